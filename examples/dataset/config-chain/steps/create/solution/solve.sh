#!/bin/bash
python3 - <<'PY'
import configparser, json

ini = configparser.ConfigParser()
ini.read("/app/legacy.ini")

def value(text):
    if text in ("yes", "no"):
        return text == "yes"
    return int(text) if text.isdigit() else text

settings = {s: {k: value(v) for k, v in ini[s].items()} for s in ini.sections()}
json.dump(settings, open("/app/settings.json", "w"), indent=2)
PY
