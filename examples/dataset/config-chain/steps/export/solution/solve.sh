#!/bin/bash
python3 - <<'PY'
import json

settings = json.load(open("/app/settings.json"))
lines = []
for section, table in settings.items():
    if isinstance(table, dict):
        for key, v in table.items():
            text = ("true" if v else "false") if isinstance(v, bool) else str(v)
            lines.append(f"{section}_{key}".upper() + "=" + text)
open("/app/settings.env", "w").write("\n".join(sorted(lines)) + "\n")
PY
