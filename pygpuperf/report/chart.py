"""The roofline chart (log-log): every measured memory and compute roof, the probes' own points,
the workloads, and points a caller overlays (e.g. per-kernel points). PNG or SVG."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from pygpuperf.core.results import Ceiling, MachineModel, Results, is_series_point  # noqa: E402
from pygpuperf.core.units import figure as _fmt  # noqa: E402


@dataclass(frozen=True)
class ChartPoint:
    """One point on the roofline.

    kind "probe": points sharing a label are one series (a sweep), joined in order of intensity.
    kind "workload": a model run, drawn large. Any other kind (e.g. "kernel") gets one style and
    one legend entry per kind, and each point is named beside it while there are few.
    """

    label: str
    intensity: float  # FLOP per byte
    tflops: float
    kind: str = "kernel"
    attainable_tflops: float | None = None  # drawn as a dotted gap up to what the roofs allow here

    @property
    def drawable(self) -> bool:
        return _positive(self.intensity) and _positive(self.tflops)


# Text stays text in SVG: searchable, selectable and smaller than glyph outlines.
_RC: dict[str, Any] = {"svg.fonttype": "none"}

_FIG_SIZE = (11.0, 6.5)  # inches
# Fixed margins (no tight_layout): the label layout below needs the axes' size in points up front.
_AXES_BOX = {"left": 0.075, "right": 0.70, "bottom": 0.10, "top": 0.92}
_LABEL_PT = 7.5
_LABEL_GAP_PT = _LABEL_PT * 1.45  # one label's line height
# Compute roofs this close (same family and unit) are one label: their lines cannot be told apart.
_MERGE_RATIO = 1.025
# Memory roofs this close share one slope label (l1 and shared memory often are).
_MEMORY_MERGE_RATIO = 1.3
# Points of a caller's kind are named beside them up to this many per kind; the legend counts the rest.
_MAX_NAMED_POINTS = 12

# Compute families: colour, line style and the level (instruction or library) the legend names.
_FAMILY_STYLE = {
    "tensor": ("#1f4e9c", "-", "tensor cores (instruction)"),
    "cuda": ("#a0522d", "-", "CUDA cores (instruction)"),
    "library": ("#4d4d4d", "--", "library (torch.matmul)"),
}
_OTHER_FAMILY_STYLE = ("#7b3f9e", ":", "other")
_MEMORY_COLORS = {"hbm": "#d62728", "dram": "#d62728", "l3": "#9467bd", "l2": "#2ca02c", "l1": "#ff7f0e",
                  "shared": "#17becf"}
_OTHER_MARKERS = ("s", "^", "v", "P", "X", "*")
# Points take colours apart from the memory slopes' (Dark2).
_POINT_COLORS = ("#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666", "#d95f02")


def _family(key: str) -> str:
    return key.split(".", 1)[0]


def compute_color(key: str) -> str:
    """The colour of a compute roof's family ("tensor.fp16.acc32" -> the tensor colour), shared by every chart."""
    return _FAMILY_STYLE.get(_family(key), _OTHER_FAMILY_STYLE)[0]


def plain(text: str) -> str:
    """Text from a results file drawn as written: a '$' pair would otherwise start mathtext."""
    return text.replace("$", r"\$")


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


# --------------------------------------------------------------------------- points


def probe_points(results: Results) -> list[ChartPoint]:
    """Verified sweep points that count both FLOPs and bytes (compute.sweep): one series per
    (probe, precision, backend), at the intensity the probe declares (its flop_per_byte)."""
    points = []
    for m in results.measurements:
        nbytes = m.bytes_read + m.bytes_written
        if not (m.usable and is_series_point(m.name)) or m.unit != "TFLOP/s" or m.flops <= 0 or nbytes <= 0:
            continue
        intensity = m.quantities.flop_per_byte or m.flops / nbytes
        precision = m.params.get("precision")
        label = f"{m.name} {precision} ({m.backend})" if precision else f"{m.name} ({m.backend})"
        points.append(ChartPoint(label, intensity, m.value, "probe"))
    return points


def workload_points(results: Results) -> list[ChartPoint]:
    return [ChartPoint(f"{w.name}: {w.achieved_tflops:.3g} TFLOP/s", w.intensity, w.achieved_tflops, "workload",
                       w.attainable_tflops)
            for w in results.workloads]


# --------------------------------------------------------------------------- layout


@dataclass
class _RoofLabel:
    text: str
    color: str
    value: float  # where its line(s) are, TFLOP/s
    position: float = 0.0  # log10 of where the label sits after spreading


def _compute_labels(compute: dict[str, Ceiling]) -> list[_RoofLabel]:
    """One label per roof, roofs of one family and unit within _MERGE_RATIO sharing one."""
    groups: list[list[tuple[str, Ceiling]]] = []
    for key, roof in sorted(compute.items(), key=lambda kv: (_family(kv[0]), kv[1].unit, kv[1].value)):
        last = groups[-1][-1] if groups else None
        if (last and _family(last[0]) == _family(key) and last[1].unit == roof.unit
                and roof.value <= groups[-1][0][1].value * _MERGE_RATIO):
            groups[-1].append((key, roof))
        else:
            groups.append([(key, roof)])
    labels = []
    for group in groups:
        family = _family(group[0][0])
        names = " · ".join(key.split(".", 1)[1] if "." in key else key for key, _ in reversed(group))
        lo, hi, unit = group[0][1].value, group[-1][1].value, group[0][1].unit
        figure = _fmt(hi) if len(group) == 1 else f"{_fmt(lo)}–{_fmt(hi)}"
        color = _FAMILY_STYLE.get(family, _OTHER_FAMILY_STYLE)[0]
        labels.append(_RoofLabel(f"{family} {names}: {figure} {unit}", color, math.sqrt(lo * hi)))
    return labels


def _spread(labels: list[_RoofLabel], gap: float, low: float, high: float) -> None:
    """Place labels (log10 units) at least `gap` apart, each as near its line as it can be: overlapping
    labels form a block centred on their lines, blocks that then touch merge, until none do."""
    labels.sort(key=lambda lb: lb.value)
    blocks: list[list[_RoofLabel]] = []
    for label in labels:
        blocks.append([label])
        while len(blocks) > 1:
            below, above = blocks[-2], blocks[-1]
            if _block_start(below, gap, low, high) + len(below) * gap <= _block_start(above, gap, low, high):
                break
            blocks[-2:] = [below + above]
    for block in blocks:
        start = _block_start(block, gap, low, high)
        for k, label in enumerate(block):
            label.position = start + k * gap


def _block_start(block: list[_RoofLabel], gap: float, low: float, high: float) -> float:
    centre = sum(math.log10(lb.value) for lb in block) / len(block)
    start = centre - (len(block) - 1) * gap / 2
    return min(max(start, low), high - (len(block) - 1) * gap)


def _axes_size_pt(fig: Figure) -> tuple[float, float]:
    width, height = fig.get_size_inches()
    return (72 * width * (_AXES_BOX["right"] - _AXES_BOX["left"]),
            72 * height * (_AXES_BOX["top"] - _AXES_BOX["bottom"]))


def _limits(model: MachineModel, points: Sequence[ChartPoint]) -> tuple[float, float, float, float]:
    """Whole decades holding every ridge point, every point, and the slowest slope at the left edge."""
    bws = [c.value for c in model.memory.values()]
    tops = [c.value for c in model.compute.values()]
    xs = [p.intensity for p in points]
    ys = [p.tflops for p in points] + [p.attainable_tflops for p in points if p.attainable_tflops]
    # The fastest slope gets at least 1.5 decades before it meets the top roof, room for its label.
    x_lo = min([0.01] + [x / 2 for x in xs] + ([max(tops) * 1e3 / max(bws) / 30] if bws and tops else []))
    ridge = max(tops) * 1e3 / min(bws) if bws and tops else 10.0
    x_hi = max([ridge * 10, 100.0] + [x * 2 for x in xs])
    top = max(tops) if tops else x_hi * max(bws) / 1e3  # without a compute roof the slopes run to the edge
    y_hi = max([top * 1.5] + [y * 1.5 for y in ys])
    floors = ([x_lo * min(bws) / 1e3] if bws else []) + ([min(tops) / 10] if tops else [])
    y_lo = min(floors + [y / 2 for y in ys])
    return _decade(x_lo, up=False), _decade(x_hi, up=True), _decade(y_lo, up=False), _decade(y_hi, up=True)


def _decade(value: float, up: bool) -> float:
    exponent = math.log10(value)
    return 10.0 ** (math.ceil(exponent) if up else math.floor(exponent))


# --------------------------------------------------------------------------- drawing


def _draw_memory(ax: Axes, model: MachineModel, x_range: tuple[float, float], y_range: tuple[float, float],
                 cap: float | None, angle: float) -> None:
    """Slopes up to the highest compute roof; close slopes share one label laid along them."""
    x = [x_range[0] * (x_range[1] / x_range[0]) ** (k / 200) for k in range(201)]
    roofs = sorted(model.memory.items(), key=lambda kv: -kv[1].value)
    for level, roof in roofs:
        y = [v * roof.value / 1e3 for v in x]
        if cap:
            y = [min(v, cap) for v in y]
        ax.plot(x, y, lw=1.8, color=_MEMORY_COLORS.get(level, "0.5"), solid_capstyle="butt")
    groups: list[list[tuple[str, Ceiling]]] = []
    for level, roof in roofs:
        if groups and groups[-1][-1][1].value <= roof.value * _MEMORY_MERGE_RATIO:
            groups[-1].append((level, roof))
        else:
            groups.append([(level, roof)])
    lo, hi = (math.log10(v) for v in y_range)
    lift = (-2.5 * math.sin(math.radians(angle)), 2.5 * math.cos(math.radians(angle)))  # points, off the line
    for group in groups:
        bw = group[0][1].value
        # The label runs up the slope from a fifth of the way up the chart, but starts at least 1.5
        # decades under the roof so that it ends before it; never left of where the slope enters.
        y_at = 10 ** (lo + 0.2 * (hi - lo))
        if cap:
            y_at = min(y_at, cap / 30)
        y_at = max(y_at, x_range[0] * 1.5 * bw / 1e3)
        text = " · ".join(f"{plain(level)} {_fmt(roof.value)}" for level, roof in group) + " GB/s"
        color = _MEMORY_COLORS.get(group[0][0], "0.3") if len(group) == 1 else "0.15"
        ax.annotate(text, (y_at * 1e3 / bw, y_at), xytext=lift, textcoords="offset points", rotation=angle,
                    rotation_mode="anchor", ha="left", va="bottom", fontsize=_LABEL_PT + 0.5, color=color)


def _draw_compute(ax: Axes, model: MachineModel, x_range: tuple[float, float], y_range: tuple[float, float],
                  gap: float) -> float:
    """Each roof from where the fastest memory slope reaches it to the right edge; labels in the
    right margin, spread so none overlap, with a leader to their line. Returns the lowest label's
    height as a fraction of the axes (1 with none)."""
    fastest = max((c.value for c in model.memory.values()), default=None)
    for key, roof in model.compute.items():
        color, style, _ = _FAMILY_STYLE.get(_family(key), _OTHER_FAMILY_STYLE)
        start = max(x_range[0], roof.value * 1e3 / fastest) if fastest else x_range[0]
        ax.plot([start, x_range[1]], [roof.value] * 2, ls=style, lw=1.1, color=color)
    labels = _compute_labels(model.compute)
    lo, hi = (math.log10(v) for v in y_range)
    _spread(labels, gap, lo + gap / 2, hi - gap / 2)
    for n, label in enumerate(labels):
        ax.annotate(plain(label.text), (1.0, label.value), xycoords=ax.get_yaxis_transform(),
                    xytext=(1.035, 10**label.position), textcoords=ax.get_yaxis_transform(),
                    va="center", ha="left", fontsize=_LABEL_PT, color=label.color, annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": label.color, "lw": 0.6, "shrinkA": 0, "shrinkB": 1},
                    gid=f"roof-label-{n}")
    return min(((lb.position - gap - lo) / (hi - lo) for lb in labels), default=1.0)


def _draw_points(ax: Axes, points: Sequence[ChartPoint]) -> None:
    colors = iter(_POINT_COLORS * 8)
    series: dict[tuple[str, str], list[ChartPoint]] = {}
    for p in points:
        series.setdefault((p.kind, p.label if p.kind == "probe" else ""), []).append(p)
    other_kinds = sorted({kind for kind, _ in series if kind not in ("probe", "workload")})
    for (kind, label), group in series.items():
        if kind == "probe":
            group = sorted(group, key=lambda p: p.intensity)
            ax.plot([p.intensity for p in group], [p.tflops for p in group], "o-", ms=3.5, lw=0.9, alpha=0.85,
                    color=next(colors), label=plain(label))
            continue
        for p in group:
            if p.attainable_tflops and p.attainable_tflops > p.tflops:
                ax.plot([p.intensity] * 2, [p.tflops, p.attainable_tflops], ":", lw=1.0, color="0.3")
        if kind == "workload":
            for p in group:
                ax.plot([p.intensity], [p.tflops], "D", ms=8, mec="black", mew=0.8, color=next(colors),
                        label=plain(p.label), zorder=5)
            continue
        marker = _OTHER_MARKERS[other_kinds.index(kind) % len(_OTHER_MARKERS)]
        ax.plot([p.intensity for p in group], [p.tflops for p in group], marker, ls="none", ms=6, mec="black",
                mew=0.5, color=next(colors), label=plain(f"{kind} ({len(group)})"), zorder=4)
        if len(group) <= _MAX_NAMED_POINTS:
            for p in group:
                ax.annotate(plain(p.label), (p.intensity, p.tflops), xytext=(5, 3), textcoords="offset points",
                            fontsize=_LABEL_PT, color="0.15")


def _legend(ax: Axes, model: MachineModel, room_below_labels: float) -> None:
    """Points as drawn, then one key line per compute family present: its colour, style and level.
    In the right margin under the roof labels when they leave room, else inside the chart."""
    handles, labels = ax.get_legend_handles_labels()
    for family in sorted({_family(k) for k in model.compute}, key=lambda f: (f not in _FAMILY_STYLE, f)):
        color, style, name = _FAMILY_STYLE.get(family, _OTHER_FAMILY_STYLE)
        handles.append(Line2D([], [], color=color, ls=style, lw=1.1))
        labels.append(name if family in _FAMILY_STYLE else plain(f"{family} ({name})"))
    if not handles:
        return
    _, height_pt = _axes_size_pt(ax.figure)
    needed = (len(handles) * _LABEL_GAP_PT * 1.15 + 12) / height_pt
    if needed <= room_below_labels:
        ax.legend(handles, labels, fontsize=_LABEL_PT, loc="lower left", bbox_to_anchor=(1.02, 0.0),
                  borderaxespad=0.0, framealpha=0.9)
    else:
        ax.legend(handles, labels, fontsize=_LABEL_PT, loc="lower right", framealpha=0.9)


def roofline_figure(results: Results, overlays: Sequence[ChartPoint] = ()) -> Figure | None:
    """The roofline as a Figure (build it inside chart_style()), or None with no roof to draw."""
    model = results.machine_model
    if model is None:
        return None
    # A file from elsewhere may hold a roof of zero; a log axis cannot draw it.
    model = dataclasses.replace(model, compute={k: c for k, c in model.compute.items() if _positive(c.value)},
                                memory={k: c for k, c in model.memory.items() if _positive(c.value)})
    if not (model.memory or model.compute):
        return None
    points = [p for p in [*probe_points(results), *workload_points(results), *overlays] if p.drawable]
    x_lo, x_hi, y_lo, y_hi = _limits(model, points)
    fig = plt.figure(figsize=_FIG_SIZE, dpi=120)
    fig.subplots_adjust(**_AXES_BOX)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    width_pt, height_pt = _axes_size_pt(fig)
    decades_x, decades_y = math.log10(x_hi / x_lo), math.log10(y_hi / y_lo)
    # A slope of one decade per decade, as it appears on this axes' aspect.
    angle = math.degrees(math.atan2(height_pt / decades_y, width_pt / decades_x))
    top = max((c.value for c in model.compute.values()), default=None)
    _draw_memory(ax, model, (x_lo, x_hi), (y_lo, y_hi), top, angle)
    room = _draw_compute(ax, model, (x_lo, x_hi), (y_lo, y_hi), _LABEL_GAP_PT * decades_y / height_pt)
    _draw_points(ax, points)
    _legend(ax, model, room)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, counted)")
    integer = any(c.unit == "TOP/s" for c in model.compute.values())
    ax.set_ylabel("TFLOP/s (TOP/s for integer roofs)" if integer else "TFLOP/s")
    device = results.device_name() or model.device
    ax.set_title(plain(f"Measured roofline: {device}"))
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.08)
    return fig


# --------------------------------------------------------------------------- files and SVG text


@contextlib.contextmanager
def chart_style(salt: str) -> Iterator[None]:
    """rc settings every chart is built and saved under; `salt` keeps its SVG ids apart from other charts'."""
    with plt.rc_context({**_RC, "svg.hashsalt": salt}):
        yield


def save_figure(fig: Figure, *paths: Path) -> list[Path]:
    """Write the figure to each path, PNG or SVG by its suffix (an SVG without a date, so reruns
    compare equal), then close it."""
    written = []
    try:
        for path in map(Path, paths):
            fig.savefig(path, metadata={"Date": None} if path.suffix.lower() == ".svg" else None)
            written.append(path)
    finally:
        plt.close(fig)
    return written


def save_and_inline(fig: Figure, prefix: str, *paths: Path, bare: bool = False) -> tuple[list[Path], str]:
    """One drawing, written to each path (PNG or SVG by its suffix) and returned as inline <svg>
    markup (see inline_svg, `bare`): the SVG is rendered once in memory; its files get that text and the
    page the markup made from it. Closes the figure."""
    written = []
    buffer = io.StringIO()
    try:
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        for path in map(Path, paths):
            if path.suffix.lower() == ".svg":
                path.write_text(buffer.getvalue(), encoding="utf-8")
            else:
                fig.savefig(path)
            written.append(path)
    finally:
        plt.close(fig)
    return written, inline_svg(buffer.getvalue(), prefix, bare)


def drawn(style: str, build: Callable[[], Figure | None], *paths: Path,
          bare: bool = False) -> tuple[list[Path], str | None]:
    """The figure `build` makes under chart style `style`, written to `paths` and returned as page markup
    (save_and_inline, the style naming its SVG ids too); ([], None) when there is nothing to draw."""
    with chart_style(style):
        fig = build()
        return ([], None) if fig is None else save_and_inline(fig, style, *paths, bare=bare)


def inline_svg(text: str, prefix: str, bare: bool = False) -> str:
    """A matplotlib SVG file's text as an element for an HTML page: no XML prolog or doctype, no fixed
    size (it scales with the page), and the numbered group ids (figure_1, axes_1, ...) prefixed so that
    several charts on one page do not repeat ids. `bare`: no metadata and no namespace declarations
    either (an HTML parser needs neither, and the page then names no address at all; the markup is then
    HTML, no longer XML)."""
    text = text[text.index("<svg"):]
    text = re.sub(r'(<svg\b[^>]*?)\s+width="[^"]*"\s+height="[^"]*"', r"\1", text, count=1)
    if bare:
        text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
        text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    return re.sub(r'\bid="([A-Za-z][\w.]*_\d+)"', rf'id="{prefix}-\1"', text)


def roofline_chart(results: Results, path: Path, overlays: Sequence[ChartPoint] = ()) -> Path | None:
    """Write the chart, PNG or SVG by the path's suffix; None (nothing written) with no roof to draw."""
    with chart_style("roofline"):
        fig = roofline_figure(results, overlays)
        return None if fig is None else save_figure(fig, path)[0]


def draw_roofline_charts(results: Results, out_dir: Path, overlays: Sequence[ChartPoint] = (),
                         formats: Sequence[str] = ("png", "svg"),
                         stem: str = "roofline") -> tuple[list[Path], str | None]:
    """Write <stem>.png and <stem>.svg (or the formats asked for) into out_dir from one drawing, and
    return that drawing as roofline_svg gives it too; ([], None) (nothing written) with no roof to draw."""
    return drawn("roofline", lambda: roofline_figure(results, overlays),
                 *(Path(out_dir) / f"{stem}.{fmt}" for fmt in formats))


def roofline_svg(results: Results, overlays: Sequence[ChartPoint] = ()) -> str | None:
    """The roofline as inline <svg> markup, or None with no roof to draw."""
    return drawn("roofline", lambda: roofline_figure(results, overlays))[1]
