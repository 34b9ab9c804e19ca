"""Every price of a kernel, in one place: its bound on the card it ran on, its time after a fix, at another
batch, and on another card.

All go through the kernel-time model (:mod:`pygpuperf.analyze.kernel_time`): t = fixed cost + max(FLOPs /
(rate x wave efficiency), each level's traffic / its bandwidth). A kernel's bound is that time on the measured
machine model (:func:`kernel_timing`, :class:`Pricing`.bound). A changed kernel (a fix) keeps its measured
residual over the model (:meth:`Pricing.reprice`); a kernel on another card keeps its residual by one of
:data:`RESIDUALS` (:func:`price_on_target`); a kernel at another batch is resized by the one batch model below.

The batch model. One model for --try-fixes' batch fix and for predict's batch predictions.

The forward and backward kernels' FLOPs scale with the batch, and their bytes do except those of the
model's parameters, buffers and gradients (the traced accesses say which); their operands' batch dimension
scales too, so their output tiles are those of the op at the new batch (:func:`tiles.at_batch`).
Optimizer and other kernels stay as they are.

A resized kernel's time is its fixed cost, its ramp, and its new work times the residual it had
(measured beyond fixed cost and ramp, over its work). The ramp is what a kernel spends beyond its fixed
cost before it streams: the card's main-memory copy sweep fits time = t0 + bytes / bandwidth, and
t0 - fixed (3.3 µs on the H200) does not grow with the bytes; the library's small GEMMs spend about as much
beyond their fixed cost and waves (4.0-4.3 µs for 512³ and 1024³ in bf16 and fp16), so a compute kernel
keeps it, up to its excess over its bound. A memory-bound kernel's ramp overlaps its streaming: it takes
the longer of the two (in fp32 ResNet-50 profiles on an H200 at batch 256 and 512, 125 ReLU, add and
ReLU-backward kernels of 17.5-566 µs took twice their time at the new batch, within -4.1 to +3.5 µs from p10
to p90 and 0.6 µs more at the median: no constant beyond the fixed cost), so a
streaming kernel doubles with its bytes and one shrunk below its ramp keeps the ramp as its floor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pygpuperf.analyze.kernel_time import (COLLECTIVE, LINK, MATRIX, MEMORY, VECTOR, CardTerms, KernelTime,
                                            KernelWork, card_terms, clock_ratio, kernel_time, reuse_traffic,
                                            units_ratio)
from pygpuperf.core.precision import accumulate_of, bytes_of, dtype_of, fallbacks, precision_of
from pygpuperf.core.results import MachineModel
from pygpuperf.core.vocabulary import KernelClass, Phase
from pygpuperf.explain import tiles
from pygpuperf.explain.model import CallAccesses, KernelRecord

MATH_CLASSES = (KernelClass.TENSOR_GEMM, KernelClass.VECTOR_MATH)
# Collective kernels (NCCL names, lower case, no underscores) -> MachineModel.communication keys.
_COLLECTIVES = (("allreduce", "all_reduce"), ("allgather", "all_gather"), ("reducescatter", "reduce_scatter"),
                ("broadcast", "broadcast"))


# --------------------------------------------------------------------------- bounds


def held_precision(record: KernelRecord) -> str:
    """The record's precision, or the one its first floating-point input dtype holds."""
    if record.precision:
        return record.precision
    return next((p for d in record.dtypes if isinstance(d, str) and (p := precision_of(d))), "")


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


def kernel_work(record: KernelRecord, model: MachineModel, shares: Mapping[str, float] | None = None
                ) -> KernelWork | None:
    """What the kernel-time model prices of a record: its class as a kind, its work, where its bytes come
    from (`shares`, from :func:`reuse_shares`) and its output tiles; None when its limiting work is unknown
    (no FLOPs for a math class, no bytes for the others, class "other")."""
    cls = record.kernel_class
    precision = held_precision(record)
    if cls in MATH_CLASSES:
        if record.flops <= 0:
            return None
        kind = MATRIX if cls == KernelClass.TENSOR_GEMM else VECTOR
        return KernelWork(kind, precision, record.flops, record.bytes, shares, tiles=tiles.output_tiles(record))
    if cls in (KernelClass.MEMORY_BOUND, KernelClass.LAYOUT):
        return KernelWork(MEMORY, "fp32", record.flops, record.bytes, shares) if record.bytes > 0 else None
    if cls == KernelClass.MEMCPY:
        if record.bytes <= 0:
            return None
        link = _link_key(record.name, model)
        if link:
            return KernelWork(LINK, bytes=record.bytes, channel=link, fixed=False)
        return KernelWork(MEMORY, "fp32", 0.0, record.bytes, shares, fixed=False)
    if cls == KernelClass.COMMUNICATION:
        key = _collective_key(record.name)
        return KernelWork(COLLECTIVE, bytes=record.bytes, channel=key) if key and record.bytes > 0 else None
    return None


def reuse_shares(calls: Sequence[CallAccesses], model: MachineModel, bound: bool = True) -> dict[int, dict[str, float]]:
    """Each traced call's share of bytes by the level that serves them (kernel_time.reuse_traffic over the
    calls in issue order, against the model's caches that have a size and a bandwidth). `bound` lets a
    call's writes stay in a cache that holds all it touches (a lower limit); False sends every write to
    main memory, where it ends up: the traffic a time prediction and the hardware counters see."""
    main = model.dram_key()
    if not calls or main is None:
        return {}
    caches = [(level, capacity) for level, capacity in card_terms(model).caches if level in model.memory]
    traffic = reuse_traffic([c.accesses for c in calls], caches, main, writes_stay_cached=bound)
    return {c.index: t.shares() for c, t in zip(calls, traffic)}


def kernel_timing(record: KernelRecord, model: MachineModel, shares: Mapping[int, Mapping[str, float]] | None = None,
                  terms: CardTerms | None = None) -> KernelTime | None:
    """The record priced by the kernel-time model on `model` (None: nothing to price, see :func:`kernel_work`)."""
    share = shares.get(record.call) if shares is not None and record.call is not None else None
    work = kernel_work(record, model, share)
    if work is None:
        return None
    timing = kernel_time(work, model, terms)
    return timing if timing.work_us > 0 else None


def kernel_bound(record: KernelRecord, model: MachineModel, shares: Mapping[int, Mapping[str, float]] | None = None,
                 terms: CardTerms | None = None) -> tuple[float | None, str]:
    """(lower bound in µs, the ceiling that set its work term as "table:key") of one kernel: the kernel-time
    model's fixed cost plus the larger of its compute and memory terms (:mod:`pygpuperf.analyze.kernel_time`).

    The ceilings by class: tensor_gemm the matrix ceiling of its precision with the wave efficiency of its
    tiles; vector_math the vector ceiling of its dtype (with its tiles' wave efficiency where it is a tiled
    GEMM); memory_bound and layout the memory hierarchy for bytes
    (each level's traffic from the traced reuse, `shares`; without them, the last-level cache for what fits
    it) and the fp32 vector ceiling for FLOPs; memcpy_memset the same, or the link for a host copy, whose
    payload is half the copy's bytes (the copy counts it read and written); communication the collective's
    ceiling, with bytes as nccl-tests' bus bytes (:func:`pygpuperf.explain.costs.collective_cost`).

    No bound (None, ""): class "other", a kernel whose limiting work is unknown, or a model without the ceiling.
    """
    timing = kernel_timing(record, model, shares, terms)
    return (timing.total_us, timing.ceiling) if timing is not None else (None, "")


def tensor_bound(record: KernelRecord, model: MachineModel, shares: Mapping[int, Mapping[str, float]] | None = None,
                 terms: CardTerms | None = None) -> tuple[float | None, str]:
    """The bound a vector_math kernel would have on the matrix units of its dtype (fp32 as tf32): what the
    waterfall's ideal holds it to. Its own bound where its dtype has no matrix ceiling."""
    if record.kernel_class != KernelClass.VECTOR_MATH or record.flops <= 0 or model.matrix_ceiling(held_precision(record) or "fp32") is None:
        return kernel_bound(record, model, shares, terms)
    as_matrix = dataclasses.replace(record, kernel_class=KernelClass.TENSOR_GEMM, precision=held_precision(record) or "fp32")
    return kernel_bound(as_matrix, model, shares, terms)


def bound_terms(records: Sequence[KernelRecord], model: MachineModel) -> CardTerms:
    """The model's terms for lower bounds on this step: the fixed cost per kernel no higher than the shortest
    kernel the step ran (the probe's figure is a typical tiny kernel; some run shorter)."""
    terms = card_terms(model)
    shortest = min((r.duration_us for r in records if r.kernel_class != KernelClass.MEMCPY and r.duration_us > 0), default=None)
    if shortest is not None and shortest < terms.fixed_us:
        return dataclasses.replace(terms, fixed_us=shortest)
    return terms


@dataclass(frozen=True)
class Pricing:
    """A step's kernels priced on one machine model: its kernel-time terms and each traced call's reuse shares
    (:func:`reuse_shares`). Two kinds: a lower bound (:meth:`bound`: writes may stay in a cache that holds
    what a call touches, the fixed cost no higher than the step's shortest kernel), what a step's kernels are
    explained against; and a time prediction (:meth:`predicting`: every write reaches main memory, the card's
    own terms), what predict prices a step on another card with."""

    model: MachineModel
    terms: CardTerms
    shares: dict[int, dict[str, float]]

    @staticmethod
    def bound(records: Sequence[KernelRecord], calls: Sequence[CallAccesses], model: MachineModel) -> "Pricing":
        return Pricing(model, bound_terms(records, model), reuse_shares(calls, model))

    @staticmethod
    def predicting(model: MachineModel, calls: Sequence[CallAccesses], reference: MachineModel | None = None
                   ) -> "Pricing":
        return Pricing(model, card_terms(model, reference), reuse_shares(calls, model, bound=False))

    def timing(self, record: KernelRecord) -> KernelTime | None:
        return kernel_timing(record, self.model, self.shares, self.terms)

    def reprice(self, record: KernelRecord, changed: KernelRecord, cap: bool = True, resized: bool = False) -> float:
        """The record's duration once it runs as `changed`: the model's new time times its measured residual.
        `resized` (the same kernel on more or less data): the kernel keeps its ramp and its speed
        (:func:`resized_us`); otherwise a changed kernel is never priced below its new bound."""
        before, after = self.timing(record), self.timing(changed)
        if before is None or after is None or before.work_us <= 0 or record.duration_us <= 0:
            return record.duration_us * (changed.bytes / record.bytes if not cap and record.bytes > 0 else 1.0)
        if resized:
            new = resized_us(record, before, after, self.terms.stream_t0_us)
        else:
            residual = max(record.duration_us - before.fixed_us, 0.0) / before.work_us
            new = after.fixed_us + after.work_us * max(residual, 1.0)
        return min(record.duration_us, new) if cap else new



GROWS_WITH_BATCH = (Phase.FORWARD, Phase.BACKWARD)


def resident_shares(calls: Sequence[CallAccesses]) -> dict[int, float]:
    """Each traced call's share of bytes in resident storages (parameters, buffers, gradients)."""
    out = {}
    for c in calls:
        total = sum(a.nbytes for a in c.accesses)
        out[c.index] = sum(a.nbytes for a in c.accesses if a.resident) / total if total else 0.0
    return out


@dataclass(frozen=True)
class AtBatch:
    """A step's kernels at `scale` times the batch: each traced call's resident share (from
    :func:`resident_shares`) and the step's weight shapes (:func:`tiles.weight_shapes`)."""

    scale: float
    resident: Mapping[int, float]
    weights: set[tuple[int, int]]

    @staticmethod
    def of(records: Sequence[KernelRecord], calls: Sequence[CallAccesses], scale: float) -> "AtBatch":
        return AtBatch(scale, resident_shares(calls), tiles.weight_shapes(records))

    def kernel(self, record: KernelRecord) -> KernelRecord:
        """The record's work at the new batch (forward and backward kernels; others unchanged)."""
        scale = self.scale
        if scale == 1 or record.phase not in GROWS_WITH_BATCH:
            return record
        fixed_share = self.resident.get(record.call, 0.0) if record.call is not None else 0.0
        return dataclasses.replace(tiles.at_batch(record, scale, self.weights), flops=record.flops * scale,
                                   bytes=record.bytes * (fixed_share + (1 - fixed_share) * scale))


def kept_ramp(record: KernelRecord, before: KernelTime, t0_us: float) -> float:
    """µs of the record's time that is its ramp (the copy sweep's t0, CardTerms.stream_t0_us, beyond its
    fixed cost, up to its excess over its bound)."""
    excess = record.duration_us - before.total_us
    return min(max(t0_us - before.fixed_us, 0.0), max(excess, 0.0))


def resized_us(record: KernelRecord, before: KernelTime, after: KernelTime, t0_us: float) -> float:
    """The record's duration on its resized work (`after`, priced as `before` was): fixed cost, the ramp it
    kept, and the new work at the residual it had beyond both; for a
    memory-bound kernel, fixed cost and the longer of its ramp and its new work at the residual it had beyond
    its fixed cost. A kernel faster than its bound (miscounted work: an FFT convolution) keeps its speed."""
    if record.kernel_class == KernelClass.MEMORY_BOUND:  # its ramp overlaps its streaming: the longer of the two
        ramp = max(t0_us - before.fixed_us, 0.0)
        streaming = max(record.duration_us - before.fixed_us, 0.0) / before.work_us
        return after.fixed_us + max(ramp, after.work_us * streaming)
    ramp = kept_ramp(record, before, t0_us)
    residual = max(record.duration_us - before.fixed_us - ramp, 0.0) / before.work_us
    return after.fixed_us + ramp + after.work_us * residual


# --------------------------------------------------------------------------- on another card

def runs_as(precision: str, target: MachineModel) -> tuple[str, str | None]:
    """(precision the target runs a kernel in, or the same one; a sentence when it had to change),
    down the precision table's fallbacks (pygpuperf.core.precision): bf16 on a card without bf16
    (V100, Turing) runs as fp16, TF32 before Ampere as plain fp32 on the vector units, fp8 and int8
    where absent as fp16, any of them as fp32 when the card has no fp16 figure at all."""
    dtype = dtype_of(precision) if precision else ""
    if target.supports(dtype):
        return precision, None
    for substitute in fallbacks(dtype):
        if target.supports(substitute):
            new = substitute if substitute == "fp32" or "." not in precision else f"{substitute}.{accumulate_of(precision)}"
            return new, f"{dtype} is not supported: runs as {substitute}"
    return precision, None


def on_target(record: KernelRecord, target: MachineModel) -> tuple[KernelRecord, str | None]:
    """The record as the target runs it: in a substitute dtype (bytes re-counted) where it lacks the original."""
    precision = held_precision(record)
    new_precision, note = runs_as(precision, target)
    if new_precision == precision:
        return record, None
    cls = record.kernel_class
    if cls == KernelClass.TENSOR_GEMM and target.matrix_ceiling(new_precision) is None:
        # No tensor-core figure for what it runs as (fp32 before Ampere): the GEMM lands on the vector units.
        cls = KernelClass.VECTOR_MATH
        note = f"{note} on the vector units"
    return dataclasses.replace(record, precision=new_precision, kernel_class=cls,
                               bytes=record.bytes * bytes_of(new_precision) / bytes_of(precision)), note


@dataclass
class KernelPrice:
    time_us: float
    carried_us: float  # the part the source's residual carries beyond the model's own terms
    note: str | None


# How a kernel's time beyond the model on the source reaches the target: "sm", as time, times the source's
# multiprocessors x clock over the target's (what it spends off the roof, the multiprocessors spend); or
# "proportional", as the same fraction of its bound. The first is predict's default: benchmarks/validate_predictions.py.
RESIDUALS = ("sm", "proportional")


def price_on_target(record: KernelRecord, source: Pricing, target: Pricing, batch: AtBatch,
                    residual_mode: str = RESIDUALS[0]) -> KernelPrice:
    """The kernel's time on the target at `batch.scale` times the batch: first resized on the card it was
    measured on by the one batch model (:func:`resized_us`), then moved to the target by the residual rule."""
    before = source.timing(record)
    if before is None or record.duration_us <= 0:
        grows = record.phase in GROWS_WITH_BATCH
        return KernelPrice(record.duration_us * (batch.scale if grows else 1.0), 0.0,
                           "kernels with no bound keep their time")
    resized = batch.kernel(record)
    if resized is not record and (at_source := source.timing(resized)) is not None:
        record = dataclasses.replace(resized, duration_us=resized_us(record, before, at_source,
                                                                      source.terms.stream_t0_us))
        before = at_source
    moved, note = on_target(record, target.model)
    after = target.timing(moved)
    if after is None:
        return KernelPrice(record.duration_us, 0.0,
                           f"{record.kernel_class} kernels the target model has no ceiling for keep their time")
    if residual_mode == "sm":
        excess = max(record.duration_us - before.fixed_us - before.work_us, 0.0)
        excess *= clock_ratio(source.model, target.model) * units_ratio(source.model, target.model)
        return KernelPrice(after.fixed_us + after.work_us + excess, excess, note)
    residual = before.residual(record.duration_us)
    time = after.fixed_us + after.work_us * residual
    return KernelPrice(time, after.work_us * max(residual - 1.0, 0.0), note)
