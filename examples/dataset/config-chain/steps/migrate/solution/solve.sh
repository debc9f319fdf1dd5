#!/bin/bash
python3 - <<'PY'
import json

old = json.load(open("/app/settings.json"))
renames = json.load(open("/app/renames.json"))
new = {"schema": 2}
for src, dst in renames.items():
    section, key = src.split(".")
    new_section, new_key = dst.split(".")
    new.setdefault(new_section, {})[new_key] = old[section][key]
json.dump(new, open("/app/settings.json", "w"), indent=2)
PY
