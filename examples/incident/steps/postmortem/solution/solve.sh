#!/bin/bash
# Oracle of step 5: a postmortem built from the incident record.
python3 - <<'PY'
import json, re

d = json.load(open("/app/incident/diagnosis.json", encoding="utf-8"))
r = json.load(open("/app/incident/rollback.json", encoding="utf-8"))
replay = open("/app/incident/replay.txt", encoding="utf-8").read().splitlines()
reload_ts = next(line.split(" ")[0] for line in open("/app/logs/service.log", encoding="utf-8")
                 if re.match(r"^\S+ \S+ \[config\] reloaded", line))
text = f"""# Postmortem: ledger-api payments failures

## Summary

Payments calls failed with {d['code']}: {d['count']} events between {d['first_seen']} and
{d['last_seen']}.

## Timeline

- {reload_ts}: a configuration reload set {d['config_key']}={d['bad_value']}.
- {d['first_seen']}: first {d['code']}.
- {d['last_seen']}: last {d['code']} in the log.

## Root cause

{d['config_key']} was set to {d['bad_value']} ms, far below the payments service's latency,
so almost every call timed out.

## Resolution

{r['key']} set back to the runbook's standard value {r['new_value']}; the change is recorded
in /app/incident/rollback.json. The replay reports: {replay[-1]}.

## Follow-up

- Validate timeouts against the runbook's allowed range before a config reload.
- Alert on the {d['code']} rate.
"""
open("/app/incident/postmortem.md", "w", encoding="utf-8").write(text)
PY
