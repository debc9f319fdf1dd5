#!/bin/bash
# Oracle of step 2: the most frequent code, and the key=value its messages name.
python3 - <<'PY'
import json, re
from collections import Counter

events = json.load(open("/app/incident/evidence.json", encoding="utf-8"))
code, count = Counter(ev["code"] for ev in events).most_common(1)[0]
mine = [ev for ev in events if ev["code"] == code]
(key, value), = {m for ev in mine
                 for m in re.findall(r"\b([a-z_]+(?:\.[a-z_]+)+)=(\d+)\b", ev["message"])}
stamps = sorted(ev["timestamp"] for ev in mine)
diagnosis = {"code": code, "count": count, "config_key": key, "bad_value": int(value),
             "first_seen": stamps[0], "last_seen": stamps[-1]}
with open("/app/incident/diagnosis.json", "w", encoding="utf-8") as f:
    json.dump(diagnosis, f, indent=2)
print(diagnosis)
PY
