"""A/B comparison of explained steps: where the step-time difference between configurations goes.

Each configuration (a label such as "memory_format=nchw") brings its own
:class:`~pygpuperf.explain.explainer.Explanation`. Their median steps are compared by
category: kernel classes (exclusive time) and idle causes, as
:func:`~pygpuperf.explain.attribution.category_times` splits a step. Kernels are paired
across runs by (op, input shapes, phase) with :func:`~pygpuperf.explain.attribution.match_kernels`,
so a category's delta splits into the same work getting faster or slower (matched) and work
only one run does (unmatched: a layout transform added, a kernel fused away).

Every configuration is compared with one baseline (the fastest, unless named). When the
configurations run different batch sizes, step times are not comparable, so every figure
is per sample (time per step / samples per step) and the unit says so.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pygpuperf.explain import attribution, words
from pygpuperf.explain.attribution import category_times, matched_deltas
from pygpuperf.core.vocabulary import Part
from pygpuperf.explain.model import CallAccesses, ExplainedStep, Explanation, Throughput
from pygpuperf.explain.model import Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.trials.record import Trials

# The comparison is trusted when named categories carry at least this share of the delta.
NAMED_SHARE_GOAL = 0.80
# A category moving less than this share of the total delta is left out of the sentence.
SENTENCE_MIN_SHARE = 0.03
# A category's move is put down to added/removed work, or to the same work at another speed,
# when that carries at least this share of it.
ORIGIN_SHARE = 0.8
# Two configurations closer than this (relative) are "the same speed".
SAME_SPEED = 0.01
# Categories that name no cause: kernels without a class and time nothing accounts for.
UNNAMED = (KernelClass.OTHER, Part.UNEXPLAINED)
CATEGORIES = (*tuple(KernelClass), Part.IDLE_HOST, Part.IDLE_LAUNCH, Part.IDLE_SYNC, Part.UNEXPLAINED)


# --------------------------------------------------------------------------- loading


# Kernel classes of older explain.json files, by their current name.
_LEGACY_CLASSES = {"cuda_math": KernelClass.VECTOR_MATH}


def _record(d: Mapping[str, Any]) -> KernelRecord:
    names = {f.name for f in dataclasses.fields(KernelRecord)}
    record = KernelRecord(**{k: v for k, v in d.items() if k in names})
    record.kernel_class = _LEGACY_CLASSES.get(record.kernel_class, record.kernel_class)
    return record


def explanation_from_json(doc: Mapping[str, Any]) -> Explanation:
    """An :class:`Explanation` back from explain.json (``Explanation.to_dict``; what --try-fixes measured,
    the host's own time per step included, is :meth:`Trials.from_doc`'s).

    The file keeps the median step only, so the result has that one step; the other
    steps' wall times are in ``doc["step_wall_us"]``. The self-check is recomputed from
    the stored bounds.
    """
    kernels = [_record(k) for k in doc.get("kernels", [])]
    t = doc["timeline"]
    timeline = Timeline(wall_us=float(t["wall_us"]), busy_us=float(t["busy_us"]), idle=Idle(**t.get("idle", {})),
                        profiler_overhead_us=float(t.get("profiler_overhead_us", 0.0)))
    w = doc["waterfall"]
    parts = {words.LEGACY_PARTS.get(name, name): float(us) for name, us in w["parts"].items()}
    waterfall = Waterfall(ideal_us=float(w["ideal_us"]), parts=parts, measured_us=float(w["measured_us"]),
                          unexplained_us=float(w["unexplained_us"]), coverage=float(w["coverage"]))
    window = doc.get("step_window_us")
    step = ExplainedStep(int(doc.get("median_step", 0)), kernels, timeline, waterfall, attribution.self_check(kernels),
                         (float(window[0]), float(window[1])) if window else None,
                         [(float(a), float(b)) for a, b in doc.get("syncs_us", [])])
    throughput = Throughput.from_dict(doc["throughput"]) if doc.get("throughput") else None
    return Explanation(str(doc.get("device", "")), [step], step, dict(doc.get("unknown_ops_us", {})), throughput,
                       {str(k): str(v) for k, v in doc.get("settings", {}).items()},
                       calls=[CallAccesses.from_list(i, c) for i, c in enumerate(doc.get("calls", []))])


def load_explained(path: str | Path) -> tuple[Explanation, Trials]:
    """explain.json, or a folder holding one, as its :class:`Explanation` and what --try-fixes measured of it
    (:class:`~pygpuperf.trials.record.Trials`, empty where it ran none), validated against
    data/explain.schema.json (:class:`pygpuperf.core.documents.ResultsFileError` says why not)."""
    from pygpuperf.core import documents

    path = Path(path)
    if path.is_dir():
        path = path / "explain.json"
    doc = documents.load_document(path, "explain", "explain.json")
    return explanation_from_json(doc), Trials.from_doc(doc)


def load_explanation(path: str | Path) -> Explanation:
    """explain.json, or a folder holding one, as an :class:`Explanation` (:func:`load_explained` without the
    trials)."""
    return load_explained(path)[0]


# --------------------------------------------------------------------------- comparison


@dataclass
class Config:
    """One configuration of a comparison: its label, its explanation and what it ran with."""

    label: str
    explanation: Explanation
    samples_per_step: int | None = None  # the batch; None when unknown (steps are then compared as steps)
    params: dict[str, str] = field(default_factory=dict)  # the built workload's params


@dataclass
class CategoryChange:
    """One category from the baseline to another configuration, in the comparison's unit."""

    category: str
    base_us: float
    other_us: float
    delta_us: float  # other - base
    matched_us: float | None  # from kernels both runs have; None when kernels are not comparable
    unmatched_us: float | None  # from kernels only one run has


@dataclass
class PairComparison:
    """One configuration against the baseline."""

    base: str
    other: str
    unit: str  # "step" or "sample": what the times are per
    base_us: float
    other_us: float
    changes: list[CategoryChange]  # in CATEGORIES order; the deltas add up to delta_us
    kind: str = words.GPU  # whose words the sentence uses (pygpuperf.explain.words)

    @property
    def delta_us(self) -> float:
        return self.other_us - self.base_us

    @property
    def unnamed_us(self) -> float:
        """The part of the delta in categories that name no cause."""
        return sum(c.delta_us for c in self.changes if c.category in UNNAMED)

    @property
    def named_share(self) -> float:
        """Share of the delta carried by named categories: 1 - |unnamed| / |delta|, in [0, 1]
        (1 when the runs are the same speed and nothing unnamed moved)."""
        delta = abs(self.delta_us)
        if delta <= 0:
            return 1.0 if abs(self.unnamed_us) <= 0 else 0.0
        return min(1.0, max(0.0, 1.0 - abs(self.unnamed_us) / delta))

    def sentence(self) -> str:
        """The comparison in words, largest moves first, offsets after a semicolon."""
        delta = self.delta_us
        per = f"per {self.unit}"
        # One unit for the whole sentence: ms, or µs when the step (or sample) is under a millisecond.
        scale, unit = (1e3, "ms") if max(self.base_us, self.other_us) >= 1e3 else (1.0, "µs")
        num = lambda us: _number(us / scale)  # noqa: E731
        times = f"({num(self.other_us)} vs {num(self.base_us)} {unit} {per})"
        if abs(delta) <= SAME_SPEED * max(self.base_us, 1e-9):
            return f"{self.other} runs at the same speed as {self.base} {times}."
        direction = "slower" if delta > 0 else "faster"
        with_delta = [c for c in self.changes if abs(c.delta_us) >= SENTENCE_MIN_SHARE * abs(delta)]
        along = sorted((c for c in with_delta if (c.delta_us > 0) == (delta > 0)), key=lambda c: -abs(c.delta_us))
        against = sorted((c for c in with_delta if (c.delta_us > 0) != (delta > 0)), key=lambda c: -abs(c.delta_us))
        more, less = ("more", "less") if delta > 0 else ("less", "more")
        text = f"{self.other} is {num(abs(delta))} {unit} {direction} {per} than {self.base} {times}"
        if along:
            text += ": " + ", ".join(f"{num(abs(c.delta_us))} {unit} {more} in {words.in_words(c.category, self.kind)}{self._origin(c)}"
                                     for c in along)
        if against:
            text += "; offset by " + ", ".join(f"{num(abs(c.delta_us))} {unit} {less} in {words.in_words(c.category, self.kind)}"
                                               for c in against)
        text += f". Named categories carry {100 * self.named_share:.0f}% of the difference."
        return text

    def _origin(self, change: CategoryChange) -> str:
        """Where a move comes from: work only one run does, or the same work at another speed,
        when either carries most of it (ORIGIN_SHARE); nothing when the two mix."""
        if change.unmatched_us is None or change.matched_us is None or abs(change.delta_us) <= 0:
            return ""
        unmatched = change.unmatched_us / change.delta_us
        if unmatched >= ORIGIN_SHARE:
            only = self.other if change.delta_us > 0 else self.base
            return f" ({100 * min(unmatched, 1.0):.0f}% of it in kernels only {only} runs)"
        if change.matched_us / change.delta_us >= ORIGIN_SHARE:
            slower = "slower" if change.delta_us > 0 else "faster"
            return f" (the same work running {slower})"
        return ""


@dataclass
class Comparison:
    """Configurations side by side: category times per configuration and each against the baseline."""

    labels: list[str]
    unit: str  # "step" or "sample"
    times_us: dict[str, dict[str, float]]  # label -> category -> time per unit
    wall_us: dict[str, float]  # label -> time per unit
    baseline: str
    pairs: list[PairComparison]  # every other configuration against the baseline
    kind: str = words.GPU

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels": self.labels,
            "unit": self.unit,
            "baseline": self.baseline,
            "wall_us": self.wall_us,
            "times_us": self.times_us,
            "pairs": [{"base": p.base, "other": p.other, "delta_us": p.delta_us, "named_share": p.named_share,
                       "sentence": p.sentence(), "changes": [dataclasses.asdict(c) for c in p.changes]}
                      for p in self.pairs],
        }

    def table_lines(self) -> list[str]:
        """Category times per configuration and each configuration's delta against the baseline."""
        width = max(12, *(len(label) for label in self.labels))
        others = [p.other for p in self.pairs]
        # ms, or µs when every step (or sample) is under a millisecond.
        scale, unit = (1e3, "ms") if max(self.wall_us.values()) >= 1e3 else (1.0, "µs")
        head = f"{unit + ' per ' + self.unit:36s}" + "".join(f"{label:>{width + 2}s}" for label in self.labels)
        head += "".join(f"{'d ' + label:>{width + 4}s}" for label in others)
        lines = [head]
        deltas = {p.other: {c.category: c.delta_us for c in p.changes} for p in self.pairs}
        for category in CATEGORIES:
            values = [self.times_us[label].get(category, 0.0) for label in self.labels]
            moved = [deltas[o].get(category, 0.0) for o in others]
            if all(abs(v) < 1e-3 for v in values + moved):
                continue
            lines.append(f"{words.in_words(category, self.kind):36s}" + "".join(f"{v / scale:>{width + 2}.2f}" for v in values)
                         + "".join(f"{d / scale:>+{width + 4}.2f}" for d in moved))
        lines.append(f"{'= ' + self.unit:36s}" + "".join(f"{self.wall_us[label] / scale:>{width + 2}.2f}"
                                                         for label in self.labels)
                     + "".join(f"{p.delta_us / scale:>+{width + 4}.2f}" for p in self.pairs))
        return lines

    def summary_lines(self) -> list[str]:
        lines = self.table_lines()
        for p in self.pairs:
            lines.append(p.sentence())
            if p.named_share < NAMED_SHARE_GOAL:
                lines.append(f"  only {100 * p.named_share:.0f}% of the {p.other} vs {p.base} difference is in named "
                             f"categories (goal {100 * NAMED_SHARE_GOAL:.0f}%): unclassified kernels or unexplained "
                             "time carry the rest")
        return lines


def _number(x: float) -> str:
    """Three significant figures or so: 32.2, 1.65, 0.42, 388."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _scaled(times: Mapping[str, float], per: float) -> dict[str, float]:
    return {c: times.get(c, 0.0) / per for c in CATEGORIES}


def compare_pair(base: tuple[Sequence[KernelRecord], Timeline], other: tuple[Sequence[KernelRecord], Timeline],
                 base_label: str = "A", other_label: str = "B", base_per: float = 1.0,
                 other_per: float = 1.0, unit: str = "step", kind: str = words.GPU) -> PairComparison:
    """One run against another, (records, timeline) each; times are divided by `base_per` and
    `other_per` (samples per step, for a per-sample comparison).

    At equal scales the changes are :func:`~pygpuperf.explain.attribution.compare_categories`'s;
    at different ones the matched/unmatched split is left out, since kernels of different
    batch sizes have different shapes and do not pair.
    """
    (records_a, timeline_a), (records_b, timeline_b) = base, other
    times_a = _scaled(category_times(records_a, timeline_a), base_per)
    times_b = _scaled(category_times(records_b, timeline_b), other_per)
    comparable = base_per == other_per
    matched: dict[str, float] = defaultdict(float)
    unmatched: dict[str, float] = defaultdict(float)
    if comparable:
        matched, unmatched = matched_deltas(records_a, records_b, base_per, other_per)
    kernel_classes = set(tuple(KernelClass))
    changes = [CategoryChange(c, times_a[c], times_b[c], times_b[c] - times_a[c],
                              matched[c] if comparable and c in kernel_classes else None,
                              unmatched[c] if comparable and c in kernel_classes else None) for c in CATEGORIES]
    return PairComparison(base_label, other_label, unit, timeline_a.wall_us / base_per, timeline_b.wall_us / other_per,
                          changes, kind)


def compare(configs: Sequence[Config], baseline: str | None = None) -> Comparison:
    """Two or more configurations' median steps, each against `baseline` (default: the fastest).

    Per step when every configuration has the same samples per step (or none is known),
    else per sample.
    """
    if len(configs) < 2:
        raise ValueError("a comparison needs at least two configurations")
    labels = [c.label for c in configs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"configuration labels must differ: {labels}")
    samples = {c.samples_per_step for c in configs}
    per_sample = len(samples) > 1 and None not in samples
    unit = "sample" if per_sample else "step"
    per = {c.label: float(c.samples_per_step) if per_sample else 1.0 for c in configs}
    steps = {c.label: (c.explanation.median.kernels, c.explanation.median.timeline) for c in configs}
    times = {label: _scaled(category_times(*steps[label]), per[label]) for label in labels}
    wall = {label: steps[label][1].wall_us / per[label] for label in labels}
    if baseline is None:
        baseline = min(labels, key=lambda label: wall[label])
    elif baseline not in labels:
        raise ValueError(f"baseline {baseline!r} is not one of {labels}")
    kind = words.kind_of(configs[0].explanation.device)
    pairs = [compare_pair(steps[baseline], steps[label], baseline, label, per[baseline], per[label], unit, kind)
             for label in labels if label != baseline]
    return Comparison(labels, unit, times, wall, baseline, pairs, kind)
