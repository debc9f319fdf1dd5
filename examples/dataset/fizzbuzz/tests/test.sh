#!/bin/bash
# Runs the agent's program for several N; the reward is the fraction of runs whose output is
# exactly right (the step passes only at 1.0).
passed=0
total=0
for n in 1 3 5 15 16 31 100; do
  total=$((total + 1))
  if diff <(timeout 10 python3 /app/fizzbuzz.py "$n" 2>/dev/null) <(python3 /tests/expected.py "$n") > /dev/null; then
    passed=$((passed + 1))
  else
    echo "N=$n: wrong output"
  fi
done
python3 -c "print(round($passed / $total, 4))" > /logs/verifier/reward.txt
echo "$passed/$total runs right"
