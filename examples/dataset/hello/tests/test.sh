#!/bin/bash
# Reward 1 when /app/hello.txt is exactly the one line "Hello, cairn!".
if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, cairn!" ] && [ "$(wc -l < /app/hello.txt)" = 1 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "hello.txt: $(cat /app/hello.txt 2>&1)"
  echo 0 > /logs/verifier/reward.txt
fi
