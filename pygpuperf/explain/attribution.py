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
from typing import Any, Callable, Hashable, Sequence

from pygpuperf.explain.model import (COMMUNICATION, VECTOR_MATH, KERNEL_CLASSES, LAYOUT, MEMCPY, MEMORY_BOUND, OTHER,
                                     TENSOR_GEMM, KernelRecord, Timeline, Waterfall)
from pygpuperf.core.precision import precision_of
from pygpuperf.core.results import Ceiling, MachineModel

from pygpuperf.explain.words import (IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC, PART_COMMUNICATION, PART_FALLBACK,
                                     PART_LAYOUT, PART_MEMCPY, PART_MEMORY, PART_OTHER, PART_TENSOR, UNEXPLAINED)

# Waterfall parts (ids; pygpuperf.explain.words has their words), in the order they stack on the ideal.
WATERFALL_PARTS = (PART_TENSOR, PART_MEMORY, PART_FALLBACK, PART_LAYOUT, PART_MEMCPY, PART_COMMUNICATION, PART_OTHER,
                   IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC)

_CACHE_LEVELS = ("l2", "l3")
# A kernel faster than its bound by more than this factor has a wrong FLOP or byte count.
SELF_CHECK_MARGIN = 1.05

_PART_OF_CLASS = {TENSOR_GEMM: PART_TENSOR, MEMORY_BOUND: PART_MEMORY, VECTOR_MATH: PART_FALLBACK,
                  MEMCPY: PART_MEMCPY, COMMUNICATION: PART_COMMUNICATION}
_MATH = (TENSOR_GEMM, VECTOR_MATH)
# Collective kernels (NCCL names, lower case, no underscores) -> MachineModel.communication keys.
_COLLECTIVES = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                ("broadcast", "broadcast"))


# --------------------------------------------------------------------------- bounds


def _precision(record: KernelRecord) -> str:
    """The record's precision, or the one its first floating-point input dtype holds."""
    if record.precision:
        return record.precision
    return next((p for d in record.dtypes if isinstance(d, str) and (p := precision_of(d))), "")


def _seconds_us(work: float, ceiling: Ceiling) -> float:
    return ceiling.seconds(work) * 1e6


def _link_key(name: str, model: MachineModel) -> str | None:
    """The link ceiling of a host copy ('Memcpy HtoD (Pinned -> Device)'); pinned stands in for an unmeasured
    pageable figure, since it is the faster of the two and the bound must stay a lower limit."""
    direction = "h2d" if "HtoD" in name else "d2h" if "DtoH" in name else None
    if direction is None:
        return None
    memory = "pageable" if "Pageable" in name else "pinned"
    for key in (f"{direction}.{memory}", f"{direction}.pinned"):
        if key in model.links:
            return key
    return None


def _collective_key(name: str) -> str | None:
    flat = name.lower().replace("_", "")
    return next((key for token, key in _COLLECTIVES if token in flat), None)


def _terms(flops: float, compute: tuple[str, Ceiling] | None,
           memory: tuple[float, str] | None) -> list[tuple[float, str]]:
    """The compute term (FLOPs at the ceiling) and the memory term (from :func:`memory_term` or a link)."""
    terms = []
    if flops > 0 and compute is not None:
        terms.append((_seconds_us(flops, compute[1]), f"compute:{compute[0]}"))
    if memory is not None:
        terms.append(memory)
    return terms


def memory_term(nbytes: float, model: MachineModel, cache_aware: bool = True) -> tuple[float, str] | None:
    """(µs, ceiling) to move `nbytes` through the memory system at its best.

    Cache-aware (the default, where the model knows its L2's size and a faster L2 ceiling):
    bytes up to the L2's capacity may be served at the L2 ceiling, the rest at main memory's,
    since a working set that fits can stay resident from the kernel that wrote it. The bound
    stays a lower limit whether or not the data was resident. Otherwise main memory alone.
    """
    dram = model.dram_key()
    if dram is None or nbytes <= 0:
        return None
    main = model.memory[dram]
    # The last-level cache with a known size and a ceiling above main memory's: L2 on GPUs, L3 on CPUs.
    caches = [(model.capacity_bytes(k), k) for k in _CACHE_LEVELS
              if model.capacity_bytes(k) and k in model.memory and model.memory[k].value > main.value]
    if cache_aware and caches:
        capacity, level = max(caches)
        cached = min(nbytes, capacity)
        us = _seconds_us(cached, model.memory[level]) + _seconds_us(nbytes - cached, main)
        return us, f"memory:{level}" if nbytes <= capacity else f"memory:{level}+{dram}"
    return _seconds_us(nbytes, main), f"memory:{dram}"


def kernel_terms(record: KernelRecord, model: MachineModel, cache_aware: bool = True) -> list[tuple[float, str]]:
    """The roofline terms of one kernel as (µs, "table:key"): what its FLOPs and its bytes take at the
    ceilings of its class and precision (see :func:`kernel_bound`); empty when it has no bound."""
    cls = record.kernel_class
    precision = _precision(record)
    memory = memory_term(record.bytes, model, cache_aware)
    if cls in _MATH:
        if record.flops <= 0:
            return []
        compute = (model.matrix_ceiling(precision) if cls == TENSOR_GEMM and precision
                   else model.vector_ceiling(precision) if cls == VECTOR_MATH else None)
        return _terms(record.flops, compute, memory) if compute is not None else []
    if cls in (MEMORY_BOUND, LAYOUT):
        return [] if memory is None else _terms(record.flops, model.vector_ceiling("fp32"), memory)
    if cls == MEMCPY:
        if record.bytes <= 0:
            return []
        link = _link_key(record.name, model)
        if link is not None:
            return [(_seconds_us(record.bytes / 2, model.links[link]), f"links:{link}")]
        return [] if memory is None else [memory]
    if cls == COMMUNICATION:
        key = _collective_key(record.name)
        if record.bytes <= 0 or key is None or key not in model.communication:
            return []
        return [(_seconds_us(record.bytes, model.communication[key]), f"communication:{key}")]
    return []


def kernel_bound(record: KernelRecord, model: MachineModel, cache_aware: bool = True) -> tuple[float | None, str]:
    """(roofline lower bound in µs, the ceiling that set it as "table:key") of one kernel.

    The ceilings by class: tensor_gemm ``tensor.<precision>`` (``library.<dtype>`` where no
    instruction-level figure was measured); vector_math ``cuda.<dtype>`` (fp16/bf16 as
    ``cuda.<dtype>x2``), falling back to ``cuda.fp32`` and ``library.fp32``;
    memory_bound and layout the memory system for bytes (:func:`memory_term`: the last-level
    cache for what fits in it, main memory for the rest) and ``cuda.fp32`` for FLOPs; memcpy_memset the
    same, or the link for a host copy, whose payload is half the copy's bytes (the copy
    counts it read and written); communication the collective's ``communication`` ceiling,
    with bytes as nccl-tests' bus bytes (:func:`pygpuperf.explain.costs.collective_cost`).
    `cache_aware` False holds every byte to main memory.

    No bound (None, ""): class "other", a kernel whose limiting work is unknown
    (no FLOPs for a math class, no bytes for the others), or a model without the ceiling.
    """
    terms = kernel_terms(record, model, cache_aware)
    return max(terms) if terms else (None, "")


def tensor_bound(record: KernelRecord, model: MachineModel) -> tuple[float | None, str]:
    """The bound a vector_math kernel would have on the tensor cores of its dtype (fp32 as tf32):
    what the waterfall's ideal holds it to. Its own bound where its dtype has no tensor-core ceiling."""
    if record.kernel_class != VECTOR_MATH or record.flops <= 0:
        return kernel_bound(record, model)
    compute = model.matrix_ceiling(_precision(record) or "fp32")
    if compute is None:
        return kernel_bound(record, model)
    return max(_terms(record.flops, compute, memory_term(record.bytes, model)))


def assign_bounds(records: Sequence[KernelRecord], model: MachineModel) -> list[KernelRecord]:
    """Set bound_us and ceiling of every record (in place) from :func:`kernel_bound`."""
    for record in records:
        record.bound_us, record.ceiling = kernel_bound(record, model)
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


def _split(records: Sequence[KernelRecord], total: float, attr: str) -> None:
    durations = [max(r.duration_us, 0.0) for r in records]
    whole = sum(durations)
    for r, d in zip(records, durations):
        setattr(r, attr, total * (d / whole if whole > 0 else 1 / len(records)))


def distribute_op_costs(records: Sequence[KernelRecord],
                        group_key: Callable[[KernelRecord], Hashable] | None = None) -> list[KernelRecord]:
    """Split an op's work among the kernels it launched, in proportion to their durations (in place).

    Each record arrives carrying its op's whole cost (every kernel of one call has the op's
    flops and bytes); call this once. Without per-kernel counters the duration is the only
    defensible weight. FLOPs go to the call's math kernels (tensor_gemm, vector_math) when it
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
        math_kernels = [r for r in group if r.kernel_class in _MATH] or group
        for r in group:
            r.flops = 0.0
        _split(math_kernels, flops, "flops")
        _split(group, nbytes, "bytes")
    return list(records)


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


def _kernel_part(record: KernelRecord, model: MachineModel) -> tuple[str, float]:
    """(waterfall part, µs of the kernel that count toward the ideal). The ideal share is the kernel's
    bound (vector_math: at the tensor-core ceiling), capped at its duration: a kernel faster than its
    bound (self_check) puts its whole time in the ideal and nothing in its part."""
    if record.kernel_class == LAYOUT:
        return PART_LAYOUT, 0.0
    bound, _ = kernel_bound(record, model)
    if bound is None:
        return PART_OTHER, 0.0
    if record.kernel_class == VECTOR_MATH:
        bound = tensor_bound(record, model)[0] or bound
    return _PART_OF_CLASS[record.kernel_class], min(bound, max(record.duration_us, 0.0))


def waterfall(records: Sequence[KernelRecord], timeline: Timeline, model: MachineModel) -> Waterfall:
    """From the sum of roofline bounds to the measured step.

    Each kernel's exclusive time is split into its bound (the ideal) and the rest (its
    class's part); layout kernels put all their time in the layout part (avoidable
    work has no ideal) and kernels without a bound all of theirs in the no-bound part. The
    timeline's idle time follows by cause. ``unexplained = measured - ideal - sum(parts)``
    is what neither names: zero when the kernels and the idle split fill the wall time.
    ``coverage = (measured - |unexplained| - other kernels) / measured``: the share of the
    step held against a ceiling or an idle cause.
    """
    parts = dict.fromkeys(WATERFALL_PARTS, 0.0)
    ideal = 0.0
    for record, share in zip(records, exclusive_times(records)):
        if record.duration_us <= 0:
            continue
        scale = share / record.duration_us
        part, bound = _kernel_part(record, model)
        ideal += bound * scale
        parts[part] += (record.duration_us - bound) * scale
    parts[IDLE_HOST] = timeline.idle.host_bound_us
    parts[IDLE_LAUNCH] = timeline.idle.launch_gap_us
    parts[IDLE_SYNC] = timeline.idle.sync_us
    measured = timeline.wall_us
    unexplained = measured - ideal - sum(parts.values())
    coverage = (measured - abs(unexplained) - parts[PART_OTHER]) / measured if measured > 0 else 0.0
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
    times = dict.fromkeys(KERNEL_CLASSES, 0.0)
    for record, share in zip(records, exclusive_times(records)):
        times[_category(record)] += share
    times[IDLE_HOST] = timeline.idle.host_bound_us
    times[IDLE_LAUNCH] = timeline.idle.launch_gap_us
    times[IDLE_SYNC] = timeline.idle.sync_us
    times[UNEXPLAINED] = timeline.wall_us - sum(times.values())
    return times


def _category(record: KernelRecord) -> str:
    return record.kernel_class if record.kernel_class in KERNEL_CLASSES else OTHER


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
        for cls in KERNEL_CLASSES:
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
