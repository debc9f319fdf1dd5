"""Task text files are strict UTF-8 (issue #12): invalid bytes are a validation error with the
file, byte offset and line; a byte-order mark and CRLF line ends are accepted; every file cairn
reads or writes as text names its encoding, whatever the locale."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cairn.errors import TaskFormatError
from cairn.task.load import check_task, load_task
from cairncli import run_cairn
from taskgen import StepSpec, write_task

SRC = Path(__file__).resolve().parents[2] / "src" / "cairn"


def _errors(root: Path) -> list[str]:
    return [str(f) for f in check_task(root) if f.is_error]


def test_latin1_instruction_is_an_error_with_offset_and_line(tmp_path):
    root = write_task(tmp_path, "latin")
    (root / "instruction.md").write_bytes(b"Fix the bug.\nPrix: 10 \xe9uros\n")
    assert _errors(root) == [
        f"{root / 'instruction.md'}:2: error: not valid UTF-8: byte 22 "
        "(line 2) is 0xe9; save the file as UTF-8"
    ]
    with pytest.raises(TaskFormatError, match=r"invalid task .*latin: 1 error"):
        load_task(root)


def test_latin1_step_instruction_task_toml_and_task_md(tmp_path):
    multi = write_task(tmp_path, "multi", steps=[StepSpec("one"), StepSpec("two")])
    (multi / "steps" / "two" / "instruction.md").write_bytes(b"\xff")
    assert _errors(multi) == [
        f"{multi / 'steps/two/instruction.md'}:1: error: not valid "
        "UTF-8: byte 0 (line 1) is 0xff; save the file as UTF-8"
    ]
    toml = write_task(tmp_path, "toml")
    data = (toml / "task.toml").read_bytes()
    (toml / "task.toml").write_bytes(data + b"# caf\xe9\n")
    line = data.count(b"\n") + 1
    assert _errors(toml) == [
        f"{toml / 'task.toml'}:{line}: error: not valid UTF-8: byte "
        f"{len(data) + 5} (line {line}) is 0xe9; save the file as UTF-8"
    ]
    md = tmp_path / "md"
    md.mkdir()
    (md / "task.md").write_bytes(b'+++\n[task]\nname = "x"\n+++\nDo \xe0 thing.\n')
    (md / "tests").mkdir()
    (md / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (md / "environment").mkdir()
    (md / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    assert [e.split(": error: ")[1] for e in _errors(md)] == [
        "not valid UTF-8: byte 29 (line 5) is 0xe0; save the file as UTF-8"
    ]


def test_bom_and_crlf_are_accepted_and_the_agent_gets_clean_text(tmp_path):
    root = write_task(tmp_path, "bom")
    (root / "instruction.md").write_bytes("\ufeffCafé line one\r\nline two\r\n".encode())
    toml = (root / "task.toml").read_bytes()
    (root / "task.toml").write_bytes(b"\xef\xbb\xbf" + toml.replace(b"\n", b"\r\n"))
    assert _errors(root) == []
    task = load_task(root)
    assert task.steps[0].instruction == "Café line one\nline two\n"


def test_a_non_utf8_task_is_a_config_error_and_its_sibling_runs(tmp_path):
    """Through `cairn run`: the Latin-1 task is config_error, the sibling scores, no traceback."""
    import json

    from faultkit import backend_available

    if not backend_available("local"):
        pytest.skip("local backend not available")
    ds = tmp_path / "ds"
    bad = write_task(ds, "bad")
    (bad / "instruction.md").write_bytes(b"r\xe9sum\xe9\n")
    write_task(ds, "good")
    tests = Path(__file__).resolve().parents[1]
    env = {
        "PYTHONPATH": f"{SRC.parent}:{tests}:{tests / 'helpers'}",
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C",
        "LANG": "C",
    }
    proc = run_cairn(
        "run", "-p", str(ds), "-e", "local", "--jobs-dir", "jobs", "--job-name", "enc", cwd=tmp_path, env=env
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    results = {}
    for d in (tmp_path / "jobs" / "enc" / "trials").iterdir():
        r = json.loads((d / "result.json").read_text(encoding="utf-8"))
        results[r["task"]["name"]] = r
    assert results["test/good"]["outcome"] == "completed" and results["test/good"]["reward"] == 1
    assert results["test/bad"]["error"]["kind"] == "config_error"
    assert "not valid UTF-8: byte 1 (line 1)" in results["test/bad"]["error"]["message"]


def _text_io_without_encoding(tree: ast.AST) -> list[int]:
    """Lines of calls that read or write text in the locale's encoding."""
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kws = {k.arg for k in node.keywords}
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name in ("read_text", "write_text") and isinstance(f, ast.Attribute):
            n_pos = 0 if name == "read_text" else 1
            if "encoding" not in kws and len(node.args) <= n_pos:
                bad.append(node.lineno)
        elif name == "open" and isinstance(f, ast.Name):
            mode = (
                node.args[1]
                if len(node.args) > 1
                else next((k.value for k in node.keywords if k.arg == "mode"), None)
            )
            binary = isinstance(mode, ast.Constant) and "b" in str(mode.value)
            if not binary and "encoding" not in kws:
                bad.append(node.lineno)
        elif "encoding" not in kws and any(_text_mode(k, name) for k in node.keywords):
            bad.append(node.lineno)
    return bad


_SUBPROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call"}


def _text_mode(kw: ast.keyword, func: str) -> bool:
    """``text=``/``universal_newlines=`` asking for text: ``True`` anywhere, or any value other
    than ``False`` on a subprocess call (``text=`` of other callables is just a field)."""
    if kw.arg not in ("text", "universal_newlines"):
        return False
    if isinstance(kw.value, ast.Constant):
        return kw.value.value is True
    return func in _SUBPROCESS_CALLS


def test_every_text_file_cairn_opens_names_its_encoding():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        lines = _text_io_without_encoding(ast.parse(path.read_text(encoding="utf-8")))
        offenders += [f"{path.relative_to(SRC)}:{n}" for n in lines]
    assert offenders == []
