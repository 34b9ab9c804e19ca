"""The words for kernel classes, waterfall parts and idle causes, by the kind of device.

Documents keep the neutral ids (``vector_math``, ``idle_host_bound``); what a person reads
comes from here, so a CPU run speaks of SIMD units, ops and framework overhead, a GPU run
of tensor cores, CUDA cores, kernels and launches.
"""

from __future__ import annotations

from pygpuperf.core.vocabulary import KernelClass, Part

GPU, CPU = "gpu", "cpu"

# id -> (GPU words, CPU words): table labels.
_LABELS: dict[str, tuple[str, str]] = {
    KernelClass.TENSOR_GEMM: ("tensor-core GEMM/conv", "matrix-unit GEMM/conv"),
    KernelClass.VECTOR_MATH: ("CUDA-core math", "SIMD math"),
    KernelClass.MEMORY_BOUND: ("memory-bound", "memory-bound"),
    KernelClass.LAYOUT: ("layout transforms", "layout copies"),
    KernelClass.MEMCPY: ("memcpy/memset", "memcpy/memset"),
    KernelClass.COMMUNICATION: ("communication", "communication"),
    KernelClass.OTHER: ("other kernels", "other ops"),
    Part.FIXED: ("fixed cost per kernel", "fixed cost per op"),
    Part.TENSOR: ("tensor-core under-use", "matrix-unit under-use"),
    Part.MEMORY: ("memory-bound under-use", "memory-bound under-use"),
    Part.FALLBACK: ("non-tensor fallback", "SIMD math under-use"),
    Part.OTHER: ("kernels with no bound", "ops with no bound"),
    Part.IDLE_HOST: ("idle: host-bound", "framework time between ops"),
    Part.IDLE_LAUNCH: ("idle: launch gaps", "dispatch gaps"),
    Part.IDLE_SYNC: ("idle: synchronization", "waiting on other threads"),
    Part.UNEXPLAINED: ("unexplained", "unexplained"),
}
# id -> (GPU words, CPU words): how a category reads inside a sentence.
_SENTENCE: dict[str, tuple[str, str]] = {
    KernelClass.TENSOR_GEMM: ("tensor-core GEMMs and convolutions", "matrix-unit GEMMs and convolutions"),
    KernelClass.VECTOR_MATH: ("CUDA-core math", "SIMD math"),
    KernelClass.MEMORY_BOUND: ("memory-bound kernels", "memory-bound ops"),
    KernelClass.LAYOUT: ("layout transforms", "layout copies"),
    KernelClass.MEMCPY: ("copies and fills", "copies and fills"),
    KernelClass.COMMUNICATION: ("communication", "communication"),
    KernelClass.OTHER: ("unclassified kernels", "unclassified ops"),
    Part.IDLE_HOST: ("host-bound idle", "framework time between ops"),
    Part.IDLE_LAUNCH: ("launch gaps", "dispatch gaps"),
    Part.IDLE_SYNC: ("synchronization", "waiting"),
    Part.UNEXPLAINED: ("unexplained time", "unexplained time"),
}
# Parts a CPU step cannot have (no launches, no device to wait on): left out of what it shows.
_NOT_ON_CPU = (Part.IDLE_LAUNCH, Part.IDLE_SYNC)
# The part names of explain.json files written before the ids, by their id.
LEGACY_PARTS = {"tensor-core under-use": Part.TENSOR, "memory-bound under-use": Part.MEMORY,
                "non-tensor fallback": Part.FALLBACK, "layout transforms": Part.LAYOUT,
                "memcpy/memset": Part.MEMCPY, "other kernels": Part.OTHER, "idle: host-bound": Part.IDLE_HOST,
                "idle: launch gaps": Part.IDLE_LAUNCH, "idle: synchronization": Part.IDLE_SYNC}


def kind_of(device: str) -> str:
    """CPU for a step profiled on "cpu", GPU for every accelerator."""
    return CPU if str(device).strip().lower().startswith("cpu") else GPU


def label(key: str, kind: str = GPU) -> str:
    """A class, part or idle cause as a table or chart shows it."""
    words = _LABELS.get(key)
    return key if words is None else words[kind == CPU]


def in_words(key: str, kind: str = GPU) -> str:
    """A category as a sentence names it."""
    words = _SENTENCE.get(key)
    return key if words is None else words[kind == CPU]


def shown(key: str, kind: str) -> bool:
    """Whether a part belongs in what a device kind's report shows."""
    return not (kind == CPU and key in _NOT_ON_CPU)


def unit(kind: str, plural: bool = False) -> str:
    """What a record of the step is: a kernel on a GPU, an op on a CPU."""
    word = "kernel" if kind == GPU else "op"
    return word + "s" if plural else word


def calls(kind: str) -> str:
    return "launches" if kind == GPU else "calls"
