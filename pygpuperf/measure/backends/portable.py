"""The portable backend: probes written with plain torch ops, for any torch device.

It measures what torch itself delivers (``copy_``, ``fill_``, ``sum``, ``matmul``,
host<->device and GPU<->GPU ``copy_``) on CPU, CUDA/ROCm, XPU and MPS, with no compiled code.
Each probe follows the same sequence as the native ones (csrc/core/probe.h):
setup -> poison -> warm-up -> timed samples -> verify -> teardown, driven by one
generic loop, :func:`run_probe`.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from pygpuperf.measure import pairs
from pygpuperf.core import torch_flags
from pygpuperf.measure.backends.base import Backend, memory_level
from pygpuperf.measure.probe import RunSettings
from pygpuperf.facts.cpu import cpu_cache_facts, host_memory_bytes
from pygpuperf.core.precision import PRECISIONS
from pygpuperf.core.results import Measurement
from pygpuperf.core.timing import synchronize
from pygpuperf.measure.probe import Params, Probe, Work, run_probe

MiB = 1 << 20
GiB = 1 << 30



# --------------------------------------------------------------------------- sizing helpers


def _reference_device(device: torch.device) -> torch.device:
    """Where float64 references are computed: MPS has no float64 and some XPUs lack it, so use the CPU there."""
    return device if device.type in ("cpu", "cuda") else torch.device("cpu")


def default_buffer_bytes(device: torch.device, sharers: int = 1) -> int:
    """Per-buffer size for memory probes: several times the last-level cache, so runs stream from memory.
    On a CPU, `sharers` processes measuring the host at once (fleet ranks) share its cache and its memory:
    each takes its share of both."""
    if device.type == "cpu":
        sharers = max(sharers, 1)
        size = max(4 * (cpu_cache_facts().get("l3_cache_bytes") or 32 * MiB) // sharers, 64 * MiB)
        host = host_memory_bytes()
        # A copy needs two buffers plus a reference; never take more than an eighth of RAM.
        return min(size, host // (8 * sharers)) if host else size
    props = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
    elif device.type == "xpu":
        props = torch.xpu.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    if l2 <= 0:
        return 256 * MiB
    # Same default as the native HBM probes (csrc/cuda/memory_probes.cpp), so both backends
    # stream buffers of the same size: max(8 x L2, 4 GiB), within an eighth of device memory.
    size = max(8 * l2, 4 * GiB)
    total = int(getattr(props, "total_memory", 0) or 0)
    return min(size, total // 8) if total else size


# --------------------------------------------------------------------------- memory probes

# Row length of the read probe's row sums: 2**16 values of at most 15 sum below 2**24,
# so every partial sum is an exactly representable float32 integer in any order.
_READ_ROW = 1 << 16
_FILL_VALUE = 7.0


# Scale and triad multiply by a small integer, so every result is an exact float32 integer.
_STREAM_SCALAR = 3
# Verification compares this many elements at a time, bounding its temporary memory.
_VERIFY_CHUNK = 16 * MiB


class MemoryProbe(Probe):
    """Streaming copy, read, write, scale or triad of fp32 buffers larger than the last-level cache."""

    _DESCRIPTIONS = {
        "copy": "dst.copy_(src) on fp32 buffers; reads and writes the buffer once",
        "read": "row sums torch.sum(src, dim=1) into a small preallocated output; counts the read only",
        "write": "dst.fill_(value) on an fp32 buffer; counts the write only",
        "scale": f"torch.mul(a, {_STREAM_SCALAR}, out=b) on fp32 buffers; reads a, writes b",
        "triad": f"torch.add(b, c, alpha={_STREAM_SCALAR}, out=a) on fp32 buffers; reads b and c, writes a",
    }

    def __init__(self, level: str, kind: str) -> None:
        self.kind = kind
        self.name = f"memory.{level}.{kind}"
        self.description = self._DESCRIPTIONS[kind]
        self._src: torch.Tensor | None = None
        self._dst: torch.Tensor | None = None
        self._reference: torch.Tensor | None = None
        self._other: torch.Tensor | None = None  # triad's second input, c
        self._elements = 0

    def setup(self, device: torch.device, settings: RunSettings) -> None:
        requested = settings.size_bytes if settings.size_bytes > 0 else default_buffer_bytes(device)
        elements = max(requested // 4, 1)
        if elements >= _READ_ROW:
            elements -= elements % _READ_ROW
        self._elements = elements
        # Integers 1..15: never zero, and their sums are exact in float32 and float64.
        if self.kind in ("copy", "read", "scale", "triad"):
            self._src = torch.randint(1, 16, (elements,), dtype=torch.float32, device=device)
        if self.kind == "triad":
            self._other = torch.randint(1, 16, (elements,), dtype=torch.float32, device=device)
        if self.kind in ("copy", "write", "scale", "triad"):
            self._dst = torch.empty(elements, dtype=torch.float32, device=device)
        if self.kind == "read":
            rows = self._src_rows()
            self._dst = torch.empty(rows.shape[0], dtype=torch.float32, device=device)
            self._reference = self._row_sums_float64(rows)

    def _src_rows(self) -> torch.Tensor:
        assert self._src is not None
        row = min(_READ_ROW, self._elements)
        return self._src.view(-1, row)

    @staticmethod
    def _row_sums_float64(rows: torch.Tensor) -> torch.Tensor:
        """Reference row sums in float64, a chunk of rows at a time to bound the extra memory."""
        target = _reference_device(rows.device)
        sums = torch.empty(rows.shape[0], dtype=torch.float64, device=target)
        chunk = max(1, (64 * MiB) // (rows.shape[1] * 8))
        for first in range(0, rows.shape[0], chunk):
            part = rows[first : first + chunk].to(target, torch.float64)
            sums[first : first + chunk] = part.sum(dim=1)
        return sums

    def work(self) -> Work:
        size = self._elements * 4.0
        if self.kind == "copy":
            return Work(bytes_read=size, bytes_written=size)
        if self.kind == "read":
            return Work(bytes_read=size)
        if self.kind == "scale":
            return Work(bytes_read=size, bytes_written=size, flops=self._elements)
        if self.kind == "triad":
            return Work(bytes_read=2 * size, bytes_written=size, flops=2.0 * self._elements)
        return Work(bytes_written=size)

    def poison(self) -> None:
        assert self._dst is not None
        self._dst.fill_(math.nan)

    def run(self) -> None:
        assert self._dst is not None
        if self.kind == "copy":
            self._dst.copy_(self._src)
        elif self.kind == "read":
            torch.sum(self._src_rows(), dim=1, dtype=torch.float32, out=self._dst)
        elif self.kind == "scale":
            torch.mul(self._src, _STREAM_SCALAR, out=self._dst)
        elif self.kind == "triad":
            torch.add(self._src, self._other, alpha=_STREAM_SCALAR, out=self._dst)
        else:
            self._dst.fill_(_FILL_VALUE)

    def verify(self) -> tuple[bool, str]:
        assert self._dst is not None
        if self.kind == "copy":
            ok = bool(torch.equal(self._dst, self._src))
            return ok, "destination equals source" if ok else "destination differs from source"
        if self.kind in ("scale", "triad"):
            return self._verify_stream()
        if self.kind == "write":
            wrong = int((self._dst != _FILL_VALUE).sum().item())
            ok = wrong == 0
            return ok, f"all {self._elements} elements equal {_FILL_VALUE}" if ok else f"{wrong} elements differ"
        assert self._reference is not None
        got = self._dst.to(self._reference.device, torch.float64)
        wrong = int((got != self._reference).sum().item())  # NaN != x, so poison always counts
        ok = wrong == 0
        rows = self._reference.numel()
        return ok, f"{rows} row sums equal the float64 reference" if ok else f"{wrong} of {rows} row sums differ"

    def _verify_stream(self) -> tuple[bool, str]:
        """Scale and triad against the same formula in exact integer float32, chunk by chunk."""
        assert self._src is not None and self._dst is not None
        wrong = 0
        for first in range(0, self._elements, _VERIFY_CHUNK):
            chunk = slice(first, first + _VERIFY_CHUNK)
            want = self._src[chunk] * _STREAM_SCALAR
            if self.kind == "triad":
                assert self._other is not None
                want = self._src[chunk] + self._other[chunk] * _STREAM_SCALAR
            wrong += int((self._dst[chunk] != want).sum().item())  # NaN != x: poison always counts
        formula = "b = 3 a" if self.kind == "scale" else "a = b + 3 c"
        if wrong == 0:
            return True, f"all {self._elements} elements equal {formula}"
        return False, f"{wrong} of {self._elements} elements differ from {formula}"

    def params(self) -> Params:
        ops = {"copy": "Tensor.copy_", "read": "torch.sum(dim=1, out=)", "write": "Tensor.fill_",
               "scale": "torch.mul(out=)", "triad": "torch.add(alpha=, out=)"}
        params = {
            "buffer_bytes": str(self._elements * 4),
            "elements": str(self._elements),
            "dtype": "fp32",
            "op": ops[self.kind],
        }
        if self.kind == "read":
            params["row_length"] = str(min(_READ_ROW, self._elements))
        if self.kind in ("scale", "triad"):
            params["scalar"] = str(_STREAM_SCALAR)
        return params

    def teardown(self) -> None:
        self._src = self._dst = self._reference = self._other = None


# --------------------------------------------------------------------------- library matmul

# compute.library.<variant>: a precision, or fp16acc16 (fp16 accumulating in fp16); fp8 runs through
# torch._scaled_mm (bf16 output), int8 through torch._int_mm (int32 output).
_MATMUL_VARIANTS = ("fp32", "tf32", "fp16", "fp16acc16", "bf16", "fp8", "int8")
_MATMUL_DTYPES = {v: getattr(torch, PRECISIONS[v.removesuffix("acc16")].torch_dtype or "", None)
                  for v in _MATMUL_VARIANTS}
# Relative Frobenius error bounds of the method; NaN never passes. int8 must be exact.
_MATMUL_TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "fp16": 1e-2, "bf16": 1e-2, "fp16acc16": 5e-2, "fp8": 2e-2,
                     "int8": 1e-12}
# Shape sweep on accelerators (M x N x K): squares, one short-K and one tall-skinny shape.
_MATMUL_SHAPES_GPU = ("8192", "1024", "2048", "4096", "16384", "16384x16384x1024", "65536x1024x4096")
# Skinny and small shapes (GEMV, decode batches, short K): what GEMMs a model really launches reach,
# for the kernel model's efficiency against shape; never the ceiling, which the large squares set.
_MATMUL_SHAPES_SKINNY = ("1x4096x4096", "8x4096x4096", "64x4096x4096", "256x4096x4096", "512x512x512",
                         "4096x4096x256")
# Smallest M the int8 and fp8 kernels take (torch._int_mm needs M > 16, torch._scaled_mm multiples of 16).
_MATMUL_MIN_M = {"int8": 32, "fp8": 16}
_MATMUL_SHAPES_CPU = ("1024", "512")
_VERIFY_ROWS = 32


def _cpu_has_fast_bf16() -> bool:
    """Whether oneDNN has bf16 kernels for this CPU; without them torch's fallback is ~100x slower than fp32."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True  # no oneDNN check in this build: let it run


_dtype_trial_cache: dict[tuple[str, str], str | None] = {}


def _dtype_trial(device: torch.device, dtype: torch.dtype) -> str | None:
    """On accelerators without a capability query (xpu, mps, ...), try a tiny matmul once."""
    key = (str(device), str(dtype))
    if key not in _dtype_trial_cache:
        try:
            a = torch.ones(8, 8, dtype=dtype, device=device)
            torch.matmul(a, a)
            synchronize(device)
            _dtype_trial_cache[key] = None
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            _dtype_trial_cache[key] = f"{dtype} matmul fails on {device.type}: {str(exc).splitlines()[0]}"
    return _dtype_trial_cache[key]


class LibraryMatmulProbe(Probe):
    """Square GEMM through torch.matmul (cuBLAS/hipBLASLt/oneDNN/MPS...): what the vendor library delivers."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.dtype = _MATMUL_DTYPES[variant]
        self.name = f"compute.library.{variant}"
        accumulate = {"fp16acc16": "fp16", "int8": "int32"}.get(variant, "fp32")
        op = {"fp8": "torch._scaled_mm", "int8": "torch._int_mm"}.get(variant, "torch.matmul")
        self.description = (f"{op} of {variant} matrices, {accumulate} accumulation, over a shape sweep "
                            "(squares, short K, tall-skinny); L2 flushed before each sample on GPUs")
        self._a = self._b = self._out = None
        self._shape = ""  # "" = the device's default square
        self._mnk = (0, 0, 0)
        self._flush: torch.Tensor | None = None
        self._restore: list[Callable[[], None]] = []
        self._flags: Params = {}

    def variants(self, device: torch.device, quick: bool) -> list[str]:
        if device.type == "cpu":
            return list(_MATMUL_SHAPES_CPU[:1] if quick else _MATMUL_SHAPES_CPU)
        if quick:
            return list(_MATMUL_SHAPES_GPU[:1])
        smallest = _MATMUL_MIN_M.get(self.variant, 1)
        return list(_MATMUL_SHAPES_GPU) + [s for s in _MATMUL_SHAPES_SKINNY if int(s.split("x")[0]) >= smallest]

    def use_variant(self, variant: str) -> None:
        if variant and variant not in _MATMUL_SHAPES_GPU + _MATMUL_SHAPES_SKINNY + _MATMUL_SHAPES_CPU:
            raise ValueError(f"probe '{self.name}' has no shape variant '{variant}'")
        self._shape = variant

    def waiver(self, device: torch.device) -> str | None:
        variant, kind = self.variant, device.type
        if variant in ("fp8", "int8"):
            return self._low_precision_waiver(device)
        if variant in ("tf32", "fp16acc16") and kind != "cuda":
            return f"{variant} is a GPU matmul mode set through torch.backends.cuda; it does not apply to {kind}"
        if kind == "cpu":
            if variant == "fp16":
                return "torch has no fast fp16 matmul for CPUs (seconds per run at N=1024); not measured"
            if variant == "bf16" and not _cpu_has_fast_bf16():
                return "oneDNN has no bf16 matmul for this CPU's instruction set; torch's fallback is too slow to measure"
            return None
        if kind == "cuda":
            is_rocm = torch.version.hip is not None
            if variant == "tf32":
                if is_rocm:
                    return "TF32 through torch.backends.cuda.matmul.allow_tf32 is not dependable on ROCm builds"
                if torch.cuda.get_device_capability(device) < (8, 0):
                    return "TF32 needs compute capability 8.0 or newer"
            if variant == "fp16acc16":
                if is_rocm:
                    return "torch.backends.cuda.matmul.allow_fp16_accumulation applies to cuBLAS only, not ROCm"
                if not torch_flags.has_fp16_accumulation_flag():
                    return f"torch {torch.__version__} has no torch.backends.cuda.matmul.allow_fp16_accumulation"
            if variant == "bf16":
                try:
                    native = torch.cuda.is_bf16_supported(including_emulation=False)
                except TypeError:
                    native = torch.cuda.is_bf16_supported()
                if not native:
                    return "the device has no native bf16 matmul"
            return None
        return _dtype_trial(device, self.dtype)

    def _low_precision_waiver(self, device: torch.device) -> str | None:
        if device.type != "cuda" or torch.version.hip is not None:
            return f"{self.variant} matmul is measured on CUDA GPUs only (torch._scaled_mm / torch._int_mm)"
        if self.variant == "fp8":
            if self.dtype is None or not hasattr(torch, "_scaled_mm"):
                return f"torch {torch.__version__} has no float8_e4m3fn or torch._scaled_mm"
            if torch.cuda.get_device_capability(device) < (8, 9):
                return "fp8 matmul needs compute capability 8.9 or newer"
        elif not hasattr(torch, "_int_mm") or torch.cuda.get_device_capability(device) < (8, 0):
            return "int8 matmul through torch._int_mm needs compute capability 8.0 or newer"
        return None

    def _dims(self, settings: RunSettings, device: torch.device) -> tuple[int, int, int]:
        if settings.size_bytes > 0 and not self._shape:
            n = int(math.isqrt(settings.size_bytes // (3 * max(1, self.dtype.itemsize))))
            n = max(64, n - n % 64)
            return n, n, n
        shape = self._shape or ("1024" if device.type == "cpu" else "8192")
        dims = [int(d) for d in shape.split("x")]
        return (dims[0],) * 3 if len(dims) == 1 else (dims[0], dims[1], dims[2])

    def setup(self, device: torch.device, settings: RunSettings) -> None:
        m, n, k = self._mnk = self._dims(settings, device)
        # Random data, never zeros: normal values rounded to the dtype; small integers for int8.
        if self.variant == "int8":
            self._a = torch.randint(-127, 128, (m, k), device=device, dtype=torch.int8)
            self._b = torch.randint(-127, 128, (n, k), device=device, dtype=torch.int8).t()  # column-major
            self._out = torch.empty(m, n, dtype=torch.int32, device=device)
        elif self.variant == "fp8":
            self._a = torch.randn(m, k, device=device).to(self.dtype)
            self._b = torch.randn(n, k, device=device).to(self.dtype).t()  # _scaled_mm wants B column-major
            self._scale = torch.ones((), device=device)
            self._out = torch.empty(m, n, dtype=torch.bfloat16, device=device)
        else:
            self._a = torch.randn(m, k, device=device).to(self.dtype)
            self._b = torch.randn(k, n, device=device).to(self.dtype)
            self._out = torch.empty(m, n, dtype=self.dtype, device=device)
        if device.type == "cuda":
            # Each sample starts with cold L2: a write of twice its size evicts the operands.
            l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
            self._flush = torch.empty(max(2 * l2, MiB), dtype=torch.uint8, device=device)
        self._flags = {}
        if device.type == "cuda":
            if self.dtype == torch.float32:
                tf32 = self.variant == "tf32"
                self._restore.append(torch_flags.set_matmul_tf32(tf32))
                self._flags["allow_tf32"] = str(tf32)
            if self.dtype == torch.float16 and torch_flags.has_fp16_accumulation_flag():
                fp16_acc = self.variant == "fp16acc16"
                self._restore.append(torch_flags.set_fp16_accumulation(fp16_acc))
                self._flags["allow_fp16_accumulation"] = str(fp16_acc)
            if self.dtype == torch.float16:
                value = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
                self._flags["allow_fp16_reduced_precision_reduction"] = str(value)
            if self.dtype == torch.bfloat16:
                value = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
                self._flags["allow_bf16_reduced_precision_reduction"] = str(value)

    def work(self) -> Work:
        m, n, k = self._mnk
        return Work(flops=2.0 * m * n * k)

    def poison(self) -> None:
        assert self._out is not None
        self._out.fill_(-(2**31) if self._out.dtype == torch.int32 else math.nan)

    def before_sample(self) -> None:
        if self._flush is not None:
            self._flush.fill_(1)

    def run(self) -> None:
        if self.variant == "fp8":
            self._out.copy_(torch._scaled_mm(self._a, self._b, scale_a=self._scale, scale_b=self._scale,
                                             out_dtype=torch.bfloat16))
        elif self.variant == "int8":
            self._out.copy_(torch._int_mm(self._a, self._b))
        else:
            torch.matmul(self._a, self._b, out=self._out)

    def verify(self) -> tuple[bool, str]:
        assert self._a is not None and self._b is not None and self._out is not None
        m = self._mnk[0]
        rows = torch.arange(0, m, max(1, m // _VERIFY_ROWS), device=self._a.device)
        target = _reference_device(self._a.device)
        reference = self._a[rows].to(target, torch.float64) @ self._b.to(target, torch.float64)
        got = self._out[rows].to(target, torch.float64)
        error = float(torch.linalg.norm(got - reference) / torch.linalg.norm(reference))
        tolerance = _MATMUL_TOLERANCE[self.variant]
        ok = math.isfinite(error) and error < tolerance  # NaN compares False: never passes
        verdict = "<" if ok else "not <"
        return ok, f"relative Frobenius error {error:.3g} {verdict} {tolerance:g} over {rows.numel()} sampled rows"

    def params(self) -> Params:
        m, n, k = self._mnk
        op = {"fp8": "torch._scaled_mm (bf16 out, unit scales)", "int8": "torch._int_mm (int32 out)"}
        return {
            "M": str(m),
            "N": str(n),
            "K": str(k),
            "dtype": self.variant,
            "accumulate": {"fp16acc16": "fp16", "int8": "int32"}.get(self.variant, "fp32"),
            "op": op.get(self.variant, "torch.matmul(out=)"),
            "l2_flushed": str(self._flush is not None),
            **self._flags,
        }

    def teardown(self) -> None:
        while self._restore:
            self._restore.pop()()
        self._a = self._b = self._out = self._flush = None


# --------------------------------------------------------------------------- host <-> device and GPU <-> GPU transfers

_pinning_cache: dict[str, str | None] = {}


def _pinning_waiver(device: torch.device) -> str | None:
    """Why page-locked host memory is unavailable for `device`, or None (tried once per device type)."""
    if device.type not in _pinning_cache:
        try:
            trial = torch.empty(16, dtype=torch.uint8).pin_memory()
            _pinning_cache[device.type] = None if trial.is_pinned() else "pin_memory() returned pageable memory"
        except (RuntimeError, NotImplementedError) as exc:
            _pinning_cache[device.type] = f"pinned host memory is not available: {str(exc).splitlines()[0]}"
    return _pinning_cache[device.type]


def _size_name(size: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


# Transfer sizes as the native transfer probes name their variants: 4 KiB to 1 GiB in powers of two.
TRANSFER_BYTES = {_size_name(1 << p): 1 << p for p in range(12, 31)}
TRANSFER_SIZES = tuple(TRANSFER_BYTES)
QUICK_TRANSFER_SIZES = ("4KiB", "256KiB", "16MiB", "256MiB")
_DEFAULT_TRANSFER_BYTES = 256 * MiB
# Small copies go back to back until a run moves about 4 MiB, so the per-copy launch cost
# does not stand in for the link's bandwidth.
_RUN_TARGET_BYTES = 4 * MiB
_MAX_COPIES_PER_RUN = 256


def copies_per_run(size_bytes: int) -> int:
    """clamp(ceil(4 MiB / size), 1, 256) back-to-back copies in one timed run."""
    return min(max(math.ceil(_RUN_TARGET_BYTES / max(size_bytes, 1)), 1), _MAX_COPIES_PER_RUN)


class _SizedCopyProbe(Probe):
    """A copy probe sized by its variant ("4KiB" .. "1GiB"; "" = settings.size_bytes, else 256 MiB)."""

    def __init__(self) -> None:
        self._size = ""
        self._bytes = 0  # one copy
        self._copies = 1

    def variants(self, device: torch.device, quick: bool) -> list[str]:
        return list(QUICK_TRANSFER_SIZES if quick else TRANSFER_SIZES)

    def use_variant(self, variant: str) -> None:
        if variant and variant not in TRANSFER_BYTES:
            raise ValueError(f"probe '{self.name}' has no size variant '{variant}'; "
                             f"sizes are {TRANSFER_SIZES[0]} to {TRANSFER_SIZES[-1]} in powers of two")
        self._size = variant

    def _elements(self, settings: RunSettings) -> int:
        """fp32 elements of one copy; sets the copy size and the copies per run."""
        if self._size:
            size = TRANSFER_BYTES[self._size]
        else:
            size = settings.size_bytes if settings.size_bytes > 0 else _DEFAULT_TRANSFER_BYTES
        elements = max(size // 4, 1)
        self._bytes = elements * 4
        self._copies = copies_per_run(self._bytes)
        return elements

    def _copy_params(self) -> Params:
        return {"bytes": str(self._bytes), "copies_per_run": str(self._copies), "engine": "copy engine"}


def _host_values(elements: int, low: int = 1, pinned: bool = False) -> torch.Tensor:
    """Integers low..low+14 as fp32 in host memory: never zero; distinct ranges tell two copies apart."""
    values = torch.randint(low, low + 15, (elements,), dtype=torch.float32)
    return values.pin_memory() if pinned else values


class TransferProbe(_SizedCopyProbe):
    """Host-to-device or device-to-host copy_ of one buffer, from pinned or pageable host memory."""

    def __init__(self, direction: str, host_memory: str) -> None:
        super().__init__()
        self.direction = direction  # "h2d" or "d2h"
        self.pinned = host_memory == "pinned"
        self.name = f"transfer.{direction}.{host_memory}"
        towards = "host to device" if direction == "h2d" else "device to host"
        self.description = (f"{towards} copy_(non_blocking=True) with {host_memory} host memory, 4 KiB to 1 GiB; "
                            "payload counted once")
        self._src: torch.Tensor | None = None
        self._dst: torch.Tensor | None = None

    def waiver(self, device: torch.device) -> str | None:
        if device.type == "cpu":
            return "host and device are the same memory"
        if self.pinned:
            return _pinning_waiver(device)
        return None

    def setup(self, device: torch.device, settings: RunSettings) -> None:
        elements = self._elements(settings)
        host = _host_values(elements, pinned=self.pinned)
        if self.direction == "h2d":
            self._src = host
            self._dst = torch.empty(elements, dtype=torch.float32, device=device)
        else:
            self._src = host.to(device)
            self._dst = torch.empty(elements, dtype=torch.float32, pin_memory=self.pinned)

    def work(self) -> Work:
        return Work(bytes_read=float(self._bytes * self._copies))

    def poison(self) -> None:
        assert self._dst is not None
        self._dst.fill_(math.nan)

    def run(self) -> None:
        assert self._dst is not None
        for _ in range(self._copies):
            self._dst.copy_(self._src, non_blocking=True)

    def verify(self) -> tuple[bool, str]:
        assert self._src is not None and self._dst is not None
        # Compare on the host: a copy back, outside timing.
        ok = bool(torch.equal(self._dst.cpu(), self._src.cpu()))
        return ok, "copy back equals the source" if ok else "copy back differs from the source"

    def params(self) -> Params:
        return {
            **self._copy_params(),
            "host_memory": "pinned" if self.pinned else "pageable",
            "direction": "host to device" if self.direction == "h2d" else "device to host",
            "op": "Tensor.copy_(non_blocking=True)",
            "counting": "payload bytes, one direction",
        }

    def teardown(self) -> None:
        self._src = self._dst = None


def _cuda_streams_waiver(device: torch.device, what: str) -> str | None:
    if device.type == "cpu":
        return "host and device are the same memory"
    if device.type != "cuda":
        return f"{what} are issued on torch.cuda streams, which {device.type} does not have"
    return None


class BidirTransferProbe(_SizedCopyProbe):
    """Host-to-device and device-to-host copies at the same time, each on its own CUDA stream."""

    name = "transfer.bidir.pinned"
    description = ("host to device and device to host copy_(non_blocking=True) at once on two CUDA streams, pinned "
                   "host memory, 4 KiB to 1 GiB; payload of both directions counted")

    def __init__(self) -> None:
        super().__init__()
        self._device = torch.device("cpu")
        self._to_device: tuple[torch.Tensor, torch.Tensor] | None = None  # (source, destination)
        self._to_host: tuple[torch.Tensor, torch.Tensor] | None = None
        self._streams: list[torch.cuda.Stream] = []

    def waiver(self, device: torch.device) -> str | None:
        return _cuda_streams_waiver(device, "concurrent copies") or _pinning_waiver(device)

    def setup(self, device: torch.device, settings: RunSettings) -> None:
        elements = self._elements(settings)
        self._device = device
        self._to_device = (_host_values(elements, pinned=True),
                           torch.empty(elements, dtype=torch.float32, device=device))
        self._to_host = (_host_values(elements, low=16).to(device),
                         torch.empty(elements, dtype=torch.float32, pin_memory=True))
        self._streams = [torch.cuda.Stream(device), torch.cuda.Stream(device)]

    def work(self) -> Work:
        return Work(bytes_read=float(2 * self._bytes * self._copies))

    def poison(self) -> None:
        assert self._to_device is not None and self._to_host is not None
        self._to_device[1].fill_(math.nan)
        self._to_host[1].fill_(math.nan)  # host memory: no copy is in flight before warm-up or after timing

    def run(self) -> None:
        assert self._to_device is not None and self._to_host is not None
        timed = torch.cuda.current_stream(self._device)  # the stream the sample's events are recorded on
        for stream in self._streams:
            stream.wait_stream(timed)  # both directions start after the start event
        for stream, (src, dst) in zip(self._streams, (self._to_device, self._to_host)):
            with torch.cuda.stream(stream):
                for _ in range(self._copies):
                    dst.copy_(src, non_blocking=True)
        for stream in self._streams:
            timed.wait_stream(stream)  # the stop event waits for both directions

    def verify(self) -> tuple[bool, str]:
        assert self._to_device is not None and self._to_host is not None
        to_device = bool(torch.equal(self._to_device[1].cpu(), self._to_device[0]))
        to_host = bool(torch.equal(self._to_host[1], self._to_host[0].cpu()))
        if to_device and to_host:
            return True, "both destinations equal their sources"
        wrong = [d for d, ok in (("host to device", to_device), ("device to host", to_host)) if not ok]
        return False, f"{' and '.join(wrong)} destination differs from its source"

    def params(self) -> Params:
        return {
            **self._copy_params(),
            "host_memory": "pinned",
            "direction": "both at once",
            "op": "Tensor.copy_(non_blocking=True)",
            "streams": "host to device on one CUDA stream, device to host on another, both after the start event",
            "counting": "payload bytes, both directions",
        }

    def teardown(self) -> None:
        self._to_device = self._to_host = None
        self._streams = []


# GPU <-> GPU references, one per ordered device pair (pygpuperf.measure.pairs): the base names.
_PEER_MODES = {"transfer.p2p.ce.write": "write", "transfer.p2p.ce.bidir": "bidir"}
P2P_BASES = tuple(_PEER_MODES)


class PeerCopyProbe(_SizedCopyProbe):
    """Copies between two GPUs with Tensor.copy_, which torch issues as cudaMemcpyAsync on the source
    device's current stream (the copy engine). write: src -> dst; bidir: both ways at once."""

    def __init__(self, base: str, src: int, dst: int) -> None:
        super().__init__()
        self.base, self.mode = base, _PEER_MODES[base]
        self.src, self.dst = src, dst
        self.name = pairs.pair_name(base, src, dst)
        if self.mode == "write":
            self.description = (f"cuda:{dst} tensor.copy_(cuda:{src} tensor), issued on cuda:{src} (copy engine), "
                                "4 KiB to 1 GiB; payload counted once")
        else:
            self.description = (f"cuda:{src} -> cuda:{dst} and cuda:{dst} -> cuda:{src} copy_ at once on two streams "
                                "(copy engines), 4 KiB to 1 GiB; payload of both directions counted")
        self._copies_made: list[tuple[torch.Tensor, torch.Tensor]] = []  # (source, destination) per direction
        self._streams: list[torch.cuda.Stream] = []
        self._peer_access = False

    def waiver(self, device: torch.device) -> str | None:
        if device.type != "cuda":
            return f"GPU-to-GPU copies are measured between CUDA devices, not {device.type}"
        count = torch.cuda.device_count()
        if max(self.src, self.dst) >= count:
            return f"cuda:{max(self.src, self.dst)} is not visible; this machine shows {count} CUDA device(s)"
        if self.src == self.dst:
            return "source and destination are the same device"
        return None

    def setup(self, device: torch.device, settings: RunSettings) -> None:
        elements = self._elements(settings)
        src, dst = torch.device("cuda", self.src), torch.device("cuda", self.dst)
        self._copies_made = [(_host_values(elements).to(src), torch.empty(elements, dtype=torch.float32, device=dst))]
        if self.mode == "bidir":
            self._copies_made.append((_host_values(elements, low=16).to(dst),
                                      torch.empty(elements, dtype=torch.float32, device=src)))
            # torch copies on the source device's current stream: one stream on each device.
            self._streams = [torch.cuda.Stream(src), torch.cuda.Stream(dst)]
        self._peer_access = torch.cuda.can_device_access_peer(self.src, self.dst)

    def work(self) -> Work:
        return Work(bytes_read=float(len(self._copies_made) * self._bytes * self._copies))

    def poison(self) -> None:
        for _, destination in self._copies_made:
            destination.fill_(math.nan)

    def run(self) -> None:
        if self.mode == "write":
            source, destination = self._copies_made[0]
            for _ in range(self._copies):
                destination.copy_(source, non_blocking=True)  # on cuda:src's current stream, the timed one
            return
        timed = torch.cuda.current_stream(torch.device("cuda", self.src))
        for stream in self._streams:
            stream.wait_stream(timed)
        for stream, (source, destination) in zip(self._streams, self._copies_made):
            with torch.cuda.stream(stream):
                for _ in range(self._copies):
                    destination.copy_(source, non_blocking=True)
        for stream in self._streams:
            timed.wait_stream(stream)

    def verify(self) -> tuple[bool, str]:
        wrong = [f"cuda:{s.device.index} -> cuda:{d.device.index}" for s, d in self._copies_made
                 if not torch.equal(d.cpu(), s.cpu())]  # compared on the host, through another path
        if not wrong:
            return True, "every destination equals its source"
        return False, f"{', '.join(wrong)}: destination differs from the source"

    def params(self) -> Params:
        i, j = str(self.src), str(self.dst)
        both = self.mode == "bidir"
        # Keys and values as the native pair probes report them, so the two backends line up.
        params = {
            **self._copy_params(),
            "src": f"{i},{j}" if both else i,
            "dst": f"{j},{i}" if both else j,
            "initiator": i,
            "peer": j,
            "direction": "both ways at once" if both else "write: initiator to peer",
            "p2p_access": "on" if self._peer_access else "off (torch.cuda.can_device_access_peer = False)",
            "op": "Tensor.copy_(non_blocking=True)",
            "counting": "payload bytes, both directions" if both else "payload bytes, one direction",
        }
        if both:
            params["streams"] = "initiator to peer on a stream of the initiator, peer to initiator on one of the peer"
        return params

    def teardown(self) -> None:
        for index in {self.src, self.dst}:
            if index < torch.cuda.device_count():
                torch.cuda.synchronize(index)  # side streams used these buffers: nothing may still run
        self._copies_made = []
        self._streams = []


def pair_probe_names(device: torch.device) -> list[str]:
    """transfer.p2p.<i>.<j>.* for every ordered pair of visible CUDA devices; none with fewer than two."""
    if device.type != "cuda":
        return []
    count = torch.cuda.device_count()
    return [name for base in P2P_BASES for name in pairs.expand(base, count)]


# --------------------------------------------------------------------------- fixed cost of a kernel

# Tiny kernels per run: enough that one run is well above the timer's resolution.
_TINY_KERNELS = 64
# Spin per queued tiny kernel (device cycles, ~20 us at 2 GHz): more than the host takes to issue one op.
_SPIN_PER_TINY_KERNEL = 40_000
# What each mode times: the kernel model's fixed cost per kernel (t_fixed) and the launch figures around it.
_KERNEL_MODES = {
    "back_to_back": "device time per tiny kernel, queued ahead of the GPU (the GPU spins while the host issues them)",
    "duration": "one tiny kernel's own duration, start to end, from the profiler's activity trace (no gaps)",
    "graph": "device time per tiny kernel replayed from one CUDA graph",
    "launch": "host time to issue one tiny op (torch dispatch and the launch call), the GPU running meanwhile",
    "single": "one tiny op from the host call to its completion (launch, run, synchronize)",
}


# Modes a CPU has no counterpart for: it runs an op where it is called.
_GPU_ONLY_KERNEL_MODES = ("graph", "launch", "duration")


class KernelLatencyProbe(Probe):
    """The fixed cost of a kernel: y.fill_(v) on one element, the smallest kernel torch launches (it reads
    nothing), 64 per run. On a CPU the same op is the fixed cost of an op (no launches, no graphs)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.name = f"latency.kernel.{mode}"
        self.description = f"{_KERNEL_MODES[mode]}: y.fill_(v) on one element"
        self.host_clock = mode == "launch"
        self.kernel_clock = mode == "duration"
        self.spin_cycles = _SPIN_PER_TINY_KERNEL * (1 if mode == "single" else _TINY_KERNELS)
        self._y: torch.Tensor | None = None
        self._value = 0.0
        self._graph = None
        self._device = torch.device("cpu")

    def waiver(self, device: torch.device) -> str | None:
        if device.type == "cpu" and self.mode in _GPU_ONLY_KERNEL_MODES:
            return "a CPU runs an op where it is called: no launch to time apart from the op, no graphs"
        if self.mode in ("graph", "duration") and device.type != "cuda":
            return f"{'CUDA graphs' if self.mode == 'graph' else 'the CUDA activity trace'} is CUDA's; {device.type} has none"
        return None

    def setup(self, device: torch.device, settings: RunSettings) -> None:
        self._device = device
        self._value = float(torch.randint(1, 16, (1,)).item())  # random, non-zero
        self._y = torch.empty(1, dtype=torch.float32, device=device)
        if self.mode == "graph":
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                self._kernels()  # warm the op up outside the capture
            torch.cuda.current_stream(device).wait_stream(side)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._kernels()

    def _kernels(self) -> None:
        for _ in range(_TINY_KERNELS):
            self._y.fill_(self._value)

    def work(self) -> Work:
        return Work(operations=1.0 if self.mode == "single" else float(_TINY_KERNELS))

    def poison(self) -> None:
        assert self._y is not None
        self._y.fill_(math.nan)

    def run(self) -> None:
        if self.mode == "graph":
            self._graph.replay()
        elif self.mode == "single":
            self._y.fill_(self._value)
            synchronize(self._device)
        else:
            self._kernels()

    def verify(self) -> tuple[bool, str]:
        assert self._y is not None
        ok = float(self._y[0]) == self._value  # NaN poison never equals
        return ok, "y = v after the last kernel" if ok else "y is not v: a kernel did not run"

    def params(self) -> Params:
        return {"mode": self.mode, "ops_per_run": int(self.work().operations), "op": "y.fill_(v)",
                "elements": 1, "timer": "host" if self.host_clock else "kernels" if self.kernel_clock else "events",
                "spin_cycles_per_sample": 0 if self.host_clock or self.kernel_clock else self.spin_cycles}

    def teardown(self) -> None:
        self._y = self._graph = None


# --------------------------------------------------------------------------- bandwidth against bytes per kernel

# Bytes one kernel moves, 4 KiB .. 1 GiB in 4x steps: what small kernels reach, for t = t0 + bytes / B.
_KERNEL_BYTES = tuple(4096 * 4 ** k for k in range(10))  # 4 KiB .. 1 GiB
_QUICK_KERNEL_BYTES = (64 * 1024, 4 << 20, 256 << 20)
_SIZE_OPS = ("read", "write", "copy")


class KernelSizeProbe(Probe):
    """memory.size.sweep: one copy_, sum or fill_ kernel per run on `bytes` of fp32, at every size, from L2
    (the same buffer each run, resident after the first) and from HBM (each sample a fresh buffer of a set
    larger than the L2, so nothing is resident). Variant: "<level>.<op>.<bytes>"."""

    name = "memory.size.sweep"
    description = ("one copy_/sum/fill_ kernel per run at 4 KiB-1 GiB, L2-resident and streaming from HBM: what a "
                   "kernel of that size reaches (t = t0 + bytes / B)")

    def __init__(self) -> None:
        self._level, self._op, self._bytes = "hbm", "copy", _KERNEL_BYTES[0]
        self._sources: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []
        self._target_pool = torch.empty(0)
        self._turn = 0
        self._l2 = 0

    def waiver(self, device: torch.device) -> str | None:
        if device.type != "cuda":
            return "sized for a GPU's L2 and HBM; a CPU's caches are measured by memory.sweep"
        return None

    def variants(self, device: torch.device, quick: bool) -> list[str]:
        sizes = _QUICK_KERNEL_BYTES if quick else _KERNEL_BYTES
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0) if device.type == "cuda" else 0
        out = []
        for level in ("l2", "hbm"):
            for op in _SIZE_OPS:
                # In L2 only what half the L2 holds (source and destination both resident).
                out += [f"{level}.{op}.{b}" for b in sizes if level == "hbm" or not l2 or 2 * b <= l2 // 2]
        return out

    def use_variant(self, variant: str) -> None:
        if not variant:
            return
        level, op, size = variant.split(".")
        if level not in ("l2", "hbm") or op not in _SIZE_OPS or int(size) <= 0:
            raise ValueError(f"probe '{self.name}' has no variant '{variant}'")
        self._level, self._op, self._bytes = level, op, int(size)

    def setup(self, device: torch.device, settings: RunSettings) -> None:
        self._l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
        elements = max(self._bytes // 4, 1)
        # HBM: enough distinct buffers that a sample's buffer was evicted since it was last touched.
        sets = 1 if self._level == "l2" else max(2, -(-4 * max(self._l2, 1) // (2 * elements * 4)) + 1)
        sets = min(sets, max(2, (1 << 30) // max(elements * 4, 1)))
        # One allocation each, cut into consecutive buffers (as the caching allocator lays out separate small
        # tensors): tens of thousands of allocations took 1.5 s for the 4 KiB point.
        sources = torch.randint(1, 16, (sets, elements), dtype=torch.float32, device=device)
        self._target_pool = torch.empty(sets, elements if self._op != "read" else 1, dtype=torch.float32, device=device)
        self._sources, self._targets = list(sources.unbind(0)), list(self._target_pool.unbind(0))
        self._turn = 0

    def before_sample(self) -> None:
        self._turn = (self._turn + 1) % len(self._sources)

    def work(self) -> Work:
        size = float(self._bytes)
        return {"read": Work(bytes_read=size), "write": Work(bytes_written=size),
                "copy": Work(bytes_read=size, bytes_written=size)}[self._op]

    def poison(self) -> None:
        self._target_pool.fill_(math.nan)  # every buffer in one kernel

    def run(self) -> None:
        src, dst = self._sources[self._turn], self._targets[self._turn]
        if self._op == "copy":
            dst.copy_(src)
        elif self._op == "read":
            torch.sum(src, dim=0, dtype=torch.float32, out=dst[0])
        else:
            dst.fill_(_FILL_VALUE)

    def verify(self) -> tuple[bool, str]:
        src, dst = self._sources[self._turn], self._targets[self._turn]
        if self._op == "copy":
            ok = bool(torch.equal(dst, src))
        elif self._op == "read":
            ok = float(dst[0]) == float(src.double().sum())  # small integers: exact in fp32 up to 2**24
            ok = ok or self._bytes // 4 * 15 >= 1 << 24 and math.isclose(float(dst[0]), float(src.double().sum()),
                                                                         rel_tol=1e-6)
        else:
            ok = bool((dst == _FILL_VALUE).all())
        return ok, f"the last sample's {self._op} is right" if ok else f"the last sample's {self._op} is wrong"

    def params(self) -> Params:
        return {"level": self._level, "op": self._op, "bytes": self._bytes, "buffers": len(self._sources),
                "l2_bytes": self._l2, "dtype": "fp32"}

    def teardown(self) -> None:
        self._sources, self._targets, self._target_pool = [], [], torch.empty(0)


# --------------------------------------------------------------------------- backend


# Matmul modes that exist on GPUs only (TF32, fp16 accumulation; fp8 and int8 through CUDA-only ops):
# a CPU run does not list them, as it lists no host<->device transfers.
_GPU_ONLY_MATMULS = ("tf32", "fp16acc16", "fp8", "int8")


def _make_probes(device: torch.device) -> dict[str, Probe]:
    level = memory_level(device)
    cpu = device.type == "cpu"
    probes: list[Probe] = [MemoryProbe(level, kind) for kind in ("copy", "read", "write", "scale", "triad")]
    probes += [LibraryMatmulProbe(variant) for variant in _MATMUL_DTYPES if not (cpu and variant in _GPU_ONLY_MATMULS)]
    probes += [KernelLatencyProbe(mode) for mode in _KERNEL_MODES if not (cpu and mode in _GPU_ONLY_KERNEL_MODES)]
    if device.type == "cuda":
        probes.append(KernelSizeProbe())
    if not cpu:
        probes += [TransferProbe(d, h) for d in ("h2d", "d2h") for h in ("pinned", "pageable")]
    if device.type == "cuda":
        probes.append(BidirTransferProbe())  # two concurrent copies need torch.cuda streams
    return {p.name: p for p in probes}


class PortableBackend(Backend):
    """Measurements made with plain torch ops; results say backend 'torch-<device type>'."""

    family = "torch"

    def probe_names(self, device: torch.device) -> list[str]:
        return list(_make_probes(device)) + pair_probe_names(device)

    def _probe(self, name: str, device: torch.device) -> Probe:
        pair = pairs.split(name)
        if pair is not None and pair[0] in _PEER_MODES:
            return PeerCopyProbe(*pair)
        probes = _make_probes(device)
        if name not in probes:
            known = [*probes, *(f"{pairs.PAIR_PREFIX}<i>.<j>.{b[len(pairs.PAIR_PREFIX):]}" for b in P2P_BASES)]
            raise KeyError(f"no portable probe {name!r} for {device.type}; known: {', '.join(known)}")
        return probes[name]

    def describe(self, name: str, device: torch.device) -> str:
        return self._probe(name, device).description

    def waiver(self, name: str, device: torch.device) -> str | None:
        return self._probe(name, device).waiver(device)

    def variants(self, name: str, device: torch.device, quick: bool = False) -> list[str]:
        return self._probe(name, device).variants(device, quick)

    def measure(self, name: str, device: torch.device, settings: RunSettings, variant: str = "") -> Measurement:
        probe = self._probe(name, device)
        probe.use_variant(variant)
        if isinstance(probe, PeerCopyProbe) and device.type == "cuda":
            # Timed on the source GPU, whose current stream torch issues the copy on.
            device = torch.device("cuda", probe.src)
        run = run_probe(probe, device, settings)
        return Measurement.from_samples(
            name,
            sample_seconds=run.sample_seconds,
            bytes_read=run.work.bytes_read,
            bytes_written=run.work.bytes_written,
            flops=run.work.flops,
            operations=run.work.operations,
            backend=self.backend_name(device),
            device=str(device),
            verified=run.verified,
            verify_detail=run.verify_detail,
            params={**run.params, **({"variant": variant} if variant else {})},
        )
