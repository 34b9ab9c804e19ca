"""report.html: one self-contained page derived from a Results document.

Run facts, findings, workloads, the measurement tables per family and the charts as inline
SVG; with the run's explained step and its predictions, their sections rendered from those
documents (explain.json's explanation, prediction.json's documents). Rendered through the
templates in report/templates: nothing is fetched (no scripts, fonts or images from elsewhere,
and a Content-Security-Policy that forbids it), no JavaScript, and every value taken from a
document is autoescaped: results files may come from someone else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from pygpuperf.diagnose import Diagnosis
from pygpuperf.explain.model import Explanation
from pygpuperf.facts import datasheets
from pygpuperf.predict import Prediction
from pygpuperf.report import templating
from pygpuperf.report.chart import ChartPoint, roofline_svg
from pygpuperf.report.datasheet_chart import datasheet_svg
from pygpuperf.report.explain_html import explain_view
from pygpuperf.report.predict_report import prediction_view
from pygpuperf.report.sweep_chart import sweep_svg
from pygpuperf.report.table import summary_rows
from pygpuperf.core.results import Results

_FAMILY_TITLES = {"memory": "Memory", "compute": "Compute", "latency": "Latency", "transfer": "Transfers",
                  "collective": "Collectives"}
# Meta sections shown first, in this order; any others follow by name.
_META_SECTIONS = ("device", "host", "versions", "extension")
_MODEL_TABLES = (("compute", "compute"), ("memory", "memory"), ("links", "transfer"), ("latency", "latency"),
                 ("communication", "collective"))
# Where the main command writes the documents of the explained step, beside results.json.
EXPLAIN_DOCUMENT = "explain/explain.json"
PREDICTION_DOCUMENT = "explain/prediction.json"


# --------------------------------------------------------------------------- the page's data


def report_view(results: Results, charts: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """What report.html.j2 renders of a Results document: its values as they are (the templates
    format them), the tables in order, and the charts as inline SVG (see html_report for `charts`)."""
    meta = results.meta
    device = meta.get("device", {}) if isinstance(meta.get("device"), dict) else {}
    versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
    card = datasheets.datasheet_for(str(device.get("name", "")))
    sections = [key for key in _META_SECTIONS if isinstance(meta.get(key), dict)]
    sections += sorted(k for k, v in meta.items() if isinstance(v, dict) and k not in _META_SECTIONS)
    cards = [(key, list(meta[key].items())) for key in sections]
    run = [(k, v) for k, v in meta.items() if not isinstance(v, dict) and k != "counting"]
    if run:
        cards.append(("run", run))
    rows = summary_rows(results)
    model = results.machine_model
    dram = model.dram_key() if model is not None else None
    ridges = [(key, model.ridge_point(key, dram)) for key in sorted(model.compute)] if model and dram else []
    return {
        "name": device.get("name") or (model.device if model else "device"),
        "version": versions.get("pygpuperf", "?"), "time_utc": meta.get("time_utc", "?"),
        "suite_seconds": meta.get("suite_seconds"), "card": card["name"] if card else None,
        "interrupted": bool(meta.get("interrupted")), "cards": cards,
        "findings": templating.finding_views(results.findings),
        "workloads": results.workloads,
        "families": [(_FAMILY_TITLES.get(family, family), [r for r in rows if r.family == family])
                     for family in dict.fromkeys(r.family for r in rows)],
        "model": model,
        "ceilings": [(family, key, c) for table, family in _MODEL_TABLES
                     for key, c in sorted(getattr(model, table).items())] if model else [],
        "dram": dram, "ridges": [(key, r) for key, r in ridges if r],
        "link_fits": sorted(model.link_fits.items()) if model else [],
        "counting": meta.get("counting", ""),
        "datasheet_svg": templating.svg(_chart(charts, "datasheet", lambda: datasheet_svg(results))),
        "sweep_svg": templating.svg(_chart(charts, "sweep", lambda: sweep_svg(results))),
    }


def _chart(charts: Mapping[str, str | None] | None, name: str, draw: Callable[[], str | None]) -> str | None:
    # A chart missing from `charts` (writing its files failed) is drawn here: None would read "nothing measured".
    return charts[name] if charts is not None and name in charts else draw()


# --------------------------------------------------------------------------- page


def html_report(results: Results, overlays: Sequence[ChartPoint] = (), explanation: Explanation | None = None,
                predictions: Sequence[Prediction | Mapping[str, Any]] = (),
                charts: Mapping[str, str | None] | None = None,
                explain_charts: Mapping[str, str | None] | None = None, prediction_svg: str | None = None,
                diagnosis: Diagnosis | None = None) -> str:
    """The whole page as text. With the run's `explanation` (what explain.json holds) and
    `predictions` (prediction.json's documents), their sections follow the roofline, each saying
    which document it derives from. `charts` holds the page markup of charts drawn while their files
    were written ("roofline", "sweep", "datasheet", as draw_roofline_charts, draw_sweep_chart and
    draw_datasheet_chart return it); a chart it lacks is drawn here, the roofline with `overlays`.
    `explain_charts` and `prediction_svg` are the sections' charts as explain.html and prediction.html
    got them (drawn here when not given)."""
    device = results.meta.get("device", {})
    name = device.get("name", "device") if isinstance(device, dict) else "device"
    view = report_view(results, charts)
    view["roofline_svg"] = templating.svg(_chart(charts, "roofline", lambda: roofline_svg(results, overlays)))
    view["explain"] = explain_view(explanation, results, source=EXPLAIN_DOCUMENT, charts=explain_charts,
                                   diagnosis=diagnosis) if explanation else None
    view["prediction"] = prediction_view(predictions, prediction_svg, PREDICTION_DOCUMENT) if predictions else None
    return templating.render("report.html.j2", title=f"pygpuperf: {name}", **view)


def write_html_report(results: Results, path: Path, overlays: Sequence[ChartPoint] = (),
                      explanation: Explanation | None = None,
                      predictions: Sequence[Prediction | Mapping[str, Any]] = (),
                      charts: Mapping[str, str | None] | None = None,
                      explain_charts: Mapping[str, str | None] | None = None, prediction_svg: str | None = None,
                      diagnosis: Diagnosis | None = None) -> Path:
    """Write report.html (or whatever `path` names); returns the path."""
    path = Path(path)
    path.write_text(html_report(results, overlays, explanation, predictions, charts, explain_charts, prediction_svg,
                                diagnosis), encoding="utf-8")
    return path
