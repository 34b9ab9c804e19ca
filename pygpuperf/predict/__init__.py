"""Predict a profiled step's speed on another GPU, kernel by kernel, and say why.

Every kernel of an explained step (:mod:`pygpuperf.explain`) is re-priced on the target
machine model. The one assumption everything rests on: a kernel reaches the same
fraction of its roofline bound on the target as it did on the source
(efficiency = bound on source / measured time, carried over). So

    target time = measured time x bound on target / bound on source

where each bound is max(FLOPs / compute ceiling, bytes / memory ceiling) at the ceilings
that match the kernel's class and exact precision (:func:`pygpuperf.explain.attribution.kernel_bound`):
a compute-bound GEMM scales with the target's tensor-core figure of its dtype and
accumulate type (fp16 with fp32 accumulate on a GeForce card is its half-rate figure),
a memory-bound kernel with DRAM bandwidth, CUDA-core math with cuda.fp32, a host copy
with the link. Kernels without a bound keep their time; idle time (host-bound, launch
gaps, synchronization) is held fixed, since the host and the software stack do not change.
Bounds here hold every byte to main memory; a memory-bound kernel whose bytes fit the source's
L2 but not the target's is priced at the source's DRAM efficiency instead of its own (it was
L2-assisted). A step that does not fit the target's memory is priced at the largest batch
that does, and a dtype the target lacks runs as a substitute (bf16 as fp16 on a V100).

Usage:
    python -m pygpuperf.predict --profile explain.json --source-model results.json \\
        --target datasheet:a100-sxm4-80gb --target datasheet:rtx3090 --price a100-sxm4-80gb=1.8
    python -m pygpuperf.predict --profile explain.json --source-model results.json \\
        --validate benchmarks/prediction_validation.json
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pygpuperf.analyze import machine_model
from pygpuperf.analyze.machine_model import DATASHEET_PREFIX, LoadedModel, load_model
from pygpuperf.explain import attribution, timeline
from pygpuperf.explain.attribution import IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC, UNEXPLAINED
from pygpuperf.explain.model import Explanation, fitting_batch
from pygpuperf.explain.model import (VECTOR_MATH, KERNEL_CLASSES, LAYOUT, MEMCPY, MEMORY_BOUND, OTHER, TENSOR_GEMM,
                                     KernelRecord)
from pygpuperf.core.precision import bytes_of, dtype_of, fallbacks
from pygpuperf.core.results import MachineModel

DEFAULT_SAMPLES_PER_STEP = 256


@dataclass
class CategoryChange:
    """One category of the step, on the source and predicted on the target (microseconds)."""

    category: str
    source_us: float
    target_us: float

    @property
    def delta_us(self) -> float:
        return self.target_us - self.source_us


@dataclass
class Prediction:
    source: str
    target: str
    source_step_us: float  # the source step the prediction starts from (profiler overhead removed when known)
    step_us: float  # predicted step on the target
    samples_per_step: int  # on the target: smaller than the source's when the step does not fit there
    waterfall: list[CategoryChange]  # per category; target values add up to step_us
    notes: list[str] = field(default_factory=list)  # substitutions, capacity, L2, kernels held fixed
    confidence: str = ""  # the assumption that carries most of the predicted time
    source_samples_per_step: int | None = None  # the profiled batch (None: same as samples_per_step)

    @property
    def throughput(self) -> float:
        """Samples per second on the target."""
        return self.samples_per_step / (self.step_us * 1e-6) if self.step_us > 0 else math.inf

    @property
    def source_throughput(self) -> float:
        return (self.source_samples_per_step or self.samples_per_step) / (self.source_step_us * 1e-6)

    @property
    def ratio_to_source(self) -> float:
        """Target throughput / source throughput: above 1 the target is faster."""
        return self.throughput / self.source_throughput

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "source_step_ms": self.source_step_us / 1e3,
                "step_ms": self.step_us / 1e3, "samples_per_step": self.samples_per_step,
                "source_samples_per_step": self.source_samples_per_step or self.samples_per_step,
                "throughput_per_s": self.throughput, "source_throughput_per_s": self.source_throughput,
                "ratio_to_source": self.ratio_to_source,
                "waterfall": [{"category": c.category, "source_ms": c.source_us / 1e3, "target_ms": c.target_us / 1e3,
                               "delta_ms": c.delta_us / 1e3} for c in self.waterfall],
                "notes": self.notes, "confidence": self.confidence}


# --------------------------------------------------------------------------- per kernel

_MEMORY_CLASSES = (MEMORY_BOUND, LAYOUT, MEMCPY)
NOTE_L2_SPILL = ("kernel(s) fit the source's L2 but not the target's: priced at the source's DRAM efficiency "
                 "instead of their L2-assisted one")


def priced_time_us(record: KernelRecord, model: MachineModel) -> float | None:
    """The kernel's roofline bound on `model` with every byte from main memory: the time its
    efficiency is carried by (the L2 is handled apart, see :class:`_Pricing`)."""
    bound, _ = attribution.kernel_bound(record, model, cache_aware=False)
    return bound


def dram_efficiency(records: Sequence[KernelRecord], model: MachineModel) -> float | None:
    """Priced time over measured time of the memory-bound kernels too big for `model`'s L2 (they stream
    from DRAM), time-weighted and at most 1; None without such kernels or an L2 size."""
    capacity = model.capacity_bytes("l2")
    if not capacity:
        return None
    priced = measured = 0.0
    for r in records:
        if r.kernel_class == MEMORY_BOUND and r.bytes > capacity and r.duration_us > 0:
            t = priced_time_us(r, model)
            if t:
                priced += t
                measured += r.duration_us
    return min(priced / measured, 1.0) if measured > 0 else None


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
            accumulate = precision.split(".", 1)[1] if "." in precision else ""
            new = substitute if substitute == "fp32" or not accumulate else f"{substitute}.{accumulate}"
            return new, f"{dtype} is not supported: runs as {substitute}"
    return precision, None


def _on_target(record: KernelRecord, target: MachineModel) -> tuple[KernelRecord, str | None]:
    """The record as the target runs it: in a substitute dtype (bytes re-counted) where it lacks the original."""
    precision = attribution._precision(record)
    new_precision, note = runs_as(precision, target)
    if new_precision == precision:
        return record, None
    cls = record.kernel_class
    if cls == TENSOR_GEMM and target.matrix_ceiling(new_precision) is None:
        # No tensor-core figure for what it runs as (fp32 before Ampere): the GEMM lands on the vector units.
        cls = VECTOR_MATH
        note = f"{note} on the vector units"
    return dataclasses.replace(record, precision=new_precision, kernel_class=cls,
                               bytes=record.bytes * bytes_of(new_precision) / bytes_of(precision)), note


@dataclass
class _Pricing:
    """What re-pricing needs besides the two models: the source's DRAM efficiency and both L2 sizes."""

    source: MachineModel
    target: MachineModel
    dram_efficiency: float | None

    def fits_source_l2_only(self, record: KernelRecord) -> bool:
        source_l2, target_l2 = self.source.capacity_bytes("l2"), self.target.capacity_bytes("l2")
        return bool(source_l2 and target_l2 and record.kernel_class in _MEMORY_CLASSES
                    and target_l2 < record.bytes <= source_l2)


def _repriced(record: KernelRecord, pricing: _Pricing) -> tuple[float, str | None]:
    """(factor on the kernel's measured time, a note when the time was held, the dtype changed or L2 spilled)."""
    source_time = priced_time_us(record, pricing.source)
    if not source_time or source_time <= 0:
        return 1.0, "kernels with no bound keep their time"
    on_target, note = _on_target(record, pricing.target)
    target_time = priced_time_us(on_target, pricing.target)
    if target_time is None or target_time <= 0:
        return 1.0, f"{record.kernel_class} kernels the target model has no ceiling for keep their time"
    efficiency = source_time / record.duration_us if record.duration_us > 0 else 0.0
    if pricing.dram_efficiency and pricing.fits_source_l2_only(record) and efficiency > pricing.dram_efficiency:
        return target_time / pricing.dram_efficiency / record.duration_us, NOTE_L2_SPILL
    return target_time / source_time, note


# --------------------------------------------------------------------------- the step


def _confidence(waterfall: Sequence[CategoryChange], source: MachineModel, target: MachineModel,
                substituted: bool) -> str:
    """The assumption that carries the largest share of the predicted step, in one sentence."""
    by = {c.category: c.target_us for c in waterfall}
    total = sum(by.values()) or 1.0
    shares = {
        "compute": by.get(TENSOR_GEMM, 0.0) + by.get(VECTOR_MATH, 0.0),
        "memory": sum(by.get(c, 0.0) for c in KERNEL_CLASSES if c not in (TENSOR_GEMM, VECTOR_MATH, OTHER)),
        "fixed": sum(by.get(c, 0.0) for c in (IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC, UNEXPLAINED, OTHER)),
    }
    dominant = max(shares, key=shares.get)
    share = 100 * shares[dominant] / total
    text = {
        "compute": "math kernels reach the same fraction of the target's tensor-core/CUDA-core ceiling as on the "
                   "source (cuDNN may pick other algorithms there)",
        "memory": "memory-bound kernels reach the same fraction of the target's DRAM bandwidth as on the source "
                  "(kernels that only fit the source's L2 at its DRAM efficiency)",
        "fixed": "idle and unbounded time stays as measured on the source host (same CPU, driver and framework)",
    }[dominant]
    sentence = f"dominant assumption ({share:.0f}% of the predicted step): {text}"
    if source.origin != target.origin:
        sentence += (f"; the source ceilings are {source.origin} and the target's {target.origin}: "
                     "measured ceilings reach some 85-95% of datasheet peaks, so the target is favoured by that gap")
    if substituted:
        sentence += "; some kernels are priced in a substitute dtype"
    return sentence


def _has_gpu_math(model: MachineModel) -> bool:
    return any(key.startswith(("cuda.", "tensor.")) for key in model.compute)


def predict(profile: Explanation, source: MachineModel, target: MachineModel, *,
            samples_per_step: int | None = None, peak_memory_bytes: float | None = None,
            resident_memory_bytes: float | None = None, source_step_us: float | None = None,
            source_name: str = "", target_name: str = "") -> Prediction:
    """The profiled median step re-priced on `target`, kernel by kernel.

    `source` is the machine model the profile was taken on. Batch, peak and resident memory come
    from the profile's throughput record unless given. `source_step_us` (the step without the
    profiler) is only needed for profiles written before the explainer took the overhead off.
    A step that does not fit the target's memory is predicted at the largest batch that does:
    forward and backward kernels scale with the batch, the optimizer and idle time do not.
    """
    throughput = profile.throughput
    batch = samples_per_step or (throughput.samples_per_step if throughput else DEFAULT_SAMPLES_PER_STEP)
    if batch <= 0:
        raise ValueError("samples_per_step must be positive")
    if throughput is not None:
        peak_memory_bytes = peak_memory_bytes or throughput.peak_memory_bytes
        resident_memory_bytes = resident_memory_bytes or throughput.resident_memory_bytes
    step = profile.median
    records = step.kernels
    pricing = _Pricing(source, target, dram_efficiency(records, source))
    notes: dict[str, int] = {}
    substituted = False
    source_cat = dict.fromkeys(KERNEL_CLASSES, 0.0)
    target_cat = dict.fromkeys(KERNEL_CLASSES, 0.0)
    per_sample_cat = dict.fromkeys(KERNEL_CLASSES, 0.0)  # the part of target_cat that grows with the batch
    for record, share in zip(records, attribution.exclusive_times(records)):
        cls = record.kernel_class if record.kernel_class in KERNEL_CLASSES else OTHER
        factor, note = _repriced(record, pricing)
        source_cat[cls] += share
        target_cat[cls] += share * factor
        if record.phase in ("forward", "backward"):
            per_sample_cat[cls] += share * factor
        if note:
            notes[note] = notes.get(note, 0) + 1
            substituted |= "runs as" in note
    line = step.timeline
    text: list[str] = [f"{n} {note}" if note == NOTE_L2_SPILL else f"{n} kernel(s): {note}" for note, n in notes.items()]
    if source_step_us is not None and line.profiler_overhead_us == 0 and 0 < source_step_us < line.wall_us:
        trimmed = timeline.remove_profiler_overhead(line, source_step_us)
        text.append(f"profiled step {line.wall_us / 1e3:.2f} ms vs {source_step_us / 1e3:.2f} ms without the profiler: "
                    f"{trimmed.profiler_overhead_us / 1e3:.2f} ms of profiler overhead taken off idle time")
        line = trimmed
    idle = {IDLE_HOST: line.idle.host_bound_us, IDLE_LAUNCH: line.idle.launch_gap_us, IDLE_SYNC: line.idle.sync_us}
    unexplained = line.wall_us - sum(source_cat.values()) - sum(idle.values())

    if not _has_gpu_math(source) and _has_gpu_math(target):
        text.append("the profile comes from a CPU: its math ops are priced on the target's CUDA cores in their own "
                    "dtype, while a GPU run would put convolutions and matmuls on tensor cores (TF32, FP16, BF16)")
    capacity = target.capacity_bytes("memory")
    fit = None
    if peak_memory_bytes and capacity and peak_memory_bytes > capacity:
        fit = fitting_batch(batch, peak_memory_bytes, resident_memory_bytes, capacity) or 0
    predicted_batch = batch
    if fit is not None:
        need, have = (peak_memory_bytes or 0) / 1e9, (target.capacity_bytes("memory") or 0) / 1e9
        if fit >= 1:
            predicted_batch = fit
            scale = fit / batch
            for cls in KERNEL_CLASSES:
                target_cat[cls] -= per_sample_cat[cls] * (1 - scale)
            text.append(f"does not fit: the step needs {need:.1f} GB at batch {batch}, the target has {have:.1f} GB; "
                        f"predicted at batch {fit}, the largest that fits (memory = resident + per-sample x batch; "
                        "forward and backward time scale with the batch)")
        else:
            text.append(f"does not fit: the step needs {need:.1f} GB, the target has {have:.1f} GB, and its weights "
                        "and optimizer state alone do not fit")
    elif not peak_memory_bytes:
        text.append("peak memory of the profile unknown: capacity not checked")
    waterfall = [CategoryChange(c, source_cat[c], target_cat[c]) for c in KERNEL_CLASSES if source_cat[c] > 0]
    waterfall += [CategoryChange(c, us, us) for c, us in idle.items() if us > 0]
    if abs(unexplained) > 1e-6:
        waterfall.append(CategoryChange(UNEXPLAINED, unexplained, unexplained))
    source_total = sum(c.source_us for c in waterfall)
    target_total = sum(c.target_us for c in waterfall)
    return Prediction(source=source_name or source.device, target=target_name or target.device,
                      source_step_us=source_total, step_us=target_total, samples_per_step=predicted_batch,
                      source_samples_per_step=batch, waterfall=waterfall, notes=text,
                      confidence=_confidence(waterfall, source, target, substituted))


# --------------------------------------------------------------------------- models from the command line


def _unprofiled_step_us(profile_path: Path) -> float | None:
    """step_ms of throughput.json next to an explain.json written before explain.json kept its throughput."""
    folder = profile_path if profile_path.is_dir() else profile_path.parent
    path = folder / "throughput.json"
    if not path.is_file():
        return None
    return float(json.loads(path.read_text(encoding="utf-8"))["step_ms"]) * 1e3


# --------------------------------------------------------------------------- validation


@dataclass
class ValidationRow:
    card: str
    published: float  # samples/s
    published_ratio: float  # to the group's reference card
    predicted: float
    predicted_ratio: float
    priced_as: str = ""  # the datasheet card it was priced as, when the figure's card is not one

    @property
    def error(self) -> float:
        """Relative error of the predicted ratio against the published one."""
        return self.predicted_ratio / self.published_ratio - 1


@dataclass
class ValidationGroup:
    """Figures from one published table: ratios are only taken inside it."""

    name: str
    reference: str
    rows: list[ValidationRow]
    skipped: list[str]  # cards with no datasheet model
    reference_published: float = math.nan  # samples/s of the reference card
    reference_predicted: float = math.nan

    @property
    def mean_absolute_error(self) -> float:
        return sum(abs(r.error) for r in self.rows) / len(self.rows) if self.rows else math.nan


def validate(profile: Explanation, source: LoadedModel, published: dict[str, Any], *,
             source_step_us: float | None = None) -> list[ValidationGroup]:
    """Predicted vs published throughput ratios, per group of the document, for its `precision` figures.

    Each figure's card is priced as its datasheet model (``priced_as`` when its name is not a
    datasheet key). The reference of a group is the document's `reference` card where the group
    has it, else the group's first card.
    """
    precision = published.get("precision", "amp-fp16")
    known = set(machine_model.card_keys())
    by_group: dict[str, list[dict[str, Any]]] = {}
    for figure in published["figures"]:
        if figure.get("precision", precision) == precision:
            by_group.setdefault(figure.get("group", "published"), []).append(figure)
    groups = []
    cache: dict[str, float] = {}
    for name, figures in by_group.items():
        usable = [f for f in figures if f.get("priced_as", f["card"]) in known]
        skipped = [f["card"] for f in figures if f.get("priced_as", f["card"]) not in known]
        if len(usable) < 2:
            continue
        cards = [f["card"] for f in usable]
        reference = published.get("reference") if published.get("reference") in cards else cards[0]
        predicted = {}
        for f in usable:
            slug = f.get("priced_as", f["card"])
            if slug not in cache:
                target = load_model(DATASHEET_PREFIX + slug)
                cache[slug] = predict(profile, source.model, target.model, source_step_us=source_step_us).throughput
            predicted[f["card"]] = cache[slug]
        figure = {f["card"]: float(f["samples_per_s"]) for f in usable}
        rows = [ValidationRow(c, figure[c], figure[c] / figure[reference], predicted[c],
                              predicted[c] / predicted[reference],
                              next(f.get("priced_as", "") for f in usable if f["card"] == c))
                for c in cards if c != reference]
        groups.append(ValidationGroup(name, reference, rows, skipped, figure[reference], predicted[reference]))
    return groups


def validation_table(groups: Sequence[ValidationGroup], source: str) -> str:
    lines = []
    for g in groups:
        lines += [f"group {g.name}: throughput relative to {g.reference} (predicted from {source} vs published)",
                  f"  {'card':44s} {'published/s':>11s} {'published x':>11s} {'predicted/s':>11s} "
                  f"{'predicted x':>11s} {'error x':>8s} {'error /s':>9s}"]
        lines.append(f"  {g.reference + ' (reference)':44s} {g.reference_published:11.0f} {1:11.3f} "
                     f"{g.reference_predicted:11.0f} {1:11.3f} {'':8s} "
                     f"{100 * (g.reference_predicted / g.reference_published - 1):+8.1f}%")
        for r in g.rows:
            card = r.card + (f" (as {r.priced_as})" if r.priced_as else "")
            lines.append(f"  {card:44s} {r.published:11.0f} {r.published_ratio:11.3f} {r.predicted:11.0f} "
                         f"{r.predicted_ratio:11.3f} {100 * r.error:+7.1f}% {100 * (r.predicted / r.published - 1):+8.1f}%")
        lines.append(f"  mean absolute error of the ratios: {100 * g.mean_absolute_error:.1f}% over {len(g.rows)} "
                     "card(s)" + (f"; no datasheet model for {', '.join(g.skipped)}" if g.skipped else ""))
    rows = [r for g in groups for r in g.rows]
    if rows:
        lines.append(f"all groups: mean absolute error {100 * sum(abs(r.error) for r in rows) / len(rows):.1f}% "
                     f"over {len(rows)} ratio(s)")
    return "\n".join(lines)


def samples_per_eur(prediction: Prediction, prices: dict[str, float]) -> float | None:
    price = prices.get(prediction.target)
    return prediction.throughput * 3600 / price if price else None


def prediction_documents(predictions: Sequence[Prediction], prices: dict[str, float]) -> list[dict[str, Any]]:
    """What prediction.json and --json hold: each prediction, with its price and samples per euro where given."""
    return [p.to_dict() | ({"eur_per_hour": prices[p.target], "samples_per_eur": samples_per_eur(p, prices)}
                           if p.target in prices else {}) for p in predictions]
