"""Write the service log of the incident example (run once, at image build time).

Deterministic: a small linear congruential generator stands in for `random`, so the same
bytes come out on every Python 3 version. The verifiers pin the log's sha256
(tests/incident_check.py); change this file and that constant together.

Usage: python3 gen_log.py OUTPUT_PATH
"""

import sys
from datetime import datetime, timedelta, timezone

START = datetime(2024, 5, 14, 8, 40, 0, tzinfo=timezone.utc)
CONFIG_CHANGE_AT = 140  # the event index at which the bad config is reloaded
N_EVENTS = 330
PATHS = ["/v1/accounts/{n}", "/v1/ledger/{n}/entries", "/v1/transfers", "/v1/errors/ERROR-{n}"]


class Lcg:
    """Numerical Recipes LCG: deterministic across Python versions."""

    def __init__(self, seed: int) -> None:
        self.state = seed

    def next(self, n: int) -> int:
        """A number in [0, n)."""
        self.state = (1664525 * self.state + 1013904223) % 2**32
        return (self.state >> 8) % n


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def generate() -> list[str]:
    """The log's lines, without newlines."""
    rng = Lcg(20240514)
    t = START
    timeout_ms = 2500
    entries: list[list[str]] = []  # each entry: its line, then continuation lines
    req = 0
    for i in range(N_EVENTS):
        t += timedelta(milliseconds=1 + rng.next(9000))
        now = ts(t)
        if i == CONFIG_CHANGE_AT:
            timeout_ms = 50
            entries.append([f"{now} INFO [config] reloaded /app/config/service.json: "
                            f"upstream.timeout_ms=50 (was 2500)"])
            continue
        roll = rng.next(100)
        req += 1
        rid = f"r{req:06d}"
        if roll < 45:  # a request that calls the payments upstream
            latency = 20 + rng.next(1880)
            if latency > timeout_ms:
                entries.append([f"{now} ERROR [upstream] E_UPSTREAM_TIMEOUT payments call "
                                f"exceeded upstream.timeout_ms={timeout_ms} request_id={rid} "
                                f"latency_ms={latency}"])
                status = 504
            else:
                entries.append([f"{now} INFO [upstream] payments call ok request_id={rid} "
                                f"latency_ms={latency}"])
                status = 200
            t += timedelta(milliseconds=1 + rng.next(3))
            entries.append([f"{ts(t)} INFO [http] POST /v1/transfers status={status} "
                            f"request_id={rid} duration_ms={latency + 3 + rng.next(20)}"])
        elif roll < 88:  # a plain read
            path = PATHS[rng.next(len(PATHS))].format(n=1000 + rng.next(9000))
            status = 404 if "errors" in path else 200
            entries.append([f"{now} INFO [http] GET {path} status={status} request_id={rid} "
                            f"duration_ms={2 + rng.next(60)}"])
        elif roll < 93:
            entries.append([f"{now} WARN [db] W_DB_SLOW query took {300 + rng.next(900)} ms "
                            f"request_id={rid}"])
        elif roll < 97:
            entries.append([f"{now} ERROR [auth] E_AUTH_REJECTED token expired for client "
                            f"{100 + rng.next(50)} request_id={rid}"])
        elif roll < 99:
            entries.append([f"{now} ERROR [db] E_DB_CONN_RESET connection reset by peer "
                            f"request_id={rid}",
                            "  Traceback (most recent call last):",
                            '    File "/srv/ledger/db.py", line 88, in query',
                            "  ConnectionResetError: [Errno 104] Connection reset by peer"])
        else:
            entries.append([f"{now} DEBUG [cache] evicted {1 + rng.next(40)} entries"])
        if timeout_ms == 50 and i in (200, 290):
            t += timedelta(milliseconds=5)
            entries.append([f"{ts(t)} FATAL [health] E_HEALTH_DEGRADED upstream error rate "
                            f"above 50% over 60 s, instance marked unhealthy"])
    # Two writers share the file with a buffer: now and then a line lands a few lines late,
    # so the file is not in timestamp order.
    errors = [k for k, e in enumerate(entries) if e[0].split(" ")[1] in ("ERROR", "FATAL")]
    for k in reversed(errors[4::9]):
        entries.insert(min(k + 4, len(entries) - 1), entries.pop(k))
    for k in range(7, len(entries) - 1, 23):
        entries[k], entries[k + 1] = entries[k + 1], entries[k]
    return [line for entry in entries for line in entry]


def main() -> None:
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        f.write("\n".join(generate()) + "\n")


if __name__ == "__main__":
    main()
