"""Kernel class and precision from a kernel's name, the op that launched it and its dtypes.

An ordered rule table decides the class: the first rule whose name pattern matches (and
whose op condition, if any, holds) wins. Library GEMM/convolution names carry their types
(cuBLAS/cuDNN `xmma` fields, CUTLASS `s16816gemm`-style instruction tags, cuBLASLt `nvjet`
letters), so a tensor-core kernel's precision ("fp16.acc32") comes from the name where it
can and from the op's dtypes and the math settings of the run where it cannot.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pygpuperf.core.precision import dtype_of, precision_in_kernel_name, precision_of
from pygpuperf.explain.model import KernelRecord
from pygpuperf.core.vocabulary import KernelClass


@dataclass(frozen=True)
class MathSettings:
    """The backend switches that change which math a GEMM or convolution runs on.

    Defaults are torch's own: cuBLAS fp32 matmuls stay fp32, cuDNN fp32 convolutions may
    use TF32, fp16 matmuls accumulate in fp32.
    """

    matmul_tf32: bool = False  # torch.backends.cuda.matmul.allow_tf32
    cudnn_tf32: bool = True  # torch.backends.cudnn.allow_tf32
    fp16_accumulation: bool = False  # torch.backends.cuda.matmul.allow_fp16_accumulation

    @classmethod
    def current(cls) -> MathSettings:
        """The settings in force now (read at capture time: they can change between runs)."""
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # allow_tf32 getters may warn about the fp32_precision API
            matmul = torch.backends.cuda.matmul
            return cls(
                matmul_tf32=bool(getattr(matmul, "allow_tf32", False)),
                cudnn_tf32=bool(getattr(torch.backends.cudnn, "allow_tf32", True)),
                fp16_accumulation=bool(getattr(matmul, "allow_fp16_accumulation", False)),
            )


@dataclass(frozen=True)
class KernelContext:
    """What the trace knows about a launch beyond the record itself."""

    op_stack: tuple[str, ...] = ()  # enclosing ops, outermost first (the record's op is innermost)
    layout_copy: bool = False  # the launching copy moved data between different strides
    settings: MathSettings = field(default_factory=MathSettings)


# Ops whose kernels are GEMMs or convolutions, for kernels no name rule recognizes.
_MATH_OPS = re.compile(
    r"^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|_scaled_mm|_int_mm|"
    r"conv\w*|_convolution\w*|cudnn_convolution\w*|convolution\w*|mkldnn_convolution|"
    r"_scaled_dot_product\w*|scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*|"
    r"_native_multi_head_attention|_cudnn_rnn\w*|mkldnn_rnn_layer\w*|lstm|gru|rnn_tanh|rnn_relu)$"
)
_CONV_OPS = re.compile(r"conv", re.I)
BATCH_NORM_OPS = re.compile(r"batch_norm", re.I)  # cudnn_batch_norm, native_batch_norm and their backward
# Ops that exist to change a tensor's memory layout; any copy they launch is a layout change.
_LAYOUT_OPS = re.compile(r"^aten::(?:contiguous|permute_copy|transpose_copy|_nnpack_\w+)$")


def _ops(record: KernelRecord, ctx: KernelContext) -> tuple[str, ...]:
    stack = ctx.op_stack
    if record.op and (not stack or stack[-1] != record.op):
        stack = (*stack, record.op)
    return stack


def _under(pattern: re.Pattern[str]) -> Callable[[KernelRecord, KernelContext], bool]:
    return lambda record, ctx: any(pattern.search(op) for op in _ops(record, ctx))


def _layout_copy(record: KernelRecord, ctx: KernelContext) -> bool:
    return ctx.layout_copy or _under(_LAYOUT_OPS)(record, ctx)


def _math_op(record: KernelRecord, ctx: KernelContext) -> bool:
    return _under(_MATH_OPS)(record, ctx)


# --- types ---------------------------------------------------------------------------------

# Type spellings in library kernel names -> input precision; accumulator widths in bits.
_INPUT = {
    "f16": "fp16", "fp16": "fp16", "h": "fp16",
    "bf16": "bf16", "t": "bf16", "b": "bf16",
    "tf32": "tf32",
    "f32": "fp32", "fp32": "fp32", "s": "fp32",
    "f64": "fp64", "fp64": "fp64", "d": "fp64",
    "e4m3": "fp8", "e5m2": "fp8", "f8": "fp8", "fp8": "fp8", "q": "fp8", "e": "fp8",
    "s8": "int8", "u8": "int8", "i8": "int8", "int8": "int8", "i": "int8",
}  # fmt: skip
_ACC_BITS = {
    "f16": 16, "fp16": 16, "h": 16, "f32": 32, "fp32": 32, "s": 32, "tf32": 32,
    "s32": 32, "i32": 32, "i": 32, "f64": 64, "d": 64,
}  # fmt: skip

_XMMA_TYPE = r"(?:bf16|tf32|f16|f32|f64|e4m3|e5m2|s8|u8|i8|s32|i32)"
# sm80_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_...: inputs A B, then C/D and accumulator.
_XMMA = re.compile(rf"xmma_[a-z_]*?_((?:{_XMMA_TYPE}){{2}})_((?:{_XMMA_TYPE}){{2}})_")
# cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_...: A, B, accumulator, C, D.
_CUTLASS3 = re.compile(
    rf"cutlass3x_sm\d+_\w*?(?:gemm|conv\w*?|fprop|dgrad|wgrad)_({_XMMA_TYPE})_({_XMMA_TYPE})_({_XMMA_TYPE})_"
)
# CUTLASS 2 / cuBLAS / cuDNN instruction-tagged names: [out_]<acc letter><mma shape>gemm|cudnn_<A>,
# e.g. cutlass_80_tensorop_f16_s16816gemm_relu_f16_..., ampere_fp16_s16816gemm_fp16_...,
# volta_fp16_s884cudnn_fp16_..., cutlass_tensorop_s1688tf32gemm_...
_MMA_TAG = re.compile(
    r"(?:^|[_:<\s])(?:(?P<out>bf16|fp16|f16|fp32|f32|tf32|s8|i8|int8)_)?(?P<acc>[shid])"
    r"(?P<shape>884|8816|8832|1688|16816|16832|161616|\d{3,6})(?P<tf32>tf32)?(?:gemm|cudnn|fprop|dgrad|wgrad)"
    r"(?:_(?:relu|bias|grouped|fast|analytic|optimized))*"
    r"(?:_(?P<a>bf16|fp16|f16|tf32|fp32|f32|s8|u8|i8|int8|e4m3|e5m2))?"
)
# nvjet_[smXX_]<letters>_...: 3 letters = inputs, accumulator, output (nvjet_hsh: fp16 in,
# fp32 accumulate, fp16 out); 5 letters = A, B, C, accumulator, D (nvjet_sm90_qqtst: fp8
# inputs, bf16 C/D, fp32 accumulate).
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]{3,5})_")


def _tensor_types(name: str) -> tuple[str | None, int | None]:
    """(input precision, accumulator bits) as far as a library GEMM/conv name spells them."""
    if m := _NVJET.search(name):
        letters = m.group(1)
        return _INPUT.get(letters[0]), _ACC_BITS.get(letters[-2])
    if m := _XMMA.search(name):
        ab = re.findall(_XMMA_TYPE, m.group(1))
        cd = re.findall(_XMMA_TYPE, m.group(2))
        a = "tf32" if "tf32" in ab + cd else ab[0]
        return _INPUT[a], _ACC_BITS.get(cd[-1])
    if m := _CUTLASS3.search(name):
        a, _b, acc = m.groups()
        return _INPUT[a], _ACC_BITS.get(acc)
    if m := _MMA_TAG.search(name):
        a = "tf32" if m.group("tf32") else (m.group("a") or m.group("out"))
        return _INPUT.get(a or ""), _ACC_BITS[m.group("acc")]
    return None, None


def _data_precision(record: KernelRecord) -> str:
    """Precision of the data a kernel works on: op dtypes first, then the kernel name."""
    for dtype in record.dtypes:
        if isinstance(dtype, str) and (precision := precision_of(dtype)):
            return precision
    return precision_in_kernel_name(record.name) or ""


def _fp32_on_tensor_cores(record: KernelRecord, ctx: KernelContext) -> bool:
    """Whether an fp32 GEMM/conv of this op may run as TF32 under the run's settings."""
    conv = any(_CONV_OPS.search(op) for op in _ops(record, ctx))
    return ctx.settings.cudnn_tf32 if conv else ctx.settings.matmul_tf32


def _math_from_dtype(record: KernelRecord, ctx: KernelContext) -> tuple[str, str]:
    """A GEMM/conv whose name does not spell its types: the op's dtypes and settings decide."""
    data = _data_precision(record)
    if data == "fp16":
        return KernelClass.TENSOR_GEMM, "fp16.acc16" if ctx.settings.fp16_accumulation else "fp16.acc32"
    if data in ("bf16", "fp8", "int8"):
        return KernelClass.TENSOR_GEMM, f"{data}.acc32"
    if data == "fp32" and _fp32_on_tensor_cores(record, ctx):
        return KernelClass.TENSOR_GEMM, "tf32.acc32"
    if data == "":
        return KernelClass.TENSOR_GEMM, ""  # a GEMM of unknown dtype: tensor cores are the likelier home
    return KernelClass.VECTOR_MATH, data


# --- precision resolvers: (record, context, name match) -> (class, precision) ------------------


_TENSOR_INSTRUCTION = re.compile(r"tensorop|TensorOp|tfloat32|(?:^|[_:<\s])[shi](?:1688|16816|16832)(?:gemm|fprop|dgrad|wgrad)")


def _tensor(record: KernelRecord, ctx: KernelContext, m: re.Match[str]) -> tuple[str, str]:
    precision, acc = _tensor_types(record.name)
    if precision is None:
        kernel_class, from_dtype = _math_from_dtype(record, ctx)
        if kernel_class == KernelClass.VECTOR_MATH and from_dtype == "fp32" and _TENSOR_INSTRUCTION.search(record.name):
            return KernelClass.TENSOR_GEMM, "tf32.acc32"  # fp32 data on a kernel named for a tensor-core instruction
        if acc is None or kernel_class != KernelClass.TENSOR_GEMM or not from_dtype:
            return kernel_class, from_dtype
        # The name spells the accumulator (ampere_h16816gemm: fp16) but not the inputs.
        return KernelClass.TENSOR_GEMM, f"{from_dtype.split('.')[0]}.acc{acc}"
    if precision == "fp32":
        # An fp32 operand with no tf32 in the name: torch asks cuBLAS/cuDNN for IEEE fp32
        # unless TF32 is allowed, so without it this runs on the CUDA cores. A name that spells a
        # tensor-core instruction (cutlass_80_tensorop_s1688gemm) ran on them whatever the switches.
        if not _TENSOR_INSTRUCTION.search(record.name) and not _fp32_on_tensor_cores(record, ctx):
            return KernelClass.VECTOR_MATH, "fp32"
        precision = "tf32"
    if precision == "fp64":
        return KernelClass.TENSOR_GEMM, "fp64.acc64"
    return KernelClass.TENSOR_GEMM, f"{precision}.acc{acc or 32}"


def _tensor_by_dtype(record: KernelRecord, ctx: KernelContext, m: re.Match[str]) -> tuple[str, str]:
    return _math_from_dtype(record, ctx)


def _vector_math(record: KernelRecord, ctx: KernelContext, m: re.Match[str]) -> tuple[str, str]:
    # The first named group that matched holds the BLAS-style type letter (s, h, d).
    letter = next((v[0].lower() for v in m.groupdict().values() if v), "")
    return KernelClass.VECTOR_MATH, {"s": "fp32", "h": "fp16", "d": "fp64"}.get(letter, "") or _data_precision(record)


def _fixed(kernel_class: str) -> Callable[[KernelRecord, KernelContext, re.Match[str]], tuple[str, str]]:
    return lambda record, ctx, m: (kernel_class, "")


def _with_data(kernel_class: str) -> Callable[[KernelRecord, KernelContext, re.Match[str]], tuple[str, str]]:
    return lambda record, ctx, m: (kernel_class, _data_precision(record))


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]  # searched in the kernel name
    resolve: Callable[[KernelRecord, KernelContext, re.Match[str]], tuple[str, str]]
    when: Callable[[KernelRecord, KernelContext], bool] | None = None  # op condition, if any


def _rule(pattern: str, resolve, when=None, flags: int = 0) -> Rule:  # type: ignore[no-untyped-def]
    return Rule(re.compile(pattern, flags), resolve, when)


_I = re.IGNORECASE

RULES: tuple[Rule, ...] = (
    # Copies and fills done by the copy engines or the driver (kineto names them this way).
    _rule(r"^(?:Memcpy|Memset)\b", _fixed(KernelClass.MEMCPY)),
    # A library zeroing its own workspace before a GEMM/convolution (cuDNN's cask init_device_workspace_kernel
    # in H200 traces): a fill, however its template names the GEMM it prepares.
    _rule(r"init_device_workspace|workspace_init|zero_workspace", _fixed(KernelClass.MEMCPY), flags=_I),
    # NCCL/RCCL collectives and point-to-point, and torch's symmetric-memory collectives.
    _rule(r"nccl|rccl|(?:one|two)_shot_all_reduce|multimem_all_reduce", _fixed(KernelClass.COMMUNICATION), flags=_I),
    # CUTLASS split-K reductions: a streaming sum of partial GEMM tiles, whatever GEMM their template names.
    _rule(r"ReduceSplitK|reduction::kernel::Reduce", _with_data(KernelClass.MEMORY_BOUND)),
    # FFMA kernels of the GEMM libraries (CUTLASS SIMT, xmma ffma): CUDA cores, whatever
    # family name they carry, so this goes before the tensor-core families.
    _rule(r"_simt_(?P<t>[shd])?|ffma|OpClassSimt", _vector_math),
    # cuBLASLt Hopper+ GEMMs; the letters after nvjet_ spell the types.
    _rule(r"nvjet_", _tensor),
    # cuBLAS/cuDNN xmma GEMMs and implicit-GEMM convolutions (fprop, dgrad, wgrad).
    _rule(r"xmma_(?:gemm|fprop|dgrad|wgrad|conv|implicit)", _tensor),
    # CUTLASS 3 (sm90+) and CUTLASS 2 tensor-op GEMMs/convolutions.
    _rule(r"cutlass3x_\w*tensorop|cutlass\w*tensorop|wmma_tensorop", _tensor),
    # CUTLASS templates spelled out by their C++ type (torch's rowwise-scaled mm, extensions).
    _rule(r"OpClassTensorOp|cutlass::gemm::kernel::|cutlass::conv::kernel::", _tensor_by_dtype),
    # Mangled CUTLASS GEMM/convolution kernels (cuDNN's cutlass__5x_cudnn): their template arguments
    # name tensor-op tile layouts or tf32 for tensor cores; otherwise they are SIMT. Checked before the
    # layout rules, as those arguments also spell "Permute" and "Transpose".
    _rule(r"ImplicitGemmConvolution|4gemm6kernel|4conv6kernel", lambda r, ctx, m: (
        _tensor(r, ctx, m) if _TENSOR_INSTRUCTION.search(r.name) else _vector_math(r, ctx, m))),
    # cuBLAS/cuDNN kernels tagged with a tensor-core instruction: ampere_fp16_s16816gemm_...,
    # volta_fp16_s884cudnn_fp16_..., turing_fp16_s1688cudnn_fp16_... (acc letter + mma shape).
    _rule(r"(?:^|[_:<\s])[shi](?:884|8816|8832|1688|16816|16832|161616)(?:tf32)?(?:gemm|cudnn|fprop|dgrad|wgrad)",
          _tensor),
    # Fused attention (flash, memory-efficient, cuDNN SDPA): tensor-core math in the op's dtype.
    _rule(r"flash_fwd|flash_bwd|flash::|fmha|flash_attn|_sdpa|sdpa_|attention_kernel", _tensor_by_dtype, flags=_I),
    # torch.compile/Triton GEMM and convolution templates.
    _rule(r"^triton_tem_", _tensor_by_dtype),
    # BLAS-style CUDA-core GEMMs and convolutions: ampere_sgemm_*, volta_scudnn_*,
    # maxwell_scudnn_winograd_*, cudnn's implicit_convolve_sgemm / implicit_convolve_hhgemm.
    _rule(r"(?:implicit|precomputed|explicit)_convolve_(?P<t>[shd])", _vector_math),
    _rule(r"(?:^|[^a-z0-9])(?P<t>[shd])(?:gemm|cudnn)(?:_|<|\b)", _vector_math),
    # cuBLAS GEMV and skinny-GEMM kernels run on the CUDA cores.
    _rule(r"gemv|gemmSN|gemmk1|dot_kernel", _vector_math, flags=_I),
    # cuDNN non-GEMM convolution algorithms (direct, FFT, Winograd) and their transforms.
    _rule(r"wgrad_alg\d|dgrad_engine|dgrad2d_alg|dgrad_alg|fft2d|fft1d|fft_|winograd|flip_filter", _vector_math),
    # ATen depthwise and direct convolutions (no library GEMM behind them).
    _rule(r"conv_depthwise|depthwise_conv|DepthwiseConv|slow_conv|conv2d_grouped_direct", _vector_math),
    # cuBLAS split-K and cuDNN weight-gradient partial-sum reductions after a GEMM: a streaming
    # pass over the output (cudnn::cnn::reduce_wgrad_nchw_helper seen in H200 traces).
    _rule(r"splitKreduce|split_k_reduce|splitk_reduce|reduce_wgrad", _with_data(KernelClass.MEMORY_BOUND), flags=_I),
    # cuDNN bookkeeping for implicit convolution (offset tables), not data movement or math.
    _rule(r"computeOffsetsKernel|computeBOffsets", _fixed(KernelClass.OTHER)),
    # Explicit layout kernels: cuDNN/ATen NCHW<->NHWC, transposes, tensor format conversion,
    # im2col-style unfolding for direct convolutions.
    _rule(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw|NCHWtoNHWC|NHWCtoNCHW", _fixed(KernelClass.LAYOUT), flags=_I),
    # cuDNN's channel padding and folded-NHWC conversions around a convolution (H200 traces).
    _rule(r"nhwcAddPadding|FoldedNhwc", _fixed(KernelClass.LAYOUT), flags=_I),
    # Streaming helpers inside library ops: cuBLASLt epilogues, cuDNN tensor scaling, and the
    # dot(dO, O) and dQ conversion passes of cuDNN's attention backward (H200 traces).
    _rule(r"epilogue::impl::globalKernel|scalePackedTensor|compute_dot_do_o|convert_dq_to", _with_data(KernelClass.MEMORY_BOUND)),
    _rule(r"transpose|convertTensor|permute|im2col|col2im|vol2col|col2vol", _fixed(KernelClass.LAYOUT), flags=_I),
    # Concatenation: a streaming copy of every input (checked before the generic copy rules).
    _rule(r"CatArray|cat_array|CatBatched", _with_data(KernelClass.MEMORY_BOUND), flags=_I),
    # Copy kernels launched to change layout (.contiguous(), channels_last .to(), strided copy_).
    _rule(r"copy", _fixed(KernelClass.LAYOUT), when=_layout_copy, flags=_I),
    # Any other copy: a cast or a same-layout copy, bandwidth-bound.
    _rule(r"copy", _with_data(KernelClass.MEMORY_BOUND), flags=_I),
    # Fused optimizers: multi-tensor apply over all parameters (foreach/fused
    # SGD, Adam...); their functor names would match the elementwise rule below.
    _rule(r"multi_tensor_apply|fused_adam|fused_sgd|FusedAdam|foreach", _with_data(KernelClass.MEMORY_BOUND), flags=_I),
    # ATen elementwise and reduction templates (activations, adds, fills, casts, sums, losses).
    _rule(r"elementwise_kernel|reduce_kernel|ReduceOp|pointwise|Functor", _with_data(KernelClass.MEMORY_BOUND), flags=_I),
    # Normalization: batch norm (ATen and cuDNN bn_fw/bn_bw), layer/group/RMS norm.
    _rule(r"batch_norm|batchnorm|bn_fw|bn_bw|cudnn::bn_|layer_norm|layernorm|LayerNorm|group_norm|"
          r"rms_norm|RowwiseMoments|GammaBeta|ComputeFusedParams|ComputeGradientFusedParams|"
          r"ComputeInternalGradients|welford", _with_data(KernelClass.MEMORY_BOUND), flags=_I),
    # cuDNN RNN pointwise passes (gate activations between the GEMMs, forward and backward).
    _rule(r"(?:LSTM|GRU|RNN)_elementWise_[fb]p|elemWiseRNNcell", _with_data(KernelClass.MEMORY_BOUND), flags=_I),
    # Softmax, pooling, losses, embedding, indexing, scatter/gather, dropout, upsampling.
    _rule(r"softmax|max_pool|avg_pool|maxpool|avgpool|adaptive_|pool2d|pool3d|nll_loss|cross_entropy|"
          r"embedding|index|scatter|gather|dropout|upsample|interpolate|sort|topk|cumsum|"
          r"bitonic|radix|unique|masked|where_kernel|fill", _with_data(KernelClass.MEMORY_BOUND), flags=_I),
    # torch.compile/Triton pointwise, reduction and persistent-reduction kernels.
    _rule(r"^triton_(?:poi|red|per)_", _with_data(KernelClass.MEMORY_BOUND)),
    # A kernel no rule names, launched by a GEMM/conv op: math in the op's dtype.
    _rule(r".", _tensor_by_dtype, when=_math_op),
    # Remaining ATen-native kernels: ATen's own CUDA kernels are elementwise, reductions,
    # normalization and indexing; its math goes through the libraries matched above.
    _rule(r"at::native::|at_cuda_detail|(?:^|[^a-z])cunn_|(?:^|[^a-z])cub::", _with_data(KernelClass.MEMORY_BOUND)),
)


def classify(record: KernelRecord, context: KernelContext | None = None) -> tuple[str, str]:
    """(kernel class, precision) of one kernel; precision is "" where no ceiling depends on it.

    Tensor-core classes carry "<input>.acc<bits>" ("fp16.acc32", "tf32.acc32"), CUDA-core math
    and memory-bound classes the data precision ("fp32", "bf16"), the rest "".
    """
    ctx = context or KernelContext()
    for rule in RULES:
        m = rule.pattern.search(record.name)
        if m and (rule.when is None or rule.when(record, ctx)):
            cls, precision = rule.resolve(record, ctx, m)
            if cls in (KernelClass.TENSOR_GEMM, KernelClass.VECTOR_MATH) and is_matrix_vector(record):
                return KernelClass.MEMORY_BOUND, dtype_of(precision) if precision else precision
            return cls, precision
    return KernelClass.OTHER, ""


# The aten ops that are one matrix product (their kernels are the GEMMs the shape rules read).
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")

def has_convolutions(records: Sequence[KernelRecord]) -> bool:
    """Whether any of the step's math kernels is a convolution's (what channels_last and cuDNN advice need)."""
    return any("conv" in r.op.lower() for r in records if r.kernel_class in (KernelClass.TENSOR_GEMM, KernelClass.VECTOR_MATH))


# A GEMM with this few rows or columns streams its matrix once for a handful of FLOPs per byte:
# memory-bound on every card, whichever library runs it (cuBLAS gemv, a GEMM kernel, a split-K).
GEMV_MAX_DIM = 16


def is_matrix_vector(record: KernelRecord) -> bool:
    """Whether the record's GEMM is a matrix-vector product (or a few vectors: decode with a small batch)."""
    from pygpuperf.explain.tiles import output_shape

    if record.op not in MATMUL_OPS:
        return False  # a convolution with few channels still runs as a GEMM over its pixels
    shape = output_shape(record)
    return shape is not None and min(shape[1], shape[2]) <= GEMV_MAX_DIM



def classify_all(records: Sequence[KernelRecord], context: KernelContext | None = None) -> None:
    """Set kernel_class and precision on every record (one shared context)."""
    for record in records:
        record.kernel_class, record.precision = classify(record, context)
