#!/bin/bash
# Verifier of step 2 (diagnose). The checks live in the shared tests/incident_check.py, which
# writes /logs/verifier/reward.json = {"reward": 0|1, "checks": fraction passed}.
python3 /tests/incident_check.py diagnose
# Never leave the step without a reward, even if the checker itself crashed.
if [ ! -s /logs/verifier/reward.json ]; then
  echo '{"reward": 0, "checks": 0}' > /logs/verifier/reward.json
fi
