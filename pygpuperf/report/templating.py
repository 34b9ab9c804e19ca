"""The one Jinja2 environment of pygpuperf's HTML pages, and the filters their templates share.

Templates live in pygpuperf/report/templates (package data: found through the installed package,
not a path of the source tree). Autoescape is on for every template and string, so any value a
document carries (a device name, a kernel name, a finding's evidence) reaches the page as text.
The one way to put markup in a page is `svg()`, for charts matplotlib drew.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from typing import Any, Iterable, Mapping

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from pygpuperf.core import units

TEMPLATES = "report/templates"  # inside the pygpuperf package
# Blocks every fetch; inline styles (ours and the SVGs') are all a page needs.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


# --------------------------------------------------------------------------- filters


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number(value: Any, digits: int = 1) -> str:
    """A table cell (core.units.format_number): "-" for none."""
    return units.format_number(value, digits) if _finite(value) else "-"


def figure(value: Any) -> str:
    """A rate or size in a sentence (core.units.figure)."""
    return units.figure(value) if _finite(value) else "-"


def size(value: Any) -> str:
    """Bytes in binary units (core.units.format_bytes)."""
    return units.format_bytes(value) if _finite(value) else "-"


def fixed(value: Any, digits: int = 2, grouped: bool = False) -> str:
    """`digits` decimals, with thousands separators when `grouped`; "-" for none."""
    if not _finite(value):
        return "-"
    return f"{value:,.{digits}f}" if grouped else f"{value:.{digits}f}"


def grouped(value: Any, digits: int = 0) -> str:
    return fixed(value, digits, True)


def signed(value: Any, digits: int = 2) -> str:
    """A change: "+" in front of a gain (and of zero)."""
    return ("+" if _finite(value) and value >= 0 else "") + fixed(value, digits)


def significant(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if _finite(value) else "-"


def ms(us: Any) -> str:
    """Microseconds as milliseconds with two decimals and thousands separators."""
    return fixed(us / 1e3, 2, True) if _finite(us) else "-"


def percent(fraction: Any, digits: int = 0, scale: float = 100) -> str:
    """A fraction as a percentage: 0.157 -> "16%" (digits 0) or "15.7%" (digits 1); scale 1 for a
    value that is a percentage already."""
    return f"{scale * fraction:.{digits}f}%" if _finite(fraction) else "-"


def share(part: Any, whole: Any, digits: int = 1) -> str:
    """part / whole as a percentage; "-" when the whole is nothing."""
    return percent(part / whole, digits) if _finite(part) and _finite(whole) and whole > 0 else "-"


def fact(value: Any, key: str = "") -> str:
    """Any document value as one line of text: sizes of *_bytes keys in binary units, lists joined,
    objects as JSON, yes/no for booleans, "-" for none."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and str(key).endswith("_bytes"):
        return size(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


FILTERS = {"number": number, "figure": figure, "size": size, "fixed": fixed, "grouped": grouped, "signed": signed,
           "significant": significant, "ms": ms, "percent": percent, "share": share, "fact": fact}


# --------------------------------------------------------------------------- documents in templates


def svg(markup: str | None) -> Markup | None:
    """A chart's inline <svg> element, drawn by matplotlib (which escapes the text it draws), as markup
    a template embeds unescaped. Anything else is refused: it would bypass autoescape."""
    if markup is None:
        return None
    if not markup.lstrip().startswith("<svg"):
        raise ValueError("only an <svg> element drawn by matplotlib is embedded unescaped")
    return Markup(markup)


# A finding's fields that its heading shows; every other field follows under its own name.
_FINDING_HEAD = ("severity", "title", "suggestion", "evidence")
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def finding_view(finding: Any) -> dict[str, Any]:
    """A finding (dataclass or findings.json object) for the finding macro: its head, its evidence
    as rows, and every other field it has, so fields added later are shown without a template change."""
    fields = dataclasses.asdict(finding) if dataclasses.is_dataclass(finding) else dict(finding)
    evidence = fields.get("evidence") or {}
    severity = str(fields.get("severity", ""))
    return {"severity": severity, "kind": severity if severity in _SEVERITY_ORDER else "other",
            "title": fields.get("title", ""),
            "suggestion": fields.get("suggestion") or "",
            "evidence": list(evidence.items()) if isinstance(evidence, Mapping) else [("", evidence)],
            "more": [(k, v) for k, v in fields.items() if k not in _FINDING_HEAD and v not in (None, "", [], {})]}


def finding_views(findings: Iterable[Any]) -> list[dict[str, Any]]:
    """Errors first, then warnings, then the rest, each kind in its order."""
    return sorted(map(finding_view, findings), key=lambda f: _SEVERITY_ORDER.get(f["severity"], 3))


# --------------------------------------------------------------------------- environment


@functools.lru_cache(maxsize=None)
def environment() -> Environment:
    """The environment every page renders through (one, shared and cached)."""
    env = Environment(loader=PackageLoader("pygpuperf", TEMPLATES),
                      autoescape=select_autoescape(enabled_extensions=("html", "j2"), default_for_string=True,
                                                   default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(FILTERS)
    env.globals["CSP"] = CSP
    return env


def render(template: str, **context: Any) -> str:
    """The template (a name under report/templates) rendered with `context`."""
    return environment().get_template(template).render(**context)
