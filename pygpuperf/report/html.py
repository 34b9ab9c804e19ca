"""report.html: one self-contained page derived from a Results document.

Run facts, findings, workloads, the measurement tables per family and the charts as inline
SVG. Nothing is fetched (no scripts, fonts or images from elsewhere, and a Content-Security-
Policy that forbids it), no JavaScript, and every string taken from the results is escaped:
results files may come from someone else.
"""

from __future__ import annotations

import html
import json
import tempfile
from pathlib import Path
from typing import Any, Iterable, Sequence

from pygpuperf.facts import datasheets
from pygpuperf.report.chart import ChartPoint, chart_style, inline_svg, roofline_svg
from pygpuperf.report.datasheet_chart import datasheet_svg
from pygpuperf.report.sweep_chart import sweep_chart
from pygpuperf.report.table import summary_rows
from pygpuperf.core.units import format_bytes, format_number as _fmt
from pygpuperf.core.results import Results

_FAMILY_TITLES = {"memory": "Memory", "compute": "Compute", "latency": "Latency", "transfer": "Transfers",
                  "collective": "Collectives"}
_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
# Meta sections shown first, in this order; any others follow by name.
_META_SECTIONS = ("device", "host", "versions", "extension")
_MODEL_TABLES = (("compute", "compute"), ("memory", "memory"), ("links", "transfer"), ("latency", "latency"),
                 ("communication", "collective"))

# Blocks every fetch; inline styles (ours and the SVGs') are all the page needs.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_CSS = """
tr.total td { border-top: 2px solid #bbb; font-weight: 600; }
td.name { overflow-wrap: anywhere; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: #1d1d1f; margin: 0 auto; max-width: 1180px; padding: 0 24px 48px; background: #fff; }
header { border-bottom: 3px solid #1f4e9c; padding: 18px 0 10px; }
h1 { margin: 0 0 4px; font-size: 26px; }
h2 { margin-top: 36px; border-bottom: 1px solid #ccc; padding-bottom: 4px; }
h3 { margin: 18px 0 6px; font-size: 16px; }
.sub { color: #555; margin: 0; }
nav { margin: 10px 0 0; font-size: 13px; }
nav a { margin-right: 14px; color: #1f4e9c; }
.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 12px; margin-top: 14px; }
.facts section { background: #f5f7fa; border-radius: 6px; padding: 8px 12px; }
.facts h3 { margin: 0 0 4px; font-size: 13px; text-transform: uppercase; color: #555; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 1px 10px; margin: 0; font-size: 13px; }
dt { color: #555; } dd { margin: 0; overflow-wrap: anywhere; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 12px; width: 100%; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e3e3e3; text-align: left; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.check-ok { color: #1a7f37; } .check-wrong, .check-error { color: #c62828; font-weight: 600; }
.check-waived { color: #777; }
.note { color: #666; font-size: 12px; }
.finding { border-left: 5px solid #999; background: #fafafa; padding: 8px 12px; margin: 10px 0; }
.finding p { margin: 4px 0; }
.sev-error { border-color: #c62828; } .sev-warning { border-color: #e09b00; } .sev-info { border-color: #1f7ab8; }
.badge { display: inline-block; font-size: 11px; text-transform: uppercase; padding: 1px 6px; border-radius: 3px;
         background: #999; color: #fff; margin-right: 6px; vertical-align: 1px; }
.sev-error .badge { background: #c62828; } .sev-warning .badge { background: #b77900; }
.sev-info .badge { background: #1f7ab8; }
.finding .title { font-weight: 600; }
pre { background: #f3f3f3; padding: 8px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; }
figure { margin: 12px 0 24px; }
figure svg { display: block; width: 100%; height: auto; max-width: 1100px; }
figcaption { color: #555; font-size: 13px; }
footer { margin-top: 40px; color: #666; font-size: 12px; border-top: 1px solid #ddd; padding-top: 8px; }
"""


def escape(value: Any) -> str:
    """Any value as HTML text: result files may come from others."""
    return html.escape(str(value), quote=True)


_e = escape


def page(title: str, body: str, extra_css: str = "") -> str:
    """A self-contained page: the shared stylesheet, and a policy that lets nothing load."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{_CSP}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(title)}</title><style>{_CSS}{extra_css}</style></head>\n<body>\n"
            + body + "\n</body></html>\n")


# --------------------------------------------------------------------------- sections


def _fact(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and key.endswith("_bytes"):
        return format_bytes(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _facts_list(items: Iterable[tuple[str, Any]]) -> str:
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(_fact(k, v))}</dd>" for k, v in items) + "</dl>"


def _header(results: Results) -> str:
    meta = results.meta
    device = meta.get("device", {}) if isinstance(meta.get("device"), dict) else {}
    name = device.get("name") or (results.machine_model.device if results.machine_model else "device")
    version = meta.get("versions", {}).get("pygpuperf", "?") if isinstance(meta.get("versions"), dict) else "?"
    card = datasheets.datasheet_for(str(device.get("name", "")))
    sub = [f"pygpuperf {version}", f"measured {meta.get('time_utc', '?')}"]
    if meta.get("suite_seconds") is not None:
        sub.append(f"{_fact('', meta['suite_seconds'])} s of probes")
    if card:
        sub.append(f"datasheet: {card['name']}")
    if meta.get("interrupted"):
        sub.append("interrupted: partial results")
    sections = [key for key in _META_SECTIONS if isinstance(meta.get(key), dict)]
    sections += sorted(k for k, v in meta.items() if isinstance(v, dict) and k not in _META_SECTIONS)
    run = [(k, v) for k, v in meta.items() if not isinstance(v, dict) and k != "counting"]
    cards = [f"<section><h3>{_e(key)}</h3>{_facts_list(meta[key].items())}</section>" for key in sections]
    if run:
        cards.append(f"<section><h3>run</h3>{_facts_list(run)}</section>")
    nav = "".join(f'<a href="#{anchor}">{title}</a>' for anchor, title in (
        ("findings", "Findings"), ("workloads", "Workloads"), ("roofline", "Roofline"),
        ("measurements", "Measurements"), ("machine-model", "Machine model")))
    return (f"<header><h1>{_e(name)}</h1><p class=\"sub\">{_e(' · '.join(sub))}</p><nav>{nav}</nav>"
            f"<div class=\"facts\">{''.join(cards)}</div></header>")


def _findings(results: Results) -> str:
    if not results.findings:
        return "<h2 id=\"findings\">Findings</h2><p>No findings.</p>"
    parts = [f"<h2 id=\"findings\">Findings ({len(results.findings)})</h2>"]
    for f in sorted(results.findings, key=lambda f: _SEVERITY_ORDER.get(f.severity, 3)):
        severity = f.severity if f.severity in _SEVERITY_ORDER else "other"
        parts.append(f"<article class=\"finding sev-{severity}\"><p><span class=\"badge\">{_e(f.severity)}</span>"
                     f"<span class=\"title\">{_e(f.title)}</span></p>")
        if f.suggestion:
            parts.append(f"<p>{_e(f.suggestion)}</p>")
        if f.evidence:
            evidence = json.dumps(f.evidence, indent=2, ensure_ascii=False, default=str)
            parts.append(f"<details><summary>evidence</summary><pre>{_e(evidence)}</pre></details>")
        parts.append("</article>")
    return "".join(parts)


def _workloads(results: Results) -> str:
    parts = ["<h2 id=\"workloads\">Workloads</h2>"]
    if not results.workloads:
        parts.append("<p>No workload ran.</p>")
    for w in results.workloads:
        fraction = f"{100 * w.fraction_of_attainable:.0f}%" if w.fraction_of_attainable is not None else "-"
        rows = [
            ("step time", f"{1e3 * w.step_time.median:.2f} ms median (p5-p95 {1e3 * w.step_time.p5:.2f}-"
                          f"{1e3 * w.step_time.p95:.2f} ms, CV {100 * w.step_time.cv:.1f}%, {w.step_time.n} steps)"),
            ("throughput", f"{_fmt(w.samples_per_second)} samples/s"),
            ("achieved", f"{_fmt(w.achieved_tflops, 2)} TFLOP/s"),
            ("intensity", f"{_fmt(w.intensity)} FLOP/B (counted)"),
            ("work per step", f"{w.flops_per_step / 1e12:.3g} TFLOP, {format_bytes(w.bytes_per_step)} moved (estimate)"),
            ("roofline allows", f"{_fmt(w.attainable_tflops, 2)} TFLOP/s against {w.compute_ceiling or '-'} / "
                                f"{w.memory_ceiling or '-'}"),
            ("of attainable", fraction),
        ]
        parts.append(f"<h3>{_e(w.name)} <span class=\"note\">on {_e(w.device)}</span></h3>")
        parts.append(_facts_list(rows))
        if w.params:
            parts.append(f"<details><summary>parameters</summary>{_facts_list(w.params.items())}</details>")
        if w.notes:
            parts.append("<ul class=\"note\">" + "".join(f"<li>{_e(n)}</li>" for n in w.notes) + "</ul>")
    return "".join(parts)


def _measurements(results: Results) -> str:
    rows = summary_rows(results)
    parts = ["<h2 id=\"measurements\">Measurements</h2>",
             "<p class=\"note\">Best variant per probe and backend; sweep points are in the charts and results.json."
             "</p>"]
    if not rows:
        parts.append("<p>No measurements.</p>")
    heads = (("probe", ""), ("backend", ""), ("median", "num"), ("unit", ""), ("p5-p95", "num"), ("CV", "num"),
             ("datasheet", "num"), ("% of datasheet", "num"), ("flag", ""), ("check", ""))
    for family in dict.fromkeys(r.family for r in rows):
        parts.append(f"<h3>{_e(_FAMILY_TITLES.get(family, family))}</h3><table><thead><tr>")
        parts.append("".join(f"<th class=\"{cls}\">{_e(h)}</th>" for h, cls in heads) + "</tr></thead><tbody>")
        for r in (r for r in rows if r.family == family):
            spread = f"{_fmt(r.p5)}-{_fmt(r.p95)}" if r.p5 is not None else "-"
            cv = f"{100 * r.cv:.1f}%" if r.cv is not None else "-"
            pct = f"{r.percent:.0f}%" if r.percent is not None else "-"
            check = {"verified": "ok"}.get(r.check, r.check.lower())
            note = f" <span class=\"note\">{_e(r.note)}</span>" if r.note else ""
            parts.append(f"<tr><td>{_e(r.name)}</td><td>{_e(r.backend)}</td><td class=\"num\">{_fmt(r.value)}</td>"
                         f"<td>{_e(r.unit)}</td><td class=\"num\">{spread}</td><td class=\"num\">{cv}</td>"
                         f"<td class=\"num\">{_fmt(r.datasheet)}</td><td class=\"num\">{pct}</td>"
                         f"<td>{_e(r.flag)}</td>"
                         f"<td><span class=\"check-{check}\">{_e(r.check)}</span>{note}</td></tr>")
        parts.append("</tbody></table>")
    return "".join(parts)


def _machine_model(results: Results) -> str:
    model = results.machine_model
    parts = ["<h2 id=\"machine-model\">Machine model</h2>"]
    if model is None:
        return parts[0] + "<p>No machine model.</p>"
    parts.append("<table><thead><tr><th>family</th><th>ceiling</th><th class=\"num\">value</th><th>unit</th>"
                 "<th>set by</th><th>backend</th></tr></thead><tbody>")
    for table, family in _MODEL_TABLES:
        for key, c in sorted(getattr(model, table).items()):
            parts.append(f"<tr><td>{family}</td><td>{_e(key)}</td><td class=\"num\">{_fmt(c.value)}</td>"
                         f"<td>{_e(c.unit)}</td><td>{_e(c.source)}</td><td>{_e(c.backend)}</td></tr>")
    parts.append("</tbody></table>")
    dram = model.dram_key()
    ridges = [(key, model.ridge_point(key, dram)) for key in sorted(model.compute)] if dram else []
    ridges = [(key, r) for key, r in ridges if r]
    if ridges:
        parts.append(f"<h3>Ridge points against {_e(dram)}</h3>")
        parts.append(_facts_list((key, f"{r:.1f} FLOP/B") for key, r in ridges))
    if model.link_fits:
        parts.append("<h3>Transfer fits: time per copy = latency + size / bandwidth</h3><table><thead><tr>"
                     "<th>link</th><th>backend</th><th class=\"num\">bandwidth GB/s</th>"
                     "<th class=\"num\">latency us</th><th class=\"num\">half bandwidth at</th>"
                     "<th class=\"num\">points</th><th class=\"num\">rms error</th></tr></thead><tbody>")
        for key, fit in sorted(model.link_fits.items()):
            parts.append(f"<tr><td>{_e(key)}</td><td>{_e(fit.backend)}</td><td class=\"num\">{_fmt(fit.bandwidth_gbs)}"
                         f"</td><td class=\"num\">{_fmt(fit.latency_us, 2)}</td><td class=\"num\">"
                         f"{_e(format_bytes(fit.n_half_bytes))}</td><td class=\"num\">{fit.points}</td>"
                         f"<td class=\"num\">{100 * fit.rms_relative_error:.1f}%</td></tr>")
        parts.append("</tbody></table>")
    return "".join(parts)


def _figure(anchor: str, title: str, svg: str | None, caption: str) -> str:
    if svg is None:
        return ""
    return f"<h2 id=\"{anchor}\">{_e(title)}</h2><figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _sweep_svg(results: Results) -> str | None:
    """The memory-hierarchy chart as inline SVG (sweep_chart writes files only)."""
    with tempfile.TemporaryDirectory() as tmp, chart_style("sweep"):
        path = sweep_chart(results, Path(tmp) / "sweep.svg")
        return None if path is None else inline_svg(path.read_text(encoding="utf-8"), "sweep")


# --------------------------------------------------------------------------- page


def html_report(results: Results, overlays: Sequence[ChartPoint] = (), sections: Sequence[str] = ()) -> str:
    """The whole page as text; `sections` (finished HTML, such as the explained step's) follow the roofline."""
    device = results.meta.get("device", {})
    name = device.get("name", "device") if isinstance(device, dict) else "device"
    roofline = roofline_svg(results, overlays)
    body = [
        _header(results),
        _findings(results),
        _workloads(results),
        _figure("roofline", "Roofline", roofline,
                "Measured roofs: memory slopes (GB/s) up to the compute roofs (horizontal, labelled on the right); "
                "sweep points, workloads and their gap to what the roofs allow at their intensity.")
        or "<h2 id=\"roofline\">Roofline</h2><p>No roof was measured.</p>",
        *sections,
        _figure("datasheet", "Measured vs datasheet", datasheet_svg(results),
                "Each measured ceiling as a percentage of the card's datasheet figure."),
        _measurements(results),
        _figure("hierarchy", "Memory hierarchy", _sweep_svg(results),
                "Read bandwidth (and latency) against footprint; the knees are cache capacities."),
        _machine_model(results),
        f"<footer>{_e(results.meta.get('counting', ''))}<br>Every figure on this page is derived from the run's "
        "results.json.</footer>",
    ]
    return page(f"pygpuperf: {name}", "\n".join(part for part in body if part))


def write_html_report(results: Results, path: Path, overlays: Sequence[ChartPoint] = (),
                      sections: Sequence[str] = ()) -> Path:
    """Write report.html (or whatever `path` names); returns the path."""
    path = Path(path)
    path.write_text(html_report(results, overlays, sections), encoding="utf-8")
    return path
