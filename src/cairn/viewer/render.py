"""Page rendering: one Jinja2 environment (autoescape on), URL builders for the live server and
the static bundle, and the number formats pages share.

Every value an agent or verifier wrote reaches HTML only through Jinja2's autoescaping (no
``|safe`` on such values anywhere in the templates); charts are inline SVG built in templates,
so their labels are escaped the same way.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import datetime
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

import jinja2

PACKAGE = "cairn.viewer"

CSP_LIVE = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
"""The Content-Security-Policy of every page the server sends: no inline script at all."""

CSP_FILE = "default-src 'none'; sandbox"
"""The policy of every stored file the server sends (artifacts, logs): nothing runs."""


def static_text(name: str) -> str:
    """The text of a shipped static asset (``static/<name>``)."""
    return resources.files(PACKAGE).joinpath("static", name).read_text(encoding="utf-8")


def bundle_csp(css: str) -> str:
    """The policy of a static-bundle page: no script at all; only the inlined stylesheet.

    Args:
        css: the exact text of the page's one ``<style>`` element.
    """
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode()
    return (
        f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; base-uri 'none'; form-action 'none'"
    )


def _seg(name: str) -> str:
    """One URL path segment: every character but unreserved ones percent-encoded (``/``,
    ``%``, ``#``, ``?`` and space too), so a job or trial name round-trips through one decoding."""
    return quote(name, safe="")


class Urls:
    """Builds links for one page, for the live server or for the static bundle.

    Live URLs are stable paths (``/jobs/<job>/trials/<trial>/``) so a trial can be shared by
    pasting its address; bundle URLs are relative file paths (``../../index.html``) that work
    from ``file://``.

    Args:
        bundle: build relative file links for the static bundle.
        depth: how many folders below the bundle's root the page is.
    """

    def __init__(self, bundle: bool = False, depth: int = 0) -> None:
        self.bundle = bundle
        self.prefix = "../" * depth

    def jobs(self) -> str:
        """The jobs page."""
        return self.prefix + "index.html" if self.bundle else "/"

    def job(self, job: str, **params: str) -> str:
        """A job page, with optional query parameters (live only)."""
        if self.bundle:
            return f"{self.prefix}jobs/{_seg(job)}/index.html"
        qs = urlencode(params)
        return f"/jobs/{_seg(job)}/" + (f"?{qs}" if qs else "")

    def trial(self, job: str, trial: str, anchor: str = "") -> str:
        """A trial page (``anchor`` e.g. ``step-2``)."""
        frag = f"#{anchor}" if anchor else ""
        if self.bundle:
            return f"{self.prefix}jobs/{_seg(job)}/trials/{_seg(trial)}/index.html{frag}"
        return f"/jobs/{_seg(job)}/trials/{_seg(trial)}/{frag}"

    @staticmethod
    def version(job: str | None = None, trial: str | None = None) -> str:
        """The version URL a live page polls: of every job (no ``job``), of one job, or of one
        trial. Names are percent-encoded whole (``a b%2e`` → ``a%20b%252e``), so the server's
        one decoding gives the name back."""
        if job is None:
            return "/api/version"
        if trial is None:
            return f"/api/jobs/{_seg(job)}/version"
        return f"/api/jobs/{_seg(job)}/trials/{_seg(trial)}/version"

    def file(self, job: str, rel: str, download: bool = False, text: bool = True) -> str:
        """A stored file (path relative to the job folder).

        Live: served as ``text/plain`` or as a download. Bundle: a copy named ``<rel>.txt``
        (text) or ``<rel>.bin`` (anything else), so a browser never renders it as a page.
        """
        if self.bundle:
            return f"{self.prefix}jobs/{_seg(job)}/files/{quote(rel)}" + (".txt" if text else ".bin")
        return f"/jobs/{_seg(job)}/files/{quote(rel)}" + ("?download=1" if download else "")

    def compare(self, a: str, b: str) -> str | None:
        """The compare page of two jobs (live only: ``None`` in the bundle)."""
        if self.bundle:
            return None
        return "/compare?" + urlencode([("job", a), ("job", b)])

    def static(self, name: str) -> str:
        """A shipped asset."""
        return f"/static/{name}"


def fmt_num(x: Any, digits: int = 2) -> str:
    """A float with ``digits`` decimals, ``–`` for ``None``."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{digits}f}"


def fmt_pct(x: float | None) -> str:
    """A fraction as a percentage, ``–`` for ``None``."""
    return "–" if x is None else f"{100 * x:.0f}%"


def fmt_sec(x: float | None) -> str:
    """Seconds as ``1.2 s`` / ``3m 05s``; ``–`` for ``None``."""
    if x is None:
        return "–"
    if x < 60:
        return f"{x:.1f} s"
    m, s = divmod(int(round(x)), 60)
    return f"{m}m {s:02d}s" if m < 60 else f"{m // 60}h {m % 60:02d}m"


def fmt_time(x: Any) -> str:
    """An ISO timestamp (or datetime) as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    if x is None:
        return "–"
    if isinstance(x, datetime):
        return x.strftime("%Y-%m-%d %H:%M:%S")
    s = str(x)
    return s.replace("T", " ")[:19]


def fmt_size(n: int) -> str:
    """Bytes as ``12 B`` / ``3.4 KiB`` / ``5.6 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def fmt_tokens(x: int | None) -> str:
    """A token count, ``?`` when unknown (never shown as a made-up 0)."""
    return "?" if x is None else str(x)


def fmt_usd(x: float | None) -> str:
    """A cost in USD with 6 decimals (one call costs fractions of a cent), ``?`` when unknown."""
    return "?" if x is None else f"${x:.6f}"


def fmt_ms(x: float | None) -> str:
    """Seconds shown as milliseconds (``12.3 ms``), ``–`` for ``None``."""
    return "–" if x is None else f"{1000 * x:.1f} ms"


def fmt_clock(x: Any) -> str:
    """The time of day of an ISO timestamp (``HH:MM:SS.mmm``), ``–`` for ``None``; anything
    that is no ISO timestamp is shown as given (cut at 32 characters)."""
    if x is None:
        return "–"
    s = str(x)
    if len(s) >= 19 and s[10] == "T":
        return s[11:23].rstrip("Z")
    return s[:32]


def pretty_json(x: Any) -> str:
    """A value as indented JSON text (escaped later by the template like any text)."""
    try:
        return json.dumps(x, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(x)


def enum_value(x: Any) -> Any:
    """An enum's value (other values unchanged)."""
    return getattr(x, "value", x)


_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    """The shared Jinja2 environment (templates from the package, autoescape always on)."""
    global _ENV
    if _ENV is None:
        env = jinja2.Environment(
            loader=jinja2.PackageLoader(PACKAGE, "templates"),
            autoescape=True,
            undefined=jinja2.ChainableUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            auto_reload=False,  # the templates ship in the package: no stat per page
        )
        env.filters.update(
            num=fmt_num,
            pct=fmt_pct,
            sec=fmt_sec,
            time=fmt_time,
            size=fmt_size,
            pretty=pretty_json,
            tok=fmt_tokens,
            usd=fmt_usd,
            ms=fmt_ms,
            clock=fmt_clock,
            v=enum_value,
        )
        _ENV = env
    return _ENV


def warm_templates() -> list[str]:
    """Compile every template once, also the ones pages only extend or import (``base.html``,
    ``macros.html``), so that no page request pays for parsing and compiling them.

    Returns:
        The template names compiled.
    """
    env = environment()
    names = env.list_templates(extensions=["html"])
    for name in names:
        env.get_template(name)
    return names


def render_page(template: str, **context: Any) -> str:
    """Render a page template.

    Args:
        template: the template file name (``job.html`` …).
        **context: its variables; ``u`` (a :class:`Urls`) and ``bundle`` are required.

    Returns:
        The HTML text.
    """
    ctx = dict(context)
    if ctx.get("bundle"):
        css = static_text("viewer.css")
        ctx.setdefault("inline_css", css)
        ctx.setdefault("csp", bundle_csp(css))
    else:
        ctx.setdefault("inline_css", None)
        ctx.setdefault("csp", None)
    ctx.setdefault("poll", None)
    return environment().get_template(template).render(**ctx)
