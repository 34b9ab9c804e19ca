"""Measured ceilings against the card's datasheet: one bar per ceiling, grouped by family.

Each bar is the measured figure as a percentage of the datasheet figure, over a pale bar
that stands for the datasheet itself (100 %), so families with different units share one axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from pygpuperf.facts import datasheets# noqa: E402
from pygpuperf.report.chart import compute_color, drawn, plain  # noqa: E402
from pygpuperf.core.results import Results  # noqa: E402
from pygpuperf.core.units import figure as _fmt  # noqa: E402

# MachineModel table -> the measurement family it holds. Latency is left out: lower is better
# there, and datasheets do not list it.
_FAMILIES = (("compute", "compute"), ("memory", "memory"), ("links", "transfer"), ("communication", "collective"))
_FAMILY_COLORS = {"memory": "#d62728", "transfer": "#2ca02c", "collective": "#9467bd"}  # compute: per roof family
# Layout in inches: per bar, between families, and the margins (the right one holds the figures).
_BAR_HEIGHT_IN = 0.28
_GAP_IN = 0.55
_TOP_IN, _BOTTOM_IN, _LEFT_IN, _RIGHT_IN, _WIDTH_IN = 0.75, 0.6, 1.6, 2.6, 10.0


@dataclass(frozen=True)
class DatasheetBar:
    family: str  # "compute", "memory", "transfer", "collective"
    key: str  # the machine model's key, e.g. "tensor.fp16.acc32" or "hbm"
    source: str  # the measurement that set the ceiling, e.g. "memory.hbm.write"
    backend: str
    measured: float
    datasheet: float
    unit: str

    @property
    def percent(self) -> float:
        return 100.0 * self.measured / self.datasheet


def datasheet_bars(results: Results) -> list[DatasheetBar]:
    """Every measured ceiling the card's datasheet has a figure for, family by family, in key order."""
    model = results.machine_model
    card = datasheets.datasheet_for(results.device_name() or "")
    if model is None or card is None:
        return []
    bars = []
    for table, family in _FAMILIES:
        for key, ceiling in sorted(getattr(model, table).items()):
            sheet = datasheets.datasheet_value(card, ceiling.source)
            if sheet and sheet > 0:
                bars.append(DatasheetBar(family, key, ceiling.source, ceiling.backend, ceiling.value, sheet,
                                         ceiling.unit))
    return bars


def datasheet_figure(results: Results) -> Figure | None:
    """The comparison as a Figure (build it inside chart_style()), or None when nothing compares."""
    bars = datasheet_bars(results)
    if not bars:
        return None
    families = list(dict.fromkeys(b.family for b in bars))
    counts = [sum(b.family == f for b in bars) for f in families]
    # Fixed inches per bar and between families, whatever the counts.
    plots_in = _BAR_HEIGHT_IN * sum(counts)
    height = _TOP_IN + plots_in + _GAP_IN * (len(families) - 1) + _BOTTOM_IN
    fig, axes = plt.subplots(len(families), 1, sharex=True, squeeze=False, dpi=120, figsize=(_WIDTH_IN, height),
                             gridspec_kw={"height_ratios": counts})
    fig.subplots_adjust(left=_LEFT_IN / _WIDTH_IN, right=1 - _RIGHT_IN / _WIDTH_IN, top=1 - _TOP_IN / height,
                        bottom=_BOTTOM_IN / height, hspace=_GAP_IN / (plots_in / len(families)))
    for ax, family in zip(axes[:, 0], families):
        group = [b for b in bars if b.family == family]
        rows = range(len(group))
        colors = [compute_color(b.key) if family == "compute" else _FAMILY_COLORS.get(family, "0.4") for b in group]
        ax.barh(rows, [100.0] * len(group), height=0.72, color="0.9", edgecolor="0.75", lw=0.6)
        ax.barh(rows, [b.percent for b in group], height=0.45, color=colors)
        for row, bar in zip(rows, group):
            ax.text(bar.percent + 1.0, row, f"{bar.percent:.0f}%", va="center", ha="left", fontsize=8,
                    fontweight="bold")
            # The figures themselves, in a column right of the chart.
            ax.text(1.02, row, plain(f"{_fmt(bar.measured)} of {bar.datasheet:,g} {bar.unit} ({bar.backend})"),
                    transform=ax.get_yaxis_transform(), va="center", ha="left", fontsize=8)
        ax.set_yticks(list(rows), [plain(b.key) for b in group], fontsize=8.5)
        ax.set_ylim(len(group) - 0.5, -0.5)  # first key on top
        ax.axvline(100.0, color="0.3", lw=0.8, ls="--")
        ax.set_title(plain(f"{family} ({group[0].unit})"), loc="left", fontsize=9.5)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_axisbelow(True)
    axes[-1, 0].set_xlim(0, max(112.0, max(b.percent for b in bars) + 12))
    axes[-1, 0].set_xlabel("measured, % of datasheet (pale bar: the datasheet figure)")
    card = datasheets.datasheet_for(results.device_name() or "")
    device = results.device_name() or "device"
    fig.suptitle(plain(f"Measured vs datasheet: {device} (datasheet: {card['name'] if card else '?'})"),
                 fontsize=11, y=1 - 0.12 / height, va="top")
    return fig


def draw_datasheet_chart(results: Results, path: Path) -> tuple[list[Path], str | None]:
    """Write the chart, PNG or SVG by the path's suffix, and return the same drawing as datasheet_svg
    gives it too; ([], None) (nothing written) for an unknown card or when no measured ceiling has a
    datasheet figure."""
    return drawn("datasheet", lambda: datasheet_figure(results), path)


def datasheet_svg(results: Results) -> str | None:
    """The chart as inline <svg> markup, or None when nothing compares."""
    return drawn("datasheet", lambda: datasheet_figure(results))[1]
