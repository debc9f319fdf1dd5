"""The live viewer: a small Starlette app over a :class:`~cairn.viewer.data.Library`.

Routes (stable URLs, shareable by pasting)::

    /                                  jobs
    /jobs/<job>/?task=&outcome=&error=&step=&sort=&desc=&page=&per_page=
    /jobs/<job>/trials/<trial>/#step-<n>
    /jobs/<job>/files/<path inside the job folder>[?download=1]
    /compare?job=<a>&job=<b>
    /api/version  /api/jobs/<job>/version  /api/jobs/<job>/trials/<trial>/version
    /static/<asset>

Every page carries a Content-Security-Policy without inline script (the one script is
``/static/viewer.js``); stored files are sent as ``text/plain`` or as attachments, with
``X-Content-Type-Options: nosniff`` and ``Content-Security-Policy: default-src 'none'; sandbox``,
so an HTML artifact is shown as its source, never run.
"""

from __future__ import annotations

import mimetypes
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from cairn.viewer.data import (
    REFRESH_SEC,
    Library,
    TrialQuery,
    is_text_file,
    load_trial,
    safe_path,
    trial_version,
)
from cairn.viewer.pages import render_compare, render_job, render_jobs, render_trial
from cairn.viewer.render import CSP_FILE, CSP_LIVE, PACKAGE, Urls, render_page

STATIC = {"viewer.css": "text/css; charset=utf-8", "viewer.js": "text/javascript; charset=utf-8"}

_COMMON = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def _headers(csp: str = CSP_LIVE, **extra: str) -> dict[str, str]:
    return {**_COMMON, "Content-Security-Policy": csp, "X-Frame-Options": "DENY", **extra}


def _page(html: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(html, status_code=status, headers=_headers())


def _not_found(message: str = "Not found.") -> HTMLResponse:
    return _page(
        render_page("error.html", u=Urls(), bundle=False, status="404 not found", message=message), 404
    )


def create_app(root: Path) -> Starlette:
    """Build the viewer app over a jobs folder or one job folder.

    Args:
        root: the folder; read only through :mod:`cairn.viewer.data` (the store's files).

    Returns:
        The ASGI app (run it with uvicorn; see :func:`cairn.viewer.serve`).

    Raises:
        FileNotFoundError: ``root`` is not a folder.
    """
    lib = Library(root)
    u = Urls()

    async def jobs(request: Request) -> Response:
        if lib.single:
            return Response(status_code=307, headers={"Location": u.job(lib.root.name)})
        return _page(render_jobs(lib, u, poll=u.version()))

    async def job(request: Request) -> Response:
        j = lib.job(request.path_params["job"])
        if j is None:
            return _not_found("No such job.")
        q = TrialQuery.from_params(request.query_params)
        return _page(render_job(j, q, u, single=lib.single, poll=u.version(j.name)))

    async def trial(request: Request) -> Response:
        j = lib.job(request.path_params["job"])
        t = load_trial(j, request.path_params["trial"]) if j is not None else None
        if j is None or t is None:
            return _not_found("No such trial.")
        poll = u.version(j.name, t.name) if t.result is None else None
        return _page(render_trial(t, u, single=lib.single, poll=poll))

    async def file(request: Request) -> Response:
        j = lib.job(request.path_params["job"])
        path = safe_path(j.root, request.path_params["path"]) if j is not None else None
        if path is None:
            return Response(
                "not found\n", status_code=404, media_type="text/plain", headers=_headers(CSP_FILE)
            )
        download = request.query_params.get("download") == "1" or not is_text_file(path)
        name = path.name.replace('"', "_").replace("\r", "_").replace("\n", "_")
        if download:
            return FileResponse(
                path,
                media_type="application/octet-stream",
                headers=_headers(CSP_FILE, **{"Content-Disposition": f'attachment; filename="{name}"'}),
            )
        return FileResponse(path, media_type="text/plain; charset=utf-8", headers=_headers(CSP_FILE))

    async def compare(request: Request) -> Response:
        names = request.query_params.getlist("job")
        if len(names) != 2:
            return _page(
                render_page(
                    "error.html",
                    u=u,
                    bundle=False,
                    status="pick two jobs",
                    message="Select exactly two jobs on the jobs page to compare them.",
                ),
                400,
            )
        a, b = lib.job(names[0]), lib.job(names[1])
        if a is None or b is None:
            return _not_found("No such job.")
        return _page(render_compare(a, b, u))

    async def version(request: Request) -> Response:
        return JSONResponse({"version": lib.version()}, headers=_headers())

    async def job_version(request: Request) -> Response:
        j = lib.job(request.path_params["job"])
        if j is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        rows = j.refresh(REFRESH_SEC)
        return JSONResponse(
            {
                "version": j.version,
                "running": sum(r.outcome == "running" for r in rows),
                "finished": sum(r.outcome != "running" for r in rows),
            },
            headers=_headers(),
        )

    async def trial_ver(request: Request) -> Response:
        j = lib.job(request.path_params["job"])
        name = request.path_params["trial"]
        if j is None or load_trial(j, name) is None:
            return JSONResponse({"error": "no such trial"}, status_code=404)
        return JSONResponse({"version": trial_version(j, name)}, headers=_headers())

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return Response(
                "not found\n", status_code=404, media_type="text/plain", headers=_headers(CSP_FILE)
            )
        body = resources.files(PACKAGE).joinpath("static", name).read_bytes()
        return Response(body, media_type=STATIC[name], headers=_headers())

    async def favicon(request: Request) -> Response:
        return Response(status_code=204, headers=_headers())

    routes = [
        Route("/", jobs),
        Route("/jobs/{job}/", job),
        Route("/jobs/{job}/trials/{trial}/", trial),
        Route("/jobs/{job}/files/{path:path}", file),
        Route("/compare", compare),
        Route("/api/version", version),
        Route("/api/jobs/{job}/version", job_version),
        Route("/api/jobs/{job}/trials/{trial}/version", trial_ver),
        Route("/static/{name}", static),
        Route("/favicon.ico", favicon),
    ]

    async def not_found(request: Request, exc: Any) -> Response:
        return _not_found()

    app = Starlette(routes=routes, exception_handlers={404: not_found})
    app.state.library = lib
    return app


def guess_type(path: Path) -> str:
    """The MIME type of a stored file by name (for information; files are never served as it)."""
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"
