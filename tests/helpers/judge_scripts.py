"""A scripted LLM-judge server and the grader that calls it (issue 22 judge tests).

:data:`JUDGE_SERVER` runs in a test-host container (tests/helpers/nethosts): it answers
OpenAI-style ``/chat/completions`` with ``PASS`` and fixed usage when the bearer key is
``sk-judge-test-123``, and ``GET /`` with the models it was asked for. :data:`GRADER` is a
verifier that calls it, writes ``judge_usage.json`` and checks that ``other.test`` is out of
reach. :func:`judge_task` writes a ``no-network`` task using both.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from net_agents import PROBE
from taskgen import write_task

JUDGE_SERVER = r"""
import http.server, json, sys
name = sys.argv[1]
seen = []
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.headers.get("Authorization") != "Bearer sk-judge-test-123":
            self.send_response(401); self.end_headers(); return
        seen.append(body.get("model"))
        data = json.dumps({"model": body.get("model"),
                           "choices": [{"message": {"role": "assistant", "content": "PASS"}}],
                           "usage": {"prompt_tokens": 321, "completion_tokens": 12}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        data = f"host={name} seen={','.join(seen)}\n".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data)))
        self.end_headers(); self.wfile.write(data)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("0.0.0.0", 80), H)
print("serving", flush=True)
srv.serve_forever()
"""

GRADER = r"""
import json, os, urllib.request
base = os.environ["OPENAI_BASE_URL"].rstrip("/")
req = urllib.request.Request(
    base + "/chat/completions", method="POST",
    data=json.dumps({"model": os.environ["JUDGE_MODEL"],
                     "messages": [{"role": "user", "content": "grade"}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
             "Content-Type": "application/json"})
out = {}
try:
    answer = json.load(urllib.request.urlopen(req, timeout=20))
    out["judge"] = answer["choices"][0]["message"]["content"]
    usage = answer["usage"]
    json.dump({"model": answer["model"], "calls": 1, "prompt_tokens": usage["prompt_tokens"],
               "completion_tokens": usage["completion_tokens"], "cost_usd": 0.25},
              open("/logs/verifier/judge_usage.json", "w"))
except Exception as exc:
    out["judge"] = f"{type(exc).__name__}: {exc}"
try:
    urllib.request.urlopen("http://other.test/", timeout=8).read()
    out["other"] = "reached"
except Exception as exc:
    out["other"] = type(exc).__name__
json.dump(out, open("/logs/verifier/grade.json", "w"))
ok = out["judge"] == "PASS" and out["other"] != "reached"
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
"""

JUDGE_TOML = textwrap.dedent("""\
    [verifier.env]
    OPENAI_API_KEY = "${CAIRN_TEST_JUDGE_KEY}"
    OPENAI_BASE_URL = "http://judge.test/v1"
    JUDGE_MODEL = "judge-small"
    """)


def judge_task(root: Path, toml: str = JUDGE_TOML) -> Path:
    """A ``no-network`` task whose verifier is :data:`GRADER`; ``toml`` goes before
    ``[environment]`` (the judge's ``[verifier.env]``)."""
    task = write_task(
        root,
        "judge",
        network="no-network",
        dockerfile="FROM python:3.12-slim\nWORKDIR /app\nCOPY probe.py /probe.py\n"
        "COPY grader.py /grader.py\n",
        toml_extra="",
        test="python3 /grader.py\n",
        files={"environment/probe.py": PROBE, "environment/grader.py": GRADER},
    )
    text = (task / "task.toml").read_text()
    (task / "task.toml").write_text(text.replace("[environment]", toml + "\n[environment]", 1))
    return task
