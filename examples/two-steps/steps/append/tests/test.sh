#!/bin/bash
# Reward 1 when a.txt is still "1" and b.txt holds "2".
if [ "$(cat /app/a.txt 2>/dev/null)" = "1" ] && [ "$(cat /app/b.txt 2>/dev/null)" = "2" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "a.txt: $(cat /app/a.txt 2>&1); b.txt: $(cat /app/b.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
