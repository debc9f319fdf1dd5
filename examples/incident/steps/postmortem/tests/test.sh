#!/bin/bash
# Verifier of step 5 (postmortem). The checks live in the shared tests/incident_check.py, which
# writes /logs/verifier/reward.json = {"reward": 0|1, "checks": fraction passed}
# and, for this last step, re-checks the whole chain: evidence, diagnosis, repair, replay.
python3 /tests/incident_check.py postmortem
# Never leave the step without a reward, even if the checker itself crashed.
if [ ! -s /logs/verifier/reward.json ]; then
  echo '{"reward": 0, "checks": 0}' > /logs/verifier/reward.json
fi
