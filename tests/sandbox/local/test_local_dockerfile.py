"""The local backend's Dockerfile subset: parsing, variables, refusals, .dockerignore."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.errors import UnsupportedError
from cairn.sandbox.local.dockerfile import (
    NEEDS_DOCKER,
    DockerfileError,
    DockerIgnore,
    analyze,
    check_env_dir,
    expand,
    key_values,
    parse_dockerfile,
    split_words,
)


def test_continuations_comments_and_flags() -> None:
    text = (
        "# syntax=docker/dockerfile:1\nFROM debian:bookworm-slim AS base\n"
        "RUN apt-get update \\\n  # a comment inside\n  && echo done\n\n"
        'COPY --chown=agent:agent --chmod=755 a.sh /app/\nCMD ["sleep", "1"]\n'
    )
    ins = parse_dockerfile(text)
    assert [i.keyword for i in ins] == ["FROM", "RUN", "COPY", "CMD"]
    assert ins[1].args == "apt-get update   && echo done"
    assert ins[1].line == 3
    assert ins[2].flags == {"chown": "agent:agent", "chmod": "755"}
    assert ins[2].args == "a.sh /app/"
    assert ins[3].json_args == ["sleep", "1"]


def test_words_quotes_and_variables() -> None:
    env = {"A": "x y", "EMPTY": ""}
    assert split_words("a 'b c' \"d $A\" e\\ f $A", env) == ["a", "b c", "d x y", "e f", "x y"]
    assert split_words("'$A' \"\\$A\"", env) == ["$A", "$A"]
    assert expand("${EMPTY:-dflt}/${A:+set}/${NOPE}end", env) == "dflt/set/end"
    assert key_values('K=v K2="two words" K3=$A', env) == [("K", "v"), ("K2", "two words"), ("K3", "x y")]
    assert key_values("LEGACY value with spaces", env) == [("LEGACY", "value with spaces")]
    with pytest.raises(DockerfileError, match="unterminated quote"):
        split_words("'unterminated", env)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("FROM a AS build\nRUN make\nFROM b\nCOPY --from=build /x /x\n", "multi-stage"),
        ("FROM a\nCOPY --from=other:1 /x /x\n", "--from"),
        ("FROM a\nADD https://example.com/f.tgz /x\n", "URL"),
        ("FROM a\nRUN --mount=type=cache,target=/c make\n", "RUN --mount"),
        ('FROM a\nENTRYPOINT ["/start.sh"]\n', "ENTRYPOINT"),
        ("FROM a\nRUN cat <<EOF > /f\n", "heredoc"),
        ("FROM a\nFROBNICATE x\n", "FROBNICATE"),
    ],
)
def test_outside_the_subset_is_refused(text: str, needle: str) -> None:
    with pytest.raises(UnsupportedError) as exc:
        analyze(parse_dockerfile(text))
    assert NEEDS_DOCKER in str(exc.value)
    assert needle in str(exc.value)


def test_subset_warns_about_from_and_ignored_instructions() -> None:
    warnings = analyze(
        parse_dockerfile("FROM python:3.12-slim\nLABEL a=b\nEXPOSE 80\nHEALTHCHECK CMD true\nRUN true\n")
    )
    assert any("host system stands in for the base image python:3.12-slim" in w for w in warnings)
    assert any("HEALTHCHECK is ignored" in w for w in warnings)
    assert len(warnings) == 2


def test_escape_directive_refused() -> None:
    with pytest.raises(UnsupportedError, match="escape"):
        parse_dockerfile("# escape=`\nFROM a\n")


def test_compose_file_refused(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM a\n")
    (tmp_path / "docker-compose.yaml").write_text("services: {main: {build: .}}\n")
    with pytest.raises(UnsupportedError) as exc:
        check_env_dir(tmp_path)
    assert NEEDS_DOCKER in str(exc.value) and "compose" in str(exc.value)


def test_docker_image_without_dockerfile_warns(tmp_path: Path) -> None:
    assert check_env_dir(tmp_path, "python:3.12") == [
        "local backend: the host system stands in for docker_image python:3.12"
    ]


def test_dockerignore() -> None:
    ign = DockerIgnore("# comment\n*.log\nbuild/\n!build/keep.txt\n**/secret*\n/abs\n")
    assert ign.ignored("x.log") and not ign.ignored("d/x.log")
    assert ign.ignored("build") and ign.ignored("build/a/b.o")
    assert not ign.ignored("build/keep.txt")
    assert ign.ignored("secret.txt") and ign.ignored("a/b/secret-key")
    assert ign.ignored("abs") and not ign.ignored("keep.py")
