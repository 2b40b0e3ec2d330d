#!/bin/bash
# Harbor's contract: the verdict is the number written to /logs/verifier/reward.txt.
if [ "$(cat /app/answer.txt 2>/dev/null)" = "42" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
