#!/bin/bash
# Oracle of step 4: replay the log against the repaired config.
python3 /app/replay.py --config /app/config/service.json --log /app/logs/service.log \
  > /app/incident/replay.txt
cat /app/incident/replay.txt
