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

Usage:
    python -m pygpuperf.predict --profile explain.json --source-model results.json \\
        --target datasheet:a100-sxm4-80gb --target datasheet:rtx3090 --price a100-sxm4-80gb=1.8
    python -m pygpuperf.predict --profile explain.json --source-model results.json \\
        --validate benchmarks/prediction_validation.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pygpuperf import cli, datasheets
from pygpuperf.device import UsageError
from pygpuperf.explain import attribution
from pygpuperf.explain.attribution import IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC, UNEXPLAINED
from pygpuperf.explain.compare import load_explanation
from pygpuperf.explain.explainer import Explanation
from pygpuperf.explain.model import CUDA_MATH, KERNEL_CLASSES, OTHER, TENSOR_GEMM, KernelRecord
from pygpuperf.results import MachineModel

DEFAULT_SAMPLES_PER_STEP = 256
# Bytes per element, to re-count traffic when a dtype runs as a wider one.
_WIDTH = {"fp8": 1, "int8": 1, "fp16": 2, "bf16": 2, "fp32": 4, "tf32": 4, "fp64": 8}
# What runs instead when the target has no support for a dtype, in order of preference.
_SUBSTITUTES = {"bf16": ("fp16", "fp32"), "fp8": ("fp16", "fp32"), "int8": ("fp16", "fp32"), "fp16": ("fp32",)}
DATASHEET_PREFIX = "datasheet:"


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
    samples_per_step: int
    waterfall: list[CategoryChange]  # per category; target values add up to step_us
    notes: list[str] = field(default_factory=list)  # substitutions, capacity, L2, kernels held fixed
    confidence: str = ""  # the assumption that carries most of the predicted time

    @property
    def throughput(self) -> float:
        """Samples per second on the target."""
        return self.samples_per_step / (self.step_us * 1e-6) if self.step_us > 0 else math.inf

    @property
    def source_throughput(self) -> float:
        return self.samples_per_step / (self.source_step_us * 1e-6)

    @property
    def ratio_to_source(self) -> float:
        """Target throughput / source throughput: above 1 the target is faster."""
        return self.source_step_us / self.step_us if self.step_us > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "source_step_ms": self.source_step_us / 1e3,
                "step_ms": self.step_us / 1e3, "samples_per_step": self.samples_per_step,
                "throughput_per_s": self.throughput, "source_throughput_per_s": self.source_throughput,
                "ratio_to_source": self.ratio_to_source,
                "waterfall": [{"category": c.category, "source_ms": c.source_us / 1e3, "target_ms": c.target_us / 1e3,
                               "delta_ms": c.delta_us / 1e3} for c in self.waterfall],
                "notes": self.notes, "confidence": self.confidence}


# --------------------------------------------------------------------------- per kernel


def _dtype_supported(dtype: str, model: MachineModel) -> bool:
    """A dtype runs on a machine when some compute ceiling names it (tensor.bf16.*, library.bf16, cuda.bf16x2).
    fp32 and fp64 always run on the CUDA cores."""
    if dtype in ("fp32", "fp64", ""):
        return True
    return any(f".{dtype}" in key for key in model.compute)


def runs_as(precision: str, target: MachineModel) -> tuple[str, str | None]:
    """(precision the target runs a kernel in, or the same one; a sentence when it had to change).

    bf16 on a card without bf16 (V100, Turing) runs as fp16; fp8/int8 where absent as fp16; either as
    fp32 when the card has no fp16 figure at all."""
    dtype = attribution._dtype(precision) if precision else ""
    if _dtype_supported(dtype, target):
        return precision, None
    for substitute in _SUBSTITUTES.get(dtype, ()):
        if _dtype_supported(substitute, target):
            accumulate = precision.split(".", 1)[1] if "." in precision else ""
            new = substitute if substitute == "fp32" or not accumulate else f"{substitute}.{accumulate}"
            return new, f"{dtype} is not supported: runs as {substitute}"
    return precision, None


def _repriced(record: KernelRecord, source: MachineModel, target: MachineModel) -> tuple[float, str | None]:
    """(factor on the kernel's measured time, a note when the time was held or the dtype changed)."""
    source_bound, _ = attribution.kernel_bound(record, source)
    if source_bound is None:
        source_bound = record.bound_us
    if not source_bound or source_bound <= 0:
        return 1.0, "kernels with no bound keep their time"
    precision = attribution._precision(record)
    new_precision, note = runs_as(precision, target)
    on_target = record
    if new_precision != precision:
        old_w = _WIDTH.get(attribution._dtype(precision), 2)
        new_w = _WIDTH.get(attribution._dtype(new_precision), 2)
        # fp32 instead of a tensor-core dtype: on a card without fp16 tensor cores the GEMM lands on the CUDA cores
        cls = record.kernel_class
        if cls == TENSOR_GEMM and attribution._dtype(new_precision) == "fp32" and "tensor.tf32.acc32" not in target.compute:
            cls = CUDA_MATH
        on_target = dataclasses.replace(record, precision=new_precision, kernel_class=cls,
                                        bytes=record.bytes * new_w / old_w)
    target_bound, _ = attribution.kernel_bound(on_target, target)
    if target_bound is None or target_bound <= 0:
        return 1.0, f"{record.kernel_class} kernels the target model has no ceiling for keep their time"
    return target_bound / source_bound, note


# --------------------------------------------------------------------------- the step


def _idle_after_overhead(idle: dict[str, float], overhead_us: float) -> tuple[dict[str, float], float]:
    """Take profiler overhead off idle time, host-bound first (the profiler slows the host, not the GPU).
    Returns the idle split and the overhead left over (more than all idle time)."""
    idle = dict(idle)
    for key in (IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC):
        taken = min(idle[key], overhead_us)
        idle[key] -= taken
        overhead_us -= taken
    return idle, overhead_us


def _memory_gb(facts: dict[str, Any] | None) -> float | None:
    if not facts:
        return None
    value = facts.get("memory_gb")
    return float(value) if value else None


def _l2_mib(facts: dict[str, Any] | None) -> float | None:
    if not facts:
        return None
    value = facts.get("l2_mib")
    return float(value) if value else None


def _confidence(waterfall: Sequence[CategoryChange], source: MachineModel, target: MachineModel,
                substituted: bool) -> str:
    """The assumption that carries the largest share of the predicted step, in one sentence."""
    by = {c.category: c.target_us for c in waterfall}
    total = sum(by.values()) or 1.0
    shares = {
        "compute": by.get(TENSOR_GEMM, 0.0) + by.get(CUDA_MATH, 0.0),
        "memory": sum(by.get(c, 0.0) for c in KERNEL_CLASSES if c not in (TENSOR_GEMM, CUDA_MATH, OTHER)),
        "fixed": sum(by.get(c, 0.0) for c in (IDLE_HOST, IDLE_LAUNCH, IDLE_SYNC, UNEXPLAINED, OTHER)),
    }
    dominant = max(shares, key=shares.get)
    share = 100 * shares[dominant] / total
    text = {
        "compute": "math kernels reach the same fraction of the target's tensor-core/CUDA-core ceiling as on the "
                   "source (cuDNN may pick other algorithms there)",
        "memory": "memory-bound kernels reach the same fraction of the target's DRAM bandwidth as on the source "
                  "(L2 hit rates and kernel launch sizes are assumed unchanged)",
        "fixed": "idle and unbounded time stays as measured on the source host (same CPU, driver and framework)",
    }[dominant]
    sentence = f"dominant assumption ({share:.0f}% of the predicted step): {text}"
    if source.origin != target.origin:
        sentence += (f"; the source ceilings are {source.origin} and the target's {target.origin}: "
                     "measured ceilings reach some 85-95% of datasheet peaks, so the target is favoured by that gap")
    if substituted:
        sentence += "; some kernels are priced in a substitute dtype"
    return sentence


def predict(profile: Explanation, source: MachineModel, target: MachineModel,
            target_facts: dict[str, Any] | None = None, *, samples_per_step: int = DEFAULT_SAMPLES_PER_STEP,
            source_facts: dict[str, Any] | None = None, peak_memory_gb: float | None = None,
            source_step_us: float | None = None, source_name: str = "", target_name: str = "") -> Prediction:
    """The profiled median step re-priced on `target`, kernel by kernel.

    `source` is the machine model the profile was taken on; `target_facts` (and `source_facts`) may
    carry "memory_gb" and "l2_mib" for the capacity and L2 notes. `source_step_us` is the step
    time measured without the profiler: the difference is taken off idle time, host-bound
    first. `peak_memory_gb` is what the step needs; unknown when None.
    """
    if samples_per_step <= 0:
        raise ValueError("samples_per_step must be positive")
    step = profile.median
    records = step.kernels
    notes: dict[str, int] = {}
    substituted = False
    source_cat = dict.fromkeys(KERNEL_CLASSES, 0.0)
    target_cat = dict.fromkeys(KERNEL_CLASSES, 0.0)
    for record, share in zip(records, attribution.exclusive_times(records)):
        cls = record.kernel_class if record.kernel_class in KERNEL_CLASSES else OTHER
        factor, note = _repriced(record, source, target)
        source_cat[cls] += share
        target_cat[cls] += share * factor
        if note:
            notes[note] = notes.get(note, 0) + 1
            substituted |= "runs as" in note
    line = step.timeline
    idle = {IDLE_HOST: line.idle.host_bound_us, IDLE_LAUNCH: line.idle.launch_gap_us, IDLE_SYNC: line.idle.sync_us}
    unexplained = line.wall_us - sum(source_cat.values()) - sum(idle.values())
    text: list[str] = [f"{n} kernel(s): {note}" for note, n in notes.items()]
    if source_step_us is not None and 0 < source_step_us < line.wall_us:
        overhead = line.wall_us - source_step_us
        idle, left = _idle_after_overhead(idle, overhead)
        text.append(f"profiled step {line.wall_us / 1e3:.2f} ms vs {source_step_us / 1e3:.2f} ms without the profiler: "
                    f"{(overhead - left) / 1e3:.2f} ms of profiler overhead taken off idle time")
    waterfall = [CategoryChange(c, source_cat[c], target_cat[c]) for c in KERNEL_CLASSES if source_cat[c] > 0]
    waterfall += [CategoryChange(c, us, us) for c, us in idle.items() if us > 0]
    if abs(unexplained) > 1e-6:
        waterfall.append(CategoryChange(UNEXPLAINED, unexplained, unexplained))
    source_total = sum(c.source_us for c in waterfall)
    target_total = sum(c.target_us for c in waterfall)

    target_mem = _memory_gb(target_facts)
    if peak_memory_gb is None:
        text.append("peak memory of the profile unknown: capacity not checked"
                    + (f" (target has {target_mem:g} GB)" if target_mem else ""))
    elif target_mem is not None and peak_memory_gb > target_mem:
        text.append(f"does not fit: the step needs {peak_memory_gb:g} GB, the target has {target_mem:g} GB "
                    "(a smaller batch or activation checkpointing changes the profile)")
    source_l2, target_l2 = _l2_mib(source_facts), _l2_mib(target_facts)
    if source_l2 and target_l2 and target_l2 < source_l2:
        text.append(f"target L2 {target_l2:g} MiB < source {source_l2:g} MiB: memory-bound kernels that hit L2 on "
                    "the source may read more from DRAM (not priced)")
    return Prediction(source=source_name or source.device, target=target_name or target.device,
                      source_step_us=source_total, step_us=target_total, samples_per_step=samples_per_step,
                      waterfall=waterfall, notes=text, confidence=_confidence(waterfall, source, target, substituted))


# --------------------------------------------------------------------------- models from the command line


@dataclass
class Card:
    name: str
    model: MachineModel
    facts: dict[str, Any]


def load_card(spec: str) -> Card:
    """"datasheet:<slug>" or a results.json with a machine model. Raises UsageError."""
    if spec.startswith(DATASHEET_PREFIX):
        slug = spec[len(DATASHEET_PREFIX):]
        try:
            model, facts = datasheets.machine_model(slug), datasheets.facts(slug)
        except datasheets.UnknownCardError as exc:
            raise UsageError(str(exc)) from None
        return Card(slug, model, facts)
    from pygpuperf import io

    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"{spec!r} is neither datasheet:<card> nor a results.json file; "
                         f"cards: {', '.join(datasheets.card_keys())}")
    try:
        results = io.load_results(path)
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"{spec}: cannot read results ({exc})") from None
    if results.machine_model is None:
        raise UsageError(f"{spec}: has no machine model; run the compute and memory probes first")
    device = results.meta.get("device", {}) if isinstance(results.meta.get("device"), dict) else {}
    facts: dict[str, Any] = {}
    if device.get("memory_bytes"):
        facts["memory_gb"] = device["memory_bytes"] / 1e9
    if device.get("l2_cache_bytes"):
        facts["l2_mib"] = device["l2_cache_bytes"] / 2**20
    return Card(str(device.get("name") or path.stem), results.machine_model, facts)


def _unprofiled_step_us(profile_path: Path) -> float | None:
    """step_ms of throughput.json next to explain.json: the step measured without the profiler."""
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
    published_ratio: float  # to the reference card
    predicted: float
    predicted_ratio: float

    @property
    def error(self) -> float:
        """Relative error of the predicted ratio against the published one."""
        return self.predicted_ratio / self.published_ratio - 1


def validate(profile: Explanation, source: Card, published: dict[str, Any], *, samples_per_step: int,
             source_step_us: float | None) -> tuple[list[ValidationRow], str]:
    """Predicted vs published throughput ratios to the document's reference card, for every card it lists."""
    reference = published["reference"]
    figures = {e["card"]: float(e["samples_per_s"]) for e in published["figures"]}
    if reference not in figures:
        raise UsageError(f"reference card {reference!r} has no published figure")
    predicted = {}
    for card in figures:
        target = load_card(DATASHEET_PREFIX + card)
        predicted[card] = predict(profile, source.model, target.model, target.facts, samples_per_step=samples_per_step,
                                  source_facts=source.facts, source_step_us=source_step_us).throughput
    rows = [ValidationRow(c, figures[c], figures[c] / figures[reference], predicted[c],
                          predicted[c] / predicted[reference]) for c in figures if c != reference]
    return rows, reference


def validation_table(rows: Sequence[ValidationRow], reference: str) -> str:
    lines = [f"ResNet-50 AMP training: throughput relative to {reference} (predicted from the H200 profile vs published)",
             f"{'card':18s} {'published img/s':>15s} {'published x':>11s} {'predicted img/s':>15s} "
             f"{'predicted x':>11s} {'error':>7s}"]
    for r in rows:
        lines.append(f"{r.card:18s} {r.published:15.0f} {r.published_ratio:11.3f} {r.predicted:15.0f} "
                     f"{r.predicted_ratio:11.3f} {100 * r.error:+6.1f}%")
    mae = sum(abs(r.error) for r in rows) / len(rows) if rows else math.nan
    lines.append(f"mean absolute error of the ratios: {100 * mae:.1f}% over {len(rows)} card(s)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UsageError(f"{message}; see --help")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m pygpuperf.predict", description=__doc__.splitlines()[0])
    p.add_argument("--profile", type=Path, required=True, help="explain.json, or the folder holding it")
    p.add_argument("--source-model", required=True, help="results.json of the profiled GPU, or datasheet:<card>")
    p.add_argument("--target", action="append", default=[], help="datasheet:<card> or results.json (repeatable)")
    p.add_argument("--price", action="append", default=[], metavar="NAME=EUR_PER_HOUR",
                   help="hourly price of a target, by its card name (repeatable)")
    p.add_argument("--samples-per-step", type=int, default=DEFAULT_SAMPLES_PER_STEP,
                   help=f"samples per step, for throughput (default {DEFAULT_SAMPLES_PER_STEP})")
    p.add_argument("--peak-memory-gb", type=float, help="memory the step needs, for the capacity check")
    p.add_argument("--source-step-ms", type=float,
                   help="step time without the profiler (default: throughput.json next to the profile)")
    p.add_argument("--validate", type=Path, help="published figures (JSON) to check predicted ratios against")
    p.add_argument("--out", type=Path, help="with --validate: folder for the validation table")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def _prices(specs: Sequence[str]) -> dict[str, float]:
    prices = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            prices[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or prices.get(name.strip(), 0) <= 0:
            raise UsageError(f"--price {spec!r}: use NAME=EUR_PER_HOUR with a positive price, e.g. rtx3090=0.4")
    return prices


def _print_table(predictions: Sequence[Prediction], prices: dict[str, float]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"predicted from {predictions[0].source} ({predictions[0].source_throughput:,.0f} samples/s)")
    for column in ("target", "step ms", "samples/s", "x source", *(["samples per EUR"] if prices else []), "notes"):
        table.add_column(column, justify="left" if column in ("target", "notes") else "right")
    for p in predictions:
        per_eur = [f"{p.throughput * 3600 / prices[p.target]:,.0f}" if p.target in prices else "-"] if prices else []
        table.add_row(p.target, f"{p.step_us / 1e3:.2f}", f"{p.throughput:,.0f}", f"{p.ratio_to_source:.2f}",
                      *per_eur, "; ".join(p.notes[:3]))
    console = Console()
    console.print(table)
    for p in predictions:
        console.print(f"[bold]{p.target}[/bold]: {p.confidence}", highlight=False)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.target and not args.validate:
        raise UsageError("give at least one --target (datasheet:<card> or results.json) or --validate FILE")
    if not args.profile.exists():
        raise UsageError(f"--profile {args.profile}: no such file or folder")
    try:
        profile = load_explanation(args.profile)
    except (ValueError, KeyError, OSError) as exc:
        raise UsageError(f"--profile {args.profile}: not an explain.json ({exc})") from None
    source = load_card(args.source_model)
    step_us = args.source_step_ms * 1e3 if args.source_step_ms else _unprofiled_step_us(args.profile)
    prices = _prices(args.price)
    if args.validate:
        published = json.loads(args.validate.read_text(encoding="utf-8"))
        rows, reference = validate(profile, source, published, samples_per_step=args.samples_per_step,
                                   source_step_us=step_us)
        text = validation_table(rows, reference)
        print(text)
        if args.out:
            out = cli.output_dir(args.out, "prediction-validation")
            (out / "prediction-validation.txt").write_text(text + "\n", encoding="utf-8")
        if not args.target:
            return 0
    predictions = []
    for spec in args.target:
        target = load_card(spec)
        predictions.append(predict(profile, source.model, target.model, target.facts,
                                   samples_per_step=args.samples_per_step, source_facts=source.facts,
                                   peak_memory_gb=args.peak_memory_gb, source_step_us=step_us,
                                   source_name=source.name, target_name=target.name))
    predictions.sort(key=lambda p: -p.throughput)
    if args.json:
        print(json.dumps([p.to_dict() | ({"eur_per_hour": prices[p.target]} if p.target in prices else {})
                          for p in predictions], indent=1))
    else:
        _print_table(predictions, prices)
    return 0


def main(argv: list[str] | None = None) -> None:
    cli.main_of(run, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
