#!/bin/bash
# Oracle of step 1: the ERROR and FATAL entries of the log, sorted by timestamp.
mkdir -p /app/incident
python3 - <<'PY'
import json, re

line_re = re.compile(r"^(\S+) (ERROR|FATAL) \[[^\]]+\] (E_[A-Z_]+) (.*)$")
events = []
with open("/app/logs/service.log", encoding="utf-8") as f:
    for line in f:
        m = line_re.match(line.rstrip("\n"))
        if m:
            ts, level, code, message = m.groups()
            events.append({"timestamp": ts, "level": level, "code": code,
                           "message": message.rstrip()})
events.sort(key=lambda ev: ev["timestamp"])
with open("/app/incident/evidence.json", "w", encoding="utf-8") as f:
    json.dump(events, f, indent=2)
print(f"{len(events)} events")
PY
