#!/bin/bash
# Prints the n-th Fibonacci number (fib 1 = 1, fib 2 = 1, fib 10 = 55).
n=$1
a=0
b=1
for ((i = 1; i < n; i++)); do # the bug: one step short
  t=$((a + b))
  a=$b
  b=$t
done
echo "$a"
