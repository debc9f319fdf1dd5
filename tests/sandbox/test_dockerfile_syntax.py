"""BuildKit-only Dockerfile syntax: detection and the rewrite for the built-in frontend."""

from __future__ import annotations

from cairn.sandbox.dockerfile_syntax import (
    buildkit_features,
    is_stock_frontend,
    rewrite_for_builtin_frontend,
    unsupported_by,
)

DF = """# syntax=docker/dockerfile:1.4
FROM debian:bookworm-slim
# a comment
COPY --chmod=755 a.sh /usr/local/bin/a
COPY --link b.txt /b.txt
ADD --chown=1:1 c.txt /c.txt
RUN --mount=type=cache,target=/var/cache/apt \\
    apt-get update
RUN <<EOF
echo RUN --mount=not-a-flag
EOF
COPY <<EOT /etc/x.conf
key=value
EOT
RUN --network=none true
"""


def test_features_with_lines():
    found = [(f.name, f.line) for f in buildkit_features(DF)]
    assert found == [
        ("syntax", 1),
        ("copy-chmod", 4),
        ("copy-link", 5),
        ("run-mount", 7),
        ("heredoc", 9),
        ("heredoc", 12),
        ("run-network", 15),
    ]


def test_classic_dockerfile_has_no_features():
    assert (
        buildkit_features(
            "FROM debian:bookworm-slim\nCOPY --chown=1:1 a /a\nRUN echo 'no heredoc here' > /x\n"
        )
        == []
    )


def test_syntax_after_an_instruction_is_a_comment():
    assert buildkit_features("FROM debian:bookworm-slim\n# syntax=docker/dockerfile:1\n") == []


def test_stock_frontend_names():
    assert is_stock_frontend("docker/dockerfile:1")
    assert is_stock_frontend("docker.io/docker/dockerfile:1.4.3")
    assert is_stock_frontend("docker/dockerfile")
    assert not is_stock_frontend("docker/dockerfile-upstream:master-labs")
    assert not is_stock_frontend("example.com/my/frontend:1")


def test_rewrite_drops_stock_syntax_and_link_only():
    new, notes = rewrite_for_builtin_frontend(DF)
    lines = new.splitlines()
    assert lines[0] == "" and lines[4] == "COPY b.txt /b.txt"
    assert lines[3] == "COPY --chmod=755 a.sh /usr/local/bin/a"
    assert len(lines) == len(DF.splitlines())  # line numbers of build errors stay right
    assert [n.split(":")[0] for n in notes] == ["line 1", "line 5"]


def test_link_on_a_continuation_line():
    new, _ = rewrite_for_builtin_frontend("FROM x\nCOPY \\\n  --link a /a\n")
    assert new == "FROM x\nCOPY \\\n  a /a\n"


def test_unsupported_by_the_engine():
    features = buildkit_features(DF)
    on_2010 = frozenset({"copy-chmod", "run-mount"})
    assert [f.name for f in unsupported_by(features, on_2010)] == ["heredoc", "heredoc", "run-network"]
    custom = buildkit_features("# syntax=example.com/f:1\nFROM x\n")
    assert [f.name for f in unsupported_by(custom, on_2010)] == ["syntax"]
