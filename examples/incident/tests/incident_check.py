"""Checks of the incident example; each step's tests/test.sh runs one stage of this file.

Usage: python3 /tests/incident_check.py evidence|diagnose|repair|validate|postmortem

Prints one PASS/FAIL line per check (they land in the step's verifier/test-stdout.txt) and
writes /logs/verifier/reward.json:

    {"reward": 1.0 when every check passes else 0.0, "checks": fraction of checks passed}

Every expected value is computed here from the files the image ships (the log, the config,
the runbook), never typed in. Those files are pinned by sha256 below, so an agent that edits
them cannot move the target; tests/test_examples.py in the cairn repository keeps the pins in
step with environment/. Each stage re-checks the stages before it, so the last one
(postmortem) re-checks the whole chain.
"""

import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path

APP = Path("/app")
LOG = APP / "logs" / "service.log"
CONFIG = APP / "config" / "service.json"
RUNBOOK = APP / "docs" / "runbook.md"
OUT = APP / "incident"
REWARD = Path("/logs/verifier/reward.json")

LOG_SHA256 = "4aa4f71f9bb2f77673df41d3dbd1aae67b96b62c7ca5680325247acf54c5354f"
RUNBOOK_SHA256 = "dd78946ff33fb5af22b81c6badb2c8bb1f602e84be9cbfcbad92f03262b1ecbd"
ORIGINAL_CONFIG_SHA256 = "601ba263049ab22e01b230f377a34d7d78cdf92b394cd77c94d29208d6cedc14"
"""sha256 of the original config in canonical form (see :func:`canonical_sha256`)."""

EVENT_KEYS = ("timestamp", "level", "code", "message")
DIAGNOSIS_KEYS = ("code", "count", "config_key", "bad_value", "first_seen", "last_seen")
ROLLBACK_KEYS = ("file", "key", "old_value", "new_value")
SECTIONS = ("Summary", "Timeline", "Root cause", "Resolution", "Follow-up")
BUDGET_MS = 5000

_LINE = re.compile(r"^(?P<ts>\S+) (?P<level>[A-Z]+) \[(?P<component>[^\]]+)\] (?P<text>.*)$")
_CODE = re.compile(r"^(?P<code>E_[A-Z_]+) (?P<message>.*)$")
_KEY_VALUE = re.compile(r"\b([a-z_]+(?:\.[a-z_]+)+)=(\d+)\b")


# -- what the shipped files say -------------------------------------------------------------

def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def canonical_sha256(value) -> str:
    """sha256 of a JSON value serialised with sorted keys and no spaces."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def log_entries() -> list[dict]:
    """Every entry of the log (continuation lines, which start with a space, skipped)."""
    entries = []
    for line in LOG.read_text(encoding="utf-8").splitlines():
        m = _LINE.match(line)
        if m:
            entries.append(m.groupdict())
    return entries


def expected_evidence() -> list[dict]:
    """The ERROR and FATAL entries as evidence.json must hold them, sorted by timestamp."""
    events = []
    for e in log_entries():
        if e["level"] in ("ERROR", "FATAL"):
            m = _CODE.match(e["text"])
            events.append({"timestamp": e["ts"], "level": e["level"], "code": m["code"],
                           "message": m["message"].rstrip()})
    return sorted(events, key=lambda ev: ev["timestamp"])


def diagnosis_from(events: list[dict]) -> dict:
    """The diagnosis a list of evidence events implies (most frequent code; its key=value)."""
    counts = Counter(ev["code"] for ev in events)
    code, count = counts.most_common(1)[0]
    mine = [ev for ev in events if ev["code"] == code]
    pairs = {m for ev in mine for m in _KEY_VALUE.findall(ev["message"])}
    if len(pairs) != 1:
        raise ValueError(f"the {code} messages name {len(pairs)} key=value pairs, not one")
    key, value = pairs.pop()
    stamps = sorted(ev["timestamp"] for ev in mine)
    return {"code": code, "count": count, "config_key": key, "bad_value": int(value),
            "first_seen": stamps[0], "last_seen": stamps[-1]}


def runbook_standard_value(key: str) -> int:
    """The `standard value` column of the runbook's row for `key`."""
    for line in RUNBOOK.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] == f"`{key}`":
            return int(cells[1])
    raise ValueError(f"the runbook has no row for {key}")


def get_path(doc: dict, dotted: str):
    node = doc
    for part in dotted.split("."):
        node = node[part]
    return node


def set_path(doc: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = doc
    for part in parents:
        node = node[part]
    node[last] = value


def expected_replay(config: dict) -> str:
    """What `python3 /app/replay.py --config <CONFIG> --log <LOG>` prints for `config`."""
    latencies = [int(m.group(1)) for e in log_entries() if e["component"] == "upstream"
                 for m in [re.search(r"\blatency_ms=(\d+)\b", e["text"])] if m]
    timeout_ms = config["upstream"]["timeout_ms"]
    over = sum(1 for ms in latencies if ms > timeout_ms)
    if over:
        status = f"FAIL ({over} calls would time out)"
    elif timeout_ms > BUDGET_MS:
        status = f"FAIL (upstream.timeout_ms above the {BUDGET_MS} ms request budget)"
    else:
        status = "OK"
    return (f"replayed {len(latencies)} upstream calls from {LOG}\n"
            f"upstream.timeout_ms: {timeout_ms}\n"
            f"slowest call: {max(latencies, default=0)} ms\n"
            f"calls over the timeout: {over}\n"
            f"status: {status}\n")


def config_reload_timestamp() -> str:
    """When the bad config went live: the `[config] reloaded` entry."""
    return next(e["ts"] for e in log_entries() if e["component"] == "config"
                and e["text"].startswith("reloaded"))


# -- reading the agent's files --------------------------------------------------------------

def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def sections(markdown: str) -> dict[str, str]:
    """`## Heading` → the text under it (headings matched case-insensitively)."""
    out: dict[str, str] = {}
    current = None
    for line in markdown.splitlines():
        m = re.match(r"^##\s+(.+?)\s*#*\s*$", line)
        if m:
            title = m.group(1).strip().lower()
            current = next((s for s in SECTIONS if s.lower() == title), None)
            if current is not None:
                out.setdefault(current, "")
            continue
        if current is not None:
            out[current] += line + "\n"
    return out


# -- the stages -----------------------------------------------------------------------------

class Checks:
    """Collects named checks; a check whose function raises fails with the error as detail.

    Guards (the shipped files are intact) are not scored: they pass silently or zero the step.
    """

    def __init__(self) -> None:
        self.results: list[tuple[str, bool, str]] = []
        self.guards_ok = True

    def check(self, name: str, fn, guard: bool = False) -> bool:
        try:
            ok = fn()
            detail = ""
            if isinstance(ok, tuple):
                ok, detail = ok
        except Exception as exc:  # noqa: BLE001 - the agent's files may be anything
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))
        if guard:
            self.guards_ok = self.guards_ok and bool(ok)
        else:
            self.results.append((name, bool(ok), detail))
        return bool(ok)

    def reward(self) -> dict:
        """``{"reward": 1.0 if every check passed else 0.0, "checks": fraction passed}``."""
        passed = sum(ok for _, ok, _ in self.results) if self.guards_ok else 0
        total = len(self.results)
        return {"reward": 1.0 if total and passed == total else 0.0,
                "checks": round(passed / total, 4) if total else 0.0}


def stage_fixtures(c: Checks) -> None:
    c.check("the log is the shipped one", lambda: sha256_file(LOG) == LOG_SHA256, guard=True)
    c.check("the runbook is the shipped one", lambda: sha256_file(RUNBOOK) == RUNBOOK_SHA256,
            guard=True)


def stage_evidence(c: Checks) -> None:
    path = OUT / "evidence.json"
    want = expected_evidence()

    def shape():
        got = read_json(path)
        if not isinstance(got, list):
            return False, "not a JSON array"
        for i, ev in enumerate(got):
            if not isinstance(ev, dict) or tuple(sorted(ev)) != tuple(sorted(EVENT_KEYS)):
                return False, f"element {i} is not an object with exactly {list(EVENT_KEYS)}"
            if not all(isinstance(ev[k], str) for k in EVENT_KEYS):
                return False, f"element {i} has a value that is not a string"
        return True

    def same_events():
        got = read_json(path)
        key = lambda ev: json.dumps(ev, sort_keys=True)
        missing = len(set(map(key, want)) - set(map(key, got)))
        extra = len(set(map(key, got)) - set(map(key, want)))
        ok = sorted(map(key, got)) == sorted(map(key, want))
        return ok, "" if ok else (f"{len(got)} events, expected {len(want)}; "
                                  f"{missing} missing, {extra} unexpected")

    c.check("evidence.json is a list of {timestamp, level, code, message}", shape)
    c.check("evidence.json holds exactly the ERROR and FATAL events", same_events)
    c.check("evidence.json is sorted by timestamp", lambda: read_json(path) == want)


def stage_diagnose(c: Checks) -> None:
    path = OUT / "diagnosis.json"
    truth = diagnosis_from(expected_evidence())

    def shape():
        got = read_json(path)
        ok = isinstance(got, dict) and sorted(got) == sorted(DIAGNOSIS_KEYS)
        return ok, "" if ok else f"keys must be exactly {list(DIAGNOSIS_KEYS)}"

    def consistent():
        got, implied = read_json(path), diagnosis_from(read_json(OUT / "evidence.json"))
        bad = sorted(k for k in DIAGNOSIS_KEYS if got.get(k) != implied[k])
        return not bad, f"disagrees with evidence.json on {bad}" if bad else ""

    def correct():
        got = read_json(path)
        bad = sorted(k for k in DIAGNOSIS_KEYS if got.get(k) != truth[k]
                     or type(got.get(k)) is not type(truth[k]))
        return not bad, f"wrong {bad}" if bad else ""

    c.check("diagnosis.json has exactly the required keys", shape)
    c.check("diagnosis.json is consistent with evidence.json", consistent)
    c.check("diagnosis.json names the root cause", correct)


def stage_diagnosis_vs_original_config(c: Checks) -> None:
    def value_in_config():
        got = read_json(OUT / "diagnosis.json")
        return get_path(read_json(CONFIG), got["config_key"]) == got["bad_value"]

    c.check("bad_value is the value service.json holds", value_in_config)
    c.check("service.json is still the original",
            lambda: canonical_sha256(read_json(CONFIG)) == ORIGINAL_CONFIG_SHA256)


def stage_repair(c: Checks) -> None:
    truth = diagnosis_from(expected_evidence())
    key, old = truth["config_key"], truth["bad_value"]
    new = runbook_standard_value(key)

    def valid():
        return isinstance(read_json(CONFIG), dict)

    def fixed():
        got = get_path(read_json(CONFIG), key)
        return is_number(got) and got == new, f"{key} is {got!r}, expected {new}"

    def rollback():
        got = read_json(OUT / "rollback.json")
        want = {"file": str(CONFIG), "key": key, "old_value": old, "new_value": new}
        ok = got == want and all(type(got[k]) is type(want[k]) for k in ROLLBACK_KEYS)
        return ok, "" if ok else f"expected {json.dumps(want)}"

    def only_that_key():
        cfg = read_json(CONFIG)
        set_path(cfg, key, old)
        return canonical_sha256(cfg) == ORIGINAL_CONFIG_SHA256, (
            "setting the key back does not give the original config: something else changed")

    c.check("service.json is a valid JSON object", valid)
    c.check(f"{key} has the runbook's standard value", fixed)
    c.check("rollback.json records the change", rollback)
    c.check("no other key of service.json changed", only_that_key)


def stage_validate(c: Checks) -> None:
    path = OUT / "replay.txt"

    def same_output():
        want = expected_replay(read_json(CONFIG))
        got = path.read_text(encoding="utf-8")
        return got == want, "" if got == want else f"expected:\n{want}"

    c.check("replay.txt is the replay's output for the repaired config", same_output)
    c.check("the replay says status: OK",
            lambda: path.read_text(encoding="utf-8").splitlines()[-1] == "status: OK")


def stage_postmortem(c: Checks) -> None:
    path = OUT / "postmortem.md"
    truth = diagnosis_from(expected_evidence())
    new = runbook_standard_value(truth["config_key"])
    found = {}

    def has(section: str):
        found.update(sections(path.read_text(encoding="utf-8")))
        return section in found and found[section].strip() != ""

    def mentions(section: str, *needles: str):
        text = found.get(section, "")
        missing = [n for n in needles if not re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", text)]
        return not missing, f"{section} does not mention {missing}" if missing else ""

    for s in SECTIONS:
        c.check(f"postmortem.md has a non-empty `## {s}` section", lambda s=s: has(s))
    c.check("Summary names the error code and its count",
            lambda: mentions("Summary", truth["code"], str(truth["count"])))
    c.check("Timeline gives the config reload, first and last error",
            lambda: mentions("Timeline", config_reload_timestamp(), truth["first_seen"],
                             truth["last_seen"]))
    c.check("Root cause names the key and the bad value",
            lambda: mentions("Root cause", truth["config_key"], str(truth["bad_value"])))
    c.check("Resolution gives the new value and the rollback record",
            lambda: mentions("Resolution", str(new), "rollback.json"))
    c.check("Follow-up has at least one list item",
            lambda: re.search(r"^\s*(?:[-*]|\d+\.)\s+\S", found.get("Follow-up", ""), re.MULTILINE)
            is not None)


STAGES = {
    "evidence": [stage_fixtures, stage_evidence],
    "diagnose": [stage_fixtures, stage_evidence, stage_diagnose,
                 stage_diagnosis_vs_original_config],
    "repair": [stage_fixtures, stage_evidence, stage_diagnose, stage_repair],
    "validate": [stage_fixtures, stage_evidence, stage_diagnose, stage_repair, stage_validate],
    "postmortem": [stage_fixtures, stage_evidence, stage_diagnose, stage_repair,
                   stage_validate, stage_postmortem],
}


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in STAGES:
        print(f"usage: incident_check.py {'|'.join(STAGES)}", file=sys.stderr)
        return 2
    c = Checks()
    try:
        for stage in STAGES[sys.argv[1]]:
            stage(c)
    finally:
        reward = c.reward()
        REWARD.write_text(json.dumps(reward) + "\n")
        passed = sum(ok for _, ok, _ in c.results)
        print(f"{passed}/{len(c.results)} checks passed"
              + ("" if c.guards_ok else "; the shipped files were modified") + f"; {reward}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
