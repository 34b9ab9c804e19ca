"""The memory-hierarchy chart: read bandwidth (and latency) against footprint, with the knees."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator  # noqa: E402

from pygpuperf.analyze.hierarchy import sweep_series  # noqa: E402
from pygpuperf.core.units import format_bytes  # noqa: E402
from pygpuperf.report.chart import drawn  # noqa: E402
from pygpuperf.core.results import Results  # noqa: E402

_MODE_LABELS = {
    "l1": "private window per worker",
    "l2": "one shared window, L1 bypassed",
}
# Panel: (title, y label, x label, legend corner, label of a series without a mode).
_PANELS = {
    "bandwidth": ("Read bandwidth vs footprint", "GB/s (log)", "footprint (bytes read per pass, all workers)",
                  "lower left", "sweep"),
    "latency": ("Dependent-load latency vs footprint", "ns per load (log)", "footprint (window chased)",
                "lower right", "pointer chase, one thread"),
}


def _series_label(series: dict[str, Any], unnamed: str) -> str:
    mode = _MODE_LABELS.get(series["mode"], series["mode"] or unnamed)
    workers = max(series["workers"], default=1)
    who = f", {workers} workers" if series["mode"] == "l1" and workers > 1 else ""
    return f"{series['backend']}: {mode}{who}"


def _knee_label(level: dict[str, Any], workers: int, private: bool) -> str:
    name = level["name"].upper() if level["name"] else "knee"
    total = format_bytes(level["capacity"])
    if private and workers > 1:
        return f"{name} {format_bytes(level['capacity'] / workers)}/worker ({total})"
    return f"{name} {total}"


def _size_axis(ax: Axes, sizes: list[float]) -> None:
    """Log2 footprint axis labelled in binary units at every power of two (or every second one)."""
    ax.set_xscale("log", base=2)
    lo, hi = min(sizes), max(sizes)
    first, last = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    stride = 1 if last - first <= 14 else 2
    ax.xaxis.set_major_locator(FixedLocator([2.0**k for k in range(first, last + 1, stride)]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v).replace(" ", "\u2009")))
    ax.set_xlim(lo / 1.25, hi * 1.25)
    ax.tick_params(axis="x", labelsize=8, labelrotation=45)


def _draw(ax: Axes, all_series: list[dict[str, Any]], unit: str, unnamed: str) -> list[float]:
    """Lines, plateaus and knees of one panel; returns every size drawn."""
    sizes: list[float] = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4
    for index, (series, color) in enumerate(zip(all_series, colors)):
        x, y = series["footprint_bytes"], series["value"]
        sizes += x
        ax.plot(x, y, "o-", ms=3.5, lw=1.4, color=color, label=_series_label(series, unnamed))
        wrong = [(a, b) for a, b, ok in zip(x, y, series["verified"]) if not ok]
        if wrong:
            ax.plot(*zip(*wrong), "x", ms=8, mew=2, color="red", label="not verified")
        workers = max(series["workers"], default=1)
        private = series["mode"] == "l1"
        for level in series["levels"]:
            # The plateau as a translucent band over the points that form it.
            ax.plot([level["first_size"], level["last_size"]], [level["bandwidth"]] * 2, lw=6, alpha=0.18,
                    color=color, solid_capstyle="butt")
            if level["capacity"] is None:
                continue
            ax.axvline(level["capacity"], ls=":", lw=1.2, color=color)
            # Alternate series label their knees at the top and the bottom, so labels do not collide.
            top = index % 2 == 0
            ax.text(level["capacity"], 0.97 if top else 0.03, _knee_label(level, workers, private), rotation=90,
                    va="top" if top else "bottom", ha="right", fontsize=8, color=color,
                    transform=ax.get_xaxis_transform(),
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.5})
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    ax.set_ylabel(unit)
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", axis="y", alpha=0.1)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    return sizes


def sweep_figure(results: Results) -> Figure | None:
    """Bandwidth vs footprint per (backend, mode), knees marked and labelled, and a latency panel
    when a latency sweep ran; None when no sweep ran."""
    series = sweep_series(results.measurements)
    panels = [key for key in _PANELS if series[key]]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 5.5 * len(panels)), dpi=120, squeeze=False)
    device = results.device_name() or "device"
    for ax, key in zip(axes[:, 0], panels):
        title, unit, xlabel, corner, unnamed = _PANELS[key]
        sizes = _draw(ax, series[key], unit, unnamed)
        _size_axis(ax, sizes)
        ax.set_title(f"{title}: {device}", fontsize=11)
        ax.set_xlabel(xlabel)
        ax.legend(fontsize=8, loc=corner)
    fig.tight_layout()
    return fig


def draw_sweep_chart(results: Results, path: Path) -> tuple[list[Path], str | None]:
    """Write sweep.png (or the format the path's suffix names) and return the same drawing as sweep_svg
    gives it too; ([], None) (nothing written) when no sweep ran."""
    return drawn("sweep", lambda: sweep_figure(results), path)


def sweep_svg(results: Results) -> str | None:
    """The chart as inline <svg> markup, drawn in memory; None when no sweep ran."""
    return drawn("sweep", lambda: sweep_figure(results))[1]
