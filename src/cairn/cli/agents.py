"""``cairn agents prepare`` / ``cairn agents list``: the cache of sealed agent runtimes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from cairn.agents.installed import InstalledAgent

from cairn.cli import app

agents_app = typer.Typer(
    help="Prepare and list the agents cairn can run.\n\nExamples:\n\n"
    "  cairn agents list\n\n"
    "  cairn agents prepare claude-code\n\n"
    "  cairn agents prepare codex@0.171.0 opencode",
    no_args_is_help=True,
)
app.add_typer(agents_app, name="agents")


def _installed_classes() -> dict[str, type[InstalledAgent]]:
    from cairn.agents.installed import InstalledAgent
    from cairn.agents.registry import AGENT_NAMES, get_agent_class

    out: dict[str, type[InstalledAgent]] = {}
    for name in AGENT_NAMES:
        cls = get_agent_class(name)
        if isinstance(cls, type) and issubclass(cls, InstalledAgent):
            out[name] = cls
    return out


@agents_app.command("prepare")
def prepare_command(
    names: Annotated[
        list[str], typer.Argument(help="NAME or NAME@VERSION (installed CLI agents).", show_default=False)
    ],
    platform: Annotated[
        str,
        typer.Option(
            "--platform", help="Sandbox platform: linux-x64, linux-arm64, linux-x64-musl, linux-arm64-musl."
        ),
    ] = "linux-x64",
) -> None:
    """Download an agent once into cairn's cache (sealed runtime): a CLI from the npm registry,
    or a Python agent from PyPI with its own Python (Debian's CPython 3.11).

    Later trials bind the cached runtime read-only into each sandbox: no network and no Node.js
    are needed inside. The cache is $CAIRN_CACHE_DIR/agents (default ~/.cache/cairn/agents).
    """
    from cairn.agents.runtime import PLATFORMS, AgentPrepareError, prepare_any, version_problem

    classes = _installed_classes()
    if platform not in PLATFORMS:
        typer.echo(f"cairn: error: unknown platform {platform!r}; known: {', '.join(PLATFORMS)}", err=True)
        raise typer.Exit(2)
    todo = []
    for item in names:
        name, _, version = item.partition("@")
        if name not in classes:
            typer.echo(
                f"cairn: error: {name!r} is not an installed CLI agent; known: {', '.join(classes)}", err=True
            )
            raise typer.Exit(2)
        version = version if "@" in item else classes[name].spec.version
        why = version_problem(version)
        if why is not None:
            typer.echo(f"cairn: error: {name}: {why}", err=True)
            raise typer.Exit(2)
        todo.append((name, version))
    failed = False
    for name, version in todo:
        spec = classes[name].spec
        try:
            rt = prepare_any(
                name, spec.packaging, version, platform, log=lambda line: typer.echo(line, err=True)
            )
        except AgentPrepareError as exc:
            typer.echo(f"cairn: error: {exc}", err=True)
            failed = True
            continue
        typer.echo(f"{name} {version} ({platform}): {rt.path} ({rt.size_bytes / 1e6:.0f} MB)")
    if failed:
        raise typer.Exit(1)


@agents_app.command("list")
def list_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the built-in agents, their pinned versions, and what is in the cache."""
    from cairn.agents.registry import AGENT_NAMES, get_agent_class
    from cairn.agents.runtime import cache_root, list_runtimes

    classes = _installed_classes()
    cached: dict[str, list] = {}
    for rt in list_runtimes():
        cached.setdefault(rt.agent, []).append(rt)
    rows: list[dict[str, Any]] = []
    for name in AGENT_NAMES:
        cls = get_agent_class(name)
        if name in classes:
            spec = classes[name].spec
            from cairn.agents.runtime import PypiPackaging

            kind = "pypi" if isinstance(spec.packaging, PypiPackaging) else "npm"
            rows.append(
                {
                    "name": name,
                    "kind": kind,
                    "package": spec.package,
                    "version": spec.version,
                    "resume": bool(getattr(cls, "supports_resume", False)),
                    "cached": [
                        {
                            "version": r.version,
                            "platform": r.platform,
                            "path": str(r.path),
                            "size_bytes": r.size_bytes,
                        }
                        for r in cached.get(name, [])
                    ],
                }
            )
        else:
            rows.append(
                {
                    "name": name,
                    "kind": "built-in",
                    "package": None,
                    "version": getattr(cls, "version", None),
                    "resume": getattr(cls, "supports_resume", None),
                    "cached": None,
                }
            )
    if as_json:
        typer.echo(json.dumps({"cache": str(cache_root()), "agents": rows}, indent=2))
        return
    typer.echo(f"cache: {cache_root()}")
    for r in rows:
        if r["kind"] in ("npm", "pypi"):  # the installed agents, npm CLIs and PyPI ones alike
            where = ", ".join(f"{c['version']} {c['platform']}" for c in r["cached"] or ()) or "not cached"
            pin = (
                f"{r['package']}@{r['version']}" if r["kind"] == "npm" else f"{r['package']}=={r['version']}"
            )
            typer.echo(
                f"  {r['name']:<14} {r['kind']:<4}  {pin:<36} "
                f"resume={'yes' if r['resume'] else 'no':<3}  cached: {where}"
            )
        else:
            typer.echo(f"  {r['name']:<14} built-in")
