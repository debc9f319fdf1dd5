#!/bin/bash
# Verifier of the export step (checks in the shared tests/check.py).
python3 /tests/check.py export
[ -s /logs/verifier/reward.json ] || echo '{"reward": 0}' > /logs/verifier/reward.json
