#!/bin/bash
# Reward 1 when /app/count.txt holds the word count of the poem as shipped (the verifier's own
# copy in /tests, so an edited /app/poem.txt does not change the answer).
expected=$(wc -w < /tests/poem.txt)
got=$(tr -d ' \t\r' 2>/dev/null < /app/count.txt)
if [ -n "$got" ] && [ "$got" = "$expected" ] && cmp -s /tests/poem.txt /app/poem.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "count.txt: '$got', expected $expected (poem.txt unchanged: $(cmp -s /tests/poem.txt /app/poem.txt && echo yes || echo no))"
  echo 0 > /logs/verifier/reward.txt
fi
