"""Predict a profiled step's speed on another card or at another batch size, kernel by kernel, and say why.

Every kernel of an explained step (:mod:`pygpuperf.explain`) is priced twice by the one kernel-time
model (:mod:`pygpuperf.analyze.kernel_time`, through :func:`pygpuperf.explain.pricing.kernel_timing`):
on the machine it was profiled on and on the target, each with its own terms (fixed cost per kernel,
ceilings per precision through the precision table and its fallbacks, bandwidths, L2 capacity for the
reuse estimate, multiprocessors for waves). By default both cards are priced at what kernels achieve there
(``ceilings="achievable"``: the library's GEMM rate and stream bandwidth, measured, published or the
architecture family's fraction of the datasheet; :func:`pygpuperf.analyze.machine_model.achievable_model`).
What the profile measured beyond the model, the kernel's excess, is carried over as a named term
(``Prediction.carried_us``). By default (``residual="sm"``) it is carried as time, scaled by the source's
multiprocessors x clock over the target's:

    target time = fixed(target) + work(target) + (measured - fixed - work)(source) x (units x clock)(source) / (units x clock)(target)

since what a kernel spends off its roof (pipeline fill, tails, dependent steps) is spent in the
multiprocessors. With ``residual="proportional"`` the kernel keeps the same fraction of its bound,
``fixed(target) + work(target) x (measured - fixed) / work(source)``. benchmarks/validate_predictions.py
picks the defaults. Kernels without a bound keep their time. A dtype the target lacks runs as a substitute
(bf16 as fp16 on a V100, TF32 as fp32 on the vector units). Idle time: launch gaps scale with the device's
gap between back-to-back kernels; the host's time per step is the one given, else the least the source's
host takes to issue the step's kernels, and the step is the longer of it and the device's. Every
prediction carries an 80 % interval (:mod:`pygpuperf.predict.interval`).

At another batch size (``batch_size``, or the largest that fits the target's memory) the kernels are
resized as --try-fixes' batch fix resizes them (:mod:`pygpuperf.explain.pricing`): the forward and
backward kernels' FLOPs scale with the batch, their bytes do except those of the model's parameters,
buffers and gradients (the traced accesses say which), their output tiles are those of the op at the
new batch, and each keeps its ramp and the split of its bytes between the memory levels it had.
Optimizer kernels stay as they are. Re-running the reuse estimate on the rescaled accesses instead
predicted ResNet-50 AMP training on the H200 from batch 128 to 512 at +22.3 % (measured 83.16 ms)
against +8.6 % this way.

Usage:
    python -m pygpuperf.predict --profile explain.json --source-model results.json \\
        --target datasheet:a100-sxm4-80gb --target datasheet:rtx3090 --price a100-sxm4-80gb=1.8
    python -m pygpuperf.predict --profile explain.json --source-model results.json --batch-size 64
    python -m pygpuperf.predict --profile explain.json --source-model results.json \\
        --validate benchmarks/reference/published/prediction_validation.json
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from pygpuperf.analyze import machine_model
from pygpuperf.analyze.machine_model import DATASHEET_PREFIX, LoadedModel, load_model
from pygpuperf.explain import attribution, pricing, timeline
from pygpuperf.predict import interval as intervals
from pygpuperf.core.vocabulary import Part
from pygpuperf.explain.model import Explanation, fitting_batch
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.core.results import MachineModel

DEFAULT_SAMPLES_PER_STEP = 256
# What a kernel's time is measured against on both cards: their peak ceilings, or what kernels achieve there
# (the library's GEMM rate, stream bandwidth; published figures for a card not measured).
CEILINGS = ("peak", "achievable")
DEFAULT_CEILINGS, DEFAULT_RESIDUAL = "achievable", "sm"


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
    carried_us: float = 0.0  # of step_us: the source's per-kernel residual above the model, carried over
    device_us: float | None = None  # of step_us: the device's kernels, launch gaps and syncs on the target
    host_us: float | None = None  # the host's time per step: given, or the least the source's host takes
    sigma_log: float = 0.0  # spread of log(step) from the validation residuals (pygpuperf.predict.interval)
    doubts: list[str] = field(default_factory=list)  # why the interval is as wide as it is

    @property
    def interval_per_s(self) -> tuple[float, float]:
        """The 80 % interval of the throughput on the target (samples per second)."""
        return intervals.bounds(self.throughput, self.sigma_log)

    @property
    def host_share(self) -> float:
        """The host's time per step over the predicted step (0 where unknown)."""
        return self.host_us / self.step_us if self.host_us and self.step_us > 0 else 0.0

    @property
    def host_bound(self) -> bool:
        return self.host_share >= intervals.HOST_SHARE
    target_power_w: float | None = None  # the target's board power limit: an upper bound on its draw

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
                "carried_ms": self.carried_us / 1e3, "notes": self.notes, "confidence": self.confidence,
                "target_power_w": self.target_power_w,
                "interval_80_per_s": list(self.interval_per_s), "doubts": self.doubts,
                "device_ms": self.device_us / 1e3 if self.device_us is not None else None,
                "host_ms": self.host_us / 1e3 if self.host_us is not None else None, "host_bound": self.host_bound}


# --------------------------------------------------------------------------- per kernel

# --------------------------------------------------------------------------- the step


def _confidence(waterfall: Sequence[CategoryChange], source: MachineModel, target: MachineModel,
                substituted: bool, carried_share: float) -> str:
    """The assumption that carries the largest share of the predicted step, in one sentence."""
    by = {c.category: c.target_us for c in waterfall}
    total = sum(by.values()) or 1.0
    shares = {
        "compute": by.get(KernelClass.TENSOR_GEMM, 0.0) + by.get(KernelClass.VECTOR_MATH, 0.0),
        "memory": sum(by.get(c, 0.0) for c in tuple(KernelClass) if c not in (KernelClass.TENSOR_GEMM, KernelClass.VECTOR_MATH, KernelClass.OTHER)),
        "fixed": sum(by.get(c, 0.0) for c in (Part.IDLE_HOST, Part.IDLE_LAUNCH, Part.IDLE_SYNC, Part.UNEXPLAINED, KernelClass.OTHER)),
    }
    dominant = max(shares, key=shares.get)
    share = 100 * shares[dominant] / total
    text = {
        "compute": "math kernels keep the residual they had on the source above the target's tensor-core/CUDA-core "
                   "roof (cuDNN may pick other algorithms there)",
        "memory": "memory-bound kernels keep the residual they had on the source above the target's memory roof",
        "fixed": "idle and unbounded time stays as measured on the source host (same CPU, driver and framework)",
    }[dominant]
    sentence = (f"dominant assumption ({share:.0f}% of the predicted step): {text}; the residual carried from the "
                f"source is {100 * carried_share:.0f}% of the predicted step")
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
            source_name: str = "", target_name: str = "", batch_size: int | None = None,
            host_step_us: float | None = None, residual: str = DEFAULT_RESIDUAL, ceilings: str = DEFAULT_CEILINGS,
            spread: intervals.Spread | None = None, target_host_scale: float | None = None) -> Prediction:
    """The profiled median step priced on `target`, kernel by kernel (see the module's note).

    `source` is the machine model the profile was taken on (the same model as `target` for a batch
    prediction on the same card). Batch, peak and resident memory come from the profile's throughput
    record unless given. `batch_size` predicts the step at that batch; a step that does not fit the
    target's memory is predicted at the largest batch that does. `host_step_us`, the host's own time
    per step (the step timed where the device has little to do), makes the step the longer of it and
    the device's time; without it the host's floor is the time it takes to issue the step's kernels.
    `target_host_scale` is the target host's time per step over the source host's (known: the interval then
    adds no host spread). `source_step_us` (the step without the profiler) is only needed for profiles
    written before the explainer took the overhead off.
    """
    throughput = profile.throughput
    batch = samples_per_step or (throughput.samples_per_step if throughput else DEFAULT_SAMPLES_PER_STEP)
    if batch <= 0 or (batch_size is not None and batch_size <= 0):
        raise ValueError("batch sizes must be positive")
    if throughput is not None:
        peak_memory_bytes = peak_memory_bytes or throughput.peak_memory_bytes
        resident_memory_bytes = resident_memory_bytes or throughput.resident_memory_bytes
    text: list[str] = []
    wanted = batch_size or batch
    predicted_batch = _fitting(wanted, batch, peak_memory_bytes, resident_memory_bytes, target, text)
    scale = predicted_batch / batch
    step = profile.median
    records = step.kernels
    calls = profile.calls
    if ceilings == CEILINGS[1]:  # both cards as kernels achieve them, their bytes priced on the levels both have
        levels = set(source.memory) & set(target.memory)
        source, target = machine_model.achievable_view(source, levels), machine_model.achievable_view(target, levels)
    source_side = pricing.Pricing.predicting(source, calls)
    # each kernel keeps its bytes' split between the levels
    target_side = pricing.Pricing.predicting(target, calls, source)
    at_batch = pricing.AtBatch.of(records, calls, scale)
    notes: dict[str, int] = {}
    substituted = False
    carried = 0.0
    source_cat = dict.fromkeys(tuple(KernelClass), 0.0)
    target_cat = dict.fromkeys(tuple(KernelClass), 0.0)
    for record, share in zip(records, attribution.exclusive_times(records)):
        cls = record.kernel_class if record.kernel_class in tuple(KernelClass) else KernelClass.OTHER
        price = pricing.price_on_target(record, source_side, target_side, at_batch, residual)
        factor = price.time_us / record.duration_us if record.duration_us > 0 else 1.0
        source_cat[cls] += share
        target_cat[cls] += share * factor
        carried += price.carried_us * (share / record.duration_us if record.duration_us > 0 else 0.0)
        if price.note:
            notes[price.note] = notes.get(price.note, 0) + 1
            substituted |= "runs as" in price.note
    text += [f"{n} kernel(s): {note}" for note, n in notes.items()]
    text += target_side.terms.notes
    if calls and not any(r.call is not None for r in records):
        text.append("no kernel is tied to a traced call: bytes up to the L2's size are held to the L2")
    elif not calls:
        text.append("the profile has no traced accesses (written before they were kept): bytes up to the L2's "
                    "size are held to the L2, and parameters are assumed to grow with the batch")
    line = step.timeline
    if source_step_us is not None and line.profiler_overhead_us == 0 and 0 < source_step_us < line.wall_us:
        trimmed = timeline.remove_profiler_overhead(line, source_step_us)
        text.append(f"profiled step {line.wall_us / 1e3:.2f} ms vs {source_step_us / 1e3:.2f} ms without the profiler: "
                    f"{trimmed.profiler_overhead_us / 1e3:.2f} ms of profiler overhead taken off idle time")
        line = trimmed
    idle_source = {Part.IDLE_HOST: line.idle.host_bound_us, Part.IDLE_LAUNCH: line.idle.launch_gap_us, Part.IDLE_SYNC: line.idle.sync_us}
    idle_target = dict(idle_source)
    gap_s, gap_t = source_side.terms.gap_us, target_side.terms.gap_us
    if gap_s > 0 and gap_t > 0:
        idle_target[Part.IDLE_LAUNCH] *= gap_t / gap_s
    device = sum(target_cat.values()) + idle_target[Part.IDLE_LAUNCH] + idle_target[Part.IDLE_SYNC]
    host = host_step_us if host_step_us is not None else _host_floor_us(profile, source, line.wall_us)
    if host is not None and target_host_scale is not None:  # the target's host, relative to the source's
        host *= target_host_scale
        text.append(f"the target's host takes {target_host_scale:g}x the source host's time per step (given)")
    if host_step_us is not None:
        idle_target[Part.IDLE_HOST] = max(host - device, 0.0)
        text.append(f"host time per step {host_step_us / 1e3:.2f} ms (given): the step is the longer of it and the "
                    f"device's {device / 1e3:.2f} ms")
    elif host is not None and host > device + idle_target[Part.IDLE_HOST]:
        idle_target[Part.IDLE_HOST] = host - device
        text.append(f"host-bound on the target: issuing the step's {len(records)} kernels takes the host "
                    f"at least {host / 1e3:.2f} ms, longer than the target's device time of {device / 1e3:.2f} ms; "
                    "the target's own CPU decides this step's speed" + (
                        "" if target_host_scale is not None else " (it is taken to be the source's)"))
    unexplained = line.wall_us - sum(source_cat.values()) - sum(idle_source.values())

    if not _has_gpu_math(source) and _has_gpu_math(target):
        text.append("the profile comes from a CPU: its math ops are priced on the target's CUDA cores in their own "
                    "dtype, while a GPU run would put convolutions and matmuls on tensor cores (TF32, FP16, BF16)")
    waterfall = [CategoryChange(c, source_cat[c], target_cat[c]) for c in tuple(KernelClass) if source_cat[c] > 0]
    waterfall += [CategoryChange(c, idle_source[c], idle_target[c]) for c in idle_source
                  if idle_source[c] > 0 or idle_target[c] > 0]
    if abs(unexplained) > 1e-6:
        waterfall.append(CategoryChange(Part.UNEXPLAINED, unexplained, unexplained))
    source_total = sum(c.source_us for c in waterfall)
    target_total = sum(c.target_us for c in waterfall)
    family = machine_model.family_of(source)
    same = source.origin == target.origin == "measured" and family is not None and family == machine_model.family_of(target)
    sigma, doubts = intervals.sigma({c.category: c.target_us for c in waterfall}, target_total, host, same,
                                    spread or intervals.shipped(), host_known=target_host_scale is not None)
    return Prediction(source=source_name or source.device, target=target_name or target.device,
                      source_step_us=source_total, step_us=target_total, samples_per_step=predicted_batch,
                      device_us=device, host_us=host, sigma_log=sigma, doubts=doubts,
                      source_samples_per_step=batch, waterfall=waterfall, notes=text,
                      confidence=_confidence(waterfall, source, target, substituted,
                                             carried / target_total if target_total > 0 else 0.0),
                      carried_us=carried, target_power_w=target.facts.get("board_power_w"))


def target_model(card_key: str, ceilings: str = DEFAULT_CEILINGS, held_out: bool = False) -> MachineModel:
    """A card of the datasheet table as `ceilings` price it: its datasheet peaks, or what kernels achieve there
    (:func:`pygpuperf.analyze.machine_model.achievable_model`; `held_out` leaves its own published figures out)."""
    if ceilings == CEILINGS[1]:
        return machine_model.achievable_model(card_key, held_out=held_out)
    return load_model(DATASHEET_PREFIX + card_key).model


def _host_floor_us(profile: Explanation, source: MachineModel, source_wall_us: float) -> float | None:
    """The least time the source's host takes to issue one step: its kernels times the host's time to issue one
    op (the launch probe, torch dispatch and the launch call), no more per kernel than the profiled step took
    (some ops issue several kernels). None without the probe, or for a step replayed as a CUDA graph."""
    launch = source.latency.get("kernel.launch")
    kernels = len(profile.median.kernels)
    if launch is None or launch.value <= 0 or not kernels or str(profile.settings.get("cuda_graphs", "")).startswith("on"):
        return None
    return kernels * min(launch.value / 1e3, source_wall_us / kernels)


def _fitting(wanted: int, batch: int, peak: float | None, resident: float | None, target: MachineModel,
             text: list[str]) -> int:
    """The batch to predict at: `wanted`, or the largest that fits the target's memory (with a note)."""
    capacity = target.capacity_bytes("memory")
    if not peak:
        text.append("peak memory of the profile unknown: capacity not checked")
        return wanted
    if not capacity:
        return wanted
    need = resident + (peak - resident) * wanted / batch if resident and peak > resident else peak * wanted / batch
    if need <= capacity:
        return wanted
    fit = fitting_batch(batch, peak, resident, capacity) or 0
    if fit >= 1:
        text.append(f"does not fit: the step needs {need / 1e9:.1f} GB at batch {wanted}, the target has "
                    f"{capacity / 1e9:.1f} GB; predicted at batch {fit}, the largest that fits (memory = resident + "
                    "per-sample x batch)")
        return min(fit, wanted)
    text.append(f"does not fit: the step needs {need / 1e9:.1f} GB, the target has {capacity / 1e9:.1f} GB, and its "
                "weights and optimizer state alone do not fit")
    return wanted


def predict_batch(profile: Explanation, model: MachineModel, batch_size: int, *,
                  host_step_us: float | None = None) -> Prediction:
    """The profiled step at another batch size on the card it was profiled on."""
    return predict(profile, model, model, batch_size=batch_size, host_step_us=host_step_us,
                   source_name=model.device, target_name=f"{model.device} at batch {batch_size}")


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
    sigma_log: float = 0.0  # the prediction's spread (Prediction.sigma_log)
    doubts: list[str] = field(default_factory=list)
    host_share: float = 0.0  # the host's time per step over the predicted step

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
    skipped: list[str]  # cards with no datasheet model, or no profile of the figure's workload and settings
    reference_published: float = math.nan  # samples/s of the reference card
    reference_predicted: float = math.nan
    reference_sigma_log: float = 0.0
    reference_host_share: float = 0.0

    @property
    def mean_absolute_error(self) -> float:
        return sum(abs(r.error) for r in self.rows) / len(self.rows) if self.rows else math.nan


# A figure's precision -> the profile's amp setting it is measured against (fp32 and TF32 figures are one
# fp32 model: TF32 is how cuDNN and cuBLAS run it on cards that have it, which the precision table handles).
_FIGURE_AMP = {"amp-fp16": "fp16", "amp-bf16": "bf16", "fp32": "none", "tf32": "none"}


def profile_for(figure: Mapping[str, Any], profiles: Sequence[Explanation],
                default_precision: str = "amp-fp16") -> Explanation | None:
    """The profile a published figure is priced from: the one of its workload (the figure's "workload" a
    prefix of the profile's, "resnet50-train" for "resnet50-train-amp"), its precision, and every setting
    its "config" states (memory_format, ...); None when no profile matches, or when the figure names no
    workload and the profiles are of several."""
    precision = figure.get("precision", default_precision)
    if not figure.get("workload") and len({p.settings.get("workload", "") for p in profiles}) > 1:
        return None
    for profile in profiles:
        settings = profile.settings
        name = settings.get("workload", "")
        wanted = figure.get("workload")
        if wanted and not (name == wanted or name.startswith(wanted + "-")):
            continue
        if _FIGURE_AMP.get(precision) not in (None, settings.get("amp", _FIGURE_AMP.get(precision))):
            continue
        if all(_setting(settings.get(k, v)) == _setting(v) for k, v in (figure.get("config") or {}).items()
               if k in ("memory_format", "cudnn_benchmark")):
            return profile
    return None


# The spellings sources use for a setting, as the workloads' knobs spell it.
_SETTING_ALIASES = {"nhwc": "channels_last", "nchw": "nchw", "true": "on", "false": "off"}


def _setting(value: Any) -> str:
    text = str(value).strip().lower()
    return _SETTING_ALIASES.get(text, text)


def validate(profiles: Explanation | Sequence[Explanation], source: LoadedModel | MachineModel, published: dict[str, Any], *,
             source_step_us: float | None = None, residual: str = DEFAULT_RESIDUAL, ceilings: str = DEFAULT_CEILINGS,
             held_out: bool = False) -> list[ValidationGroup]:
    """Predicted vs published throughput ratios, per group of the document.

    With one profile, the document's `precision` figures are priced from it. With several, each figure
    is priced from the profile of its workload, precision and stated configuration
    (:func:`profile_for`); figures without one are listed as skipped. Each figure's card is priced as
    its datasheet model (``priced_as`` when its name is not a datasheet key), at the figure's batch
    size where it gives one. The reference of a group is the document's `reference` card where the
    group has it, else the group's first card.
    """
    source_model = source.model if isinstance(source, LoadedModel) else source
    single = isinstance(profiles, Explanation)
    profiles = [profiles] if single else list(profiles)
    precision = published.get("precision", "amp-fp16")
    known = set(machine_model.card_keys())
    by_group: dict[str, list[tuple[dict[str, Any], Explanation | None]]] = {}
    for figure in published["figures"]:
        if single and figure.get("precision", precision) != precision:
            continue
        chosen = profiles[0] if single else profile_for(figure, profiles, precision)
        group = figure.get("group", "published")
        if not single:  # a card appears once per group and precision: ratios are taken within both
            group = f"{group} [{figure.get('precision', precision)}]"
        by_group.setdefault(group, []).append((figure, chosen))
    groups = []
    cache: dict[tuple[int, str, int | None], Prediction] = {}
    for name, figures in by_group.items():
        usable = [(f, p) for f, p in figures if f.get("priced_as", f["card"]) in known and p is not None]
        skipped = [f["card"] if p is not None else f"{f['card']} (no profile of its workload and settings)"
                   for f, p in figures if (f, p) not in usable]
        if len(usable) < 2:
            continue
        cards = [f["card"] for f, _ in usable]
        reference = published.get("reference") if published.get("reference") in cards else cards[0]
        predicted = {}
        for f, profile in usable:
            slug = f.get("priced_as", f["card"])
            key = (id(profile), slug, f.get("batch_size"))
            if key not in cache:  # at the figure's batch where it names one: the model moves the step there
                cache[key] = predict(profile, source_model, target_model(slug, ceilings, held_out),
                                     source_step_us=source_step_us, batch_size=f.get("batch_size"),
                                     residual=residual, ceilings=ceilings)
            predicted[f["card"]] = cache[key]
        figure = {f["card"]: float(f["samples_per_s"]) for f, _ in usable}
        ref = predicted[reference]
        rows = [ValidationRow(c, figure[c], figure[c] / figure[reference], predicted[c].throughput,
                              predicted[c].throughput / ref.throughput,
                              next(f.get("priced_as", "") for f, _ in usable if f["card"] == c),
                              predicted[c].sigma_log, predicted[c].doubts, predicted[c].host_share)
                for c in cards if c != reference]
        groups.append(ValidationGroup(name, reference, rows, skipped, figure[reference], ref.throughput,
                                      ref.sigma_log, ref.host_share))
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
                     "card(s)" + (f"; not priced: {', '.join(g.skipped)}" if g.skipped else ""))
    rows = [r for g in groups for r in g.rows]
    if rows:
        lines.append(f"all groups: mean absolute error {100 * sum(abs(r.error) for r in rows) / len(rows):.1f}% "
                     f"over {len(rows)} ratio(s)")
        absolute = absolute_errors(groups)
        lines.append(f"all groups: mean absolute error of predicted throughput {100 * _mean_abs(absolute):.1f}% over "
                     f"{len(absolute)} figure(s) (each card once per group, the reference included)")
    return "\n".join(lines)


def absolute_errors(groups: Sequence[ValidationGroup]) -> list[float]:
    """predicted / published - 1 for every priced figure (the references and the other rows)."""
    out = []
    for g in groups:
        if g.reference_published > 0 and math.isfinite(g.reference_predicted):
            out.append(g.reference_predicted / g.reference_published - 1)
        out += [r.predicted / r.published - 1 for r in g.rows if r.published > 0]
    return out


def _mean_abs(values: Sequence[float]) -> float:
    return sum(abs(v) for v in values) / len(values) if values else math.nan


def samples_per_eur(prediction: Prediction, prices: dict[str, float]) -> float | None:
    price = prices.get(prediction.target)
    return prediction.throughput * 3600 / price if price else None


def per_thousand_samples(prediction: Prediction, per_second: float) -> float:
    """What a rate per second (EUR/s, W) of the target comes to over 1,000 predicted samples."""
    return per_second * prediction.step_us * 1e-6 * 1000 / prediction.samples_per_step


def prediction_documents(predictions: Sequence[Prediction], prices: dict[str, float]) -> list[dict[str, Any]]:
    """What prediction.json and --json hold: each prediction, with its price, samples per euro and cost per
    1,000 samples where a price is given, and the energy of 1,000 samples at the target's board power."""
    docs = []
    for p in predictions:
        doc = p.to_dict()
        if p.target in prices:
            doc |= {"eur_per_hour": prices[p.target], "samples_per_eur": samples_per_eur(p, prices),
                    "eur_per_1000_samples": per_thousand_samples(p, prices[p.target] / 3600)}
        if p.target_power_w:
            doc["joules_per_1000_samples"] = per_thousand_samples(p, p.target_power_w)
        docs.append(doc)
    return docs
