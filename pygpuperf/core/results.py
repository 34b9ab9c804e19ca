"""The one result model: Measurement -> MachineModel -> Findings, plus workloads.

Every output (terminal table, JSON, CSV, DataFrame, chart) is derived from a
``Results`` document. Throughput is derived in one place, :func:`throughput`,
from what a probe declares (bytes read, bytes written, FLOPs) and its sample times.
Counting convention: 1 GB = 1e9 bytes, 1 TFLOP = 1e12 FLOP, an FMA is 2 FLOPs.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from pygpuperf.core.precision import accumulate_of, dtype_of

SCHEMA_ID = "pygpuperf/1"
COUNTING_CONVENTION = (
    "1 GB = 1e9 B; GB/s = (bytes_read + bytes_written) / time; 1 TFLOP = 1e12 FLOP; FMA = 2 FLOP; "
    "latency ns = time / dependent loads"
)

# Unit of each measurement family, keyed by the first component of its name.
# collective: bus bandwidth as nccl-tests defines it (busbw).
_UNITS = {"memory": "GB/s", "transfer": "GB/s", "collective": "GB/s", "compute": "TFLOP/s", "latency": "ns"}
_SCALE = {"GB/s": 1e9, "TFLOP/s": 1e12, "TOP/s": 1e12}


def unit_for(name: str) -> str:
    """The unit a measurement name is reported in (integer math counts TOP/s)."""
    family = name.split(".", 1)[0]
    if family not in _UNITS:
        raise ValueError(f"measurement name {name!r} has no known family ({', '.join(_UNITS)})")
    unit = _UNITS[family]
    if unit == "TFLOP/s" and (".int8" in name or ".int32" in name):
        return "TOP/s"
    return unit


def throughput(
    name: str, seconds: float, bytes_read: float, bytes_written: float, flops: float, operations: float = 0.0
) -> float:
    """The single throughput formula: work of one run over the time of that run, in the name's unit.

    Latency is the one inverse: time of one run over its dependent operations, in ns.
    """
    unit = unit_for(name)
    if unit == "ns":
        if operations <= 0:
            raise ValueError(f"{name}: a latency measurement needs its count of dependent operations")
        return seconds / operations * 1e9
    work = bytes_read + bytes_written if unit == "GB/s" else flops
    return work / seconds / _SCALE[unit]


@dataclass
class Stats:
    """Summary of per-sample values (in the measurement's unit)."""

    median: float
    p5: float
    p95: float
    mean: float
    cv: float  # standard deviation / mean
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> "Stats":
        if len(values) == 0:
            raise ValueError("no samples")
        a = np.asarray(values, dtype=np.float64)
        mean = float(a.mean())
        return Stats(
            median=float(np.median(a)),
            p5=float(np.percentile(a, 5)),
            p95=float(np.percentile(a, 95)),
            mean=mean,
            cv=float(a.std() / mean) if mean else 0.0,
            n=int(a.size),
        )

    def scaled(self, factor: float) -> "Stats":
        """The same samples in another unit (seconds -> microseconds: 1e6)."""
        return Stats(self.median * factor, self.p5 * factor, self.p95 * factor, self.mean * factor, self.cv, self.n)


@dataclass
class Telemetry:
    """Clock, throttle and link samples taken while a probe ran (empty where the device has none)."""

    sm_clock_mhz: list[float] = field(default_factory=list)
    mem_clock_mhz: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    temperature_c: list[float] = field(default_factory=list)
    throttle_reasons: list[str] = field(default_factory=list)
    # Links slow down when idle, so their speed is only worth reading while a transfer runs.
    pcie_generation: list[float] = field(default_factory=list)
    pcie_width: list[float] = field(default_factory=list)
    # Joules the device used over the probe: its total-energy counter where it has one, else the power
    # samples integrated over the time; None where neither exists (a CPU without RAPL access, ...).
    energy_j: float | None = None
    energy_source: str = ""  # "energy counter" or "power integral"
    seconds: float | None = None  # how long the sampled span lasted

    def median_sm_clock_mhz(self) -> float | None:
        return float(np.median(self.sm_clock_mhz)) if self.sm_clock_mhz else None

    def mean_power_w(self) -> float | None:
        """Average board power over the span: energy / time where both are known, else the samples' mean."""
        if self.energy_j is not None and self.seconds:
            return self.energy_j / self.seconds
        return float(np.mean(self.power_w)) if self.power_w else None


def per_watt(value: float, telemetry: Telemetry | None) -> float | None:
    """A rate per watt of average board power (GB/s per W, TFLOP/s per W); None where power is not known."""
    power = telemetry.mean_power_w() if telemetry else None
    return value / power if power and math.isfinite(value) else None


# A measurement parameter: a number where it counts something, text where it names something.
ParamValue = int | float | str | bool
# Identifiers that look like numbers but are not quantities: a variant "1024", NUMA nodes "0" or "0,1".
TEXT_PARAMS = frozenset({"variant", "source_variant", "gpu_numa_node", "host_numa_node"})
_INTEGER = re.compile(r"^[+-]?\d+$")
_REAL = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


def typed_param(key: str, value: Any) -> ParamValue:
    """A parameter as a value: numbers as int or float, the rest as text. Applied where text arrives
    (the native extension's string map, documents written before parameters were typed)."""
    if key in TEXT_PARAMS:
        return str(value)
    if isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    if _INTEGER.match(text):
        return int(text)
    if _REAL.match(text):
        number = float(text)
        return number if math.isfinite(number) else text
    return text


def typed_params(params: dict[str, Any] | None) -> dict[str, ParamValue]:
    return {str(k): typed_param(str(k), v) for k, v in (params or {}).items()}


@dataclass(frozen=True)
class Quantities:
    """The parameters the analysis reads as numbers, typed. results.json keeps them in `params` under
    the same keys: a Measurement takes them out of the params it is given and writes them back
    (Measurement.document_params). Unset where the probe does not declare one."""

    bytes: int | None = None  # payload of one copy (transfers), or of one kernel (memory.size.sweep)
    copies_per_run: int | None = None  # copies of `bytes` one timed run makes
    size_bytes: int | None = None  # a collective's message size
    footprint_bytes: int | None = None  # bytes a sweep point cycles through
    window_bytes: int | None = None  # one worker's share of the footprint
    chain_bytes: int | None = None  # a pointer chase's footprint
    workers: int | None = None  # private windows a footprint is made of
    # A cache level read off a sweep's plateau (pygpuperf.analyze.hierarchy): the knee and the range it
    # is known to within, and the plateau's first and last footprints.
    capacity_bytes: int | None = None
    capacity_low_bytes: int | None = None
    capacity_high_bytes: int | None = None
    plateau_first_bytes: int | None = None
    plateau_last_bytes: int | None = None
    flop_per_byte: float | None = None  # the intensity a compute.sweep point was built for
    time_s: float | None = None  # a collective's median time per operation
    algbw_gbs: float | None = None  # a collective's message size over that time
    world_size: int | None = None  # ranks of a collective
    hosts: int | None = None

    def as_params(self) -> dict[str, ParamValue]:
        """The set ones, as results.json's params hold them."""
        return {f.name: value for f in _QUANTITY_FIELDS if (value := getattr(self, f.name)) is not None}


_QUANTITY_FIELDS = dataclasses.fields(Quantities)
_QUANTITY_KEYS = frozenset(f.name for f in _QUANTITY_FIELDS)
# Whole counts take ints only: a fraction of a byte or of a worker is no count, and stays a plain parameter.
_WHOLE = frozenset(name for name, hint in typing.get_type_hints(Quantities).items() if int in typing.get_args(hint))


def _quantity(key: str, value: Any) -> int | float | None:
    """`value` as the number quantity `key` holds, or None where it is not one (text, a fraction for a
    count, a non-finite real): such a value stays in params as it is, so documents round-trip unchanged."""
    value = typed_param(key, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if key in _WHOLE:
        return value if isinstance(value, int) else None
    return value if math.isfinite(value) else None


def split_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int | float]]:
    """(the rest, the quantities) of a params mapping."""
    rest: dict[str, Any] = {}
    numbers: dict[str, int | float] = {}
    for key, value in params.items():
        number = _quantity(key, value) if key in _QUANTITY_KEYS else None
        if number is None:
            rest[key] = value
        else:
            numbers[key] = number
    return rest, numbers


@dataclass
class Measurement:
    name: str
    value: float  # median throughput, in `unit`
    unit: str
    stats: Stats
    bytes_read: float  # per run
    bytes_written: float  # per run
    flops: float  # per run
    operations: float  # dependent operations per run (latency probes), else 0
    backend: str  # which implementation measured it: "native-cuda", "native-cpu", "torch-cuda", ...
    device: str
    verified: bool
    verify_detail: str = ""
    params: dict[str, ParamValue] = field(default_factory=dict)
    sample_seconds: list[float] = field(default_factory=list)
    telemetry: Telemetry | None = None
    status: str = "ok"  # "ok", "waived" or "error"
    reason: str = ""  # why it was waived or failed
    # The value is bytes / time x this: a collective's bus factor (nccl-tests' busbw from the message
    # size, pygpuperf.measure.collectives.bus_factor); 1 for everything else.
    bus_factor: float = 1.0
    # The parameters the analysis reads as numbers; `params` keeps the labels and the other numbers.
    quantities: Quantities = field(default_factory=Quantities)
    # The document's order of the params' keys, quantities among them (so that a document reads back
    # and writes out unchanged); filled from `params` when the measurement is made.
    param_order: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        # Quantities given among the params (as probes and documents give them) move to their fields.
        self.param_order = tuple(dict.fromkeys((*self.param_order, *self.params)))
        self.params, numbers = split_params(self.params)
        if numbers:
            self.quantities = dataclasses.replace(self.quantities, **numbers)

    def document_params(self) -> dict[str, ParamValue]:
        """The params as results.json holds them: the labels and the quantities, in the order given."""
        numbers = self.quantities.as_params()
        merged = {**self.params, **numbers}
        return {key: merged[key] for key in dict.fromkeys((*self.param_order, *merged)) if key in merged}

    @staticmethod
    def from_samples(
        name: str,
        *,
        sample_seconds: Sequence[float],
        bytes_read: float,
        bytes_written: float,
        flops: float,
        backend: str,
        device: str,
        verified: bool,
        operations: float = 0.0,
        verify_detail: str = "",
        params: dict[str, Any] | None = None,
        telemetry: Telemetry | None = None,
        bus_factor: float = 1.0,
    ) -> "Measurement":
        values = [throughput(name, s, bytes_read, bytes_written, flops, operations) * bus_factor
                  for s in sample_seconds if s > 0]
        if not values:
            raise ValueError(f"{name}: no positive sample times")
        stats = Stats.of(values)
        return Measurement(
            name=name,
            value=stats.median,
            unit=unit_for(name),
            stats=stats,
            bytes_read=float(bytes_read),
            bytes_written=float(bytes_written),
            flops=float(flops),
            operations=float(operations),
            backend=backend,
            device=device,
            verified=bool(verified),
            verify_detail=verify_detail,
            params=typed_params(params),
            sample_seconds=[float(s) for s in sample_seconds],
            telemetry=telemetry,
            bus_factor=float(bus_factor),
        )

    @staticmethod
    def not_run(name: str, *, backend: str, device: str, status: str, reason: str) -> "Measurement":
        """A probe that was waived (hardware can't run it) or failed with an error."""
        nan = math.nan
        return Measurement(
            name=name,
            value=nan,
            unit=unit_for(name),
            stats=Stats(nan, nan, nan, nan, nan, 0),
            bytes_read=0.0,
            bytes_written=0.0,
            flops=0.0,
            operations=0.0,
            backend=backend,
            device=device,
            verified=False,
            status=status,
            reason=reason,
        )

    @property
    def usable(self) -> bool:
        """Counts toward ceilings: it ran and its output checked out."""
        return self.status == "ok" and self.verified and math.isfinite(self.value)

    @property
    def noisy(self) -> bool:
        """Its samples spread more than NOISY_CV: the median is reported, but alone it supports no verdict."""
        return self.status == "ok" and math.isfinite(self.stats.cv) and self.stats.cv > NOISY_CV


# Samples spread more than this (standard deviation / mean) make a measurement noisy: flagged, and a
# ceiling only where no quieter measurement of the same roof exists.
NOISY_CV = 0.10

# Stream operations whose best figure is a memory level's bandwidth ceiling.
MEMORY_CEILING_OPS = ("read", "write", "copy", "scale", "triad")


@dataclass
class Ceiling:
    """One roof of the machine model, traced back to the measurement that set it."""

    value: float
    unit: str
    source: str  # measurement name
    backend: str
    cv: float | None = None  # the measurement's sample spread (None: a datasheet figure or a derived size)

    @property
    def per_second(self) -> float:
        """The ceiling in work per second: bytes/s for GB/s, FLOP/s (or OP/s) for TFLOP/s."""
        return self.value * _SCALE.get(self.unit, 1.0)

    def seconds(self, work: float) -> float:
        """Seconds to do `work` (bytes or FLOPs) at this ceiling."""
        return work / self.per_second


@dataclass
class LinkFit:
    """A transfer size sweep fitted as time per copy = latency + size / bandwidth (pygpuperf.analyze.transfers).

    Sizes count the payload of one copy as the measurement does: both directions for a
    bidirectional one.
    """

    name: str  # measurement name, e.g. "transfer.h2d.pinned"
    backend: str
    bandwidth_gbs: float  # asymptotic, reached by large copies
    latency_us: float  # fixed cost of one copy
    n_half_bytes: float  # size that reaches half the asymptotic bandwidth: latency x bandwidth
    points: int  # transfer sizes fitted
    rms_relative_error: float  # of the fitted times per copy: 0.02 = the line passes within ~2 %
    min_bytes: float
    max_bytes: float


@dataclass
class MachineModel:
    """Measured ceilings of one device. Keys are measurement names without the family."""

    device: str
    compute: dict[str, Ceiling] = field(default_factory=dict)  # "tensor.fp16.acc32" -> TFLOP/s
    memory: dict[str, Ceiling] = field(default_factory=dict)  # "hbm" / "dram" / "l2" -> GB/s
    links: dict[str, Ceiling] = field(default_factory=dict)  # "h2d.pinned" -> GB/s
    latency: dict[str, Ceiling] = field(default_factory=dict)  # "l2" -> ns (lowest measured)
    communication: dict[str, Ceiling] = field(default_factory=dict)  # "all_reduce" -> busbw GB/s
    origin: str = "measured"  # later: "datasheet"
    link_fits: dict[str, LinkFit] = field(default_factory=dict)  # "h2d.pinned" -> latency + bandwidth fit
    # "tensor.fp16.acc32/hbm" -> FLOP per byte where that compute roof meets main memory's.
    ridge_points: dict[str, float] = field(default_factory=dict)
    capacity: dict[str, Ceiling] = field(default_factory=dict)  # "l2", "memory" -> bytes
    # Bytes per kernel against time, fitted as t = t0 + bytes / bandwidth per level ("hbm", "l2"): memory.size.sweep.
    memory_fits: dict[str, LinkFit] = field(default_factory=dict)
    # Chip facts the kernel-time model needs: "compute_units" (multiprocessors), "clock_mhz" (boost clock);
    # "board_power_w" (the power limit) prices a prediction's energy.
    facts: dict[str, float] = field(default_factory=dict)

    def fill_capacity(self, device_meta: dict[str, Any], source: str = "device properties") -> None:
        """Cache and memory sizes in bytes from a run's meta.device (l2_cache_bytes, l3_cache_bytes, memory_bytes)."""
        for key, meta_key in (("l2", "l2_cache_bytes"), ("l3", "l3_cache_bytes"), ("memory", "memory_bytes")):
            value = device_meta.get(meta_key)
            if value:
                self.capacity[key] = Ceiling(float(value), "B", source, "")
        # A CPU's private caches, summed over the threads that share an op's work.
        workers = device_meta.get("threads") or device_meta.get("cores")
        for key, meta_key in (("l1", "l1d_cache_bytes_per_cpu"), ("l2", "l2_cache_bytes_per_cpu")):
            value = device_meta.get(meta_key)
            if value and workers and key not in self.capacity:
                self.capacity[key] = Ceiling(float(value) * workers, "B", f"{source}: {meta_key} x {workers}", "")
        for key, meta_key in (("compute_units", "multiprocessor_count"), ("clock_mhz", "sm_clock_max_mhz"),
                              ("board_power_w", "power_limit_w")):
            value = device_meta.get(meta_key)
            if value and key not in self.facts:
                self.facts[key] = float(value)

    def capacity_bytes(self, key: str) -> float | None:
        c = self.capacity.get(key)
        return c.value if c is not None and c.value > 0 else None

    def fill_ridge_points(self) -> None:
        """Each compute roof against main memory (the DRAM/HBM ceiling), where both exist."""
        dram = self.dram_key()
        self.ridge_points = {}
        for key in sorted(self.compute) if dram else []:
            ridge = self.ridge_point(key, dram)
            if ridge:
                self.ridge_points[f"{key}/{dram}"] = ridge

    def ridge_point(self, compute_key: str, memory_key: str) -> float | None:
        """FLOP per byte where the compute roof meets the memory roof."""
        c, b = self.compute.get(compute_key), self.memory.get(memory_key)
        if c is None or b is None or b.value <= 0:
            return None
        return (c.value * 1e12) / (b.value * 1e9)

    def _first(self, table: dict[str, Ceiling], keys: Iterable[str]) -> tuple[str, Ceiling] | None:
        for key in keys:
            ceiling = table.get(key)
            if ceiling is not None and ceiling.value > 0:
                return key, ceiling
        return None

    def matrix_ceiling(self, precision: str, prefer_library: bool = False) -> tuple[str, Ceiling] | None:
        """(key, ceiling) that bounds matrix math of `precision` ("fp16.acc32", "bf16") on the tensor
        cores: the instruction-level figure (tensor.*) first, the library's (library.*) where none was
        measured, or the other way round with `prefer_library`. fp32 data reaches them as TF32."""
        dtype, accumulate = dtype_of(precision), accumulate_of(precision)
        if dtype == "fp32":
            dtype, accumulate = "tf32", "acc32"
        keys = [f"tensor.{dtype}.{accumulate}", f"library.{dtype}" + ("acc16" if accumulate == "acc16" else "")]
        return self._first(self.compute, reversed(keys) if prefer_library else keys)

    def vector_ceiling(self, precision: str, prefer_library: bool = False) -> tuple[str, Ceiling] | None:
        """(key, ceiling) that bounds math of `precision` off the matrix units: a GPU's CUDA cores (packed
        fp16/bf16 where measured), else a CPU's SIMD units, else the BLAS library's fp32 figure (first,
        with `prefer_library`: what a model's GEMMs reach through the library)."""
        dtype = dtype_of(precision) if precision else "fp32"
        if dtype in ("fp16", "bf16"):
            keys = [f"cuda.{dtype}x2", "cuda.fp32", "simd.fp32", "library.fp32"]
        elif dtype == "fp64":
            keys = ["cuda.fp64", "simd.fp64"]
        else:
            keys = ["cuda.fp32", "simd.fp32", "library.fp32"]
        if prefer_library and "library.fp32" in keys:
            keys = ["library.fp32"] + [k for k in keys if k != "library.fp32"]
        return self._first(self.compute, keys)

    def supports(self, dtype: str) -> bool:
        """Whether this machine runs `dtype` at all: some compute ceiling names it (tensor.bf16.*,
        library.bf16, cuda.bf16x2). fp32 and fp64 always run on the vector units."""
        dtype = dtype_of(dtype) if dtype else ""
        if dtype in ("fp32", "fp64", ""):
            return True
        return any(f".{dtype}" in key for key in self.compute)

    def dram_key(self) -> str | None:
        for key in ("hbm", "dram"):
            if key in self.memory:
                return key
        return None


@dataclass
class Finding:
    severity: str  # "info", "warning" or "error"
    title: str  # one sentence in plain words
    evidence: dict[str, Any] = field(default_factory=dict)
    suggestion: str = ""


@dataclass
class WorkloadResult:
    """A model run placed on the measured roofline."""

    name: str
    device: str
    params: dict[str, str]
    step_time: Stats  # seconds per step
    samples_per_second: float
    flops_per_step: float  # counted with torch.utils.flop_counter (matmul, conv, attention)
    bytes_per_step: float  # estimate: every op's input and output bytes, no cache reuse
    achieved_tflops: float
    intensity: float  # FLOP per byte
    compute_ceiling: str | None = None  # MachineModel.compute key it is held against
    memory_ceiling: str | None = None  # MachineModel.memory key
    attainable_tflops: float | None = None  # min(compute roof, intensity x memory roof)
    fraction_of_attainable: float | None = None
    notes: list[str] = field(default_factory=list)
    peak_memory_bytes: float | None = None  # allocator peak during the timed steps (CUDA only)
    resident_memory_bytes: float | None = None  # held between steps: weights, optimizer state, data
    explanation: dict[str, Any] | None = None  # waterfall summary of the explained step (explain.json has it all)


def is_series_point(name: str) -> bool:
    """Sweep points (memory.sweep, latency.sweep, compute.sweep) are series, not ceilings or table rows."""
    return name.endswith(".sweep")


def lower_is_better(name: str) -> bool:
    return unit_for(name) == "ns"


def best_of(measurements: Sequence[Measurement]) -> Measurement | None:
    """Best usable one of measurements of one name (lowest for latency, else highest)."""
    usable = [m for m in measurements if m.usable]
    if not usable:
        return None
    return (min if lower_is_better(usable[0].name) else max)(usable, key=lambda m: m.value)


def best_per_backend(measurements: Iterable[Measurement]) -> list[tuple[Measurement, int]]:
    """One row per (name, backend): its best variant (or the failed/waived entry) and how many variants ran."""
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.name, m.backend), []).append(m)
    return [(best_of(group) or group[0], len(group)) for group in groups.values()]


def measurement_dict(m: Measurement) -> dict[str, Any]:
    """One measurement as results.json holds it: the quantities among its params."""
    d = dataclasses.asdict(m)
    del d["quantities"], d["param_order"]
    d["params"] = m.document_params()
    return _clean(d)


@dataclass
class Results:
    meta: dict[str, Any]
    measurements: list[Measurement] = field(default_factory=list)
    machine_model: MachineModel | None = None
    findings: list[Finding] = field(default_factory=list)
    workloads: list[WorkloadResult] = field(default_factory=list)

    def device_name(self) -> str | None:
        """The measured device's name as the run recorded it (None: it recorded none)."""
        device = self.meta.get("device")
        return str(device["name"]) if isinstance(device, dict) and device.get("name") else None

    def best(self, name: str) -> Measurement | None:
        """The best usable measurement of `name`, whichever backend or variant measured it."""
        usable = [m for m in self.measurements if m.name == name and m.usable]
        return best_of(usable)

    def to_dict(self, measurements: bool = True) -> dict[str, Any]:
        """The document; without `measurements` their list is left empty (a checkpoint adds them itself)."""
        return {
            "schema": SCHEMA_ID,
            "meta": self.meta,
            "measurements": [measurement_dict(m) for m in self.measurements] if measurements else [],
            "machine_model": _clean(dataclasses.asdict(self.machine_model)) if self.machine_model else None,
            "findings": [_clean(dataclasses.asdict(f)) for f in self.findings],
            "workloads": [_clean(dataclasses.asdict(w)) for w in self.workloads],
        }

    @staticmethod
    def from_dict(doc: dict[str, Any]) -> "Results":
        """Build from an already-validated document (see pygpuperf.core.documents.load_results)."""
        def measurement(d: dict[str, Any]) -> Measurement:
            d = dict(d)
            d["value"] = _num(d["value"])
            d["stats"] = Stats(**{k: _num(v) if k != "n" else v for k, v in d["stats"].items()})
            d["telemetry"] = Telemetry(**d["telemetry"]) if d.get("telemetry") else None
            d["params"] = typed_params(d.get("params"))  # its quantities move to their fields
            return Measurement(**d)

        def model(d: dict[str, Any] | None) -> MachineModel | None:
            if d is None:
                return None
            tables = {k: {n: Ceiling(**c) for n, c in d[k].items()} for k in ("compute", "memory", "links", "latency", "communication",
                                                                          "capacity") if k in d}
            fits = {n: LinkFit(**f) for n, f in d.get("link_fits", {}).items()}  # absent from older documents
            memory_fits = {n: LinkFit(**f) for n, f in d.get("memory_fits", {}).items()}
            return MachineModel(device=d["device"], origin=d["origin"], link_fits=fits, memory_fits=memory_fits,
                                facts={k: float(v) for k, v in d.get("facts", {}).items()},
                                ridge_points=dict(d.get("ridge_points", {})), **tables)

        def workload(d: dict[str, Any]) -> WorkloadResult:
            d = dict(d)
            d["step_time"] = Stats(**d["step_time"])
            return WorkloadResult(**d)

        return Results(
            meta=doc["meta"],
            measurements=[measurement(m) for m in doc["measurements"]],
            machine_model=model(doc.get("machine_model")),
            findings=[Finding(**f) for f in doc["findings"]],
            workloads=[workload(w) for w in doc["workloads"]],
        )


def _clean(obj: Any) -> Any:
    """JSON has no NaN: non-finite floats become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _num(v: float | None) -> float:
    return math.nan if v is None else float(v)
