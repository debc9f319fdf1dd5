#!/bin/bash
# Runs before the migrate step's agent, in /app: keep the step-1 settings for reference.
# Fails (a setup_failed candidate error) when step 1 left no valid settings.json.
set -e
python3 -c 'import json; json.load(open("/app/settings.json"))'
mkdir -p /app/migration
cp /app/settings.json /app/migration/settings.v1.json
