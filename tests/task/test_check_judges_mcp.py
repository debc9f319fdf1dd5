"""``cairn tasks check`` on judge verifiers and MCP servers (issue 22)."""

from __future__ import annotations

from cairn.task.load import check_paths
from taskgen import write_task

JUDGE = '[verifier.env]\nOPENAI_API_KEY = "${OPENAI_API_KEY}"\n'


def _findings(task):
    (result,) = check_paths([task])
    return result, [(f.severity, f.text) for f in result.findings]


def _with(task, extra):
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + extra)
    return task


def test_judge_under_no_network_warns_about_the_gateway(tmp_path):
    result, found = _findings(write_task(tmp_path, "j", toml_extra=JUDGE))
    assert result.ok
    (warning,) = [t for s, t in found if s == "warning" and "judge" in t]
    assert "OPENAI_API_KEY" in warning and "docker" in warning and "-e local" in warning
    _, public = _findings(write_task(tmp_path, "p", toml_extra=JUDGE, network="public"))
    assert not any("judge" in t for _, t in public)
    _, literal = _findings(write_task(tmp_path, "l", toml_extra='[verifier.env]\n'
                                                               'OPENAI_API_KEY = "sk-x"\n'))
    assert not any("judge" in t for _, t in literal)


def test_embedded_judge_template_is_an_error(tmp_path):
    task = write_task(tmp_path, "e", toml_extra='[verifier.env]\n'
                                                'OPENAI_API_KEY = "Bearer ${OPENAI_API_KEY}"\n')
    result, found = _findings(task)
    assert not result.ok
    assert any(s == "error" and "verifier.env.OPENAI_API_KEY" in t for s, t in found)


def test_self_downloading_mcp_server_under_no_network_warns(tmp_path):
    npx = ('\n[[environment.mcp_servers]]\nname = "fs"\ntransport = "stdio"\ncommand = "npx"\n'
           'args = ["-y", "@modelcontextprotocol/server-filesystem", "/app"]\n')
    result, found = _findings(_with(write_task(tmp_path, "n"), npx))
    assert result.ok
    (warning,) = [t for s, t in found if s == "warning" and "MCP" in t]
    assert "'fs'" in warning and "npx" in warning and "install it in the image" in warning
    _, public = _findings(_with(write_task(tmp_path, "p", network="public"), npx))
    assert not any("MCP" in t for _, t in public)
    local = npx.replace('"npx"', '"python3"').replace('"-y", "@modelcontextprotocol/server-'
                                                      'filesystem", "/app"', '"/opt/s.py"')
    _, fine = _findings(_with(write_task(tmp_path, "f"), local))
    assert not any("MCP" in t for _, t in fine)


def test_unreadable_mcp_entry_is_an_error_with_its_line(tmp_path):
    bad = '\n[[environment.mcp_servers]]\nname = "s"\ntransport = "sse"\n'
    result, found = _findings(_with(write_task(tmp_path, "b"), bad))
    assert not result.ok
    (error,) = [f for f in result.findings if f.severity == "error"]
    assert "needs `url`" in error.text and error.line is not None
