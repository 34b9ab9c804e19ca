"""The Python probe interface, mirroring pgp::Probe (csrc/core/probe.h), and its one measurement
sequence: setup -> poison -> warm-up -> timed samples (core.timing.sample_seconds) -> verify -> teardown.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from pygpuperf.core.results import is_series_point, typed_params
from pygpuperf.core.timing import SPIN_CYCLES_PER_SAMPLE, sample_seconds, synchronize

Params = dict[str, str]


@dataclass(frozen=True)
class RunSettings:
    warmup: int = 3
    samples: int = 20
    size_bytes: int = 0  # 0: the probe sizes itself from the device
    poison_after_runs: bool = False  # test hook: verification must then fail
    quick: bool = False  # the --quick suite: fewer variants and sweep points
    # The default suite's limits (0: none). A sweep point is one of a curve's many: it takes this many samples.
    sweep_samples: int = 0
    # Seconds of timed samples a long run may take: fewer samples where they do not fit (at least MIN_SAMPLES).
    sample_budget_s: float = 0.0

    def for_probe(self, name: str) -> "RunSettings":
        """The settings one probe runs with: a sweep point's fewer samples where the suite sets them."""
        if self.sweep_samples and is_series_point(name) and self.sweep_samples < self.samples:
            return dataclasses.replace(self, samples=self.sweep_samples)
        return self


# Fewest samples a budget leaves a long run: enough for a median and a spread.
MIN_SAMPLES = 5


@dataclass
class Work:
    """What one timed run moves and computes (1 GB = 1e9 B, an FMA is 2 FLOPs)."""

    bytes_read: float = 0.0
    bytes_written: float = 0.0
    flops: float = 0.0
    operations: float = 0.0  # dependent operations per run, for latency probes: times are per operation


class Probe(ABC):
    """One portable measurement; mirrors pgp::Probe in csrc/core/probe.h."""

    name: str
    description: str
    #: Device cycles the GPU spins per sample before the samples are queued (core.timing.sample_seconds):
    #: enough for the host to queue one sample, so runs are timed back to back on the device.
    spin_cycles = SPIN_CYCLES_PER_SAMPLE
    #: Time what the host spends issuing a run rather than the run on the device (launch rates).
    host_clock = False
    #: Time the kernels' own durations from the profiler's activity trace (no gaps between them; CUDA only).
    kernel_clock = False

    def waiver(self, device: torch.device) -> str | None:
        """Why this probe cannot run on `device`, or None when it can."""
        return None

    @abstractmethod
    def setup(self, device: torch.device, settings: RunSettings) -> None:
        """Allocate and fill inputs with random non-zero data; called once per measurement."""

    @abstractmethod
    def work(self) -> Work:
        """Bytes and FLOPs of one run; valid after setup()."""

    @abstractmethod
    def poison(self) -> None:
        """Overwrite every output with a value no correct run produces."""

    @abstractmethod
    def run(self) -> None:
        """One timed unit of work, queued on the device (not awaited)."""

    @abstractmethod
    def verify(self) -> tuple[bool, str]:
        """Check the outputs of the last run against an independent reference."""

    def params(self) -> Params:
        """Parameters worth reporting (sizes, dtype, op, flags)."""
        return {}

    def variants(self, device: torch.device, quick: bool) -> list[str]:
        """Implementation variants measured under this name ([""]: one)."""
        return [""]

    def use_variant(self, variant: str) -> None:
        """Select one of variants() before setup()."""
        if variant:
            raise ValueError(f"probe '{self.name}' has no variant '{variant}'")

    def before_sample(self) -> None:
        """Untimed work queued before each timed sample (e.g. flushing a cache)."""

    def teardown(self) -> None:
        """Release what setup() allocated and restore any global state it changed."""


@dataclass
class ProbeRun:
    """What one pass of :func:`run_probe` produced, before it becomes a Measurement."""

    sample_seconds: list[float]
    work: Work
    verified: bool
    verify_detail: str
    params: Params


def _budgeted(probe: Probe, device: torch.device, settings: RunSettings) -> tuple[int, int]:
    """(warm-up runs left, timed samples): with a sample budget, the first warm-up run is timed on the host
    and a long run takes only the samples that fit the budget (the fp32 16384-cube GEMM: 166 ms a run)."""
    if settings.sample_budget_s <= 0 or settings.warmup < 1 or settings.samples <= MIN_SAMPLES:
        return settings.warmup, settings.samples
    probe.before_sample()
    synchronize(device)
    start = time.perf_counter()
    probe.run()
    synchronize(device)
    run_s = time.perf_counter() - start
    fit = int(settings.sample_budget_s / run_s) if run_s > 0 else settings.samples
    return settings.warmup - 1, max(MIN_SAMPLES, min(settings.samples, fit))


def run_probe(probe: Probe, device: torch.device, settings: RunSettings) -> ProbeRun:
    """The one measurement sequence every Python probe goes through (portable torch probes, collectives).

    setup -> poison -> warm-up -> timed samples -> verify -> teardown. With
    ``settings.poison_after_runs`` the outputs are poisoned after the timed runs
    instead, so verification must fail (a test hook proving verify() checks).
    """
    if settings.samples < 1:
        raise ValueError(f"samples must be at least 1, got {settings.samples}")
    if settings.warmup < 0:
        raise ValueError(f"warmup must be non-negative, got {settings.warmup}")
    if settings.size_bytes < 0:
        raise ValueError("size_bytes must be non-negative")
    reason = probe.waiver(device)
    if reason is not None:
        raise RuntimeError(f"probe '{probe.name}' is waived on {device}: {reason}")

    with torch.no_grad():
        try:
            probe.setup(device, settings)
            if not settings.poison_after_runs:
                probe.poison()
            warmup, samples = _budgeted(probe, device, settings)
            seconds = sample_seconds(probe.run, device, warmup, samples,
                                     before_sample=probe.before_sample, spin=True, spin_cycles=probe.spin_cycles,
                                     host_clock=probe.host_clock, kernel_clock=probe.kernel_clock)
            if settings.poison_after_runs:
                probe.poison()
            synchronize(device)
            verified, detail = probe.verify()
            return ProbeRun(seconds, probe.work(), verified, detail, typed_params(probe.params()))
        finally:
            probe.teardown()
            if device.type == "cuda":
                # Hand freed blocks back so the next probe (or the native backend) can use them.
                torch.cuda.empty_cache()
