"""Typed events (cairn.events): each carries its facts, one renderer makes its line (the same
bytes job.log and the terminal printed before events were typed), warnings dedupe on their key,
and a value survives pickling as Ray ships it."""

from __future__ import annotations

import pickle

from cairn.events import (
    EngineWait,
    EnvironmentReady,
    Event,
    EventKind,
    Retrying,
    StepEnded,
    TrialLine,
    TrialWarning,
    body,
    dedupe_key,
    render,
)


def test_a_step_line_renders_as_before():
    e = StepEnded(
        tag="t",
        task="t",
        index=1,
        of=2,
        name="write",
        source="verifier",
        reward=1.0,
        agent_sec=3.04,
        verifier_sec=0.96,
    )
    assert e.text == "[t] step 1/2 write: reward 1.00 (agent 3.0 s, verifier 1.0 s)"
    assert e.kind is EventKind.STEP and render(e) == e.text


def test_a_candidate_error_and_an_agent_exit_render_as_before():
    e = StepEnded(
        tag="t #2",
        index=2,
        of=2,
        name="fix",
        source="candidate-error",
        error_kind="setup_failed",
        error_message="setup.sh exited 3",
        agent_exit="timeout",
        agent_sec=10.0,
    )
    assert e.text == (
        "[t #2] step 2/2 fix: reward 0.00 (setup_failed: setup.sh exited 3) [agent timeout] (agent 10.0 s)"
    )


def test_a_step_without_verification_renders_as_before():
    e = StepEnded(tag="t", index=1, of=1, name="main", source="not-run", agent_sec=0.5)
    assert e.text == "[t] step 1/1 main: agent only (no verification) (agent 0.5 s)"
    keyed = StepEnded(tag="t", index=1, of=1, name="main", source="verifier", rewards={"a": 1.0})
    assert keyed.text == "[t] step 1/1 main: rewards {'a': 1.0}"


def test_environment_retry_and_engine_lines_render_as_before():
    assert (
        EnvironmentReady(tag="t", backend="docker", seconds=1.26).text
        == "[t] environment: docker, ready in 1.3 s"
    )
    pre = EnvironmentReady(tag="t", backend="local", seconds=0.0, prestarted=True, prestart_sec=2.0)
    assert pre.text == (
        "[t] environment: local, ready in 0.0 s (pre-started; its start took 2.0 s during an earlier trial)"
    )
    r = Retrying(tag="t", error_kind="start_failed", delay_sec=2.0, run=2, of=3)
    assert (r.kind, r.text) == (
        EventKind.RETRY,
        "[t] infra error start_failed; retrying in 2 s on a fresh sandbox (run 2 of 3)",
    )
    gone = EngineWait(tag="t", state="gave_up", bound_sec=180)
    assert gone.kind is EventKind.WARNING
    assert gone.text == (
        "[t] engine_unavailable: the Docker engine did not answer within 180 s; "
        "the trial keeps its sandbox_lost error (resume re-runs it)"
    )
    assert EngineWait(tag="t", state="back", bound_sec=1).kind is EventKind.RETRY


def test_a_trial_warning_dedupes_on_its_key_not_its_tag():
    a = TrialWarning(tag="t", key="backend 'local' cannot apply cpus = 2")
    b = TrialWarning(tag="t #3", key="backend 'local' cannot apply cpus = 2")
    assert a.text == "[t] warning: backend 'local' cannot apply cpus = 2"
    assert a.text != b.text and dedupe_key(a) == dedupe_key(b)
    assert body(a) == "warning: backend 'local' cannot apply cpus = 2"
    plain = Event(EventKind.WARNING, "something odd")
    assert dedupe_key(plain) == "something odd" and render(plain) == "something odd"


def test_a_trial_line_takes_its_kind():
    v = TrialLine(tag="t", line="PASS reward 1.00", line_kind=EventKind.VERDICT)
    assert (v.kind, v.text, v.notable) == (EventKind.VERDICT, "[t] PASS reward 1.00", True)


def test_events_survive_pickling_as_ray_ships_them():
    events = [
        StepEnded(tag="t", trial_id="x", index=1, of=1, name="m", source="verifier", reward=0.5),
        TrialWarning(tag="t", key="k"),
        Event(EventKind.JOB, "j"),
    ]
    back = pickle.loads(pickle.dumps(events))
    assert back == events and [e.text for e in back] == [e.text for e in events]
    assert type(back[0]) is StepEnded and back[0].reward == 0.5
