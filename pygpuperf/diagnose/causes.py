"""The named causes inside the waterfall's under-use parts, each with its kernels, evidence, advice and
what its fix would buy by the kernel-time model.

Every kernel's time above its bound goes to at most one cause of its part (the first rule below that
takes it), so causes never add up to more than their part; what no rule takes stays the part's
catch-all (`rest_us` of :attr:`Causes.by_part`). Idle time is split by its timeline cause. Advice
depends on what the step contains: channels_last only where convolutions run, CUDA graphs, TF32 and
tensor cores only on a GPU, SIMD, cores and framework time on a CPU.

A fix's prediction re-prices the kernels it touches with the same kernel-time model the waterfall
uses (:func:`pygpuperf.explain.kernel_timing`), keeping each kernel's measured residual
above its model time (as pygpuperf.predict does), or removes time the fix does away with (layout
copies, launch gaps, a fused chain's intermediate traffic and fixed costs).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pygpuperf.analyze.kernel_time import MEMORY, CardTerms, KernelWork, card_terms, kernel_time
from pygpuperf.core.precision import dtype_of
from pygpuperf.core.settings import StepSettings
from pygpuperf.core.results import MachineModel
from pygpuperf.explain import attribution, costs, tiles, words
from pygpuperf.explain.classify import BATCH_NORM_OPS, MATMUL_OPS, has_convolutions, is_matrix_vector
from pygpuperf.explain.model import CallAccesses, Idle, KernelRecord, Timeline
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.core.vocabulary import CauseId, Part
from pygpuperf.explain.pricing import Pricing, kernel_timing

# Parts the causes split (the rest of the waterfall names its cause already: no bound, copies, communication).
SPLIT_PARTS = (Part.FIXED, Part.TENSOR, Part.MEMORY, Part.FALLBACK, Part.LAYOUT, Part.IDLE_HOST, Part.IDLE_LAUNCH, Part.IDLE_SYNC)
# A cause below this share of the step is left out (it would be noise in a report).
MIN_SHARE = 0.005
# A GEMM wave below this efficiency wastes enough of the card to name.
WAVE_EFFICIENCY = 0.85
# A GEMM whose tiles fill fewer than this share of the card's units leaves them idle.
FEW_TILES = 0.5
# A GEMM with a side at most this long (and above a GEMV's) is skinny.
SKINNY_DIM = 64
# Tile quantization: padded tiles above this share of the output are wasted work.
TILE_WASTE = 0.10
# Element alignment the matrix units' fast kernels need (16 bytes of fp16/bf16).
ALIGN_ELEMENTS = 8
# A kernel whose fixed cost is above this share of its time is a small kernel.
SMALL_KERNEL = 0.5
# A memory-bound kernel below this share of the step's streaming efficiency is held by its access pattern.
ACCESS_BOUND = 0.5

_CONV = re.compile(r"conv", re.I)
_ATTENTION_MODULE = re.compile(r"attn|attention|mha|self_attn|heads?\b", re.I)
_ATTENTION_OP = re.compile(r"scaled_dot_product|flash|efficient_attention|cudnn_attention|aten::bmm|aten::baddbmm|"
                           r"multi_head", re.I)
_NHWC_NAME = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|NCHWtoNHWC|NHWCtoNCHW|nhwcAddPadding|FoldedNhwc",
                        re.I)
_VIEW_FALLBACK_OPS = ("aten::reshape", "aten::flatten", "aten::_reshape_alias", "aten::view_as", "aten::unflatten")
_SPLIT_K = re.compile(r"split_?k|ReduceSplitK|reduce_wgrad", re.I)
_ALIGN1 = re.compile(r"align1\b|align2\b|_align[12]_", re.I)


# Cause fixes --try-fixes applies under another name.
_TRIAL_OF = {"fuse": "compile", "remove_layout": "compile", "amp_bf16": "amp"}


@dataclass
class Fix:
    """What a cause's fix would buy, predicted by the kernel-time model, and how --try-fixes applies it."""

    name: str  # "tf32", "cuda_graphs", "fuse", "channels_last", "remove_layout", ...
    what: str  # "TF32 on"
    saves_us: float  # predicted step time saved
    predicted_step_us: float  # the step after the fix, predicted
    knobs: dict[str, str] = field(default_factory=dict)  # the knob set --try-fixes applies ({}: not by the tool)

    def words(self) -> str:
        before = (self.predicted_step_us + self.saves_us) / 1e3
        return f"{self.what}: {before:,.2f} → {self.predicted_step_us / 1e3:,.2f} ms (predicted)"

    @property
    def trial(self) -> str:
        """The --try-fixes fix that applies it (fusing and removing copies is torch.compile's work)."""
        return _TRIAL_OF.get(self.name, self.name)


@dataclass
class Cause:
    """One named cause of time above the ideal: the part it splits, its time and kernels, why, and the fix."""

    id: str  # "layout.attention_heads", "shape.split_k", ...
    part: str  # the waterfall part (or idle cause) whose time it names
    us: float  # step time it accounts for
    share: float  # of the step
    kernels: list[int]  # indices into the median step's kernels
    title: str
    evidence: dict[str, Any]
    advice: str
    fix: Fix | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Causes:
    """The causes of one step and how much of each split part they name."""

    items: list[Cause]
    by_part: dict[str, dict[str, float]]  # part -> {"us", "named_us", "rest_us"}

    def to_dict(self) -> dict[str, Any]:
        return {"items": [c.to_dict() for c in self.items], "by_part": self.by_part}


# --------------------------------------------------------------------------- re-pricing


def _saved(records: Sequence[KernelRecord], exclusive: Sequence[float], indices: Sequence[int],
           new_us: Mapping[int, float]) -> float:
    """Step time saved when kernels `indices` take `new_us` instead of their durations (their exclusive share)."""
    saved = 0.0
    for i in indices:
        r = records[i]
        if r.duration_us > 0:
            saved += exclusive[i] * (1.0 - new_us.get(i, r.duration_us) / r.duration_us)
    return max(saved, 0.0)


# --------------------------------------------------------------------------- the rules


def _gemm_dims(record: KernelRecord) -> tuple[int, int, int] | None:
    """(M, N, K) of a matmul record, from its op's shapes."""
    shapes = [s for s in record.input_shapes if isinstance(s, list) and s and all(isinstance(d, int) for d in s)]
    op = record.op
    if op in ("aten::addmm", "aten::baddbmm") and len(shapes) >= 3:
        a, b = shapes[1], shapes[2]
    elif op == "aten::linear" and len(shapes) >= 2:
        x, w = shapes[0], shapes[1]
        return (math.prod(x[:-1]), w[0], x[-1]) if len(w) == 2 else None
    elif len(shapes) >= 2:
        a, b = shapes[0], shapes[1]
    else:
        return None
    if len(a) < 2 or len(b) < 2:
        return None
    return a[-2], b[-1], a[-1]


def _shape_cause(record: KernelRecord, timing: Any, units: int | None) -> tuple[str, dict[str, Any]] | None:
    """Why a GEMM/conv kernel runs below its bound, as far as its name and shapes tell."""
    if _SPLIT_K.search(record.name):
        return "shape.split_k", {"kernel": record.name[:120]}
    dims = _gemm_dims(record) if record.op in MATMUL_OPS else None
    half = dtype_of(record.precision) in ("fp16", "bf16", "fp8", "int8")
    if _ALIGN1.search(record.name) or (dims and half and any(d % ALIGN_ELEMENTS for d in dims)):
        return "shape.misaligned", {"mnk": list(dims) if dims else None, "kernel": record.name[:120]}
    if dims and min(dims[0], dims[1]) <= SKINNY_DIM:
        return "shape.skinny", {"mnk": list(dims)}
    count = tiles.output_tiles(record)
    if units and count and max(count) < FEW_TILES * units:
        return "waves.few_tiles", {"tiles": max(count), "units": units}
    tile = tiles.tile_shape(record.name)
    out = tiles.output_shape(record) if tile else None
    if tile and out:
        _, m, n = out
        a, b = tile
        waste = min(math.ceil(m / a) * a * math.ceil(n / b) * b, math.ceil(m / b) * b * math.ceil(n / a) * a) / (m * n) - 1
        if waste > TILE_WASTE:
            return "shape.tile_quantization", {"tile": list(tile), "mn": [m, n], "padded_share": round(waste, 3)}
    return None


def _library_gap(record: KernelRecord, part: attribution.KernelPart, model: MachineModel, exclusive_us: float) -> float:
    """µs of a tensor-core kernel's time above its bound that the gap between the instruction-level ceiling
    and the library's best measured GEMM of that precision accounts for (the bound uses the former)."""
    timing = part.timing
    instruction = model.matrix_ceiling(record.precision)
    library = model.matrix_ceiling(record.precision, prefer_library=True)
    if timing is None or instruction is None or library is None or record.duration_us <= 0:
        return 0.0
    ratio = instruction[1].value / library[1].value if library[1].value > 0 else 1.0
    if ratio <= 1 or timing.compute_us < timing.memory_us:
        return 0.0
    return timing.compute_us * (ratio - 1) * exclusive_us / record.duration_us


# The cause of NCHW↔NHWC transposes around convolutions: the one layout cause a channels_last fix removes.
NCHW_NHWC = CauseId.NCHW_NHWC


def _layout_cause(record: KernelRecord, neighbours: Sequence[KernelRecord], convolutions: bool) -> str:
    if convolutions and (_NHWC_NAME.search(record.name) or _CONV.search(record.op) or _CONV.search(record.module)):
        return NCHW_NHWC
    if record.op in _VIEW_FALLBACK_OPS:
        return "layout.view_fallback"
    if _ATTENTION_MODULE.search(record.module) or any(_ATTENTION_OP.search(n.op) for n in neighbours):
        return "layout.attention_heads"
    return "layout.permute_contiguous"


def _chains(records: Sequence[KernelRecord], calls: Sequence[CallAccesses]) -> list[tuple[list[int], float]]:
    """Runs of consecutive memory-bound kernels where each reads what the one before wrote: (indices, bytes a
    fusion would not move: each intermediate written once and read back once)."""
    by_call = {c.index: c for c in calls}
    order = sorted(range(len(records)), key=lambda i: records[i].start_us)
    chains: list[tuple[list[int], float]] = []
    current: list[int] = []
    saved = 0.0
    last_writes: dict[int, int] = {}
    for i in order:
        r = records[i]
        call = by_call.get(r.call) if r.call is not None else None
        if r.kernel_class != KernelClass.MEMORY_BOUND or call is None:
            if len(current) > 1:
                chains.append((current, saved))
            current, saved, last_writes = [], 0.0, {}
            continue
        reads = {a.storage: a.nbytes for a in call.accesses if not a.write}
        linked = {s: n for s, n in last_writes.items() if s in reads}
        if current and linked:
            current.append(i)
            saved += sum(2.0 * min(n, reads[s]) for s, n in linked.items())  # written, then read back
        else:
            if len(current) > 1:
                chains.append((current, saved))
            current, saved = [i], 0.0
        last_writes = {a.storage: a.nbytes for a in call.accesses if a.write}
    if len(current) > 1:
        chains.append((current, saved))
    return chains


def step_causes(records: Sequence[KernelRecord], timeline: Timeline, model: MachineModel,
                calls: Sequence[CallAccesses] = (), settings: Mapping[str, Any] | None = None,
                device: str = "cuda") -> Causes:
    """The named causes of a step's time above its ideal (see the module's note)."""
    settings = settings or {}
    kind = words.kind_of(device)
    gpu = kind == words.GPU
    wall = timeline.wall_us
    exclusive = attribution.exclusive_times(records)
    pricing = Pricing.bound(records, calls, model)
    terms = pricing.terms
    parts = attribution.kernel_parts(records, model, shares=pricing.shares, terms=terms, exclusive=exclusive)
    units = card_terms(model).units
    convolutions = has_convolutions(records)
    taken: dict[str, dict[int, float]] = {}  # cause id -> kernel index -> µs of its part
    evidence: dict[str, dict[str, Any]] = {}

    def take(cause: str, i: int, us: float, **ev: Any) -> None:
        taken.setdefault(cause, {})[i] = taken.get(cause, {}).get(i, 0.0) + us
        if ev:
            evidence.setdefault(cause, {}).setdefault("examples", [])
            if len(evidence[cause]["examples"]) < 5:
                evidence[cause]["examples"].append({"op": records[i].op, **ev})

    chain_of: dict[int, int] = {}
    chains = _chains(records, calls)
    for n, (members, _) in enumerate(chains):
        for i in members:
            chain_of[i] = n
    ordered = sorted(range(len(records)), key=lambda i: records[i].start_us)
    position = {i: k for k, i in enumerate(ordered)}
    for i, (r, p) in enumerate(zip(records, parts)):
        if p.fixed_us > 0:
            take("small_kernels", i, p.fixed_us)
        # waves inside the ideal: the model prices them, so they are in the ideal, not above it
        if r.kernel_class in (KernelClass.TENSOR_GEMM, KernelClass.VECTOR_MATH) and p.timing is not None \
                and p.timing.wave_efficiency < WAVE_EFFICIENCY \
                and p.timing.compute_us >= p.timing.memory_us and r.duration_us > 0:
            lost = p.timing.compute_us * (1 - p.timing.wave_efficiency) * (exclusive[i] / r.duration_us)
            take("waves.partial_wave", i, min(lost, p.ideal_us), efficiency=round(p.timing.wave_efficiency, 3))
        if p.over_us <= 0 and p.part != Part.LAYOUT:
            continue
        if p.part == Part.TENSOR:
            found = _shape_cause(r, p.timing, units)
            if found:
                take(found[0], i, p.over_us, **found[1])
            else:  # a well-shaped GEMM: the part of its excess the library's own measured rate explains
                gap = min(_library_gap(r, p, model, exclusive[i]), p.over_us)
                if gap > 0:
                    take("library_rate", i, gap)
                if p.over_us - gap > 0:  # the rest: this kernel below the library's best for its precision
                    kind_of_kernel = "convolution" if _CONV.search(r.op or "") else "gemm"
                    take(f"kernel_choice.{kind_of_kernel}", i, p.over_us - gap)
        elif p.part == Part.FALLBACK:
            precision = dtype_of(r.precision)
            if gpu and precision == "fp32" and not re.search(r"depthwise|conv_depthwise|grouped", r.name, re.I):
                take("precision.fp32_no_tf32", i, p.over_us)
            elif gpu and re.search(r"depthwise|grouped", r.name, re.I):
                take("shape.depthwise", i, p.over_us)
            elif not gpu:
                take("cpu.simd_under_use", i, p.over_us)
        elif p.part == Part.MEMORY:
            if i in chain_of:
                take("unfused_chain", i, p.over_us)
            elif is_matrix_vector(r):
                take("shape.gemv", i, p.over_us)
            elif r.phase == "optimizer" and not r.op.startswith("aten::_fused"):
                take("optimizer.unfused", i, p.over_us)
            else:
                take("bandwidth", i, p.over_us)
        elif p.part == Part.LAYOUT:
            k = position[i]
            near = [records[j] for j in ordered[max(0, k - 3):k + 4] if j != i]
            take(_layout_cause(r, near, convolutions), i, exclusive[i])
    if gpu and model.matrix_ceiling("bf16.acc32") is not None:
        # FP32/TF32 math on a card with bf16 matrix units: what AMP would buy (inside the ideal too).
        for i, r in enumerate(records):
            saves = bf16_saving(r, exclusive[i], pricing)
            if saves > 0:
                take("precision.bf16_unused", i, saves)

    fused_saves, fused_evidence = _fused_optimizer_saving(records, exclusive, calls, pricing)
    if fused_evidence:
        evidence.setdefault("optimizer.unfused", {}).update(fused_evidence, fused_saving_us=fused_saves)
    items: list[Cause] = []
    for cause_id, kernels in taken.items():
        us = sum(kernels.values())
        if wall <= 0 or us / wall < MIN_SHARE:
            continue
        idx = sorted(kernels)
        cause = _describe(cause_id, us, wall, idx, records, exclusive, parts, pricing, settings, kind, convolutions,
                          chains, chain_of, evidence.get(cause_id, {}), units)
        if cause is not None:
            items.append(cause)
    idle = timeline.idle
    for part, us in ((Part.IDLE_HOST, idle.host_bound_us), (Part.IDLE_LAUNCH, idle.launch_gap_us), (Part.IDLE_SYNC, idle.sync_us)):
        if wall > 0 and us / wall >= MIN_SHARE and words.shown(part, kind):
            items.append(_idle_cause(part, us, wall, timeline, settings, kind, len(records)))
    graphed = [c for c in items if c.fix is not None and c.fix.name == "cuda_graphs"]
    if graphed:  # one graph removes both, and its nodes still pay their gaps in it: one fix, on the larger
        saves = graph_saving_us(len(records), idle, terms)
        keep = max(graphed, key=lambda c: c.us)
        what = "CUDA graphs (launch gaps and host-bound idle)" if len(graphed) > 1 else keep.fix.what
        for c in graphed:
            c.fix = _fix("cuda_graphs", what, saves, wall, {"cuda_graphs": "on"}) if c is keep else None
    items.sort(key=lambda c: -c.us)
    by_part: dict[str, dict[str, float]] = {}
    totals = dict.fromkeys(SPLIT_PARTS, 0.0)
    for p in parts:
        if p.part in totals:
            totals[p.part] += p.over_us
        totals[Part.FIXED] += p.fixed_us
    totals[Part.IDLE_HOST], totals[Part.IDLE_LAUNCH], totals[Part.IDLE_SYNC] = idle.host_bound_us, idle.launch_gap_us, idle.sync_us
    totals[Part.LAYOUT] = sum(exclusive[i] for i, p in enumerate(parts) if p.part == Part.LAYOUT)
    for part, total in totals.items():
        named = sum(c.us for c in items if c.part == part)
        if total > 0 or named > 0:
            by_part[part] = {"us": total, "named_us": named, "rest_us": max(total - named, 0.0)}
    return Causes(items, by_part)




def graph_saving_us(kernels: int, idle: Idle, terms: CardTerms) -> float:
    """What replaying a step of `kernels` kernels as one CUDA graph saves: its idle between kernels less the
    graph's own gap at every kernel boundary. A stream pays at least its back-to-back gap at each boundary
    (the probes' period less an empty kernel's duration, 0.93 µs on an H200), however much of it the profile
    shows as idle: on an H200, 64 kernels with work back to back saved 0.7-1.0 µs per boundary replayed from a
    graph (64 MB copies 1.5-1.6), memset nodes included (docs/investigations.md), where the steps'
    profiles showed 0.3 to 1.5 µs of idle per boundary."""
    boundaries = max(kernels - 1, 0)
    idle_us = idle.host_bound_us + idle.launch_gap_us
    if terms.graph_gap_us > 0:  # the graph's period was measured: so is what it leaves
        idle_us = max(idle_us, boundaries * terms.gap_us)
    return max(idle_us - boundaries * terms.graph_gap_us, 0.0)


def _ops(records: Sequence[KernelRecord], idx: Sequence[int], exclusive: Sequence[float]) -> dict[str, float]:
    by: dict[str, float] = {}
    for i in idx:
        key = records[i].op or records[i].name[:60]
        by[key] = by.get(key, 0.0) + exclusive[i]
    return dict(sorted(by.items(), key=lambda kv: -kv[1])[:5])


def _modules(records: Sequence[KernelRecord], idx: Sequence[int]) -> list[str]:
    seen: list[str] = []
    for i in idx:
        m = records[i].module
        if m and m not in seen:
            seen.append(m)
    return seen[:5]


def bf16_saving(record: KernelRecord, exclusive_us: float, pricing: Pricing) -> float:
    """Step time an FP32/TF32 GEMM or convolution saves as bf16 matrix math on the card's matrix units, as
    the kernel model prices it (0 for other kernels, and where it would not be faster)."""
    r = record
    if not ((r.kernel_class == KernelClass.TENSOR_GEMM and r.precision.startswith("tf32")) or (
            r.kernel_class == KernelClass.VECTOR_MATH and r.precision == "fp32" and r.flops > 0)) or r.duration_us <= 0:
        return 0.0
    new_us = pricing.reprice(r, dataclasses.replace(r, kernel_class=KernelClass.TENSOR_GEMM, precision="bf16.acc32",
                                                    bytes=r.bytes / 2))
    return exclusive_us * (1 - new_us / r.duration_us) if new_us < r.duration_us else 0.0


_NOT_STREAMING = re.compile(r"norm|pool|conv", re.I)  # kernels whose NCHW form has its own access pattern


# Ops autocast runs in fp32 whatever their inputs (torch's autocast fp32 list), with their backward; and
# those whose output stays fp32 because their weight is (embeddings): their traffic does not halve under AMP.
_AUTOCAST_FP32 = frozenset((
    "native_layer_norm", "native_layer_norm_backward", "layer_norm", "native_group_norm", "native_group_norm_backward",
    "group_norm", "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "softmax",
    "log_softmax", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
    "cross_entropy_loss", "mse_loss", "mse_loss_backward", "l1_loss", "smooth_l1_loss", "smooth_l1_loss_backward",
    "huber_loss", "huber_loss_backward", "binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits_backward",
    "kl_div", "logsumexp", "cumsum", "cumprod", "norm", "linalg_vector_norm", "exp", "log", "pow", "rsqrt",
    "reciprocal", "embedding", "embedding_dense_backward", "embedding_backward"))
_AUTOCAST_FP32_FORWARD = frozenset(("sum", "mean", "prod"))


def _amp_traffic_saving(records: Sequence[KernelRecord], exclusive: Sequence[float],
                        parts: Sequence[attribution.KernelPart], pricing: Pricing) -> float:
    """What AMP saves on memory-bound kernels: activations in bf16 halve the bytes of every fp32 forward and
    backward kernel outside autocast's fp32 list (the optimizer keeps fp32 master weights). A kernel far below
    the bandwidth efficiency of the step's elementwise kernels is held by its access pattern, not its bytes
    (NCHW's strided per-channel reductions): it keeps its time. So do batch norms: cuDNN's take fp16 and fp32
    only, and in bf16 torch runs its own kernels, which took as long as cuDNN's fp32 ones (H200, ResNet-50:
    24.1 ms against 24.7)."""
    efficiency = _streaming_efficiency(records, parts)
    new: dict[int, float] = {}
    for i, r in enumerate(records):
        base = costs.base_name(r.op or "")
        if r.kernel_class != KernelClass.MEMORY_BOUND or r.precision != "fp32" or r.phase not in ("forward", "backward") \
                or r.duration_us <= 0 or base in _AUTOCAST_FP32 \
                or (r.phase == "forward" and base in _AUTOCAST_FP32_FORWARD) or BATCH_NORM_OPS.search(base) \
                or (efficiency and _bound(parts[i]) / r.duration_us < ACCESS_BOUND * efficiency):
            continue
        new[i] = pricing.reprice(r, dataclasses.replace(r, bytes=r.bytes / 2))
    return _saved(records, exclusive, list(new), new)


def _bound(part: attribution.KernelPart) -> float:
    return part.timing.total_us if part.timing is not None else 0.0


def _memory_kernels(records: Sequence[KernelRecord], parts: Sequence[attribution.KernelPart]) -> list[int]:
    return [i for i, r in enumerate(records) if parts[i].part == Part.MEMORY and r.kernel_class == KernelClass.MEMORY_BOUND
            and _bound(parts[i]) > 0 and r.duration_us > 0]


def _streaming_efficiency(records: Sequence[KernelRecord], parts: Sequence[attribution.KernelPart]) -> float | None:
    """Bound over time of the step's elementwise memory-bound kernels: the share of its size's bandwidth a
    kernel that streams reaches on this card, measured in this step."""
    streaming = [i for i in _memory_kernels(records, parts) if not _NOT_STREAMING.search(records[i].op or "")]
    spent = sum(records[i].duration_us for i in streaming)
    return min(1.0, sum(_bound(parts[i]) for i in streaming) / spent) if spent > 0 else None


# Traffic of a training batch norm over what its bound counts (its input read once, its output written
# once): statistics need a pass over the input before it is normalised, so the forward streams 2 reads +
# 1 write against 1 + 1, the backward (the channel sums, then the input gradient) 4 reads + 1 write against
# 2 + 1. Nsight Compute on the H200 saw L2 carry 2.1x the input's bytes in cuDNN's NHWC forward kernels; DRAM
# less, as its semi-persistent kernels keep part of the second pass on chip, so the bound stays one pass.
_TRAINING_NORM_PASSES = {"forward": 1.5, "backward": 5 / 3}


def _nchw_norm_saving(records: Sequence[KernelRecord], exclusive: Sequence[float],
                      parts: Sequence[attribution.KernelPart]) -> tuple[float, dict[str, Any]]:
    """What channels_last buys an NCHW step's batch norms: their NHWC kernels stream each channel's values
    contiguously, so each is priced as its traffic (two passes when training) at the streaming efficiency of
    the step's own elementwise kernels; NCHW's strided per-channel reductions run far below it."""
    efficiency = _streaming_efficiency(records, parts)
    norms = [i for i in _memory_kernels(records, parts) if BATCH_NORM_OPS.search(records[i].op or "")]
    if not norms or not efficiency:
        return 0.0, {}
    training = any(r.phase == "backward" for r in records)
    new = {i: min(records[i].duration_us, _bound(parts[i]) * (_TRAINING_NORM_PASSES.get(records[i].phase, 1.0)
                                                                 if training else 1.0) / efficiency) for i in norms}
    saves = _saved(records, exclusive, norms, new)
    return saves, {"batch_norm_kernels": len(norms), "batch_norm_saving_us": round(saves, 1),
                   "streaming_efficiency": round(efficiency, 3)}


def _fused_optimizer_saving(records: Sequence[KernelRecord], exclusive: Sequence[float], calls: Sequence[CallAccesses],
                            pricing: Pricing) -> tuple[float, dict[str, Any]]:
    """What one fused optimizer kernel buys over the step's per-op (foreach or per-tensor) update: it reads
    each parameter, gradient and state once and writes each once (the storages the update's traced calls
    read before writing them; what the update creates and reads back, a fused kernel keeps in registers),
    priced by the kernel model at the efficiency the update's own kernels reach."""
    idx = [i for i, r in enumerate(records) if r.phase == "optimizer" and r.duration_us > 0
           and not (r.op or "").startswith("aten::_fused")]
    read, written, created = _update_storages(records, idx, calls)
    if not read and not written:
        return 0.0, {}
    traffic = float(sum(read.values()) + sum(b for s, b in written.items() if s not in created))
    timed = [(i, t) for i in idx if (t := kernel_timing(records[i], pricing.model, pricing.shares,
                                                                     pricing.terms)) is not None]
    spent = sum(records[i].duration_us for i, _ in timed)
    bounded = sum(t.total_us for _, t in timed)
    if traffic <= 0 or bounded <= 0:
        return 0.0, {}
    one = kernel_time(KernelWork(MEMORY, "fp32", 0.0, traffic), pricing.model, pricing.terms)
    fused_us = one.total_us * max(spent / bounded, 1.0)
    saves = max(sum(exclusive[i] for i in idx) - fused_us, 0.0)
    return saves, {"fused_traffic_bytes": traffic, "fused_us": round(fused_us, 1), "update_kernels": len(idx)}


def _update_storages(records: Sequence[KernelRecord], idx: Sequence[int], calls: Sequence[CallAccesses]
                     ) -> tuple[dict[int, int], dict[int, int], set[int]]:
    """The storages the traced calls of kernels `idx` read before writing them, those they write (bytes each),
    and those they create (written before any read)."""
    traced = {records[i].call for i in idx if records[i].call is not None}
    read: dict[int, int] = {}
    written: dict[int, int] = {}
    created: set[int] = set()
    for call in sorted((c for c in calls if c.index in traced), key=lambda c: c.index):
        for a in call.accesses:
            if a.write:
                if a.storage not in read:
                    created.add(a.storage)
                written[a.storage] = max(written.get(a.storage, 0), a.nbytes)
            elif a.storage not in created:
                read[a.storage] = max(read.get(a.storage, 0), a.nbytes)
    return read, written, created


def gradient_bytes(records: Sequence[KernelRecord], calls: Sequence[CallAccesses]) -> float:
    """The bytes of the gradients the optimizer's update reads: the storages its traced calls read and never
    write (parameters and optimizer state are written; gradients are only read)."""
    idx = [i for i, r in enumerate(records) if r.phase == "optimizer"]
    read, written, _ = _update_storages(records, idx, calls)
    return float(sum(b for s, b in read.items() if s not in written))


def _fix(name: str, what: str, saves: float, wall: float, knobs: dict[str, str] | None = None) -> Fix:
    return Fix(name, what, saves, max(wall - saves, 0.0), dict(knobs or {}))


@dataclass
class _Seen:
    """What a cause's words and fix are made from: the stretch of the step it names (`idx`, `us`) and the step."""

    cause_id: str
    us: float
    wall: float
    idx: list[int]
    records: Sequence[KernelRecord]
    exclusive: Sequence[float]
    parts: Sequence[attribution.KernelPart]
    pricing: Pricing
    step_settings: StepSettings
    kind: str
    convolutions: bool
    chains: list[tuple[list[int], float]]
    chain_of: dict[int, int]
    ev: dict[str, Any]  # what the kernels' assignment found (shape, tiles, a fused optimizer's saving)
    units: int | None
    evidence: dict[str, Any]  # the cause's evidence, which a rule may add to

    @property
    def gpu(self) -> bool:
        return self.kind == words.GPU

    @property
    def unit(self) -> str:
        return words.unit(self.kind, True)

    @property
    def pct(self) -> str:
        return f"{100 * self.us / self.wall:.1f}% of the step ({self.us / 1e3:.2f} ms)"


def _small_kernels(s: _Seen) -> tuple[str, str, Fix | None]:
    wall, idx, records, exclusive = s.wall, s.idx, s.records, s.exclusive
    parts, pricing, evidence, pct = s.parts, s.pricing, s.evidence, s.pct
    unit, gpu = s.unit, s.gpu
    fix: Fix | None = None
    small = [i for i in idx if records[i].duration_us > 0 and parts[i].fixed_us > 0 and
             parts[i].fixed_us / max(exclusive[i], 1e-9) > SMALL_KERNEL]
    evidence["small_kernels"] = len(small)
    evidence["fixed_us_per_kernel"] = pricing.terms.fixed_us
    title = (f"The fixed cost of {len(idx)} {unit} ({pricing.terms.fixed_us:.2f} µs each by the kernel model) "
             f"adds up to {pct}; {len(small)} of them spend most of their time on it.")
    optimizer = any(records[i].phase == "optimizer" for i in idx)
    if gpu:
        advice = ("Fewer, larger kernels: torch.compile fuses elementwise and normalization kernels, "
                  + ("fused optimizers (fused=True) update all parameters in a few kernels, " if optimizer else "")
                  + "and a larger batch spreads each kernel's fixed cost over more samples.")
    else:
        advice = ("Fewer, larger ops: torch.compile fuses elementwise ops into vectorized loops, and a larger batch "
                  "spreads each op's dispatch over more samples.")
    fusible = [i for i in idx if records[i].kernel_class == KernelClass.MEMORY_BOUND]
    saves = sum(parts[i].fixed_us for i in fusible) / 2  # fusion keeps about one kernel in two
    fix = _fix("compile", "torch.compile (fuses memory-bound kernels)", saves, wall, {"compile": "inductor"})
    return title, advice, fix


def _partial_wave(s: _Seen) -> tuple[str, str, Fix | None]:
    wall, idx, records, exclusive = s.wall, s.idx, s.records, s.exclusive
    parts, units, pct, unit = s.parts, s.units, s.pct, s.unit
    fix: Fix | None = None
    title = (f"GEMM/convolution {unit} lose {pct} to partial waves: their tiles do not fill the card's "
             f"{units or '?'} multiprocessors a whole number of times.")
    advice = ("Change the batch (or the GEMM's M/N) so the tile count fills the last wave; the model's "
              "bound already includes this loss.")
    new = {}
    for i in idx:
        t = parts[i].timing
        if t is not None and t.work_us > 0:
            full = t.fixed_us + max(t.compute_us * t.wave_efficiency, t.memory_us)
            new[i] = records[i].duration_us * full / t.total_us
    fix = _fix("full_waves", "full waves", _saved(records, exclusive, idx, new), wall)
    return title, advice, fix


def _library_rate(s: _Seen) -> tuple[str, str, Fix | None]:
    idx, records, pricing, evidence = s.idx, s.records, s.pricing, s.evidence
    pct, unit = s.pct, s.unit
    precisions = sorted({records[i].precision for i in idx})
    rates = {}
    for precision in precisions:
        instruction = pricing.model.matrix_ceiling(precision)
        library = pricing.model.matrix_ceiling(precision, prefer_library=True)
        if instruction and library:
            rates[precision] = {"instruction": round(instruction[1].value, 1), "library": round(library[1].value, 1),
                                "unit": library[1].unit}
    evidence["ceilings"] = rates
    title = (f"Well-shaped GEMM/convolution {unit} take {pct} above their bound that the libraries' own rate "
             "accounts for: the best GEMM the library runs on this card reaches "
             + ", ".join(f"{100 * r['library'] / r['instruction']:.0f}% of the {p} instruction rate"
                         for p, r in rates.items()) + ".")
    advice = ("Little to gain from the model side: larger GEMMs (batch, hidden size) get closer to the library's "
              "best; a lower precision the card has (bf16/fp8) raises the rate itself.")
    return title, advice, None


def _kernel_choice(s: _Seen) -> tuple[str, str, Fix | None]:
    idx, records, evidence, pct = s.idx, s.records, s.evidence, s.pct
    unit, step_settings, cause_id = s.unit, s.step_settings, s.cause_id
    conv = cause_id.endswith("convolution")
    nchw = step_settings.nchw
    achieved = [records[i].flops / (records[i].duration_us * 1e-6) / 1e12 for i in idx if records[i].duration_us > 0]
    evidence["median_tflops"] = round(sorted(achieved)[len(achieved) // 2], 1) if achieved else None
    title = (f"{'Convolution' if conv else 'GEMM'} {unit} run below the library's best rate for their precision "
             f"(median {evidence['median_tflops']} TFLOP/s) for {pct} beyond what shape and the library's rate explain.")
    if conv and nchw:
        advice = ("The convolutions run in NCHW, where cuDNN's tensor-core kernels are slower and need transposes: "
                  "put the model and its inputs in channels_last (the layout cause predicts what that buys).")
    elif conv and step_settings.cudnn_benchmark is not True:
        advice = ("cudnn.benchmark is off, so cuDNN picked these kernels by heuristic: turn it on to time its "
                  "algorithms once per shape.")
    else:
        advice = ("The library's kernel for these shapes is what runs; larger or rounder dimensions (multiples of "
                  "128) or a lower precision let it pick faster ones.")
    return title, advice, None


def _few_tiles(s: _Seen) -> tuple[str, str, Fix | None]:
    units, pct, unit = s.units, s.pct, s.unit
    title = (f"GEMM/convolution {unit} with fewer tiles than half the card's {units} multiprocessors take {pct} "
             "above their bound: most multiprocessors idle.")
    advice = "Raise the batch (more rows, more tiles), or batch several small GEMMs into one bmm."
    return title, advice, None


def _shape(s: _Seen) -> tuple[str, str, Fix | None]:
    """No fix of its own: a batch change, the usual remedy, is tried by --try-fixes as a whole."""
    pct, cause_id = s.pct, s.cause_id
    name = cause_id.split(".", 1)[1]
    what = {"split_k": "split-K GEMMs (a reduction pass over partial tiles)",
            "misaligned": f"GEMMs with a dimension not a multiple of {ALIGN_ELEMENTS} (slow align1/align2 kernels)",
            "skinny": f"skinny GEMMs (a side of at most {SKINNY_DIM})",
            "tile_quantization": "GEMMs whose dimensions are not multiples of their tile (padded tiles)",
            "gemv": "matrix-vector products (GEMV: a few rows, memory-bound)",
            "depthwise": "depthwise/grouped convolutions (no tensor-core kernel)"}[name]
    title = f"{what[0].upper() + what[1:]} take {pct} above their bound."
    advice = {
        "split_k": "K is long against M x N: a larger batch (larger M) lets the library drop split-K.",
        "misaligned": (f"Pad the odd dimension to a multiple of {ALIGN_ELEMENTS} (e.g. an LM head's vocabulary "
                       "to a multiple of 64, padding the extra logits away), so the library picks its "
                       "vectorized tensor-core kernels."),
        "skinny": "Batch more rows into each GEMM (a larger batch, or several small GEMMs as one bmm).",
        "tile_quantization": "Pick dimensions that are multiples of 64 or 128 (hidden sizes, batch x tokens).",
        "gemv": "Batch more rows per GEMM (a larger batch turns GEMVs into GEMMs).",
        "depthwise": "These convolutions run on the CUDA cores whatever the precision; channels_last and "
                     "cudnn.benchmark can still pick faster kernels.",
    }[name]
    return title, advice, None


def _fp32_no_tf32(s: _Seen) -> tuple[str, str, Fix | None]:
    wall, idx, records, exclusive = s.wall, s.idx, s.records, s.exclusive
    pricing, pct = s.pricing, s.pct
    fix: Fix | None = None
    new = {i: pricing.reprice(records[i], dataclasses.replace(records[i], kernel_class=KernelClass.TENSOR_GEMM,
                                                              precision="tf32.acc32")) for i in idx}
    saves = _saved(records, exclusive, idx, new)
    title = f"FP32 GEMMs and convolutions on the CUDA cores without TF32 take {pct} above their tensor-core bound."
    advice = ("Allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True, torch.backends.cudnn.allow_tf32 = True; "
              "knob tf32=on) or run under AMP.")
    fix = _fix("tf32", "TF32 on", saves, wall, {"tf32": "on"})
    return title, advice, fix


def _bf16_unused(s: _Seen) -> tuple[str, str, Fix | None]:
    us, wall, records, exclusive = s.us, s.wall, s.records, s.exclusive
    parts, pricing, evidence, pct = s.parts, s.pricing, s.evidence, s.pct
    step_settings = s.step_settings
    fix: Fix | None = None
    title = f"FP32/TF32 matrix math would take {pct} less in bf16 on this card's matrix units."
    amp = step_settings.amp or ""
    advice = ("Train under autocast (torch.autocast(device_type, dtype=torch.bfloat16); knob amp=bf16): bf16 "
              "needs no loss scaling and halves the bytes of activations.")
    traffic = _amp_traffic_saving(records, exclusive, parts, pricing)
    evidence["activation_traffic_saving_us"] = round(traffic, 1)
    fix = _fix("amp_bf16", "AMP bf16 (bf16 matrix math, half the activation traffic)", us + traffic, wall,
               {"amp": "bf16"} if amp in ("none", "fp32", "") else {})
    return title, advice, fix


def _simd_under_use(s: _Seen) -> tuple[str, str, Fix | None]:
    pct = s.pct
    title = f"Matrix ops run below the measured SIMD/BLAS rate for {pct}."
    advice = ("Small matrices keep few cores and short SIMD loops busy: a larger batch gives each op more rows, "
              "and torch.set_num_threads should match the physical cores.")
    return title, advice, None


def _unfused_chain(s: _Seen) -> tuple[str, str, Fix | None]:
    wall, idx, records, exclusive = s.wall, s.idx, s.records, s.exclusive
    parts, chains, chain_of, evidence = s.parts, s.chains, s.chain_of, s.evidence
    pct, unit, gpu = s.pct, s.unit, s.gpu
    fix: Fix | None = None
    members = sorted({chain_of[i] for i in idx})
    saved_bytes = sum(chains[n][1] for n in members)
    count = sum(len(chains[n][0]) for n in members)
    new = {}
    for n in members:
        chain, chain_saved = chains[n]
        total_bytes = sum(records[i].bytes for i in chain) or 1.0
        keep = max(0.0, 1.0 - chain_saved / total_bytes)
        for k, i in enumerate(chain):
            t = parts[i].timing
            if t is None or records[i].duration_us <= 0:
                continue
            residual = t.residual(records[i].duration_us) if t.work_us > 0 else 1.0
            new[i] = (t.fixed_us if k == 0 else 0.0) + t.work_us * keep * max(residual, 1.0)
    saves = _saved(records, exclusive, [i for n in members for i in chains[n][0]], new)
    evidence.update({"chains": len(members), "chain_kernels": count, "saved_bytes": saved_bytes})
    title = (f"{len(members)} chain(s) of {count} consecutive memory-bound {unit} on the same tensors take {pct} "
             f"above their bound; fused they would not move {saved_bytes / 1e6:,.1f} MB of intermediates.")
    advice = (f"Fuse each chain into one {'kernel' if gpu else 'loop'}: torch.compile does it for elementwise, "
              "normalization and reduction chains.")
    fix = _fix("fuse", f"fuse these {count} {unit}", saves, wall, {"compile": "inductor"})
    return title, advice, fix


def _unfused_optimizer(s: _Seen) -> tuple[str, str, Fix | None]:
    wall, idx, parts, ev = s.wall, s.idx, s.parts, s.ev
    pct, unit = s.pct, s.unit
    fix: Fix | None = None
    title = f"The optimizer's per-parameter memory-bound {unit} take {pct} above their bound."
    advice = ("Use a fused optimizer (torch.optim.AdamW(..., fused=True), or foreach=True): one pass over all "
              "parameters instead of several per tensor.")
    saves = ev.get("fused_saving_us", sum(parts[i].over_us + parts[i].fixed_us * 0.9 for i in idx))
    fix = _fix("fused_optimizer", "fused optimizer", saves, wall)
    return title, advice, fix


def _bandwidth(s: _Seen) -> tuple[str, str, Fix | None]:
    pct, unit, gpu = s.pct, s.unit, s.gpu
    title = f"Memory-bound {unit} run below the bandwidth their size reaches for {pct}."
    advice = ("Strided or broadcast inputs and short rows keep these from streaming at full rate: make their "
              f"inputs contiguous, or let torch.compile generate vectorized {'kernels' if gpu else 'loops'}.")
    return title, advice, None


def _layout(s: _Seen) -> tuple[str, str, Fix | None]:
    wall, idx, records, exclusive = s.wall, s.idx, s.records, s.exclusive
    parts, evidence, pct, gpu = s.parts, s.evidence, s.pct, s.gpu
    step_settings, cause_id = s.step_settings, s.cause_id
    fix: Fix | None = None
    name = cause_id.split(".", 1)[1]
    saves = sum(exclusive[i] for i in idx)
    if cause_id == NCHW_NHWC:
        title = f"NCHW↔NHWC transposes around convolutions take {pct}."
        fmt = step_settings.memory_format or ""
        if fmt == "channels_last":
            advice = ("The model runs channels_last already: these come from ops without an NHWC kernel "
                      f"({', '.join(evidence['by_op_us'])}); keep their inputs in the layout they need.")
        else:
            norm_saves, norm_evidence = _nchw_norm_saving(records, exclusive, parts)
            evidence.update(norm_evidence)
            advice = ("Put the model and its inputs in channels_last (model.to(memory_format=torch.channels_last); "
                      "knob memory_format=channels_last): "
                      f"{'cuDNN' if gpu else 'oneDNN'} convolutions work in NHWC"
                      + (f", and the batch norms' NHWC kernels stream like the step's elementwise kernels "
                         f"(predicted -{norm_saves / 1e3:.2f} ms)" if norm_saves > 0 else "") + ".")
            fix = _fix("channels_last", "channels_last", saves + norm_saves, wall, {"memory_format": "channels_last"})
    elif name == "attention_heads":
        title = f"Copies splitting and merging attention heads take {pct}."
        advice = ("Keep q, k, v as [batch, heads, tokens, dim] views for scaled_dot_product_attention (which reads "
                  "strided inputs) and merge heads with one transpose(1, 2).reshape at the end, or torch.compile "
                  "the attention block to fuse the copies into its neighbours.")
        fix = _fix("remove_layout", "no head split/merge copies", saves, wall, {"compile": "inductor"})
    elif name == "view_fallback":
        title = f"reshape/flatten of non-contiguous tensors (a copy instead of a view) takes {pct}."
        advice = ("These reshape calls copy because their input is not contiguous: reorder the ops so the "
                  "reshape sees a contiguous tensor, or torch.compile the model.")
        fix = _fix("remove_layout", "no reshape copies", saves, wall, {"compile": "inductor"})
    else:
        title = f".contiguous() copies of permuted or sliced tensors take {pct}."
        advice = ("Keep tensors in the layout the next op reads, or torch.compile the model to fold the "
                  "permute into its consumer.")
        fix = _fix("remove_layout", "no permute copies", saves, wall, {"compile": "inductor"})
    return title, advice, fix


@dataclass(frozen=True)
class CauseRule:
    """One cause: its id, the waterfall part its time is counted in ("ideal": time inside the bound), and how
    it is put in words with its fix (title, advice, fix) from what was seen. :func:`step_causes` decides which
    kernels' time each takes; a new cause is one entry in :data:`RULES` and its kernels' assignment there."""

    id: CauseId
    part: str
    words: Callable[[_Seen], tuple[str, str, Fix | None]]


RULES: dict[str, CauseRule] = {rule.id: rule for rule in (
    CauseRule(CauseId.SMALL_KERNELS, Part.FIXED, _small_kernels),
    CauseRule(CauseId.PARTIAL_WAVE, "ideal", _partial_wave),
    CauseRule(CauseId.LIBRARY_RATE, Part.TENSOR, _library_rate),
    CauseRule(CauseId.KERNEL_CHOICE_GEMM, Part.TENSOR, _kernel_choice),
    CauseRule(CauseId.KERNEL_CHOICE_CONVOLUTION, Part.TENSOR, _kernel_choice),
    CauseRule(CauseId.FEW_TILES, Part.TENSOR, _few_tiles),
    CauseRule(CauseId.SPLIT_K, Part.TENSOR, _shape),
    CauseRule(CauseId.MISALIGNED, Part.TENSOR, _shape),
    CauseRule(CauseId.SKINNY, Part.TENSOR, _shape),
    CauseRule(CauseId.TILE_QUANTIZATION, Part.TENSOR, _shape),
    CauseRule(CauseId.DEPTHWISE, Part.FALLBACK, _shape),
    CauseRule(CauseId.GEMV, Part.MEMORY, _shape),
    CauseRule(CauseId.FP32_NO_TF32, Part.FALLBACK, _fp32_no_tf32),
    CauseRule(CauseId.BF16_UNUSED, "ideal", _bf16_unused),
    CauseRule(CauseId.CPU_SIMD, Part.FALLBACK, _simd_under_use),
    CauseRule(CauseId.UNFUSED_CHAIN, Part.MEMORY, _unfused_chain),
    CauseRule(CauseId.UNFUSED_OPTIMIZER, Part.MEMORY, _unfused_optimizer),
    CauseRule(CauseId.BANDWIDTH, Part.MEMORY, _bandwidth),
    CauseRule(CauseId.NCHW_NHWC, Part.LAYOUT, _layout),
    CauseRule(CauseId.ATTENTION_HEADS, Part.LAYOUT, _layout),
    CauseRule(CauseId.PERMUTE_CONTIGUOUS, Part.LAYOUT, _layout),
    CauseRule(CauseId.VIEW_FALLBACK, Part.LAYOUT, _layout),
)}


def _describe(cause_id: str, us: float, wall: float, idx: list[int], records: Sequence[KernelRecord],
              exclusive: Sequence[float], parts: Sequence[attribution.KernelPart], pricing: Pricing,
              settings: Mapping[str, Any], kind: str, convolutions: bool, chains: list[tuple[list[int], float]],
              chain_of: dict[int, int], ev: dict[str, Any], units: int | None) -> Cause | None:
    """The cause `cause_id` names for the kernels `idx` (their `us` above their bound), by its rule."""
    rule = RULES.get(cause_id)
    if rule is None:
        return None
    evidence: dict[str, Any] = {"by_op_us": _ops(records, idx, exclusive), "modules": _modules(records, idx),
                                "kernels": len(idx), **ev}
    seen = _Seen(cause_id, us, wall, idx, records, exclusive, parts, pricing, StepSettings.parse(settings), kind,
                 convolutions, chains, chain_of, ev, units, evidence)
    title, advice, fix = rule.words(seen)
    return Cause(cause_id, rule.part, us, round(us / wall, 4), idx, title, evidence, advice, fix)


def _idle_cause(part: str, us: float, wall: float, timeline: Timeline, settings: Mapping[str, Any], kind: str,
                kernels: int) -> Cause:
    pct = f"{100 * us / wall:.1f}% of the step ({us / 1e3:.2f} ms)"
    fix = None
    if kind == words.CPU:
        title = f"Framework time between ops (dispatch, autograd, Python) takes {pct}."
        advice = ("Fewer, larger ops: torch.compile removes most per-op dispatch, and a larger batch does more work "
                  "per op.")
        fix = _fix("compile", "torch.compile", us * 0.5, wall, {"compile": "inductor"})
        return Cause("cpu.framework", part, us, round(us / wall, 4), [], title, {"us": us}, advice, fix)
    graphs = StepSettings.parse(settings).cuda_graphs is True
    if part == Part.IDLE_SYNC:
        title = f"The host waits on the device (.item(), .cpu(), synchronize) for {pct}."
        advice = ("Remove the synchronizing calls from the step or move them to every Nth step; a step that "
                  "synchronizes cannot be captured in a CUDA graph.")
        return Cause("sync", part, us, round(us / wall, 4), [], title, {"sync_us": us}, advice, None)
    if part == Part.IDLE_LAUNCH:
        title = f"Launch gaps between {kernels} short kernels take {pct}."
    else:
        title = f"The GPU idles waiting on the host to launch for {pct}."
    if graphs:
        advice = "The step is already one CUDA graph: what is left is host work outside it, or a larger batch."
    else:
        advice = ("Capture the step in a CUDA graph (torch.cuda.graphs, or torch.compile(mode='reduce-overhead'); "
                  "knob cuda_graphs=on) so its kernels launch back to back, or raise the batch.")
        if timeline.idle.sync_us <= 0:
            fix = _fix("cuda_graphs", "CUDA graphs", us, wall, {"cuda_graphs": "on"})
    return Cause("launch_gaps" if part == Part.IDLE_LAUNCH else "host_bound", part, us, round(us / wall, 4), [], title,
                 {"us": us}, advice, fix)
