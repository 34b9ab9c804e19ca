"""The words the analysis speaks in, as string enums.

Each member is its own JSON value (a ``str`` subclass), so documents keep the strings they always had while
the code names a member instead of spelling a string: a typo is an AttributeError, not a silent mismatch.
"""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A string enum that prints and formats as its value on every Python this package supports."""

    __str__ = str.__str__
    __format__ = str.__format__

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)


class KernelClass(StrEnum):
    """What a kernel does, in the order reports list them."""

    TENSOR_GEMM = "tensor_gemm"  # GEMM or convolution on the matrix units (tensor cores)
    VECTOR_MATH = "vector_math"  # GEMM/conv or other math on vector units: CUDA cores, CPU SIMD
    MEMORY_BOUND = "memory_bound"  # elementwise, normalization, pooling, softmax, reductions, optimizer
    LAYOUT = "layout"  # NCHW<->NHWC and other transposes, .contiguous()
    MEMCPY = "memcpy_memset"
    COMMUNICATION = "communication"
    OTHER = "other"


class Phase(StrEnum):
    """Where in a training step a kernel ran."""

    FORWARD = "forward"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"
    OTHER = "other"


class Part(StrEnum):
    """A part of the waterfall from the roofline ideal to the measured step."""

    FIXED = "fixed_cost"  # every kernel's fixed cost (launch ramp-up, tail): what it costs doing nothing
    TENSOR = "matrix_under_use"  # tensor_gemm kernels: time above their bound
    MEMORY = "memory_under_use"  # memory_bound kernels: time above their bound
    FALLBACK = "vector_fallback"  # vector_math kernels: time above their bound at the matrix units' ceiling
    LAYOUT = "layout"  # layout kernels: all their time (avoidable work)
    MEMCPY = "memcpy_memset"  # copies and fills: time above their bound
    COMMUNICATION = "communication"  # collectives: time above their bound
    OTHER = "no_bound"  # kernels with no bound: all their time
    IDLE_HOST = "idle_host_bound"
    IDLE_LAUNCH = "idle_launch_gaps"
    IDLE_SYNC = "idle_sync"
    UNEXPLAINED = "unexplained"


IDLE_PARTS = (Part.IDLE_HOST, Part.IDLE_LAUNCH, Part.IDLE_SYNC)


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class CauseId(StrEnum):
    """Why part of a step ran above its bound (the diagnosis names each stretch of time by one)."""

    SMALL_KERNELS = "small_kernels"
    PARTIAL_WAVE = "waves.partial_wave"
    FEW_TILES = "waves.few_tiles"
    LIBRARY_RATE = "library_rate"
    KERNEL_CHOICE_GEMM = "kernel_choice.gemm"
    KERNEL_CHOICE_CONVOLUTION = "kernel_choice.convolution"
    SPLIT_K = "shape.split_k"
    MISALIGNED = "shape.misaligned"
    SKINNY = "shape.skinny"
    TILE_QUANTIZATION = "shape.tile_quantization"
    DEPTHWISE = "shape.depthwise"
    GEMV = "shape.gemv"
    FP32_NO_TF32 = "precision.fp32_no_tf32"
    BF16_UNUSED = "precision.bf16_unused"
    CPU_SIMD = "cpu.simd_under_use"
    UNFUSED_CHAIN = "unfused_chain"
    UNFUSED_OPTIMIZER = "optimizer.unfused"
    BANDWIDTH = "bandwidth"
    NCHW_NHWC = "layout.nchw_nhwc"
    ATTENTION_HEADS = "layout.attention_heads"
    PERMUTE_CONTIGUOUS = "layout.permute_contiguous"
    VIEW_FALLBACK = "layout.view_fallback"
    LAUNCH_GAPS = "launch_gaps"
    HOST_BOUND = "host_bound"
    SYNC = "sync"
    CPU_FRAMEWORK = "cpu.framework"


class FixName(StrEnum):
    """What ``--try-fixes`` can apply, in the order it tries them."""

    TF32 = "tf32"
    CUDNN_BENCHMARK = "cudnn_benchmark"
    FP16_ACCUMULATION = "fp16_accumulation"
    AMP = "amp"
    CHANNELS_LAST = "channels_last"
    CUDA_GRAPHS = "cuda_graphs"
    COMPILE = "compile"
    COMPILE_REDUCE_OVERHEAD = "compile_reduce_overhead"
    BATCH_SIZE = "batch_size"


class Advice(StrEnum):
    """Fixes a cause can advise that ``--try-fixes`` times as one of :class:`FixName` (see its `trial`)."""

    FULL_WAVES = "full_waves"
    AMP_BF16 = "amp_bf16"
    FUSE = "fuse"
    FUSED_OPTIMIZER = "fused_optimizer"
    REMOVE_LAYOUT = "remove_layout"
