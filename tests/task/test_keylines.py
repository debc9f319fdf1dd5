"""Line numbers of task.toml keys (tomllib has none; findings need them)."""

from __future__ import annotations

import tomllib

from cairn.task.keylines import toml_key_lines, yaml_key_lines

DOC = '''\
# comment
schema_version = "1.4"
artifacts = [
  "/a",   # first
  { source = "/b", destination = "x" },
]
[environment]
memroy_mb = 512
healthcheck.command = "true"

[[steps]]
name = "write"
min_reward = { safety = 1 }
[steps.agent]
timeout_sec = 3
[[steps]]
name = "append"
[[steps.artifacts]]
source = "/c"
["steps".verifier.env]
"A.B" = \'\'\'x\'\'\'
z = """a ] } [
""""
after = 'k'
'''


def test_every_kind_of_key_gets_its_line():
    tomllib.loads(DOC)  # the fixture itself is valid TOML
    lines = toml_key_lines(DOC).lines
    expected = {
        ("schema_version",): 2,
        ("artifacts",): 3,
        ("artifacts", 0): 4,
        ("artifacts", 1): 5,
        ("artifacts", 1, "destination"): 5,
        ("environment",): 7,
        ("environment", "memroy_mb"): 8,
        ("environment", "healthcheck"): 9,
        ("environment", "healthcheck", "command"): 9,
        ("steps",): 11,
        ("steps", 0): 11,
        ("steps", 0, "name"): 12,
        ("steps", 0, "min_reward", "safety"): 13,
        ("steps", 0, "agent"): 14,
        ("steps", 0, "agent", "timeout_sec"): 15,
        ("steps", 1): 16,
        ("steps", 1, "name"): 17,
        ("steps", 1, "artifacts", 0): 18,
        ("steps", 1, "artifacts", 0, "source"): 19,
        ("steps", 1, "verifier", "env"): 20,
        ("steps", 1, "verifier", "env", "A.B"): 21,
        ("steps", 1, "verifier", "env", "z"): 22,
        ("steps", 1, "verifier", "env", "after"): 24,
    }
    for path, line in expected.items():
        assert lines.get(path) == line, path


def test_unrecorded_paths_fall_back_to_their_table():
    kl = toml_key_lines(DOC)
    assert kl.line(("steps", 1, "agent", "timeout_sec")) == 16
    assert kl.line(("nothing",)) is None


def test_offset_for_front_matter():
    assert toml_key_lines("a = 1\n", line_offset=1).line(("a",)) == 2


def test_yaml_key_lines():
    text = "agent:\n  timeout_sec: 3\nsteps:\n  - name: a\n  - name: b\n    min_reward: 1\n"
    kl = yaml_key_lines(text, line_offset=1)
    assert kl.line(("agent", "timeout_sec")) == 3
    assert kl.line(("steps", 1, "min_reward")) == 7
    assert kl.line(("steps", 1)) == 6
