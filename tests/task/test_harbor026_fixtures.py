"""Harbor 0.26 parity at load time (issue #21): each fixture under tests/fixtures/harbor026/
loads with the meaning Harbor 0.26 gives it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cairn.errors import TaskFormatError
from cairn.task.load import check_task, load_task
from cairn.task.model import parse_size_mb

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harbor026"


def _texts(findings, severity):
    return [f.text for f in findings if f.severity == severity]


def test_verifier_environment_without_mode_means_separate():
    task = load_task(FIXTURES / "verifier-env-implies-separate")
    assert [s.verifier_mode for s in task.steps] == ["separate"]
    assert task.steps[0].verifier_environment is not None
    assert task.steps[0].verifier_environment.cpus == 1


def test_step_verifier_environment_without_mode_means_separate_for_that_step_only():
    task = load_task(FIXTURES / "multistep-step-env-implies-separate")
    assert [(s.name, s.verifier_mode) for s in task.steps] == [("write", "shared"), ("audit", "separate")]


def test_explicit_step_mode_beats_task_environment_table(tmp_path):
    root = shutil.copytree(FIXTURES / "multistep-step-env-implies-separate", tmp_path / "t")
    toml = (root / "task.toml").read_text()
    toml = toml.replace(
        '[[steps]]\nname = "write"',
        '[verifier.environment]\ncpus = 1\n\n[[steps]]\nname = "write"\n'
        '[steps.verifier]\nenvironment_mode = "shared"',
        1,
    )
    (root / "task.toml").write_text(toml)
    task = load_task(root)
    # Harbor 0.26 precedence: the step's explicit mode, then the task's table.
    assert [s.verifier_mode for s in task.steps] == ["shared", "separate"]


def test_shared_mode_with_verifier_environment_is_an_error():
    findings = check_task(FIXTURES / "shared-mode-with-verifier-environment")
    errors = [f for f in findings if f.is_error]
    assert len(errors) == 1
    assert errors[0].line == 5
    assert 'environment_mode = "shared"` conflicts with [verifier.environment]' in errors[0].text
    with pytest.raises(TaskFormatError, match=r"invalid task .*shared-mode-with-verifier-env.*: 1 error"):
        load_task(FIXTURES / "shared-mode-with-verifier-environment")


def test_shared_mode_with_step_verifier_environment_is_an_error(tmp_path):
    root = shutil.copytree(FIXTURES / "multistep-step-env-implies-separate", tmp_path / "t")
    toml = (
        (root / "task.toml")
        .read_text()
        .replace(
            "[steps.verifier.environment]",
            '[steps.verifier]\nenvironment_mode = "shared"\n[steps.verifier.environment]',
        )
    )
    (root / "task.toml").write_text(toml)
    errors = _texts(check_task(root), "error")
    assert errors == [
        (
            '`steps[1].verifier.environment_mode = "shared"` conflicts with '
            "[steps[1].verifier.environment]: a shared verifier has no environment "
            'of its own; drop the table or set `environment_mode = "separate"`'
        )
    ]


@pytest.mark.parametrize(
    "text,mb",
    [
        ("1G", 1024),
        ("512M", 512),
        ("2048k", 2),
        ("1.5G", 1536),
        (" 10g ", 10240),
        ("10", None),
        ("1T", None),
        ("G", None),
    ],
)
def test_legacy_size_strings_parse_as_harbor_does(text, mb):
    assert parse_size_mb(text) == mb


def test_legacy_memory_key_is_applied_with_a_deprecation_warning():
    path = FIXTURES / "legacy-memory-key"
    task = load_task(path)
    assert task.environment.memory_mb == 512
    warnings = _texts(check_task(path), "warning")
    assert warnings == [
        ("`environment.memory` is deprecated: applied as `memory_mb = 512`; write that instead")
    ]


def test_legacy_storage_key_and_conflicts(tmp_path):
    root = shutil.copytree(FIXTURES / "legacy-memory-key", tmp_path / "t")
    toml = root / "task.toml"
    toml.write_text(toml.read_text().replace('memory = "512M"', 'storage = "10G"'))
    assert load_task(root).environment.storage_mb == 10240
    toml.write_text(toml.read_text().replace('storage = "10G"', 'storage = "10G"\nstorage_mb = 100'))
    assert _texts(check_task(root), "error") == [
        "`environment.storage` = '10G' (10240 MiB) conflicts with `storage_mb` = 100"
    ]
    toml.write_text(toml.read_text().replace('storage = "10G"\nstorage_mb = 100', 'storage = "lots"'))
    assert _texts(check_task(root), "error") == [
        (
            '`environment.storage` = \'lots\': expected a size like "1G" or "512M" (better: '
            "`storage_mb` in MiB)"
        )
    ]


def test_name_without_org_is_accepted_with_a_warning():
    path = FIXTURES / "name-without-org"
    assert load_task(path).name == "plain-name"
    assert _texts(check_task(path), "warning") == [
        (
            "`task.name` = 'plain-name' is not in `org/name` form: cairn accepts it, Harbor 0.26 "
            "refuses to load the task"
        )
    ]


def test_every_harbor_026_key_is_known():
    findings = check_task(FIXTURES / "every-harbor-key")
    assert [f for f in findings if "unknown key" in f.text] == []
    assert not [f for f in findings if f.is_error]
    task = load_task(FIXTURES / "every-harbor-key")
    step = task.steps[0]
    assert [h.service for h in step.collect] == ["main", "main"]
    assert task.config.artifacts[0].service == "main"


def test_artifact_service_is_not_suggested_as_source(tmp_path):
    root = shutil.copytree(FIXTURES / "name-without-org", tmp_path / "t")
    toml = root / "task.toml"
    toml.write_text('artifacts = [{ source = "/app/x", sevice = "db" }]\n' + toml.read_text())
    texts = _texts(check_task(root), "warning")
    assert any(t == "unknown key `sevice` in [artifacts[0]] (did you mean `service`?)" for t in texts), texts
    toml.write_text(toml.read_text().replace("sevice", "origin"))
    texts = _texts(check_task(root), "warning")
    assert "unknown key `origin` in [artifacts[0]]" in texts, texts  # no wrong suggestion


def test_tpu_is_refused_and_gpu_types_without_gpus_warns(tmp_path):
    root = shutil.copytree(FIXTURES / "name-without-org", tmp_path / "t")
    toml = root / "task.toml"
    toml.write_text(
        toml.read_text() + '\n[environment]\ngpu_types = ["H100"]\n\n'
        '[environment.tpu]\ntype = "v6e"\ntopology = "2x4"\n'
    )
    findings = check_task(root)
    assert _texts(findings, "error") == [
        "`environment.tpu`: cairn has no backend that attaches TPUs; this task cannot run here"
    ]
    assert "`environment.gpu_types` has no effect without `gpus` > 0" in _texts(findings, "warning")


def test_service_artifacts_need_a_compose_file_that_defines_the_service(tmp_path):
    root = shutil.copytree(FIXTURES / "sidecar-collect-artifact", tmp_path / "t")
    assert not [f for f in check_task(root) if f.is_error]
    compose = root / "environment" / "docker-compose.yaml"
    compose.write_text(compose.read_text().replace("counter", "tally"))
    assert _texts(check_task(root), "error") == [
        "no service counter (named by artifacts or [[verifier.collect]] in task.toml)"
    ]
    compose.unlink()
    assert _texts(check_task(root), "error") == [
        (
            "artifacts or [[verifier.collect]] name service(s) counter, but the task has no "
            "environment/docker-compose.yaml"
        )
    ]


def test_collect_hooks_resolve_task_then_step():
    task = load_task(FIXTURES / "sidecar-collect-artifact")
    (hook,) = task.steps[0].collect
    assert (hook.service, hook.timeout_sec, hook.user) == ("counter", 30.0, None)
    assert task.steps[0].artifacts[0].service == "counter"
    assert task.steps[0].verifier_mode == "separate"
