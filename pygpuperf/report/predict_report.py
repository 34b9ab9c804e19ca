"""Predictions on other cards as charts and a page: throughput per target (and per euro where priced),
and where each target gains or loses against the source, category by category.

Everything is drawn from the :class:`~pygpuperf.predict.Prediction` objects, the same ones
prediction.json holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from pygpuperf.core import documents  # noqa: E402
from pygpuperf.explain.attribution import IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC, UNEXPLAINED  # noqa: E402
from pygpuperf.predict import Prediction, prediction_documents, samples_per_eur  # noqa: E402
from pygpuperf.report import html as report_html  # noqa: E402
from pygpuperf.report.chart import chart_style, inline_svg, save_figure, svg_markup  # noqa: E402
from pygpuperf.report.explain_charts import CLASS_COLORS  # noqa: E402

_IDLE_COLORS = {IDLE_HOST: "#8c96a3", IDLE_LAUNCH: "#aab3bd", IDLE_SYNC: "#c8ced5", UNEXPLAINED: "#e0e0e0"}
_SOURCE_COLOR = "#2ca02c"
_TARGET_COLOR = "#1f4e9c"
_e = report_html.escape


def _color(category: str) -> str:
    return CLASS_COLORS.get(category) or _IDLE_COLORS.get(category, "#7f7f7f")


def prediction_figure(predictions: Sequence[Prediction]):
    """Left: samples/s per target with the source's as a line. Right: each target's step, stacked by
    category (ms per sample, so targets predicted at a smaller batch compare fairly)."""
    targets = [p.target for p in predictions]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.45 * len(targets) + 2.2), layout="constrained")
    y = range(len(targets))
    left.barh(y, [p.throughput for p in predictions], color=_TARGET_COLOR)
    left.axvline(predictions[0].source_throughput, color=_SOURCE_COLOR, linestyle="--",
                 label=f"{predictions[0].source} (measured)")
    for i, p in enumerate(predictions):
        left.annotate(f"{p.throughput:,.0f}  ({p.ratio_to_source:.2f}x)", (p.throughput, i), xytext=(4, 0),
                      textcoords="offset points", va="center", fontsize=8)
    left.set_yticks(list(y), targets)
    left.invert_yaxis()
    left.set_xlabel("predicted samples/s")
    left.set_xlim(0, max(max(p.throughput for p in predictions), predictions[0].source_throughput) * 1.35)
    left.legend(loc="lower right", fontsize=8)
    categories = list(dict.fromkeys(c.category for p in predictions for c in p.waterfall))
    rows = [("source: " + predictions[0].source, {c.category: c.source_us for c in predictions[0].waterfall},
             predictions[0].source_samples_per_step or predictions[0].samples_per_step)]
    rows += [(p.target, {c.category: c.target_us for c in p.waterfall}, p.samples_per_step) for p in predictions]
    for category in categories:
        starts = [sum(parts.get(c, 0.0) for c in categories[:categories.index(category)]) / 1e3 / batch
                  for _, parts, batch in rows]
        widths = [parts.get(category, 0.0) / 1e3 / batch for _, parts, batch in rows]
        right.barh(range(len(rows)), widths, left=starts, color=_color(category), label=category,
                   edgecolor="white", linewidth=0.4)
    right.set_yticks(range(len(rows)), [name for name, _, _ in rows])
    right.invert_yaxis()
    right.set_xlabel("ms per sample, by category")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    return fig


def _table(predictions: Sequence[Prediction], prices: dict[str, float]) -> str:
    head = ["target", "batch", "step ms", "samples/s", "x source"] + (["samples per EUR"] if prices else [])
    rows = []
    for p in predictions:
        per_eur = samples_per_eur(p, prices)
        cells = [p.target, str(p.samples_per_step), f"{p.step_us / 1e3:.2f}", f"{p.throughput:,.0f}",
                 f"{p.ratio_to_source:.2f}"] + ([f"{per_eur:,.0f}" if per_eur else "-"] if prices else [])
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return ("<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _why(p: Prediction) -> str:
    changes = sorted(p.waterfall, key=lambda c: -abs(c.delta_us))
    items = "".join(f"<li>{_e(c.category)}: {c.source_us / 1e3:.2f} → {c.target_us / 1e3:.2f} ms "
                    f"({'+' if c.delta_us >= 0 else ''}{c.delta_us / 1e3:.2f})</li>" for c in changes if c.delta_us)
    notes = "".join(f"<li>{_e(n)}</li>" for n in p.notes)
    return (f"<h3>{_e(p.target)}: {p.throughput:,.0f} samples/s ({p.ratio_to_source:.2f}x)</h3>"
            f"<ul>{items}</ul><p class=\"note\">{_e(p.confidence)}</p>" + (f"<ul>{notes}</ul>" if notes else ""))


def prediction_section_html(predictions: Sequence[Prediction], prices: dict[str, float], svg: str | None = None) -> str:
    """<section id="prediction">: the ranked table, the chart and, per target, what changes and why.
    `svg` is the chart as inline markup when already drawn (else it is drawn here)."""
    if svg is None:
        with chart_style("prediction"):
            svg = svg_markup(prediction_figure(predictions), "prediction")
    source = predictions[0]
    return "\n".join([
        "<section id=\"prediction\">",
        f"<h2>Predicted on other cards <span class=\"note\">from {_e(source.source)}, "
        f"{source.source_throughput:,.0f} samples/s measured</span></h2>",
        _table(predictions, prices),
        f"<figure>{svg}<figcaption>Each kernel re-priced at the target's ceiling for its class and precision, "
        "keeping its measured efficiency; idle time held fixed.</figcaption></figure>",
        *(_why(p) for p in predictions),
        "</section>",
    ])


def write_prediction_report(predictions: Sequence[Prediction], prices: dict[str, float],
                            out: Path) -> tuple[list[Path], str]:
    """prediction.json, prediction.png, prediction.svg and prediction.html in `out`; returns them and the
    page's section, for a report that shows it too. The chart is drawn once."""
    out = Path(out)
    data = out / "prediction.json"
    documents.write_document(data, prediction_documents(predictions, prices), "prediction", "prediction.json")
    with chart_style("prediction"):
        written = save_figure(prediction_figure(predictions), out / "prediction.png", out / "prediction.svg")
    section = prediction_section_html(predictions, prices,
                                      inline_svg((out / "prediction.svg").read_text(encoding="utf-8"), "prediction"))
    body = (f"<header><h1>Predicted from {_e(predictions[0].source)}</h1></header>\n" + section
            + "\n<footer>Every figure on this page is derived from prediction.json.</footer>")
    page = out / "prediction.html"
    page.write_text(report_html.page(f"pygpuperf predict: {predictions[0].source}", body), encoding="utf-8")
    return [data, *written, page], section
