"""Values a document may hold, beyond what its schema says: every reader checks them.

A schema says a ceiling is a number; only a check of the value says it is a positive, finite,
plausible one. A document that passes its schema but holds a zero, negative, enormous or
non-finite figure, or a step that took no time, is refused with one line naming where
(:class:`DocumentValueError`), never carried into a division or a chart.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable

from pygpuperf.core.results import MachineModel, unit_for

# A ceiling above this in its unit (GB/s, TFLOP/s, ns) is no measurement but a damaged or forged file.
MAX_CEILING = 1e9
# Bytes no cache or memory of a single device comes near (1 EB).
MAX_CAPACITY_BYTES = 1e18
# Microseconds: a profiled step of more than a day is not a step.
MAX_STEP_US = 86_400e6
CEILING_FAMILIES = ("compute", "memory", "links", "latency", "communication")
# Measurement family behind each MachineModel table, for the unit a ceiling must carry.
_MEASUREMENT_FAMILY = {"compute": "compute", "memory": "memory", "links": "transfer", "latency": "latency",
                       "communication": "collective"}
_CEILING_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")
_REDO = "re-run the command that wrote it"


class DocumentValueError(ValueError):
    """A value no real run produces; the message is one line: where, what, and the fix."""


def one_line(text: Any, limit: int = 300) -> str:
    """Untrusted text as one printable line: control characters (terminal escapes, newlines) become spaces."""
    cleaned = "".join(c if c.isprintable() else " " for c in str(text))
    return " ".join(cleaned.split())[:limit]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # not a number, or an integer beyond any float
        return None
    return number if math.isfinite(number) else None


def positive(value: Any, what: str, where: str, upper: float = math.inf) -> float:
    """`value` as a float in (0, upper]; DocumentValueError otherwise."""
    number = _number(value)
    if number is None or not 0 < number <= upper:
        raise DocumentValueError(f"{where}: {what} is {one_line(value, 40)}, not a plausible figure; the file is "
                                 f"damaged or forged, {_REDO}")
    return number


def non_negative(value: Any, what: str, where: str, upper: float = math.inf) -> float:
    number = _number(value)
    if number is None or not 0 <= number <= upper:
        raise DocumentValueError(f"{where}: {what} is {one_line(value, 40)}, not a plausible figure; the file is "
                                 f"damaged or forged, {_REDO}")
    return number


def check_machine_model(model: MachineModel, where: str) -> None:
    """Every ceiling named like a measurement, in its family's unit, positive, finite and plausible;
    every capacity a positive size."""
    for family in CEILING_FAMILIES:
        for key, ceiling in getattr(model, family).items():
            if not _CEILING_NAME.match(key):
                raise DocumentValueError(f"{where}: ceiling name {one_line(key, 40)!r} under {family} is not a "
                                         f"measurement name; the file is damaged or forged, {_REDO}")
            positive(ceiling.value, f"ceiling {family}.{key}", where, MAX_CEILING)
            expected = unit_for(f"{_MEASUREMENT_FAMILY[family]}.{key}")
            if ceiling.unit != expected:
                raise DocumentValueError(f"{where}: ceiling {family}.{key} is in {one_line(ceiling.unit, 20)!r}, not "
                                         f"{expected}; the file is damaged or forged, {_REDO}")
    for key, size in model.capacity.items():
        positive(size.value, f"capacity {key}", where, MAX_CAPACITY_BYTES)


def check_kernels(kernels: Iterable[Any], where: str) -> None:
    """Profiled kernels: finite start times, durations, work and bounds, none negative."""
    for i, k in enumerate(kernels):
        label = f"kernel {i} ({one_line(getattr(k, 'name', ''), 40)})"
        if _number(k.start_us) is None:
            raise DocumentValueError(f"{where}: {label} starts at {one_line(k.start_us, 40)}; the file is damaged "
                                     f"or forged, {_REDO}")
        non_negative(k.duration_us, f"{label} duration", where, MAX_STEP_US)
        non_negative(k.flops, f"{label} FLOPs", where, 1e21)
        non_negative(k.bytes, f"{label} bytes", where, 1e18)
        if k.bound_us is not None:
            non_negative(k.bound_us, f"{label} bound", where, MAX_STEP_US)


def check_explanation(explanation: Any, where: str) -> None:
    """An explained step that took time, with sane kernels and throughput figures."""
    for step in explanation.steps:
        positive(step.timeline.wall_us, f"step {step.index} wall time", where, MAX_STEP_US)
        check_kernels(step.kernels, where)
    throughput = explanation.throughput
    if throughput is not None:
        positive(throughput.step_us.median, "the unprofiled step time", where, MAX_STEP_US)
        positive(throughput.samples_per_step, "samples per step", where, 1e12)
        for name in ("peak_memory_bytes", "resident_memory_bytes"):
            value = getattr(throughput, name)
            if value is not None:
                non_negative(value, name.replace("_", " "), where, MAX_CAPACITY_BYTES)


def device_kind(device: str, origin: str = "measured") -> str:
    """"cpu" or "gpu" for a machine model's or a profile's device ("cpu", "cuda:0", "cuda x2", a card
    name of a datasheet model); "unknown" where the string does not say."""
    if origin == "datasheet":
        return "gpu"
    head = device.strip().lower()
    if head.startswith("cpu"):
        return "cpu"
    if head.startswith(("cuda", "xpu", "mps", "hip", "rocm")):
        return "gpu"
    return "unknown"


def same_kind(model: MachineModel, profile_device: str) -> bool:
    """Whether a machine model can explain a step profiled on `profile_device` (CPU with CPU, GPU with GPU)."""
    kinds = {device_kind(model.device, model.origin), device_kind(profile_device)}
    return "unknown" in kinds or len(kinds) == 1
