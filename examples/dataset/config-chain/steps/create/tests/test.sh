#!/bin/bash
# Verifier of the create step (checks in the shared tests/check.py).
python3 /tests/check.py create
[ -s /logs/verifier/reward.json ] || echo '{"reward": 0}' > /logs/verifier/reward.json
