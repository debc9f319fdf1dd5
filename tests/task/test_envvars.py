"""``${VAR}`` / ``${VAR:-default}`` env templates (design §1.1) and the secrets they produce."""

from __future__ import annotations

import pytest

from cairn.errors import ErrorKind, TrialFailure
from cairn.task.envvars import (
    embedded_template,
    missing_variables,
    parse_template,
    resolve_env,
    secret_values,
)


def test_parse_template():
    assert parse_template("${KEY}") == ("KEY", None)
    assert parse_template("${KEY:-x}") == ("KEY", "x")
    assert parse_template("${KEY:-}") == ("KEY", "")
    assert parse_template("Bearer ${KEY}") is None
    assert parse_template("$KEY") is None


@pytest.mark.parametrize(
    "value, refused",
    [
        ("Bearer ${KEY}", True),
        ("${A}${B}", True),
        ("${1X}", True),
        ("${KEY}x", True),
        ("${KEY}", False),
        ("${KEY:-x y}", False),
        ("$KEY", False),
        ("plain", False),
        ("", False),
    ],
)
def test_embedded_template(value, refused):
    assert embedded_template(value) is refused


def test_resolve_env_literals_templates_and_defaults():
    templates = {
        "LIT": "a $B c",
        "T": "${TOKEN}",
        "D": "${UNSET:-fallback}",
        "E": "${UNSET:-}",
        "O": "${SET:-ignored}",
    }
    env = resolve_env(templates, {"TOKEN": "s3cret-value", "SET": "given"})
    assert env == {"LIT": "a $B c", "T": "s3cret-value", "D": "fallback", "E": "", "O": "given"}


def test_missing_variable_is_a_config_error_naming_it():
    with pytest.raises(TrialFailure) as exc:
        resolve_env({"A": "${NEEDED}", "B": "${ALSO}", "C": "${OK:-1}"}, {})
    assert exc.value.kind is ErrorKind.CONFIG_ERROR
    assert "NEEDED" in str(exc.value) and "ALSO" in str(exc.value)
    assert exc.value.detail["missing"] == ["ALSO", "NEEDED"]
    assert missing_variables({"A": "${NEEDED}", "C": "${OK:-1}"}, {}) == ["NEEDED"]


def test_secret_values_are_template_values_of_four_chars_or_more():
    templates = {
        "LIT": "literal-value",
        "LONG": "${LONG}",
        "SHORT": "${SHORT}",
        "DEF": "${UNSET:-default-value}",
        "OVER": "${OVER:-abcd}",
    }
    resolved = resolve_env(templates, {"LONG": "abcd", "SHORT": "abc", "OVER": "host-val"})
    assert secret_values(templates, resolved) == {"abcd", "host-val"}
