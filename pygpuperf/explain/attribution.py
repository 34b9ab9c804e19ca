"""Each kernel held against the measured roofline, and a step's time from that ideal to the clock.

A kernel's bound is the roofline's lower limit on its time: max(FLOPs / compute ceiling,
bytes / memory ceiling) at the ceilings of the :class:`~pygpuperf.core.results.MachineModel`
that match its class and precision (:func:`kernel_bound`). The waterfall
(:func:`waterfall`) starts from the sum of the bounds and adds, category by category,
what the step spent above them, down to the measured wall time.

Overlapping kernels (several streams) share the time they overlap: each elementary
interval of the timeline is split evenly among the kernels running in it
(:func:`exclusive_times`). The exclusive times add up to the timeline's busy time, so the
waterfall and :func:`category_times` add up to the wall time whatever the overlap; with
one stream a kernel's exclusive time is its duration.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping, Sequence

from pygpuperf.analyze.kernel_time import (CardTerms, KernelTime)
from pygpuperf.core.results import MachineModel
from pygpuperf.explain.pricing import MATH_CLASSES, bound_terms, kernel_timing, reuse_shares, tensor_bound
from pygpuperf.explain.model import CallAccesses, KernelRecord, Timeline, Waterfall
from pygpuperf.core.vocabulary import KernelClass

from pygpuperf.core.vocabulary import Part

# Waterfall parts (ids; pygpuperf.explain.words has their words), in the order they stack on the ideal.
WATERFALL_PARTS = (Part.FIXED, Part.TENSOR, Part.MEMORY, Part.FALLBACK, Part.LAYOUT, Part.MEMCPY, Part.COMMUNICATION,
                   Part.OTHER, Part.IDLE_HOST, Part.IDLE_LAUNCH, Part.IDLE_SYNC)

# A kernel faster than its bound by more than this factor has a wrong FLOP or byte count.
SELF_CHECK_MARGIN = 1.05

_PART_OF_CLASS = {KernelClass.TENSOR_GEMM: Part.TENSOR, KernelClass.MEMORY_BOUND: Part.MEMORY, KernelClass.VECTOR_MATH: Part.FALLBACK,
                  KernelClass.MEMCPY: Part.MEMCPY, KernelClass.COMMUNICATION: Part.COMMUNICATION}
def assign_bounds(records: Sequence[KernelRecord], model: MachineModel,
                  calls: Sequence[CallAccesses] = ()) -> list[KernelRecord]:
    """Set bound_us, fixed_us and ceiling of every record (in place) from :func:`kernel_bound`, with the
    reuse of `calls` (the traced step's op calls) deciding which level serves each kernel's bytes."""
    shares = reuse_shares(calls, model)
    terms = bound_terms(records, model)
    for record in records:
        timing = kernel_timing(record, model, shares, terms)
        record.bound_us, record.ceiling = (timing.total_us, timing.ceiling) if timing else (None, "")
        record.fixed_us = timing.fixed_us if timing else 0.0
    return list(records)


def _freeze(x: Any) -> Hashable:
    return tuple(_freeze(v) for v in x) if isinstance(x, (list, tuple)) else x


def _op_calls(records: Sequence[KernelRecord]) -> list[list[KernelRecord]]:
    """Kernels launched by one op call: consecutive in launch order, with the same op, module, phase,
    shapes and work, and no kernel name twice (a repeated name starts the next call of the same op)."""
    ordered = sorted(records, key=lambda r: r.launch_us if r.launch_us is not None else r.start_us)
    groups: list[list[KernelRecord]] = []
    last_key: Hashable = None
    for r in ordered:
        key = (r.op, r.module, r.phase, _freeze(r.input_shapes), _freeze(r.dtypes), r.flops, r.bytes)
        if r.op and groups and key == last_key and all(g.name != r.name for g in groups[-1]):
            groups[-1].append(r)
        else:
            groups.append([r])
        last_key = key
    return groups


def _split(records: Sequence[KernelRecord], total: float, attr: str, fixed_us: float = 0.0) -> None:
    """Share `total` among `records` by the time each spent beyond the fixed cost of a kernel (the part of a
    kernel's duration that can be doing the work); evenly when none spent any."""
    durations = [max(r.duration_us - fixed_us, 0.0) for r in records]
    whole = sum(durations)
    for r, d in zip(records, durations):
        setattr(r, attr, total * (d / whole if whole > 0 else 1 / len(records)))


def distribute_op_costs(records: Sequence[KernelRecord],
                        group_key: Callable[[KernelRecord], Hashable] | None = None,
                        fixed_us: float = 0.0) -> list[KernelRecord]:
    """Split an op's work among the kernels it launched, in proportion to their durations beyond the
    card's fixed cost per kernel `fixed_us` (in place).

    Each record arrives carrying its op's whole cost (every kernel of one call has the op's
    flops and bytes); call this once. Without per-kernel counters the duration is the only
    defensible weight, less the fixed cost: a tiny helper kernel that runs for its fixed cost alone
    takes no share. FLOPs go to the call's math kernels (tensor_gemm, vector_math) when it
    has any, so a conv's layout or reduction kernels get no GEMM FLOPs; bytes go to all of
    its kernels. `group_key` names a record's op call; by default the records' op_call_id
    when every kernel launched by an op has one, else calls are told apart as :func:`_op_calls` does.
    """
    if group_key is None and records and all(r.op_call_id is not None for r in records if r.op):
        group_key = lambda r: (r.op_call_id, r.op) if r.op else id(r)  # noqa: E731
    if group_key is None:
        groups = _op_calls(records)
    else:
        by_key: dict[Hashable, list[KernelRecord]] = defaultdict(list)
        for r in records:
            by_key[group_key(r)].append(r)
        groups = list(by_key.values())
    for group in groups:
        if len(group) < 2:
            continue
        flops, nbytes = group[0].flops, group[0].bytes
        math_kernels = [r for r in group if r.kernel_class in MATH_CLASSES] or group
        for r in group:
            r.flops = 0.0
        _split(math_kernels, flops, "flops", fixed_us)
        _split(group, nbytes, "bytes", fixed_us)
    return list(records)


def resplit_op_costs(records: Sequence[KernelRecord], fixed_us: float) -> list[KernelRecord]:
    """Split each op call's work again among its kernels (in place), weighting by time beyond `fixed_us`:
    for a profile split before the card's fixed cost per kernel was known."""
    calls: dict[Hashable, list[KernelRecord]] = defaultdict(list)
    for r in records:
        if r.op and r.op_call_id is not None:
            calls[(r.op_call_id, r.op)].append(r)
    for group in calls.values():
        if len(group) > 1:
            flops, nbytes = sum(r.flops for r in group), sum(r.bytes for r in group)
            for r in group:
                r.flops, r.bytes = flops, nbytes
    return distribute_op_costs(records, lambda r: (r.op_call_id, r.op) if r.op and r.op_call_id is not None else id(r),
                               fixed_us=fixed_us)


# --------------------------------------------------------------------------- time


def exclusive_times(records: Sequence[KernelRecord]) -> list[float]:
    """Each kernel's share of the timeline: every interval split evenly among the kernels running in it."""
    events: list[tuple[float, int, int]] = []  # (time, 0 = end / 1 = start, index)
    for i, r in enumerate(records):
        if r.duration_us > 0:
            events += [(r.start_us, 1, i), (r.end_us, 0, i)]
    events.sort()
    share = [0.0] * len(records)
    active: set[int] = set()
    for j, (t, kind, i) in enumerate(events):
        if kind:
            active.add(i)
        else:
            active.discard(i)
        if j + 1 < len(events) and active:
            dt = events[j + 1][0] - t
            if dt > 0:
                for k in active:
                    share[k] += dt / len(active)
    return share


def _kernel_part(record: KernelRecord, timing: KernelTime | None, model: MachineModel,
                 shares: Mapping[int, Mapping[str, float]], terms: CardTerms) -> tuple[str, float, float]:
    """(waterfall part, µs of the kernel in the ideal, µs of its fixed cost). The ideal share is the work term
    of its bound (vector_math: at the matrix units' ceiling), the fixed cost comes next, both capped at the
    kernel's duration: a kernel faster than its bound (self_check) puts its whole time in the two and nothing
    in its part."""
    if record.kernel_class == KernelClass.LAYOUT:
        return Part.LAYOUT, 0.0, 0.0
    bound = timing.total_us if timing is not None else None  # kernel_bound's, from the timing at hand
    if bound is None:
        return Part.OTHER, 0.0, 0.0
    if record.kernel_class == KernelClass.VECTOR_MATH:
        bound = tensor_bound(record, model, shares, terms)[0] or bound
    duration = max(record.duration_us, 0.0)
    fixed = min(record.fixed_us if record.bound_us is not None else terms.fixed_us, bound)
    work = min(bound - fixed, duration)
    return _PART_OF_CLASS[record.kernel_class], work, min(fixed, duration - work)


@dataclass(frozen=True)
class KernelPart:
    """One kernel's exclusive time split as the waterfall splits it (µs of the step)."""

    part: str  # the waterfall part its time above the bound goes to
    ideal_us: float
    fixed_us: float
    over_us: float  # time in `part`
    timing: KernelTime | None  # the kernel-time model's price of it (None: no bound)


def kernel_parts(records: Sequence[KernelRecord], model: MachineModel, calls: Sequence[CallAccesses] = (),
                 shares: Mapping[int, Mapping[str, float]] | None = None,
                 terms: CardTerms | None = None, exclusive: Sequence[float] | None = None) -> list[KernelPart]:
    """Each record's share of the waterfall (:func:`waterfall` adds these up), parallel to `records`. `shares`,
    `terms` and `exclusive` are reuse_shares(calls), bound_terms(records) and exclusive_times(records) where
    the caller has them already."""
    shares = reuse_shares(calls, model) if shares is None else shares
    terms = bound_terms(records, model) if terms is None else terms
    out = []
    for record, share in zip(records, exclusive_times(records) if exclusive is None else exclusive):
        if record.duration_us <= 0:
            out.append(KernelPart(Part.OTHER, 0.0, 0.0, 0.0, None))
            continue
        scale = share / record.duration_us
        timing = kernel_timing(record, model, shares, terms)
        part, work, fixed = _kernel_part(record, timing, model, shares, terms)
        out.append(KernelPart(part, work * scale, fixed * scale, (record.duration_us - work - fixed) * scale, timing))
    return out


def waterfall(records: Sequence[KernelRecord], timeline: Timeline, model: MachineModel,
              calls: Sequence[CallAccesses] = ()) -> Waterfall:
    """From the sum of roofline bounds to the measured step.

    Each kernel's exclusive time is split into the work term of its bound (the ideal), its fixed
    cost (the fixed-cost part: what a kernel costs doing nothing) and the rest (its class's part);
    layout kernels put all their time in the layout part (avoidable work has no ideal) and
    kernels without a bound all of theirs in the no-bound part. The timeline's idle time follows
    by cause. ``unexplained = measured - ideal - sum(parts)`` is what neither names: zero when the
    kernels and the idle split fill the wall time. ``coverage = (measured - |unexplained| - other
    kernels) / measured``: the share of the step held against a ceiling or an idle cause.
    """
    parts = dict.fromkeys(WATERFALL_PARTS, 0.0)
    ideal = 0.0
    for p in kernel_parts(records, model, calls):  # a kernel of no duration has an empty part
        ideal += p.ideal_us
        parts[Part.FIXED] += p.fixed_us
        parts[p.part] += p.over_us
    parts[Part.IDLE_HOST] = timeline.idle.host_bound_us
    parts[Part.IDLE_LAUNCH] = timeline.idle.launch_gap_us
    parts[Part.IDLE_SYNC] = timeline.idle.sync_us
    measured = timeline.wall_us
    unexplained = measured - ideal - sum(parts.values())
    coverage = (measured - abs(unexplained) - parts[Part.OTHER]) / measured if measured > 0 else 0.0
    return Waterfall(ideal_us=ideal, parts=parts, measured_us=measured, unexplained_us=unexplained,
                     coverage=min(1.0, max(0.0, coverage)))


def self_check(records: Sequence[KernelRecord]) -> list[KernelRecord]:
    """Kernels measured faster than their bound by more than 5 %: their FLOP or byte count is
    wrong (or the ceiling is), since no kernel beats the roofline."""
    return [r for r in records if r.bound_us is not None and r.bound_us > SELF_CHECK_MARGIN * r.duration_us]


# --------------------------------------------------------------------------- A/B comparison


def category_times(records: Sequence[KernelRecord], timeline: Timeline) -> dict[str, float]:
    """Step time by kernel class (exclusive time) and idle cause; "unexplained" takes the rest,
    so the values add up to the wall time."""
    times = dict.fromkeys(tuple(KernelClass), 0.0)
    for record, share in zip(records, exclusive_times(records)):
        times[_category(record)] += share
    times[Part.IDLE_HOST] = timeline.idle.host_bound_us
    times[Part.IDLE_LAUNCH] = timeline.idle.launch_gap_us
    times[Part.IDLE_SYNC] = timeline.idle.sync_us
    times[Part.UNEXPLAINED] = timeline.wall_us - sum(times.values())
    return times


def _category(record: KernelRecord) -> str:
    return record.kernel_class if record.kernel_class in tuple(KernelClass) else KernelClass.OTHER


@dataclass
class KernelMatch:
    """Kernels of two runs of the same step paired by the work they do."""

    pairs: list[tuple[KernelRecord, KernelRecord]]  # (run A, run B)
    only_a: list[KernelRecord]
    only_b: list[KernelRecord]


def _match_key(record: KernelRecord) -> Hashable:
    # Kernels launched outside any op (NCCL, copies) have only their name to go by.
    return record.op or record.name, _freeze(record.input_shapes), record.phase


def match_kernels(records_a: Sequence[KernelRecord], records_b: Sequence[KernelRecord]) -> KernelMatch:
    """Pair kernels of two runs by (op, input shapes, phase) rather than by kernel name, which
    changes with the library's choice of algorithm. Within a key kernels pair in time order,
    first those of the same class, then the rest; the unpaired are work one run did and the
    other did not (a layout transform added, a kernel fused away)."""
    groups_a: dict[Hashable, list[KernelRecord]] = defaultdict(list)
    groups_b: dict[Hashable, list[KernelRecord]] = defaultdict(list)
    for r in sorted(records_a, key=lambda r: r.start_us):
        groups_a[_match_key(r)].append(r)
    for r in sorted(records_b, key=lambda r: r.start_us):
        groups_b[_match_key(r)].append(r)
    pairs: list[tuple[KernelRecord, KernelRecord]] = []
    only_a: list[KernelRecord] = []
    only_b: list[KernelRecord] = []
    for key in list(groups_a) + [k for k in groups_b if k not in groups_a]:
        left, right = list(groups_a.get(key, [])), list(groups_b.get(key, []))
        for cls in tuple(KernelClass):
            same_a = [r for r in left if r.kernel_class == cls]
            same_b = [r for r in right if r.kernel_class == cls]
            for a, b in zip(same_a, same_b):
                pairs.append((a, b))
                left.remove(a)
                right.remove(b)
        pairs += list(zip(left, right))
        only_a += left[len(right):]
        only_b += right[len(left):]
    pairs.sort(key=lambda p: p[1].start_us)
    return KernelMatch(pairs, only_a, only_b)


@dataclass
class CategoryDelta:
    """How much one category's time changed from run A to run B, and through which kernels."""

    category: str
    a_us: float
    b_us: float
    delta_us: float  # b - a
    matched_us: float  # from kernels both runs have (the same work ran faster or slower)
    unmatched_us: float  # from kernels only one run has (work added or removed)


def matched_deltas(records_a: Sequence[KernelRecord], records_b: Sequence[KernelRecord], per_a: float = 1.0,
                   per_b: float = 1.0) -> tuple[dict[str, float], dict[str, float]]:
    """Per category, B - A of the exclusive kernel time of matched kernels (the same work running
    faster or slower) and of unmatched ones (work only one run did); times divided by per_a/per_b."""
    share_a = {id(r): s / per_a for r, s in zip(records_a, exclusive_times(records_a))}
    share_b = {id(r): s / per_b for r, s in zip(records_b, exclusive_times(records_b))}
    match = match_kernels(records_a, records_b)
    matched: dict[str, float] = defaultdict(float)
    unmatched: dict[str, float] = defaultdict(float)
    for ra, rb in match.pairs:
        matched[_category(ra)] -= share_a[id(ra)]
        matched[_category(rb)] += share_b[id(rb)]
    for r in match.only_a:
        unmatched[_category(r)] -= share_a[id(r)]
    for r in match.only_b:
        unmatched[_category(r)] += share_b[id(r)]
    return matched, unmatched


def compare_categories(a: tuple[Sequence[KernelRecord], Timeline],
                       b: tuple[Sequence[KernelRecord], Timeline]) -> list[CategoryDelta]:
    """The difference in step time between two runs, (records, timeline) each, by category.

    The deltas add up to wall_b - wall_a. Kernel categories split theirs into matched
    kernels (:func:`match_kernels`: the same work, now faster or slower, or moved to
    another class) and unmatched ones; idle and unexplained time has no kernels to split.
    """
    (records_a, timeline_a), (records_b, timeline_b) = a, b
    times_a, times_b = category_times(records_a, timeline_a), category_times(records_b, timeline_b)
    matched, unmatched = matched_deltas(records_a, records_b)
    return [CategoryDelta(c, times_a[c], times_b[c], times_b[c] - times_a[c], matched[c], unmatched[c])
            for c in times_a]
