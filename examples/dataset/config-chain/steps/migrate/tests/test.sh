#!/bin/bash
# Verifier of the migrate step (checks in the shared tests/check.py).
python3 /tests/check.py migrate
[ -s /logs/verifier/reward.json ] || echo '{"reward": 0}' > /logs/verifier/reward.json
