"""Checks of the config-chain example: `python3 /tests/check.py create|migrate|export`.

Writes /logs/verifier/reward.json. The expected values are small enough to spell out here.
"""

import json
import sys
from pathlib import Path

V1 = {"server": {"name": "orders", "port": 8080, "workers": 4},
      "features": {"debug": False, "beta_checkout": True}}
V2 = {"schema": 2,
      "service": {"name": "orders", "http_port": 8080, "worker_count": 4},
      "flags": {"debug": False, "beta_checkout": True}}
ENV = ("FLAGS_BETA_CHECKOUT=true\nFLAGS_DEBUG=false\nSERVICE_HTTP_PORT=8080\n"
       "SERVICE_NAME=orders\nSERVICE_WORKER_COUNT=4\n")
REWARD = Path("/logs/verifier/reward.json")


def load(path: str):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}")
        return None


def same(a, b) -> bool:
    """Equal JSON values with equal types (so 8080 is not "8080" and 1 is not true)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def leaves(doc, prefix=""):
    """{dotted path: value} of a nested JSON object."""
    out = {}
    for k, v in (doc.items() if isinstance(doc, dict) else []):
        if isinstance(v, dict):
            out.update(leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def main() -> None:
    stage = sys.argv[1]
    rewards = {}
    if stage == "create":
        rewards["reward"] = float(same(load("/app/settings.json"), V1))
    elif stage == "migrate":
        got = leaves(load("/app/settings.json"))
        want = leaves(V2)
        rewards["renamed"] = round(sum(k in got for k in want) / len(want), 4)
        rewards["values"] = float(all(same(got.get(k), v) for k, v in want.items()))
        rewards["reward"] = float(same(load("/app/settings.json"), V2)
                                  and same(load("/app/migration/settings.v1.json"), V1))
    elif stage == "export":
        try:
            env = Path("/app/settings.env").read_text(encoding="utf-8")
        except OSError as exc:
            env = f"{exc}"
        rewards["reward"] = float(env == ENV and same(load("/app/settings.json"), V2))
    print(rewards)
    REWARD.write_text(json.dumps(rewards) + "\n")


if __name__ == "__main__":
    main()
