"""Replay the payments calls of a ledger-api log against a configuration.

Every `[upstream]` line of the log records how long the payments service took to answer
(`latency_ms=N`). The replay checks each of those calls against the configuration's
`upstream.timeout_ms` and against the 5000 ms request budget, and prints a five-line report
ending in `status: OK` or `status: FAIL (...)`.

Usage: python3 replay.py --config CONFIG.json --log SERVICE.log
Exit code: 0 when the status is OK, 1 when it is FAIL, 2 on bad usage.
"""

import argparse
import json
import os
import re
import sys

BUDGET_MS = 5000
_CALL = re.compile(r"^\S+ \S+ \[upstream\] .*\blatency_ms=(\d+)\b")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the service.json to replay against")
    parser.add_argument("--log", required=True, help="the service log holding the calls")
    args = parser.parse_args()

    with open(args.config, encoding="utf-8") as f:
        config = json.load(f)
    timeout_ms = config["upstream"]["timeout_ms"]
    latencies = []
    with open(args.log, encoding="utf-8") as f:
        for line in f:
            m = _CALL.match(line)
            if m:
                latencies.append(int(m.group(1)))

    over = sum(1 for ms in latencies if ms > timeout_ms)
    if over:
        status = f"FAIL ({over} calls would time out)"
    elif timeout_ms > BUDGET_MS:
        status = f"FAIL (upstream.timeout_ms above the {BUDGET_MS} ms request budget)"
    else:
        status = "OK"
    print(f"replayed {len(latencies)} upstream calls from {os.path.abspath(args.log)}")
    print(f"upstream.timeout_ms: {timeout_ms}")
    print(f"slowest call: {max(latencies, default=0)} ms")
    print(f"calls over the timeout: {over}")
    print(f"status: {status}")
    return 0 if status == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
