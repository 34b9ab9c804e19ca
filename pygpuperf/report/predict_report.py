"""Predictions on other cards as charts and a page: throughput per target (and per euro where priced),
and where each target gains or loses against the source, category by category.

Chart and page are drawn from prediction.json's documents (predict.prediction_documents), the page
through the templates in report/templates; report.html renders the same section from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402

from pygpuperf.core import documents  # noqa: E402
from pygpuperf.core.vocabulary import Part
from pygpuperf.predict import Prediction, prediction_documents  # noqa: E402
from pygpuperf.report import templating  # noqa: E402
from pygpuperf.report.chart import drawn  # noqa: E402
from pygpuperf.report.explain_charts import CLASS_COLORS  # noqa: E402

_IDLE_COLORS = {Part.IDLE_HOST: "#8c96a3", Part.IDLE_LAUNCH: "#aab3bd", Part.IDLE_SYNC: "#c8ced5", Part.UNEXPLAINED: "#e0e0e0"}
_SOURCE_COLOR = "#2ca02c"
_TARGET_COLOR = "#1f4e9c"


def _color(category: str) -> str:
    return CLASS_COLORS.get(category) or _IDLE_COLORS.get(category, "#7f7f7f")


def _documents(predictions: Sequence[Prediction | Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """prediction.json's documents; a Prediction is taken as its document (unpriced)."""
    return [p.to_dict() if isinstance(p, Prediction) else p for p in predictions]


def _number(value: Any) -> float:
    return value if isinstance(value, (int, float)) else 0.0  # null in a written document: nothing to draw


def prediction_figure(predictions: Sequence[Prediction | Mapping[str, Any]]):
    """Left: samples/s per target with the source's as a line. Right: each target's step, stacked by
    category (ms per sample, so targets predicted at a smaller batch compare fairly)."""
    docs = _documents(predictions)
    first = docs[0]
    targets = [d["target"] for d in docs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.45 * len(targets) + 2.2), layout="constrained")
    y = range(len(targets))
    throughputs = [_number(d["throughput_per_s"]) for d in docs]
    left.barh(y, throughputs, color=_TARGET_COLOR)
    left.axvline(_number(first["source_throughput_per_s"]), color=_SOURCE_COLOR, linestyle="--",
                 label=f"{first['source']} (measured)")
    for i, d in enumerate(docs):
        left.annotate(f"{throughputs[i]:,.0f}  ({_number(d['ratio_to_source']):.2f}x)", (throughputs[i], i),
                      xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    left.set_yticks(list(y), targets)
    left.invert_yaxis()
    left.set_xlabel("predicted samples/s")
    left.set_xlim(0, max(max(throughputs), _number(first["source_throughput_per_s"])) * 1.35 or 1.0)
    left.legend(loc="lower right", fontsize=8)
    categories = list(dict.fromkeys(c["category"] for d in docs for c in d["waterfall"]))
    rows = [("source: " + first["source"], {c["category"]: _number(c["source_ms"]) for c in first["waterfall"]},
             first["source_samples_per_step"] or first["samples_per_step"])]
    rows += [(d["target"], {c["category"]: _number(c["target_ms"]) for c in d["waterfall"]}, d["samples_per_step"])
             for d in docs]
    for category in categories:
        starts = [sum(parts.get(c, 0.0) for c in categories[:categories.index(category)]) / batch
                  for _, parts, batch in rows]
        widths = [parts.get(category, 0.0) / batch for _, parts, batch in rows]
        right.barh(range(len(rows)), widths, left=starts, color=_color(category), label=category,
                   edgecolor="white", linewidth=0.4)
    right.set_yticks(range(len(rows)), [name for name, _, _ in rows])
    right.invert_yaxis()
    right.set_xlabel("ms per sample, by category")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    return fig


def prediction_view(predictions: Sequence[Prediction | Mapping[str, Any]], svg: str | None = None,
                    document: str | None = None) -> dict[str, Any]:
    """What prediction_section.html.j2 renders from prediction.json's documents: the ranked targets,
    each with its categories by the size of their change, and the chart (`svg` when already drawn,
    else drawn here). `document` names the file they came from when the section sits on another page."""
    docs = _documents(predictions)
    if svg is None:
        svg = drawn("prediction", lambda: prediction_figure(docs))[1]
    # Documents written before predictions carried an interval have none: the cell reads "-".
    targets = [{**d, "changes": sorted((c for c in d["waterfall"] if c["delta_ms"]), key=lambda c: -abs(c["delta_ms"])),
                "interval_low": (d.get("interval_80_per_s") or [None, None])[0],
                "interval_high": (d.get("interval_80_per_s") or [None, None])[1], "doubts": d.get("doubts") or []}
               for d in docs]
    return {"source": docs[0]["source"], "source_throughput": docs[0]["source_throughput_per_s"],
            "priced": any("eur_per_hour" in d for d in docs), "targets": targets, "svg": templating.svg(svg),
            "document": document}


def prediction_html(predictions: Sequence[Prediction | Mapping[str, Any]], svg: str | None = None) -> str:
    """prediction.html as text: the section under report.html's stylesheet and policy."""
    view = prediction_view(predictions, svg)
    return templating.render("prediction.html.j2", title=f"pygpuperf predict: {view['source']}", prediction=view)


class PredictionReport(NamedTuple):
    paths: list[Path]  # the files written
    docs: list[dict[str, Any]]  # prediction.json's documents
    svg: str | None  # the chart's page markup, for another page that shows it (drawn once)


def write_prediction_report(predictions: Sequence[Prediction], prices: dict[str, float],
                            out: Path) -> PredictionReport:
    """prediction.json, prediction.png, prediction.svg and prediction.html in `out`, with what a report that
    shows them too needs."""
    out = Path(out)
    data = out / "prediction.json"
    docs = prediction_documents(predictions, prices)
    documents.write_document(data, docs, "prediction", "prediction.json")
    written, svg = drawn("prediction", lambda: prediction_figure(docs), out / "prediction.png", out / "prediction.svg")
    page = out / "prediction.html"
    page.write_text(prediction_html(docs, svg), encoding="utf-8")
    return PredictionReport([data, *written, page], docs, svg)
