"""The one table of numeric precisions: names, element sizes, which cards run each on their matrix
units, and what runs instead where a card lacks one; and every spelling of a dtype that the
profiler, torch and kernel names use.

Ceiling keys name a precision with its accumulate type where it has one: ``fp16.acc32``
(tensor cores), ``fp16x2`` (packed CUDA-core math), ``fp32`` (plain). :func:`dtype_of` and
:func:`accumulate_of` take such a key apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str
    element_bytes: int
    # NVIDIA compute capability from which the matrix units (tensor cores) take it; None: never.
    matrix_since: tuple[int, int] | None
    # What runs instead on a card that lacks it: bf16 runs as fp16 on Volta and Turing, TF32 as
    # plain fp32 on the vector units before Ampere, fp8 as fp16 before Ada and Hopper.
    fallback: str | None
    torch_dtype: str | None  # torch's name of the dtype that holds it


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp64", 8, (8, 0), None, "float64"),
    Precision("fp32", 4, None, None, "float32"),
    Precision("tf32", 4, (8, 0), "fp32", "float32"),  # fp32 data, tensor-core math
    Precision("bf16", 2, (8, 0), "fp16", "bfloat16"),
    Precision("fp16", 2, (7, 0), "fp32", "float16"),
    Precision("fp8", 1, (8, 9), "fp16", "float8_e4m3fn"),
    Precision("int8", 1, (7, 5), "fp16", "int8"),
)}

# Every spelling of a dtype the profiler ("c10::Half", "float"), torch ("float16") or the project
# ("fp16") uses -> (bytes per element, precision or None for integer and boolean data).
DTYPES: dict[str, tuple[int, str | None]] = {
    **dict.fromkeys(("double", "float64", "fp64"), (8, "fp64")),
    **dict.fromkeys(("float", "float32", "fp32", "tf32"), (4, "fp32")),
    **dict.fromkeys(("c10::half", "half", "float16", "fp16"), (2, "fp16")),
    **dict.fromkeys(("c10::bfloat16", "bfloat16", "bf16"), (2, "bf16")),
    **dict.fromkeys(("c10::float8_e4m3fn", "c10::float8_e5m2", "c10::float8_e4m3fnuz", "c10::float8_e5m2fnuz",
                     "c10::float8_e8m0fnu", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                     "float8_e8m0fnu", "fp8"), (1, "fp8")),
    **dict.fromkeys(("long int", "long", "int64"), (8, None)),
    **dict.fromkeys(("int", "int32", "unsigned int", "uint32"), (4, None)),
    **dict.fromkeys(("short int", "short", "int16"), (2, None)),
    **dict.fromkeys(("signed char", "int8"), (1, "int8")),
    **dict.fromkeys(("unsigned char", "uint8"), (1, "int8")),
    "bool": (1, None),
    **dict.fromkeys(("c10::complex<c10::half>", "complex32"), (4, None)),
    **dict.fromkeys(("c10::complex<float>", "complex64"), (8, None)),
    **dict.fromkeys(("c10::complex<double>", "complex128"), (16, None)),
}

# Element types as kernel template arguments spell them ("<c10::BFloat16, 4>", "Functor<float, 3>"):
# for kernels whose op recorded no dtype (tensor lists), in the order they are tried.
KERNEL_NAME_DTYPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"c10::BFloat16|__nv_bfloat16|\bbf16\b"), "bf16"),
    (re.compile(r"c10::Half|\b__half\b|\bhalf\b"), "fp16"),
    (re.compile(r"[<,(]\s*double\s*[,>)]|\bdouble\b"), "fp64"),
    (re.compile(r"[<,(]\s*float\s*[,>)]|\bfloat\b"), "fp32"),
)


def _spelling(dtype: str) -> str:
    return str(dtype).strip().lower().removeprefix("torch.")


def element_bytes(dtype: str) -> int | None:
    """Bytes per element of a dtype spelling; None if it names no tensor dtype ("Scalar", "TensorList")."""
    entry = DTYPES.get(_spelling(dtype))
    return entry[0] if entry else None


def precision_of(dtype: str) -> str | None:
    """The precision a dtype spelling holds ("c10::Half" -> "fp16"); None for integers, bools, non-dtypes."""
    entry = DTYPES.get(_spelling(dtype))
    return entry[1] if entry else None


def precision_in_kernel_name(name: str) -> str | None:
    """The floating-point element type a kernel's template arguments give away, else None."""
    for pattern, precision in KERNEL_NAME_DTYPES:
        if pattern.search(name):
            return precision
    return None


def dtype_of(key: str) -> str:
    """The precision of a ceiling key's precision part: 'fp16.acc32' -> 'fp16', 'fp16x2' -> 'fp16'."""
    return key.split(".", 1)[0].removesuffix("x2")


def accumulate_of(key: str) -> str:
    """'fp16.acc16' -> 'acc16'; a key without one accumulates in fp32 ('acc32')."""
    return key.split(".", 1)[1] if "." in key else "acc32"


def bytes_of(precision_key: str, default: int = 2) -> int:
    """Element size of a precision key's data ('bf16.acc32' -> 2)."""
    entry = PRECISIONS.get(dtype_of(precision_key))
    return entry.element_bytes if entry else default


def fallbacks(precision: str) -> list[str]:
    """What runs instead of `precision` where a card lacks it, in order: bf16 -> fp16 -> fp32."""
    chain: list[str] = []
    step = PRECISIONS.get(dtype_of(precision))
    while step is not None and step.fallback is not None and step.fallback not in chain:
        chain.append(step.fallback)
        step = PRECISIONS.get(step.fallback)
    return chain


def matrix_capable(precision: str, compute_capability: tuple[int, int]) -> bool:
    """Whether an NVIDIA GPU of this compute capability runs `precision` on its tensor cores."""
    entry = PRECISIONS.get(dtype_of(precision))
    return bool(entry and entry.matrix_since and compute_capability >= entry.matrix_since)
