#!/bin/bash
sed -i 's/i < n; i++/i <= n; i++/' /app/fib.sh
