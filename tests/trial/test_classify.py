"""Unit tests of the failure helpers the fault suite relies on (issue #12): a sandbox that
stopped by itself named in the error, and the verifier's free-space probe."""

from __future__ import annotations

import pytest

from cairn.errors import Category, ErrorKind, SandboxError, SandboxLostError, TrialFailure
from cairn.sandbox.base import SandboxEnd
from cairn.trial.classify import error_info, with_end
from cairn.trial.verify import FULL_KB, parse_free_kb

OOM = SandboxEnd(
    "its container exited (exit 137): the sandbox ran out of memory (memory_mb = 64)",
    exit_code=137,
    oom_killed=True,
)


def test_with_end_names_the_out_of_memory_kill_and_keeps_kind_and_category():
    exc = with_end(SandboxError("listing processes failed (exit 126): "), OOM)
    assert isinstance(exc, SandboxError) and exc.kind is ErrorKind.SANDBOX_UNUSABLE
    assert str(exc) == (
        "listing processes failed (exit 126); the sandbox had stopped: its "
        "container exited (exit 137): the sandbox ran out of memory "
        "(memory_mb = 64)"
    )
    info = error_info(exc, after_agent=True)
    assert (info.category, info.detail) == (
        Category.CANDIDATE,
        {"sandbox_exit_code": 137, "oom_killed": True, "from_outside": False},
    )


def test_with_end_on_a_verifier_error_stays_the_task_s():
    exc = with_end(TrialFailure(ErrorKind.REWARD_MISSING, "no reward", detail={"exit_code": 137}), OOM)
    assert not isinstance(exc, SandboxError) and exc.kind is ErrorKind.REWARD_MISSING
    assert exc.detail == {
        "exit_code": 137,
        "sandbox_exit_code": 137,
        "oom_killed": True,
        "from_outside": False,
    }
    assert error_info(exc, after_agent=True).category is Category.TASK


KILLED = SandboxEnd(
    "its container was killed from outside the sandbox (the engine sent signal "
    "9: docker kill, stop or rm -f, not cairn; exit 137)",
    exit_code=137,
    from_outside=True,
)


def test_with_end_of_a_sandbox_killed_from_outside_is_sandbox_lost_infra_whatever_failed():
    """``docker kill`` from outside during the agent (a failed exec, else candidate) or the
    verifier (no reward, else the task's): the trial is retried as infra (issue #12)."""
    for failed in (
        SandboxError("listing processes failed (exit 126): "),
        TrialFailure(ErrorKind.REWARD_MISSING, "no reward", detail={"exit_code": 137}),
    ):
        exc = with_end(failed, KILLED)
        assert isinstance(exc, SandboxLostError) and exc.kind is ErrorKind.SANDBOX_LOST
        assert str(exc).endswith(
            "; the sandbox had stopped: its container was killed from "
            "outside the sandbox (the engine sent signal 9: docker kill, "
            "stop or rm -f, not cairn; exit 137)"
        )
        info = error_info(exc, after_agent=True)
        assert info.category is Category.INFRA
        assert {k: info.detail[k] for k in ("sandbox_exit_code", "oom_killed", "from_outside")} == {
            "sandbox_exit_code": 137,
            "oom_killed": False,
            "from_outside": True,
        }


def test_with_end_without_an_end_is_the_same_failure():
    exc = SandboxError("x")
    assert with_end(exc, None) is exc


def test_parse_free_kb_reads_the_available_column_of_df_p():
    out = (
        "Filesystem     1024-blocks  Used Available Capacity Mounted on\n"
        "overlay          16384 16380         4     100% /\n"
    )
    assert parse_free_kb(out) == 4 and parse_free_kb(out) < FULL_KB
    assert parse_free_kb("overlay 263174212 34082344 215654768 14% /\n") == 215654768
    assert parse_free_kb("") is None  # no df in the image
    assert parse_free_kb("sh: df: not found\n") is None
    assert parse_free_kb("a b c d-not-a-number e f\n") is None


# ------------------------------------------- held by mutation testing (bench/mutation.py)


def test_error_info_defaults_to_before_the_agent_and_the_kinds_phase():
    from cairn.errors import Phase

    info = error_info(TrialFailure(ErrorKind.TRANSFER_FAILED, "copy failed"))
    assert (info.category, info.phase, info.step) == (Category.INFRA, None, None)  # no fixed phase
    info = error_info(TrialFailure(ErrorKind.TEST_MISSING, "no test.sh"))
    assert (info.category, info.phase) == (Category.TASK, Phase.VERIFIER)
    info = error_info(TrialFailure(ErrorKind.TEST_MISSING, "x"), phase=Phase.SETUP)
    assert info.phase is Phase.SETUP


def test_as_start_failure_keeps_the_detail_it_is_given_or_the_exceptions():
    from cairn.trial.classify import as_start_failure

    exc = SandboxError("no room", detail={"free_kb": 3})
    assert as_start_failure(exc).detail == {"free_kb": 3}
    assert as_start_failure(exc, detail={"other": 1}).detail == {"other": 1}
    assert as_start_failure(OSError("boom")).detail == {}
    got = as_start_failure(exc, "could not start")
    assert (got.kind, str(got)) == (ErrorKind.START_FAILED, "could not start")


def test_with_sandbox_end_without_a_sandbox_is_the_failure_itself():
    import asyncio

    from cairn.trial.classify import with_sandbox_end

    exc = TrialFailure(ErrorKind.SETUP_FAILED, "setup.sh exited 3")
    assert asyncio.run(with_sandbox_end(exc, None)) is exc
    lost = SandboxLostError("engine gone")
    assert asyncio.run(with_sandbox_end(lost, None)) is lost


def test_error_info_masks_string_details_drops_private_ones_and_judges_step_one():
    exc = TrialFailure(
        ErrorKind.SETUP_FAILED,
        "token sk-1 leaked",
        detail={"stderr_tail": "sk-1 in log", "exit_code": 3, "_task_fault": False},
    )
    info = error_info(exc, mask=lambda s: s.replace("sk-1", "***"))
    assert info.message == "token *** leaked"
    assert info.detail == {"stderr_tail": "*** in log", "exit_code": 3}
    assert info.category is Category.TASK  # no step given: before the first step, step 1
    with pytest.raises(TypeError, match="positional argument"):
        error_info(exc, None)  # type: ignore[misc]


def test_a_task_fault_is_a_typed_flag_that_survives_relabels():
    """A start the task's own image breaks is the task's error, also after the engine adds
    what the sandbox said of its end or relabels it; the flag never reaches the detail."""
    from cairn.trial.classify import as_start_failure

    exc = SandboxError(
        "the task's image cannot start: no /bin/sh",
        kind=ErrorKind.START_FAILED,
        detail={"logs": "x"},
        task_fault=True,
    )
    ended = with_end(exc, SandboxEnd(reason="exited 127", exit_code=127))
    for e in (exc, ended, as_start_failure(ended)):
        info = error_info(e)
        assert (info.kind, info.category) == (ErrorKind.START_FAILED, Category.TASK)
        assert "task_fault" not in info.detail and "_task_fault" not in info.detail
    plain = SandboxError("the engine refused", kind=ErrorKind.START_FAILED)
    assert error_info(plain).category is Category.INFRA
