"""The kernel-time model: what one kernel costs on a machine, from the work it does.

    t = t_fixed + max(FLOPs / (P(precision) x wave efficiency), max over levels of traffic(level) / B(level))

Every term is a figure of a :class:`~pygpuperf.core.results.MachineModel`: measured by the
probes on a measured card, or a datasheet fact on a datasheet card (stated as such by
:class:`CardTerms`). Nothing in it is fitted to a workload.

* ``t_fixed``: a kernel's own duration when it does nothing (``latency.kernel.duration``, from
  the device's activity trace): launch ramp-up and tail drain; copies and fills the runtime issues
  (memcpy, memset) do not pay it. The gap between back-to-back
  kernels (``latency.kernel.back_to_back`` minus that) is idle device time, kept apart, and so is
  the smaller gap between the kernels of a replayed CUDA graph (``latency.kernel.graph`` minus it).
* ``P``: the precision's matrix or vector ceiling (:meth:`MachineModel.matrix_ceiling`), times the
  wave efficiency of a tiled GEMM (on either units): ``tiles / (waves x units)`` with ``waves = ceil(tiles / units)``
  on a card of ``units`` multiprocessors. A 133-tile GEMM on 132 units runs two waves at 50 %;
  fewer tiles than units count as full (libraries split K to fill the card).
* Memory, the hierarchical roofline: bytes served from each level come from :func:`reuse_traffic`,
  an LRU estimate over the step's own access order. A read of data an earlier kernel of the step
  touched is served by the smallest cache whose capacity holds everything touched since; every
  other read is main-memory traffic, and so is every write (write-back caches hand it on). The
  bound lets a kernel's writes stay in the nearest cache that holds all it touches (their write-back
  may come after it ends), so that it stays a lower limit. Traffic
  reaching a level is what it serves plus what passes through it to farther levels, and the
  slowest level sets the term. Without an access trace, bytes up to the last-level cache's size
  may be served by it (a lower limit whether or not the data was resident).

The bound is a lower limit on the time: the ceilings are the best measured figures, and the
fixed cost is that of an empty kernel.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pygpuperf.core.results import Ceiling, MachineModel

# What a kernel's time is bounded by (its class, as the explainer names kernel classes).
MATRIX = "matrix"  # GEMM/convolution on the matrix units
VECTOR = "vector"  # math on the vector units (CUDA cores, CPU SIMD)
MEMORY = "memory"  # bytes through the memory system; FLOPs at the fp32 vector ceiling
LINK = "link"  # a host copy over the host link
COLLECTIVE = "collective"  # bus bytes at the collective's bandwidth
KINDS = (MATRIX, VECTOR, MEMORY, LINK, COLLECTIVE)

# Cache levels a model may know a size and a bandwidth for, nearest first.
CACHE_LEVELS = ("l1", "l2", "l3")
# The machine-model fact keys the model reads (MachineModel.facts).
UNITS = "compute_units"
CLOCK = "clock_mhz"
# Latency keys of the fixed cost (MachineModel.latency, ns).
FIXED_KEY = "kernel.duration"
PERIOD_KEY = "kernel.back_to_back"
GRAPH_PERIOD_KEY = "kernel.graph"  # per kernel of a replayed CUDA graph


# --------------------------------------------------------------------------- reuse


@dataclass(frozen=True)
class Access:
    """One tensor an op call reads or writes: its memory (a storage's base address), the bytes touched,
    and whether it is resident (a parameter, buffer or gradient: its size does not follow the batch)."""

    storage: int
    nbytes: int
    write: bool
    resident: bool = False


@dataclass(frozen=True)
class Traffic:
    """Where one call's bytes go: reads by the level that serves them, writes by the level that takes them
    (cache keys and main memory)."""

    reads: Mapping[str, float]
    writes: Mapping[str, float]
    resident: float  # bytes of resident storages among reads and writes

    @property
    def written(self) -> float:
        return sum(self.writes.values())

    @property
    def total(self) -> float:
        return sum(self.reads.values()) + self.written

    def shares(self) -> dict[str, float]:
        """Share of the call's bytes served or taken by each level."""
        total = self.total
        if total <= 0:
            return {}
        levels = {*self.reads, *self.writes}
        shares = {level: (self.reads.get(level, 0.0) + self.writes.get(level, 0.0)) / total for level in levels}
        return {level: share for level, share in shares.items() if share > 0}


def reuse_traffic(calls: Sequence[Sequence[Access]], caches: Sequence[tuple[str, float]], main: str,
                  writes_stay_cached: bool = False) -> list[Traffic]:
    """Serve each call's reads from the nearest cache that still holds them, by an LRU stack over the calls'
    order: a storage touched before is resident in a cache of capacity C when the distinct bytes touched since
    its last touch, plus its own, fit in C. `caches` are (level, capacity in bytes); `main` names main memory.
    A call touching one storage twice reads it once. Writes go to main memory: a write-back cache hands
    every dirty line on sooner or later, and the data stays cached for later reads. With
    `writes_stay_cached` (a lower bound's view), a call's writes are taken by the nearest cache that holds
    everything the call touches: their write-back may fall after the call ends."""
    levels = sorted(((c, level) for level, c in caches if c > 0))
    largest = levels[-1][0] if levels else 0.0
    stack: OrderedDict[int, int] = OrderedDict()  # storage -> bytes, least recent first
    held = 0  # bytes on the stack
    out = []
    for accesses in calls:
        reads: dict[int, int] = {}
        writes: dict[int, int] = {}
        resident = 0.0
        for a in accesses:
            target = writes if a.write else reads
            target[a.storage] = max(target.get(a.storage, 0), a.nbytes)
            resident += a.nbytes if a.resident else 0
        served = dict.fromkeys([level for _, level in levels] + [main], 0.0)
        for storage, nbytes in reads.items():
            level = main
            if storage in stack:
                distance = nbytes
                for key in reversed(stack):
                    if key == storage:
                        break
                    distance += stack[key]
                    if distance > largest:
                        break
                level = next((name for capacity, name in levels if distance <= capacity), main)
            served[level] += nbytes
        touched = sum(reads.values()) + sum(writes.values())
        taken = dict.fromkeys(served, 0.0)
        absorbing = next((name for capacity, name in levels if touched <= capacity), main) if writes_stay_cached else main
        taken[absorbing] += float(sum(writes.values()))
        for storage, nbytes in (*reads.items(), *writes.items()):
            held -= stack.pop(storage, 0)
            stack[storage] = nbytes
            held += nbytes
        while held > 2 * largest and len(stack) > 1:  # what lies this deep is a miss in every cache
            held -= stack.popitem(last=False)[1]
        out.append(Traffic(served, taken, resident))
    return out


# --------------------------------------------------------------------------- the card


@dataclass(frozen=True)
class CardTerms:
    """The terms of the model a machine model gives, and where each came from."""

    fixed_us: float  # an empty kernel's own duration
    gap_us: float  # device idle between two back-to-back kernels
    units: int | None  # multiprocessors / compute units (for waves)
    caches: tuple[tuple[str, float], ...]  # (level, capacity bytes) with a bandwidth, nearest first
    notes: tuple[str, ...] = ()  # assumptions, for the output
    graph_gap_us: float = 0.0  # device idle between two kernels of a replayed graph (0: not measured)
    # t0 of the main-memory copy sweep (time = t0 + bytes / bandwidth): beyond the fixed cost, the ramp a
    # kernel spends before it streams, which does not grow with its work (0: not measured)
    stream_t0_us: float = 0.0


def card_terms(model: MachineModel, reference: MachineModel | None = None) -> CardTerms:
    """The model's terms; a datasheet card without a measured fixed cost takes the `reference` card's
    (the measured source), scaled by the clock ratio, and says so; one without a measured copy sweep takes
    the reference's t0 the same way."""
    notes = []
    fixed = _latency_us(model, FIXED_KEY)
    period = _latency_us(model, PERIOD_KEY)
    if fixed is None and reference is not None and _latency_us(reference, FIXED_KEY) is not None:
        scale = clock_ratio(reference, model)
        fixed = _latency_us(reference, FIXED_KEY) * scale
        ref_period = _latency_us(reference, PERIOD_KEY)
        period = ref_period * scale if ref_period is not None else None
        notes.append(f"fixed cost per kernel {fixed:.2f} us: the measured card's figure"
                     + (f" x its clock / this card's ({scale:.2f})" if scale != 1 else "") + " (assumed)")
    if fixed is None:
        fixed = 0.0
        notes.append("no fixed cost per kernel measured: kernels are bounded by their work alone")
    gap = max(period - fixed, 0.0) if period is not None else 0.0
    graph_period = _latency_us(model, GRAPH_PERIOD_KEY)
    graph_gap = max(graph_period - fixed, 0.0) if graph_period is not None else 0.0
    units = model.facts.get(UNITS)
    caches = tuple((level, model.capacity_bytes(level) or 0.0) for level in CACHE_LEVELS
                   if model.capacity_bytes(level))
    t0 = _copy_t0_us(model)
    if t0 is None and reference is not None and _copy_t0_us(reference) is not None:
        t0 = _copy_t0_us(reference) * clock_ratio(reference, model)
    return CardTerms(fixed, gap, int(units) if units else None, caches, tuple(notes), graph_gap, t0 or 0.0)


def _copy_t0_us(model: MachineModel) -> float | None:
    main = model.dram_key()
    fit = model.memory_fits.get(f"{main}.copy") if main else None
    return fit.latency_us if fit is not None and fit.latency_us > 0 else None


def _latency_us(model: MachineModel, key: str) -> float | None:
    c = model.latency.get(key)
    return c.value / 1e3 if c is not None and c.value > 0 else None


def clock_ratio(reference: MachineModel, model: MachineModel) -> float:
    """`reference`'s boost clock over `model`'s (1 where either is unknown)."""
    a, b = reference.facts.get(CLOCK), model.facts.get(CLOCK)
    return a / b if a and b else 1.0


def units_ratio(reference: MachineModel, model: MachineModel) -> float:
    """`reference`'s multiprocessors (compute units) over `model`'s (1 where either is unknown)."""
    a, b = reference.facts.get(UNITS), model.facts.get(UNITS)
    return a / b if a and b else 1.0


def wave_efficiency(tiles: int | None, units: int | None) -> float:
    """tiles / (waves x units): the share of the card's units a tiled kernel keeps busy over its waves.
    Fewer tiles than units count as one full wave: libraries split K (split-K, stream-K) to fill the
    card then, and the bound must stay a lower limit."""
    if not tiles or not units or tiles <= units:
        return 1.0
    waves = math.ceil(tiles / units)
    return tiles / (waves * units)


# --------------------------------------------------------------------------- one kernel


@dataclass(frozen=True)
class KernelWork:
    """What a kernel does, in the terms the model prices."""

    kind: str  # one of KINDS
    precision: str = ""  # "fp16.acc32", "fp32", ...
    flops: float = 0.0
    bytes: float = 0.0  # minimum traffic, reads and writes
    shares: Mapping[str, float] | None = None  # share of `bytes` served by each level (reuse_traffic); None: unknown
    tiles: tuple[int, ...] = ()  # output tiles of a tiled GEMM, one count per tile orientation (the fuller wins)
    channel: str = ""  # the links / communication key of a copy or collective
    fixed: bool = True  # pays a kernel's fixed cost (copies and fills the runtime issues itself do not)


@dataclass(frozen=True)
class KernelTime:
    """One kernel priced on one machine: t = fixed + max(compute, memory)."""

    fixed_us: float
    compute_us: float
    memory_us: float
    wave_efficiency: float = 1.0
    compute_ceiling: str = ""  # "compute:tensor.fp16.acc32"
    memory_ceiling: str = ""  # "memory:hbm", "links:h2d.pinned"
    traffic: Mapping[str, float] = field(default_factory=dict)  # bytes reaching each level

    @property
    def work_us(self) -> float:
        return max(self.compute_us, self.memory_us)

    @property
    def total_us(self) -> float:
        return self.fixed_us + self.work_us

    def residual(self, measured_us: float) -> float:
        """What a kernel measured at `measured_us` spends per µs of this work term beyond its fixed cost: the
        share of the model a re-pricing carries over. Needs work_us > 0."""
        return max(measured_us - self.fixed_us, 0.0) / self.work_us

    @property
    def ceiling(self) -> str:
        """The ceiling that sets the work term, or "fixed" when the kernel does no priced work."""
        if self.work_us <= 0:
            return "fixed" if self.fixed_us > 0 else ""
        return self.compute_ceiling if self.compute_us >= self.memory_us else self.memory_ceiling


def _seconds_us(work: float, ceiling: Ceiling) -> float:
    return ceiling.seconds(work) * 1e6


def memory_time(work: KernelWork, model: MachineModel) -> tuple[float, str, dict[str, float]]:
    """(µs, ceiling, bytes reaching each level) of a kernel's bytes through the memory hierarchy."""
    main = model.dram_key()
    if main is None or work.bytes <= 0:
        return 0.0, "", {}
    caches = [level for level in CACHE_LEVELS if level in model.memory and model.capacity_bytes(level)]
    if work.shares is not None:
        served = {level: work.bytes * share for level, share in work.shares.items()}
        served[main] = work.bytes - sum(b for level, b in served.items() if level != main)
    else:
        # No trace: up to the last-level cache's size may be served by it.
        last = max(caches, key=lambda level: model.capacity_bytes(level) or 0, default=None)
        cached = min(work.bytes, model.capacity_bytes(last) or 0) if last else 0.0
        served = {main: work.bytes - cached, **({last: cached} if last else {})}
    order = [level for level in CACHE_LEVELS if level in served or level in caches] + [main]
    traffic: dict[str, float] = {}
    farther = 0.0
    for level in reversed(order):  # a level carries what it serves and what passes through it
        farther += served.get(level, 0.0)
        traffic[level] = farther
    terms = [(_seconds_us(traffic[level], model.memory[level]), f"memory:{level}")
             for level in order if level in model.memory and traffic.get(level, 0) > 0]
    if not terms:
        return 0.0, "", traffic
    us, ceiling = max(terms)
    return us, ceiling, traffic


def kernel_time(work: KernelWork, model: MachineModel, terms: CardTerms | None = None) -> KernelTime:
    """The kernel priced on `model` (:data:`KINDS` say by which ceilings); zero terms where the model has
    no ceiling for the work, so the result stays a lower limit."""
    terms = terms or card_terms(model)
    fixed = terms.fixed_us if work.fixed else 0.0
    if work.kind == LINK:
        link = model.links.get(work.channel)
        us = _seconds_us(work.bytes / 2, link) if link is not None and work.bytes > 0 else 0.0  # read + written
        return KernelTime(fixed, 0.0, us, memory_ceiling=f"links:{work.channel}" if us else "")
    if work.kind == COLLECTIVE:
        bus = model.communication.get(work.channel)
        us = _seconds_us(work.bytes, bus) if bus is not None and work.bytes > 0 else 0.0
        return KernelTime(fixed, 0.0, us, memory_ceiling=f"communication:{work.channel}" if us else "")
    memory_us, memory_ceiling, traffic = memory_time(work, model)
    compute_us, compute_ceiling, efficiency = 0.0, "", 1.0
    if work.flops > 0:
        ceiling = (model.matrix_ceiling(work.precision) if work.kind == MATRIX
                   else model.vector_ceiling(work.precision or "fp32") if work.kind == VECTOR
                   else model.vector_ceiling("fp32"))
        if ceiling is not None:
            efficiency = max((wave_efficiency(t, terms.units) for t in work.tiles), default=1.0)
            compute_us = _seconds_us(work.flops, ceiling[1]) / efficiency
            compute_ceiling = f"compute:{ceiling[0]}"
    return KernelTime(fixed, compute_us, memory_us, efficiency, compute_ceiling, memory_ceiling, traffic)
