#!/bin/bash
# Reward 1 when /app/a.txt holds exactly "1".
if [ "$(cat /app/a.txt 2>/dev/null)" = "1" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "a.txt is missing or wrong: $(cat /app/a.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
