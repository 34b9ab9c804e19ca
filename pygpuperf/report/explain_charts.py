"""Charts of an explained step: the waterfall from the roofline ideal to the measured step time,
and the step's kernels as bubbles on the measured roofline (area: share of kernel time; colour:
kernel class). PNG or SVG.

Kernels are grouped by the op that launched them, their class and their precision (or by kernel
name), summing time, FLOPs and bytes: one bubble or table row stands for, e.g., every forward
convolution of the step. Bytes are the explainer's minimum-traffic estimate (each input read
once, each output written once), so the achieved GB/s and the intensities are estimates too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.legend import Legend  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from pygpuperf.explain import words  # noqa: E402
from pygpuperf.explain.model import Explanation  # noqa: E402
from pygpuperf.explain.model import KernelRecord  # noqa: E402
from pygpuperf.report.chart import (ChartPoint, chart_style, drawn, plain, roofline_figure,  # noqa: E402
                                    save_figure)
from pygpuperf.core.results import MachineModel, Results  # noqa: E402
from pygpuperf.core.vocabulary import KernelClass, Part  # noqa: E402

# Kernel class -> colour: the tensor and CUDA-core classes take their roofs' colours, memory-bound
# kernels the HBM slope's; the rest take colours no roof uses.
CLASS_COLORS = {KernelClass.TENSOR_GEMM: "#1f4e9c", KernelClass.VECTOR_MATH: "#a0522d", KernelClass.MEMORY_BOUND: "#d62728", KernelClass.LAYOUT: "#e7298a",
                KernelClass.MEMCPY: "#e6ab02", KernelClass.COMMUNICATION: "#1b9e77", KernelClass.OTHER: "#7f7f7f"}
# Waterfall bars: the ideal, each part (kernel parts in their class's colour, idle in greys), the total.
_IDEAL_COLOR = "#2ca02c"
_MEASURED_COLOR = "#333333"
_PART_COLORS = {Part.TENSOR: CLASS_COLORS[KernelClass.TENSOR_GEMM],
                Part.MEMORY: CLASS_COLORS[KernelClass.MEMORY_BOUND],
                Part.FALLBACK: CLASS_COLORS[KernelClass.VECTOR_MATH], Part.LAYOUT: CLASS_COLORS[KernelClass.LAYOUT],
                Part.MEMCPY: CLASS_COLORS[KernelClass.MEMCPY],
                Part.COMMUNICATION: CLASS_COLORS[KernelClass.COMMUNICATION],
                Part.OTHER: CLASS_COLORS[KernelClass.OTHER], Part.IDLE_HOST: "#8c96a3",
                Part.IDLE_LAUNCH: "#aab3bd", Part.IDLE_SYNC: "#c8ced5",
                Part.UNEXPLAINED: "#ffffff"}
IDEAL = "roofline ideal"
MEASURED = "measured"

# Bubble area in points² for a group holding all of the step's kernel time; area is proportional
# to the share, never under _MIN_AREA_PT2 so that the smallest groups stay visible.
_FULL_AREA_PT2 = 3200.0
_MIN_AREA_PT2 = 5.0
# The largest groups are named beside their bubble; the legend names the classes.
LABELLED_BUBBLES = 8
# Groups under this share of the kernel time are counted in the legend, not drawn: a step has
# many tiny scalar kernels whose few FLOPs would stretch the axes by decades.
MIN_SHARE = 0.005
_LABEL_PT = 7.5
# Kind and label of the stand-in points that give roofline_figure the kernels' extent: a leading
# underscore keeps matplotlib from listing them in the legend; the bubbles replace them.
_STAND_IN = "_kernel group"
_WATERFALL_WIDTH_IN = 10.0
_ROW_IN = 0.34


# --------------------------------------------------------------------------- kernel groups


@dataclass(frozen=True)
class KernelGroup:
    """Kernels of a step summed by (op, class, precision), or by (kernel name, class, precision)."""

    label: str  # the op without "aten::" (or the kernel's short name), and the precision
    op: str
    kernel_class: str
    precision: str
    names: tuple[str, ...]  # distinct kernel names, most time first
    launches: int
    time_us: float  # summed kernel durations
    flops: float
    bytes: float
    bound_us: float | None  # summed roofline bounds of the kernels that have one; None when none has
    bounded_us: float  # summed durations of those kernels
    share: float  # time_us over the step's summed kernel time

    @property
    def intensity(self) -> float:
        """FLOP per byte; inf with FLOPs but no bytes, 0 with neither."""
        if self.bytes > 0:
            return self.flops / self.bytes
        return math.inf if self.flops > 0 else 0.0

    @property
    def tflops(self) -> float:
        return self.flops / self.time_us / 1e6 if self.time_us > 0 else 0.0

    @property
    def gbs(self) -> float:
        return self.bytes / self.time_us / 1e3 if self.time_us > 0 else 0.0

    @property
    def efficiency(self) -> float | None:
        """Bound over time for the kernels that have a bound: 1 runs at the roofline; above 1 means
        miscounted work (the self-check)."""
        if self.bound_us is None or self.bounded_us <= 0:
            return None
        return self.bound_us / self.bounded_us

    @property
    def drawable(self) -> bool:
        """Has a place on a log-log roofline: FLOPs and bytes both counted and time measured."""
        return self.flops > 0 and self.bytes > 0 and self.time_us > 0


def short_kernel_name(name: str, width: int = 48) -> str:
    """A profiler kernel name without return type, namespaces, template and call arguments, cut to
    `width` characters: "void at::native::vectorized_elementwise_kernel<8, ...>(...)" ->
    "vectorized_elementwise_kernel"."""
    text = name.strip().replace("(anonymous namespace)::", "")
    text = text[5:] if text.startswith("void ") else text
    cut = min((i for i in (text.find("("), text.find("<")) if i > 0), default=len(text))
    text = text[:cut].rstrip().rsplit("::", 1)[-1].strip() or name.strip()
    return text if len(text) <= width else text[:width - 1] + "…"


def _group_label(record: KernelRecord, by: str) -> str:
    base = record.op.removeprefix("aten::") if by == "op" and record.op else short_kernel_name(record.name)
    return f"{base} {record.precision}" if record.precision else base


def kernel_groups(explanation: Explanation, by: str = "op") -> list[KernelGroup]:
    """The median step's kernels grouped by (op, class, precision) with by="op" (kernels no op
    launched go by their name), or by (kernel name, class, precision) with by="name"; most time first."""
    if by not in ("op", "name"):
        raise ValueError(f"by={by!r}: use 'op' or 'name'")
    members: dict[tuple[str, str, str], list[KernelRecord]] = {}
    for record in explanation.median.kernels:
        what = record.op if by == "op" and record.op else f"kernel:{record.name}"
        members.setdefault((what, record.kernel_class, record.precision), []).append(record)
    total = sum(r.duration_us for r in explanation.median.kernels)
    groups = []
    for (_, kernel_class, precision), records in members.items():
        time_us = sum(r.duration_us for r in records)
        names: dict[str, float] = {}
        for r in records:
            names[r.name] = names.get(r.name, 0.0) + r.duration_us
        bounded = [r for r in records if r.bound_us is not None]
        groups.append(KernelGroup(
            label=_group_label(records[0], by), op=records[0].op if by == "op" else "", kernel_class=kernel_class,
            precision=precision, names=tuple(sorted(names, key=lambda n: -names[n])), launches=len(records),
            time_us=time_us, flops=sum(r.flops for r in records), bytes=sum(r.bytes for r in records),
            bound_us=sum(r.bound_us for r in bounded) if bounded else None,  # type: ignore[misc]
            bounded_us=sum(r.duration_us for r in bounded), share=time_us / total if total > 0 else 0.0))
    groups.sort(key=lambda g: -g.time_us)
    # One label per group: a label two groups share gets its class ("copy_ (memcpy_memset)").
    seen: dict[str, int] = {}
    for g in groups:
        seen[g.label] = seen.get(g.label, 0) + 1
    return [g if seen[g.label] == 1 else replace(g, label=f"{g.label} ({g.kernel_class})") for g in groups]


def kernel_points(explanation: Explanation, top: int | None = 25, by: str = "op") -> list[ChartPoint]:
    """One roofline point per kernel group, the `top` groups by time (all with None): intensity =
    FLOPs / bytes, achieved TFLOP/s = FLOPs / time, kind = the kernel class, and the group's share
    of the step's kernel time in the label. Groups without FLOPs or bytes are in the list but not
    drawable (ChartPoint.drawable): a log-log roofline has no place for them."""
    groups = kernel_groups(explanation, by)
    return [ChartPoint(f"{g.label} ({100 * g.share:.1f}%)", g.intensity, g.tflops, g.kernel_class)
            for g in (groups if top is None else groups[:top])]


# --------------------------------------------------------------------------- waterfall


@dataclass(frozen=True)
class WaterfallBar:
    name: str  # IDEAL, a waterfall part, Part.UNEXPLAINED or MEASURED
    start_us: float  # where the bar starts: the running total before it (0 for the ideal and the total)
    length_us: float  # signed: a negative unexplained remainder runs back

    @property
    def end_us(self) -> float:
        return self.start_us + self.length_us


def waterfall_bars(explanation: Explanation) -> list[WaterfallBar]:
    """The ideal, each part of non-zero time stacked on the running total, the unexplained rest,
    and the measured step (which the running total reaches by construction)."""
    w = explanation.median.waterfall
    bars = [WaterfallBar(IDEAL, 0.0, w.ideal_us)]
    running = w.ideal_us
    for name, us in w.parts.items():
        if us != 0:
            bars.append(WaterfallBar(name, running, us))
            running += us
    bars.append(WaterfallBar(Part.UNEXPLAINED, running, w.unexplained_us))
    bars.append(WaterfallBar(MEASURED, 0.0, w.measured_us))
    return bars


def _ms(us: float) -> str:
    return f"{us / 1e3:,.2f} ms"


def waterfall_figure(explanation: Explanation, device: str | None = None) -> Figure:
    """The waterfall as a Figure (build it inside chart_style()): one row per bar, top to bottom,
    each labelled with its milliseconds and its share of the measured step."""
    w = explanation.median.waterfall
    bars = waterfall_bars(explanation)
    height = 1.35 + _ROW_IN * len(bars)
    fig = plt.figure(figsize=(_WATERFALL_WIDTH_IN, height), dpi=120)
    fig.subplots_adjust(left=2.0 / _WATERFALL_WIDTH_IN, right=0.97, top=1 - 0.62 / height, bottom=0.72 / height)
    ax = fig.add_subplot()
    rows = range(len(bars))
    for row, bar in zip(rows, bars):
        color = {IDEAL: _IDEAL_COLOR, MEASURED: _MEASURED_COLOR}.get(bar.name, _PART_COLORS.get(bar.name, "0.6"))
        ax.barh(row, bar.length_us / 1e3, left=bar.start_us / 1e3, height=0.62, color=color, edgecolor="0.25",
                lw=0.6, hatch="//" if bar.name == Part.UNEXPLAINED else None, gid=f"waterfall-bar-{row}")
        if 0 < row < len(bars) - 1:  # a leader from the running total before this bar
            ax.plot([bar.start_us / 1e3] * 2, [row - 1 - 0.31, row + 0.31], color="0.45", lw=0.6, ls=":")
        share = f" ({100 * abs(bar.length_us) / w.measured_us:.1f}%)" if w.measured_us > 0 else ""
        if bar.name == MEASURED:
            text = _ms(bar.length_us)
        elif bar.name == IDEAL:
            text = f"{_ms(bar.length_us)}{share}"
        elif abs(bar.length_us) < 5.0:  # shows as 0.00 ms
            text = f"{_ms(0.0)}{share}"
        else:
            text = f"{'+' if bar.length_us >= 0 else '−'}{_ms(abs(bar.length_us))}{share}"
        ax.annotate(text, (max(bar.start_us, bar.end_us) / 1e3, row), xytext=(4, 0), textcoords="offset points",
                    va="center", ha="left", fontsize=8.5, gid=f"waterfall-label-{row}")
    kind = words.kind_of(explanation.device)
    ax.set_yticks(list(rows), [plain(words.label(b.name, kind)) for b in bars], fontsize=9)
    ax.set_ylim(len(bars) - 0.5, -0.5)  # the ideal on top, the measured step at the bottom
    right = max([b.end_us for b in bars] + [b.start_us for b in bars] + [0.0]) / 1e3
    left = min([b.end_us for b in bars] + [0.0]) / 1e3
    ax.set_xlim(left, right * 1.22 if right > 0 else 1.0)
    ax.set_xlabel("ms of the step (median profiled step)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    name = device or explanation.device
    ax.set_title(plain(f"From the roofline ideal to the measured step: {name} (coverage {100 * w.coverage:.1f}%)"),
                 fontsize=11, loc="left")
    empty = [words.label(name, kind) for name, us in w.parts.items() if us == 0 and words.shown(name, kind)]
    if empty:
        fig.text(0.01, 0.01, plain("no time in: " + ", ".join(empty)), fontsize=7.5, color="0.35", va="bottom")
    return fig


def waterfall_chart(explanation: Explanation, path: Path, device: str | None = None) -> Path:
    """Write the waterfall, PNG or SVG by the path's suffix."""
    with chart_style("explain-waterfall"):
        return save_figure(waterfall_figure(explanation, device), path)[0]


def waterfall_svg(explanation: Explanation, device: str | None = None) -> str:
    """The waterfall as inline <svg> markup for a page."""
    return drawn("explain-waterfall", lambda: waterfall_figure(explanation, device), bare=True)[1]


# --------------------------------------------------------------------------- kernels on the roofline


def _bubble_area(share: float) -> float:
    return max(_MIN_AREA_PT2, _FULL_AREA_PT2 * share)


def explain_roofline_figure(results: Results, explanation: Explanation, top: int | None = None,
                            by: str = "op", labelled: int = LABELLED_BUBBLES,
                            min_share: float = MIN_SHARE) -> Figure | None:
    """The measured roofline with the step's kernel groups as bubbles (build it inside chart_style()):
    area proportional to the share of kernel time, colour by class, the `labelled` largest named.
    Groups under `min_share` of the kernel time, and groups without FLOPs or bytes, are counted in
    the legend instead. None when `results` has no roof to draw."""
    groups = kernel_groups(explanation, by)
    groups = groups if top is None else groups[:top]
    shown = [g for g in groups if g.drawable and g.share >= min_share]
    # Stand-ins at the bubbles' places make the roofline's axes hold them; they are then removed.
    stand_ins = [ChartPoint(_STAND_IN, g.intensity, g.tflops, _STAND_IN) for g in shown]
    fig = roofline_figure(results, stand_ins)
    if fig is None:
        return None
    ax = fig.axes[0]
    for artist in [*ax.lines, *ax.texts]:
        if artist.get_label().startswith(_STAND_IN) or (hasattr(artist, "get_text")
                                                        and artist.get_text() == plain(_STAND_IN)):
            artist.remove()
    # Largest first, so that smaller bubbles are drawn over them.
    for n, g in enumerate(shown):
        ax.scatter([g.intensity], [g.tflops], s=_bubble_area(g.share), color=CLASS_COLORS.get(g.kernel_class, "0.5"),
                   alpha=0.6, edgecolors="black", linewidths=0.6, zorder=6 + n / 1000, gid=f"kernel-bubble-{n}")
    _class_legend(ax, groups, shown, min_share, words.kind_of(explanation.device))
    _label_bubbles(ax, shown, labelled)
    device = results.device_name()
    unit = words.unit(words.kind_of(explanation.device))
    ax.set_title(plain(f"{unit.capitalize()}s on the measured roofline: {device or explanation.device}"))
    return fig


def _label_bubbles(ax: Axes, shown: Sequence[KernelGroup], labelled: int) -> None:
    """Name the `labelled` largest bubbles, each beside its bubble on the side where its text covers
    the least of the other labels (the roofline's and those placed before it), the legends and the
    other bubbles: groups sit close (a convolution's forward and backward kernels have nearly one
    intensity)."""
    renderer = ax.figure.canvas.get_renderer()
    placed = [t.get_window_extent(renderer) for t in ax.texts]
    placed += [legend.get_window_extent(renderer) for legend in [*ax.artists, ax.get_legend()]
               if isinstance(legend, Legend)]
    scale = ax.figure.dpi / 72  # points -> pixels
    bubbles = []
    for g in shown:
        x, y = ax.transData.transform((g.intensity, g.tflops))
        r = math.sqrt(_bubble_area(g.share)) / 2 * scale
        bubbles.append(Bbox.from_extents(x - r, y - r, x + r, y + r))
    frame = ax.get_window_extent(renderer)
    for n, g in enumerate(shown[:labelled]):
        gap = math.sqrt(_bubble_area(g.share)) / 2 + 2
        best = None
        for dx, dy, ha, va in ((gap, 0, "left", "center"), (-gap, 0, "right", "center"),
                               (0, gap, "center", "bottom"), (0, -gap, "center", "top"),
                               (gap * 0.7, gap * 0.7, "left", "bottom"), (gap * 0.7, -gap * 0.7, "left", "top"),
                               (-gap * 0.7, gap * 0.7, "right", "bottom"), (-gap * 0.7, -gap * 0.7, "right", "top")):
            label = ax.annotate(plain(f"{g.label} {100 * g.share:.0f}%"), (g.intensity, g.tflops), xytext=(dx, dy),
                                textcoords="offset points", ha=ha, va=va, fontsize=_LABEL_PT, color="0.1", zorder=7,
                                gid=f"kernel-label-{n}")
            box = label.get_window_extent(renderer)
            cost = (4 * sum(_overlap(box, other) for other in placed)
                    + sum(_overlap(box, b) for k, b in enumerate(bubbles) if k != n)
                    + 8 * (box.width * box.height - _overlap(box, frame)))  # outside the axes
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, label, box)
            else:
                label.remove()
            if cost == 0:
                break
        assert best is not None
        placed.append(best[2])


def _overlap(a: Bbox, b: Bbox) -> float:
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def _class_legend(ax: Axes, groups: Sequence[KernelGroup], shown: Sequence[KernelGroup], min_share: float,
                  kind: str) -> None:
    """Colour per class present, with how many groups and how much time it holds; then the groups not
    drawn. Upper left: above every memory slope, where no kernel can be. The roofline's own legend stays."""
    kept = ax.get_legend()
    handles, labels = [], []
    for kernel_class in sorted({g.kernel_class for g in shown},
                               key=lambda c: tuple(KernelClass).index(c) if c in tuple(KernelClass) else len(tuple(KernelClass))):
        members = [g for g in shown if g.kernel_class == kernel_class]
        handles.append(Line2D([], [], marker="o", ls="none", ms=8, mec="black", mew=0.6, alpha=0.6,
                              color=CLASS_COLORS.get(kernel_class, "0.5")))
        labels.append(plain(f"{words.label(kernel_class, kind)}: {len(members)} groups, "
                            f"{100 * sum(g.share for g in members):.1f}%"))
    small = [g for g in groups if g.drawable and g.share < min_share]
    for what, left_out in (("no FLOPs or bytes counted", [g for g in groups if not g.drawable]),
                           (f"under {100 * min_share:g}% each", small)):
        if left_out:
            handles.append(Line2D([], [], ls="none"))
            labels.append(plain(f"not drawn, {what}: {len(left_out)} groups, "
                                f"{100 * sum(g.share for g in left_out):.1f}%"))
    if not handles:
        return
    ax.legend(handles, labels, fontsize=_LABEL_PT, loc="upper left", framealpha=0.9,
              title=f"{words.unit(kind)} groups (area: share of {words.unit(kind)} time)", title_fontsize=_LABEL_PT)
    if kept is not None:
        ax.add_artist(kept)


def _as_results(machine: Results | MachineModel) -> Results:
    if isinstance(machine, Results):
        return machine
    return Results(meta={"device": {"name": machine.device}}, machine_model=machine)


def explain_roofline(results: Results | MachineModel, explanation: Explanation, path: Path,
                     top: int | None = None, by: str = "op") -> Path | None:
    """Write the kernel roofline, PNG or SVG by the path's suffix; None (nothing written) when there
    is no roof to draw."""
    with chart_style("explain-roofline"):
        fig = explain_roofline_figure(_as_results(results), explanation, top, by)
        return None if fig is None else save_figure(fig, path)[0]


def explain_roofline_svg(results: Results | MachineModel, explanation: Explanation, top: int | None = None,
                         by: str = "op") -> str | None:
    """The kernel roofline as inline <svg> markup, or None with no roof to draw."""
    return drawn("explain-roofline", lambda: explain_roofline_figure(_as_results(results), explanation, top, by),
                 bare=True)[1]


def explain_charts(explanation: Explanation, out_dir: Path, results: Results | MachineModel | None = None,
                   formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write waterfall.<fmt> and, with a machine model, kernel_roofline.<fmt> into out_dir, one
    drawing per chart."""
    return draw_explain_charts(explanation, out_dir, results, formats)[0]


def draw_explain_charts(explanation: Explanation, out_dir: Path, results: Results | MachineModel | None = None,
                        formats: Sequence[str] = ("png", "svg")) -> tuple[list[Path], dict[str, str | None]]:
    """:func:`explain_charts`, and the same drawings as page markup ({"waterfall": svg, "roofline": svg or
    None}, as waterfall_svg and explain_roofline_svg give them): each figure is built once."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    machine = None if results is None else _as_results(results)
    device = machine.device_name() if machine is not None else None
    pages: dict[str, str | None] = {"waterfall": None, "roofline": None}
    written, pages["waterfall"] = drawn("explain-waterfall", lambda: waterfall_figure(explanation, device),
                                        *[out_dir / f"waterfall.{f}" for f in formats], bare=True)
    if machine is not None:
        files, pages["roofline"] = drawn("explain-roofline", lambda: explain_roofline_figure(machine, explanation),
                                         *[out_dir / f"kernel_roofline.{f}" for f in formats], bare=True)
        written += files
    return written, pages
