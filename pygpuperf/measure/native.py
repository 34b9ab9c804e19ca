"""Typed wrappers over the extension's ops (``torch.ops.pygpuperf``).

torch is imported before ``_C``: loading ``_C`` registers the ops with torch's dispatcher.
An extension built against another torch than the one running is not loaded at all (its
C++ ABI would not match): the build records its torch in _build_torch.txt, checked first.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from pygpuperf.core.results import ParamValue, typed_params

REBUILD = "pip install --no-build-isolation -e ."


def build_torch_version() -> str | None:
    """The torch version the installed extension was built against, from the record beside it
    (found without loading it); None where there is no extension or no record."""
    try:
        spec = importlib.util.find_spec("pygpuperf._C")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        return (Path(spec.origin).parent / "_build_torch.txt").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _mismatch(built: str | None, running: str) -> str | None:
    """Why an extension built against torch `built` must not load under torch `running`."""
    if built is None or built == running:
        return None
    return (f"the native extension was built against torch {built} but torch {running} is running; "
            f"rebuild it against this torch: {REBUILD}")


def _load() -> str | None:
    mismatch = _mismatch(build_torch_version(), torch.__version__)
    if mismatch:
        warnings.warn(mismatch, stacklevel=3)
        return mismatch
    try:
        from pygpuperf import _C# noqa: F401  (registers torch.ops.pygpuperf.*)
    except ImportError as exc:  # a source checkout that was never built
        return str(exc)
    return None


IMPORT_ERROR: str | None = _load()


def available() -> bool:
    """True when the compiled extension loaded."""
    return IMPORT_ERROR is None


def _ops():
    if IMPORT_ERROR is not None:
        raise RuntimeError(
            f"pygpuperf's native extension is not built ({IMPORT_ERROR}); "
            f"run: {REBUILD}"
        )
    return torch.ops.pygpuperf


def build_info() -> dict[str, str]:
    """How the extension was built: {'cuda': '0'|'1', 'cuda_archs': 'sm_80,...', ...}."""
    return dict(_ops().build_info())


def cuda_built() -> bool:
    return available() and build_info().get("cuda") == "1"


def list_probes(device_type: str, pattern: str = "") -> list[str]:
    """Native probe names for 'cpu' or 'cuda', filtered by exact name or dotted prefix."""
    return list(_ops().list_probes(device_type, pattern))


def describe_probe(device_type: str, name: str) -> str:
    return str(_ops().describe_probe(device_type, name))


def probe_waiver(name: str, device: torch.device) -> str | None:
    """Why `name` cannot run on `device`, or None when it can."""
    reason = str(_ops().probe_waiver(name, device))
    return reason or None


def probe_variants(name: str, device: torch.device, quick: bool = False) -> list[str]:
    """Implementation variants of a probe ([""] when it has one); `quick` gives the --quick subset."""
    return list(_ops().probe_variants(name, device, quick))


@dataclass
class NativeRun:
    sample_seconds: list[float]
    bytes_read: float
    bytes_written: float
    flops: float
    operations: float
    verified: bool
    verify_detail: str
    params: dict[str, ParamValue]  # typed at this boundary: the extension returns text


def run_probe(
    name: str,
    device: torch.device,
    *,
    variant: str = "",
    warmup: int = 3,
    samples: int = 20,
    size_bytes: int = 0,
    poison_after_runs: bool = False,
) -> NativeRun:
    """Set up, poison, warm up, time `samples` runs and verify one native probe.

    Errors (CUDA failures, bad arguments, waived probes) raise RuntimeError naming
    the CUDA error and the call site.
    """
    out = _ops().run_probe(name, device, variant, warmup, samples, size_bytes, poison_after_runs)
    seconds, bytes_read, bytes_written, flops, operations, verified, detail, params = out
    return NativeRun(list(seconds), bytes_read, bytes_written, flops, operations, bool(verified), str(detail),
                     typed_params(dict(params)))
