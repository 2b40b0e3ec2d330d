#!/bin/bash
# Reward 1 only when fib.sh gives the right answers for several inputs (reward.json form).
ok=1
for pair in "1 1" "2 1" "10 55" "20 6765"; do
  set -- $pair
  [ "$(bash /app/fib.sh "$1" 2>/dev/null)" = "$2" ] || ok=0
done
echo "{\"reward\": $ok}" > /logs/verifier/reward.json
