#!/bin/bash
cat > /app/fizzbuzz.py <<'PY'
import sys

for i in range(1, int(sys.argv[1]) + 1):
    out = ("Fizz" if i % 3 == 0 else "") + ("Buzz" if i % 5 == 0 else "")
    print(out or i)
PY
