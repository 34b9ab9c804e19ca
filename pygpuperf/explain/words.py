"""The words for kernel classes, waterfall parts and idle causes, by the kind of device.

Documents keep the neutral ids (``vector_math``, ``idle_host_bound``); what a person reads
comes from here, so a CPU run speaks of SIMD units, ops and framework overhead, a GPU run
of tensor cores, CUDA cores, kernels and launches.
"""

from __future__ import annotations

from pygpuperf.explain.model import (COMMUNICATION, LAYOUT, MEMCPY, MEMORY_BOUND, OTHER, TENSOR_GEMM,
                                     VECTOR_MATH)

GPU, CPU = "gpu", "cpu"

# Waterfall parts, in the order they stack on top of the ideal; idle causes double as step categories.
PART_FIXED = "fixed_cost"  # every kernel's fixed cost (launch ramp-up, tail): what it costs doing nothing
PART_TENSOR = "matrix_under_use"  # tensor_gemm kernels: time above their bound
PART_MEMORY = "memory_under_use"  # memory_bound kernels: time above their bound
PART_FALLBACK = "vector_fallback"  # vector_math kernels: time above their bound at the matrix units' ceiling
PART_LAYOUT = "layout"  # layout kernels: all their time (avoidable work)
PART_MEMCPY = "memcpy_memset"  # copies and fills: time above their bound
PART_COMMUNICATION = "communication"  # collectives: time above their bound
PART_OTHER = "no_bound"  # kernels with no bound: all their time
IDLE_HOST = "idle_host_bound"
IDLE_LAUNCH = "idle_launch_gaps"
IDLE_SYNC = "idle_sync"
UNEXPLAINED = "unexplained"

# id -> (GPU words, CPU words): table labels.
_LABELS: dict[str, tuple[str, str]] = {
    TENSOR_GEMM: ("tensor-core GEMM/conv", "matrix-unit GEMM/conv"),
    VECTOR_MATH: ("CUDA-core math", "SIMD math"),
    MEMORY_BOUND: ("memory-bound", "memory-bound"),
    LAYOUT: ("layout transforms", "layout copies"),
    MEMCPY: ("memcpy/memset", "memcpy/memset"),
    COMMUNICATION: ("communication", "communication"),
    OTHER: ("other kernels", "other ops"),
    PART_FIXED: ("fixed cost per kernel", "fixed cost per op"),
    PART_TENSOR: ("tensor-core under-use", "matrix-unit under-use"),
    PART_MEMORY: ("memory-bound under-use", "memory-bound under-use"),
    PART_FALLBACK: ("non-tensor fallback", "SIMD math under-use"),
    PART_OTHER: ("kernels with no bound", "ops with no bound"),
    IDLE_HOST: ("idle: host-bound", "framework time between ops"),
    IDLE_LAUNCH: ("idle: launch gaps", "dispatch gaps"),
    IDLE_SYNC: ("idle: synchronization", "waiting on other threads"),
    UNEXPLAINED: ("unexplained", "unexplained"),
}
# id -> (GPU words, CPU words): how a category reads inside a sentence.
_SENTENCE: dict[str, tuple[str, str]] = {
    TENSOR_GEMM: ("tensor-core GEMMs and convolutions", "matrix-unit GEMMs and convolutions"),
    VECTOR_MATH: ("CUDA-core math", "SIMD math"),
    MEMORY_BOUND: ("memory-bound kernels", "memory-bound ops"),
    LAYOUT: ("layout transforms", "layout copies"),
    MEMCPY: ("copies and fills", "copies and fills"),
    COMMUNICATION: ("communication", "communication"),
    OTHER: ("unclassified kernels", "unclassified ops"),
    IDLE_HOST: ("host-bound idle", "framework time between ops"),
    IDLE_LAUNCH: ("launch gaps", "dispatch gaps"),
    IDLE_SYNC: ("synchronization", "waiting"),
    UNEXPLAINED: ("unexplained time", "unexplained time"),
}
# Parts a CPU step cannot have (no launches, no device to wait on): left out of what it shows.
_NOT_ON_CPU = (IDLE_LAUNCH, IDLE_SYNC)
# The part names of explain.json files written before the ids, by their id.
LEGACY_PARTS = {"tensor-core under-use": PART_TENSOR, "memory-bound under-use": PART_MEMORY,
                "non-tensor fallback": PART_FALLBACK, "layout transforms": PART_LAYOUT,
                "memcpy/memset": PART_MEMCPY, "other kernels": PART_OTHER, "idle: host-bound": IDLE_HOST,
                "idle: launch gaps": IDLE_LAUNCH, "idle: synchronization": IDLE_SYNC}


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
