#!/bin/bash
# Oracle of step 3: set the key to the runbook's standard value, keeping a rollback record.
python3 - <<'PY'
import json

diagnosis = json.load(open("/app/incident/diagnosis.json", encoding="utf-8"))
key = diagnosis["config_key"]
standard = None
for line in open("/app/docs/runbook.md", encoding="utf-8"):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 2 and cells[0] == f"`{key}`":
        standard = int(cells[1])

path = "/app/config/service.json"
config = json.load(open(path, encoding="utf-8"))
*parents, last = key.split(".")
node = config
for part in parents:
    node = node[part]
rollback = {"file": path, "key": key, "old_value": node[last], "new_value": standard}
with open("/app/incident/rollback.json", "w", encoding="utf-8") as f:
    json.dump(rollback, f, indent=2)
node[last] = standard
with open(path, "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
print(rollback)
PY
