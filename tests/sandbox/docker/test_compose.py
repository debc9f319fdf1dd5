"""Multi-container (compose) environments (issue 8, design §3.1): the override files cairn lays
over a task's compose file, the conformance suite on ``main``, and whole trials on docker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cairn.errors import UnsupportedError
from cairn.sandbox.base import NetworkMode, SandboxSpec
from cairn.sandbox.docker.compose_files import (
    INHIBIT_IPV4,
    Reset,
    cairn_file,
    check_compose_file,
    defaults_file,
    dump_yaml,
    harbor_variables,
    project_name,
)
from taskgen import reward_if, write_task
from testbed import backend_available, run_trial_sync, validate_result_files

LABELS = {"cairn.job": "j1", "cairn.trial": "t1"}


# ---- override files (no Docker) ---------------------------------------------------------------
def _model() -> dict:
    return {
        "services": {
            "main": {
                "build": {"context": "/x"},
                "image": "shared:1",
                "ports": ["8080:80"],
                "container_name": "fixed",
                "cpus": 2.0,
            },
            "db": {"image": "postgres:16", "networks": {"back": None}},
            "worker": {"image": "shared:1"},
        },
        "networks": {
            "default": {"name": "p_default"},
            "back": {"name": "fixed-net"},
            "ext": {"name": "outside", "external": True},
        },
        "volumes": {"data": {"name": "mydata"}, "cache": {"name": "c", "external": True}},
    }


def test_project_names_are_unique_per_trial_and_valid():
    a = project_name("ABCDEF0123456789", "x1y2z3")
    b = project_name("ABCDEF0123456789", "q9w8e7")
    assert a == "cairn-abcdef01-x1y2z3" and a != b
    assert project_name("__", "Z") == "cairn-adhoc-z"


def test_cairn_file_owns_names_labels_ports_and_limits():
    spec = SandboxSpec(cpus=1.5, memory_mb=300, network_mode=NetworkMode.PUBLIC)
    doc = cairn_file(_model(), spec, project="cairn-p", env_hash="ab" * 32, labels=LABELS)
    main, db, worker = (doc["services"][s] for s in ("main", "db", "worker"))
    for svc in (main, db, worker):
        assert svc["labels"]["cairn.trial"] == "t1"
        assert svc["labels"]["cairn.compose_project"] == "cairn-p"
    tag = f"cairn-env:{'ab' * 8}-compose-main"
    assert main["image"] == tag and worker["image"] == tag  # a built image shared by name
    assert main["build"]["labels"]["cairn.env_hash"] == "ab" * 32
    assert "image" not in db and "build" not in db
    assert main["container_name"] == "cairn-p-main" and isinstance(main["ports"], Reset)
    assert main["deploy"]["resources"]["limits"] == {"cpus": "1.5", "memory": "300m"}
    assert main["cpus"] == 1.5 and main["memswap_limit"] == "300m"
    assert "deploy" not in db
    assert doc["networks"]["back"]["name"] == "cairn-p_back"
    assert "ext" not in doc["networks"] and "internal" not in doc["networks"]["back"]
    assert doc["volumes"] == {
        "data": {"name": "cairn-p_data", "labels": {**LABELS, "cairn.compose_project": "cairn-p"}}
    }
    assert "ports: !reset []" in dump_yaml(doc)


def test_no_network_makes_every_project_network_internal_without_a_host_address():
    model = _model()
    del model["networks"]["ext"]
    doc = cairn_file(
        model, SandboxSpec(network_mode=NetworkMode.NO_NETWORK), project="p", env_hash="0" * 64, labels=LABELS
    )
    for net in doc["networks"].values():
        assert net["internal"] is True and net["driver_opts"] == {INHIBIT_IPV4: "true"}


def test_behind_the_gateway_main_gets_a_known_host_name_and_no_proxy_names_it():
    """Issue 29: ``NO_PROXY`` names every local spelling, every service and ``main``'s own
    host name (set in advance: its ``hostname:``, else ``main``); Node gets
    ``NODE_USE_ENV_PROXY``."""
    from cairn.sandbox.docker.gateway import proxy_env

    model = _model()
    del model["networks"]["ext"]
    spec = SandboxSpec(network_mode=NetworkMode.ALLOWLIST, allowed_hosts=("a.test",))
    doc = cairn_file(model, spec, project="p", env_hash="0" * 64, labels=LABELS, gateway_env=proxy_env())
    main = doc["services"]["main"]
    assert main["hostname"] == "main"
    env = main["environment"]
    assert env["NODE_USE_ENV_PROXY"] == "1"
    for key in ("NO_PROXY", "no_proxy"):
        assert set(env[key].split(",")) >= {
            "localhost",
            "127.0.0.1",
            "::1",
            "0.0.0.0",
            "main",
            "db",
            "worker",
        }
        assert "[" not in env[key]  # httpx fails every request on a bracketed entry
    model["services"]["main"]["hostname"] = "box"
    doc = cairn_file(model, spec, project="p", env_hash="0" * 64, labels=LABELS, gateway_env=proxy_env())
    assert doc["services"]["main"]["hostname"] == "box"
    assert "box" in doc["services"]["main"]["environment"]["NO_PROXY"].split(",")


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda m: None, "external"),
        (
            lambda m: (m["networks"].pop("ext"), m["services"]["db"].update(network_mode="host")),
            "service `db` sets network_mode: host",
        ),
        (
            lambda m: (m["networks"].pop("ext"), m["networks"]["back"].update(driver="macvlan")),
            "driver 'macvlan'",
        ),
    ],
)
def test_no_network_refuses_what_reaches_outside(change, needle):
    model = _model()
    change(model)
    with pytest.raises(UnsupportedError, match="no-network") as exc:
        cairn_file(
            model,
            SandboxSpec(network_mode=NetworkMode.NO_NETWORK),
            project="p",
            env_hash="0" * 64,
            labels=LABELS,
        )
    assert needle in str(exc.value)


def test_harbor_variables_and_defaults(tmp_path):
    spec = SandboxSpec(
        env_dir=tmp_path, cpus=2, memory_mb=1024, env={"FOO": "x$y", "PATH": "/opt/bin:/usr/bin"}
    )
    v = harbor_variables(spec, "cairn-p", "img:1")
    assert v["CPUS"] == "2" and v["MEMORY"] == "1024M" and v["MAIN_IMAGE_NAME"] == "img:1"
    assert v["CONTEXT_DIR"] == str(tmp_path.resolve()) and v["TEST_DIR"] == "/tests"
    assert v["ENV_VERIFIER_LOGS_PATH"] == "/logs/verifier"
    assert v["T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME"] == "img:1"
    unlimited = harbor_variables(SandboxSpec(), "p", "i")
    assert int(unlimited["CPUS"]) >= 1 and unlimited["MEMORY"].endswith("M")
    main = defaults_file(spec, "img:1", build_main=True)["services"]["main"]
    assert main["build"] == {"context": str(tmp_path.resolve())} and main["image"] == "img:1"
    # values reach main through the compose process, except the CLI's own variables
    assert main["environment"] == ["FOO", "PATH=/opt/bin:/usr/bin"]
    assert main["command"] == ["sh", "-c", "sleep infinity"] and main["init"] is True


def test_compose_file_needs_a_main_service(tmp_path):
    f = tmp_path / "docker-compose.yaml"
    f.write_text("services:\n  app:\n    image: debian:bookworm-slim\n")
    with pytest.raises(UnsupportedError, match="service named `main`.*'app'"):
        check_compose_file(f)
    f.write_text("services: [\n")
    with pytest.raises(UnsupportedError, match="not readable as YAML"):
        check_compose_file(f)


# ---- the local backend refuses compose before anything starts ---------------------------------
SIDECAR_COMPOSE = """\
services:
  main:
    depends_on:
      sidecar:
        condition: service_completed_successfully
    volumes:
      - shared:/shared
  sidecar:
    image: debian:bookworm-slim
    command: ["sh", "-c", "echo from-sidecar > /shared/hello.txt"]
    volumes:
      - shared:/shared
volumes:
  shared: {}
"""


def _sidecar_task(root: Path, name: str = "sidecar") -> Path:
    return write_task(
        root,
        name,
        files={"environment/docker-compose.yaml": SIDECAR_COMPOSE},
        test=reward_if('[ "$(cat /shared/hello.txt)" = from-sidecar ]'),
    )


@pytest.mark.local
def test_local_backend_refuses_compose_with_a_config_error(tmp_path):
    if not backend_available("local"):
        pytest.skip("local backend not available")
    try:
        from cairn.sandbox import get_backend

        get_backend("local")
    except ImportError as exc:
        pytest.skip(f"local backend does not import here: {exc}")
    r = run_trial_sync(_sidecar_task(tmp_path / "tasks"), "nop", "local", tmp_path / "jobs")
    assert r.outcome.value == "errored" and r.error.kind.value == "config_error"
    assert "needs -e docker" in r.error.message
    assert r.timings.environment_sec is None and r.steps[0].source.value == "not-run"


# ---- docker --------------------------------------------------------------------------------
docker_mod = pytest.importorskip("docker")


def _docker_client():
    if not backend_available("docker"):
        pytest.skip("docker not available")
    return docker_mod.from_env()


def _owned(trial_id: str) -> list[str]:
    """Containers, networks and volumes still labelled with a trial id."""
    client = docker_mod.from_env()
    try:
        flt = {"label": [f"cairn.trial={trial_id}"]}
        names = [c.name for c in client.containers.list(all=True, filters=flt)]
        names += [n.name for n in client.networks.list(filters=flt)]
        names += [v.name for v in client.volumes.list(filters=flt)]
        return names
    finally:
        client.close()


def _project_leftovers(project: str) -> list[str]:
    client = docker_mod.from_env()
    try:
        flt = {"label": [f"com.docker.compose.project={project}"]}
        return (
            [c.name for c in client.containers.list(all=True, filters=flt)]
            + [n.name for n in client.networks.list(filters=flt)]
            + [v.name for v in client.volumes.list(filters=flt)]
        )
    finally:
        client.close()


class _Recorder:
    """An agent that records, during its run, what Docker holds under the trial's labels."""

    def __new__(cls):
        from cairn.agents.base import Agent

        class Recorder(Agent):
            name = "recorder"
            seen: dict | None = None

            async def run(self, instruction, sandbox, context):
                flt = {"label": [f"cairn.compose_project={sandbox.info['compose_project']}"]}
                client = docker_mod.from_env()
                try:
                    self.seen = {
                        "project": sandbox.info["compose_project"],
                        "containers": {
                            c.labels["com.docker.compose.service"]: c.labels
                            for c in client.containers.list(all=True, filters=flt)
                        },
                        "networks": [n.name for n in client.networks.list(filters=flt)],
                        "volumes": [v.name for v in client.volumes.list(filters=flt)],
                    }
                finally:
                    client.close()

        return Recorder()


@pytest.mark.docker
def test_sidecar_file_seen_by_main_labels_on_everything_and_nothing_left(tmp_path):
    _docker_client()
    agent = _Recorder()
    r = run_trial_sync(_sidecar_task(tmp_path / "tasks"), agent, "docker", tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 1.0 and r.passed
    seen = agent.seen
    assert set(seen["containers"]) == {"main", "sidecar"}
    for labels in seen["containers"].values():
        assert labels["cairn.trial"] == r.trial_id and labels["cairn.job"] == "test-" + r.trial_id[:8]
        assert labels["cairn.job_dir"] == str((tmp_path / "jobs" / "job").absolute())
    assert seen["networks"] == [f"{seen['project']}_default"]
    assert f"{seen['project']}_shared" in seen["volumes"]
    assert _owned(r.trial_id) == [] and _project_leftovers(seen["project"]) == []
    (trial_dir,) = (tmp_path / "jobs" / "job" / "trials").iterdir()
    validate_result_files(trial_dir)
    assert json.loads((trial_dir / "result.json").read_text())["image_id"].startswith("sha256:")


def _plan(task_path: Path, jobs: Path, attempt: int):
    from cairn.plan import RunOptions, TrialPlan, trial_id
    from cairn.task.load import load_task

    task = load_task(task_path)
    tid = trial_id(task.name, task.content_hash, "nop", {}, None, "docker", attempt)
    job_dir = jobs / "job"
    return TrialPlan(
        task=task,
        agent_name="nop",
        agent_kwargs={},
        model=None,
        backend="docker",
        attempt=attempt,
        trial_id=tid,
        trial_dir=job_dir / "trials" / f"{task.slug}__{attempt}__{tid[:8]}",
        job_id="test-" + tid[:8],
        job_dir=job_dir,
        options=RunOptions(),
    )


@pytest.mark.docker
@pytest.mark.slow
def test_two_compose_trials_at_once_do_not_collide(tmp_path):
    """Same task, same compose file with a fixed container_name, a named volume and a host port."""
    _docker_client()
    compose = SIDECAR_COMPOSE.replace(
        "    volumes:\n      - shared:/shared\n  sidecar:",
        "    container_name: fixed-main\n    ports: ['18931:80']\n"
        "    volumes:\n      - shared:/shared\n  sidecar:",
    )
    compose = compose.replace("  shared: {}\n", "  shared:\n    name: fixed-volume\n")
    task = write_task(
        tmp_path / "tasks",
        "pair",
        files={"environment/docker-compose.yaml": compose},
        test=reward_if(
            '[ "$(cat /shared/hello.txt)" = from-sidecar ] && [ ! -e /shared/other ] && touch /shared/other'
        ),
    )
    from cairn.trial.run import run_trial

    async def both():
        return await asyncio.gather(*(run_trial(_plan(task, tmp_path / "jobs", k)) for k in (1, 2)))

    results = asyncio.run(both())
    for r in results:
        assert r.error is None, r.error
        assert r.reward == 1.0
        assert _owned(r.trial_id) == []


HARBOR_COMPOSE = """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}
    image: ${MAIN_IMAGE_NAME}
    command: ["sh", "-c", "echo \\"main saw $$SHARED_TOKEN\\" > /startup.txt && sleep infinity"]
    environment:
      - SHARED_TOKEN=${SHARED_TOKEN}
    volumes:
      - shared:/shared
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
    depends_on:
      - helper
  helper:
    image: debian:bookworm-slim
    command: ["sh", "-c", "echo \\"helper saw $$SHARED_TOKEN\\" > /shared/helper.txt && sleep infinity"]
    environment:
      SHARED_TOKEN: ${SHARED_TOKEN}
    volumes:
      - shared:/shared
volumes:
  shared: {}
"""


@pytest.mark.docker
def test_harbor_pattern_env_reaches_main_startup_and_sidecar_nop_scores_1(tmp_path):
    _docker_client()
    test = "for i in $(seq 50); do [ -s /shared/helper.txt ] && break; sleep 0.1; done\n" + reward_if(
        '[ "$(cat /startup.txt)" = "main saw tok-42" ] '
        '&& [ "$(cat /shared/helper.txt)" = "helper saw tok-42" ] '
        '&& [ "$SHARED_TOKEN" = tok-42 ]'
    )
    task = write_task(
        tmp_path / "tasks",
        "harbor-pattern",
        toml_extra='[environment.env]\nSHARED_TOKEN = "tok-42"\n',
        files={"environment/docker-compose.yaml": HARBOR_COMPOSE},
        test=test,
    )
    with (task / "task.toml").open("a") as f:  # the file ends inside [environment]
        f.write("memory_mb = 512\ncpus = 1\n")
    r = run_trial_sync(task, "nop", "docker", tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 1.0 and r.passed


@pytest.mark.docker
def test_no_network_main_reaches_its_sidecar_by_name(tmp_path):
    """(That nothing outside is reached is the conformance check network_none, on main.)"""
    _docker_client()
    compose = """\
services:
  main:
    depends_on: [web]
  web:
    image: debian:bookworm-slim
    command: ["python3", "-m", "http.server", "8080"]
    healthcheck:
      test: ["CMD", "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"]
      interval: 1s
      retries: 30
"""
    test = reward_if(
        "timeout 5 bash -c 'exec 3<>/dev/tcp/web/8080; "
        'printf "GET / HTTP/1.0\\r\\n\\r\\n" >&3; head -1 <&3\' | grep -q 200'
    )
    task = write_task(
        tmp_path / "tasks", "nonet", files={"environment/docker-compose.yaml": compose}, test=test
    )
    r = run_trial_sync(task, "nop", "docker", tmp_path / "jobs")
    assert r.error is None, r.error
    assert r.reward == 1.0


@pytest.mark.docker
@pytest.mark.parametrize(
    "compose, kind, needle",
    [
        (
            "services:\n  main: {}\n  db:\n    image: cairn-absent-image:nope\n",
            "image_not_found",
            "cairn-absent-image:nope",
        ),
        (
            "services:\n  main: {}\n  side:\n    image: debian:bookworm-slim\n    network_mode: host\n",
            "config_error",
            "network_mode: host",
        ),
        ("services:\n  main:\n    depends_on: [ghost]\n", "config_error", "ghost"),
    ],
)
def test_compose_failures_are_classified_and_leave_nothing(tmp_path, compose, kind, needle):
    _docker_client()
    task = write_task(tmp_path / "tasks", "broken", files={"environment/docker-compose.yaml": compose})
    r = run_trial_sync(task, "nop", "docker", tmp_path / "jobs")
    assert r.outcome.value == "errored" and r.error.kind.value == kind, r.error
    assert needle in r.error.message
    assert _owned(r.trial_id) == []


@pytest.mark.docker
def test_a_failing_main_build_is_build_failed_with_its_log(tmp_path):
    _docker_client()
    task = write_task(
        tmp_path / "tasks",
        "badbuild",
        dockerfile="FROM debian:bookworm-slim\nRUN echo compose-boom-7 && exit 3\n",
        files={"environment/docker-compose.yaml": SIDECAR_COMPOSE},
    )
    import docker

    client = docker.from_env()
    before = {c.id for c in client.containers.list(all=True)}
    r = run_trial_sync(task, "nop", "docker", tmp_path / "jobs")
    assert r.error.kind.value == "build_failed"
    assert "compose-boom-7" in r.error.detail["log_tail"]
    assert _owned(r.trial_id) == []
    # nor an unlabelled intermediate container of the failed build (cairn clean can't see those)
    left = [
        c
        for c in client.containers.list(all=True)
        if c.id not in before and "compose-boom-7" in " ".join(c.attrs["Config"].get("Cmd") or [])
    ]
    assert left == []


# ---- the conformance suite against main ---------------------------------------------------------
def _compose_factory(spec: SandboxSpec):
    """Conformance factory: the suite's Dockerfile becomes service main beside a sleeping sidecar."""
    from cairn.sandbox.docker.compose import ComposeSandbox

    assert spec.env_dir is not None
    (spec.env_dir / "docker-compose.yaml").write_text(
        "services:\n  main: {}\n  sidecar:\n    image: debian:bookworm-slim\n"
        "    command: [sleep, infinity]\n    init: true\n"
    )
    return ComposeSandbox(spec)


async def _leftovers(spec: SandboxSpec) -> list[str]:
    return _owned(spec.trial_id)


def _conformance_params():
    from cairn.sandbox import conformance

    try:
        from cairn.sandbox.docker.compose import ComposeSandbox
    except ImportError:
        return []
    return conformance.pytest_params(ComposeSandbox)


@pytest.mark.docker
@pytest.mark.parametrize("check", _conformance_params())
def test_conformance_on_main(check, tmp_path):
    from cairn.sandbox import conformance

    _docker_client()
    conformance.run_check_sync(check, _compose_factory, tmp_path, leftovers=_leftovers)


# ---- a start that fails or is cancelled half way leaves nothing ---------------------------------
UNHEALTHY_COMPOSE = """\
services:
  main: {}
  flaky:
    image: debian:bookworm-slim
    command: [sleep, infinity]
    init: true
    healthcheck:
      test: ["CMD", "false"]
      interval: 1s
      timeout: 1s
      retries: %d
"""


def _compose_spec(tmp_path: Path, compose: str) -> SandboxSpec:
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (env / "docker-compose.yaml").write_text(compose)
    return SandboxSpec(
        env_dir=env,
        network_mode=NetworkMode.NO_NETWORK,
        job_id="test-compose",
        trial_id=f"unhealthy-{tmp_path.name[-12:]}",
    )


@pytest.mark.docker
def test_an_unhealthy_service_is_start_failed_and_the_project_is_removed(tmp_path):
    _docker_client()
    from cairn.errors import SandboxError
    from cairn.sandbox.docker.compose import ComposeSandbox

    sb = ComposeSandbox(_compose_spec(tmp_path, UNHEALTHY_COMPOSE % 1))

    async def go():
        async with sb:
            pass

    with pytest.raises(SandboxError) as exc:
        asyncio.run(go())
    assert exc.value.kind.value == "start_failed" and "flaky" in str(exc.value)
    assert _project_leftovers(sb.project) == [] and _owned(sb.spec.trial_id) == []


@pytest.mark.docker
def test_a_start_cancelled_during_up_leaves_nothing(tmp_path):
    _docker_client()
    from cairn.sandbox.docker.compose import ComposeSandbox

    sb = ComposeSandbox(_compose_spec(tmp_path, UNHEALTHY_COMPOSE % 1000))

    async def go():
        async with asyncio.timeout(6):
            async with sb:
                raise AssertionError("the project came up healthy")

    with pytest.raises(TimeoutError):
        asyncio.run(go())
    assert _project_leftovers(sb.project) == [] and _owned(sb.spec.trial_id) == []


@pytest.mark.docker
def test_cairn_limits_replace_the_files_own_limits_on_main(tmp_path):
    _docker_client()
    from cairn.sandbox.docker.compose import ComposeSandbox

    spec = _compose_spec(
        tmp_path,
        "services:\n  main:\n    mem_limit: 1g\n    cpus: 3\n"
        "    deploy: {resources: {limits: {cpus: '3', memory: 1g}}}\n",
    )
    spec = SandboxSpec(**{**spec.__dict__, "cpus": 1.5, "memory_mb": 300})

    async def go() -> str:
        async with ComposeSandbox(spec) as sb:
            r = await sb.exec(
                "cat /sys/fs/cgroup/memory.max 2>/dev/null "
                "|| cat /sys/fs/cgroup/memory/memory.limit_in_bytes; "
                "cat /sys/fs/cgroup/cpu.max 2>/dev/null "
                "|| cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us"
            )
            return r.stdout

    mem, cpu = asyncio.run(go()).split("\n")[:2]
    assert int(mem) == 300 * 1024 * 1024
    assert cpu.split()[0] == "150000"


def test_images_to_build_and_to_find_follow_the_cairn_file():
    from cairn.sandbox.docker.compose_files import images_to_build, images_to_find, with_images

    model = _model()
    doc = cairn_file(model, SandboxSpec(), project="p", env_hash="cd" * 32, labels=LABELS)
    final = with_images(model, doc)
    tag = f"cairn-env:{'cd' * 8}-compose-main"
    assert images_to_build(final) == {"main": tag}
    assert images_to_find(final) == {"db": "postgres:16"}
    assert model["services"]["main"]["image"] == "shared:1"  # the input is not changed
