"""The portable (torch-op) backend on the CPU: every probe measures and verifies, or is waived with a reason."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from pygpuperf.measure.probe import RunSettings
from pygpuperf.measure.backends.portable import LibraryMatmulProbe, PortableBackend, run_probe

CPU = torch.device("cpu")
BUFFER_BYTES = 8 << 20  # small buffers keep the suite fast on two cores
SETTINGS = RunSettings(warmup=1, samples=5, size_bytes=BUFFER_BYTES)
MATMUL_N = 256
MATMUL_SETTINGS = RunSettings(warmup=1, samples=3, size_bytes=3 * 4 * MATMUL_N * MATMUL_N)

backend = PortableBackend()
NAMES = backend.probe_names(CPU)
RUNNABLE = [n for n in NAMES if backend.waiver(n, CPU) is None]


def settings_for(name: str, **changes: object) -> RunSettings:
    base = MATMUL_SETTINGS if name.startswith("compute.") else SETTINGS
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_cpu_probe_names_cover_every_family() -> None:
    assert {"memory.dram.copy", "memory.dram.read", "memory.dram.write"} <= set(NAMES)
    assert "compute.library.fp32" in NAMES
    # Host and device are one memory on a CPU, and TF32, fp16 accumulation, fp8 and int8 matmuls are
    # GPU modes: a CPU run lists none of them rather than a row of waivers in GPU words.
    assert not [n for n in NAMES if n.startswith("transfer.")]
    assert not {f"compute.library.{v}" for v in ("tf32", "fp16acc16", "fp8", "int8")} & set(NAMES)
    assert backend.backend_name(CPU) == "torch-cpu"
    for name in NAMES:
        assert backend.describe(name, CPU)


@pytest.mark.parametrize("name", NAMES)
def test_probe_measures_verified_or_is_waived(name: str) -> None:
    reason = backend.waiver(name, CPU)
    if reason is not None:
        assert reason.strip(), f"{name} waived without a reason"
        with pytest.raises(RuntimeError, match="waived"):
            backend.measure(name, CPU, settings_for(name))
        return
    m = backend.measure(name, CPU, settings_for(name))
    assert m.verified, m.verify_detail
    assert m.usable
    assert m.backend == "torch-cpu" and m.device == "cpu" and m.name == name
    assert m.stats.n == len(m.sample_seconds) == settings_for(name).samples
    assert math.isfinite(m.value) and m.value > 0
    assert all(s > 0 for s in m.sample_seconds)
    assert m.params


def test_exact_work_accounting() -> None:
    copy = backend.measure("memory.dram.copy", CPU, SETTINGS)
    assert copy.bytes_read == copy.bytes_written == BUFFER_BYTES
    assert copy.flops == 0
    assert copy.params["buffer_bytes"] == BUFFER_BYTES
    read = backend.measure("memory.dram.read", CPU, SETTINGS)
    assert read.bytes_read == BUFFER_BYTES and read.bytes_written == 0
    write = backend.measure("memory.dram.write", CPU, SETTINGS)
    assert write.bytes_read == 0 and write.bytes_written == BUFFER_BYTES
    matmul = backend.measure("compute.library.fp32", CPU, MATMUL_SETTINGS)
    n = int(matmul.params["N"])
    assert n == MATMUL_N and matmul.params["M"] == matmul.params["K"] == n
    assert matmul.flops == 2 * n**3
    assert matmul.bytes_read == matmul.bytes_written == 0
    assert matmul.unit == "TFLOP/s"


def test_cpu_values_are_plausible() -> None:
    copy = backend.measure("memory.dram.copy", CPU, SETTINGS)
    assert copy.unit == "GB/s"
    assert 0.1 < copy.value < 1000
    # The reported value is the median of per-sample throughputs from the one formula.
    per_sample = sorted((copy.bytes_read + copy.bytes_written) / s / 1e9 for s in copy.sample_seconds)
    assert copy.value == pytest.approx(per_sample[len(per_sample) // 2])
    matmul = backend.measure("compute.library.fp32", CPU, MATMUL_SETTINGS)
    assert 1e-4 < matmul.value < 1000  # TFLOP/s


@pytest.mark.parametrize("name", RUNNABLE)
def test_poison_after_runs_fails_verification(name: str) -> None:
    m = backend.measure(name, CPU, settings_for(name, poison_after_runs=True))
    assert not m.verified, f"{name} verified although its outputs were poisoned: {m.verify_detail}"
    assert not m.usable


def test_cpu_waivers_name_their_reason() -> None:
    assert "CPU" in backend.waiver("compute.library.fp16", CPU)
    assert backend.waiver("compute.library.fp32", CPU) is None


@pytest.mark.parametrize("variant", ["bf16", "fp16"])
def test_low_precision_matmul_verification_when_forced(variant: str) -> None:
    """The low-precision check itself, on a tiny product (these dtypes are slow on most CPUs)."""
    probe = LibraryMatmulProbe(variant)
    probe.waiver = lambda device: None  # type: ignore[method-assign]
    tiny = RunSettings(warmup=0, samples=1, size_bytes=3 * 2 * 64 * 64)
    good = run_probe(probe, CPU, tiny)
    assert good.verified, good.verify_detail
    assert good.params["dtype"] == variant and good.params["accumulate"] == "fp32"
    poisoned = run_probe(probe, CPU, dataclasses.replace(tiny, poison_after_runs=True))
    assert not poisoned.verified


def test_unknown_probe_and_bad_settings() -> None:
    with pytest.raises(KeyError, match="memory.dram.copy"):
        backend.waiver("memory.dram.nonsense", CPU)
    with pytest.raises(ValueError, match="samples"):
        backend.measure("memory.dram.copy", CPU, RunSettings(samples=0, size_bytes=BUFFER_BYTES))


def test_matmul_size_from_size_bytes_is_a_multiple_of_64() -> None:
    m = backend.measure("compute.library.fp32", CPU, RunSettings(warmup=0, samples=1, size_bytes=3 * 4 * 200 * 200))
    assert m.params["N"] == 192


def test_cpu_matmul_shape_variants_and_gpu_only_dtypes():
    backend = PortableBackend()
    assert backend.variants("compute.library.fp32", CPU) == ["1024", "512"]
    assert backend.variants("compute.library.fp32", CPU, quick=True) == ["1024"]
    m = backend.measure("compute.library.fp32", CPU, RunSettings(warmup=0, samples=2), "512")
    assert m.verified and m.flops == 2 * 512**3 and m.params["variant"] == "512"
    for dtype in ("fp8", "int8"):  # GPU-only matmuls are not probes of a CPU at all
        with pytest.raises(KeyError, match="no portable probe"):
            backend.waiver(f"compute.library.{dtype}", CPU)
    with pytest.raises(ValueError, match="no shape variant"):
        backend.measure("compute.library.fp32", CPU, RunSettings(), "3x3")


def test_fixed_cost_of_an_op_is_per_op():
    """latency.kernel.*: the value is the time of one tiny op, the run's time divided by the ops in it."""
    queued = backend.measure("latency.kernel.back_to_back", CPU, RunSettings(warmup=2, samples=9))
    single = backend.measure("latency.kernel.single", CPU, RunSettings(warmup=2, samples=9))
    assert queued.unit == single.unit == "ns"
    ops = int(queued.params["ops_per_run"])
    assert ops > 1 and int(single.params["ops_per_run"]) == 1
    median_run = sorted(queued.sample_seconds)[len(queued.sample_seconds) // 2]
    assert queued.value == pytest.approx(median_run / ops * 1e9, rel=0.01)
    assert 10 < queued.value < 1e6  # a CPU op costs more than 10 ns and far less than a millisecond
    # Launches and graphs are GPU notions: a CPU run does not list them.
    assert not {"latency.kernel.graph", "latency.kernel.launch", "latency.kernel.duration"} & set(NAMES)


def test_skinny_matmul_shapes_count_their_own_flops():
    m = backend.measure("compute.library.fp32", CPU, RunSettings(warmup=0, samples=2), "8x4096x4096")
    assert m.verified and (m.params["M"], m.params["N"], m.params["K"]) == (8, 4096, 4096)
    assert m.flops == 2 * 8 * 4096 * 4096
    # On an accelerator the sweep adds the skinny shapes, but only those the low-precision ops accept.
    meta = torch.device("meta")
    assert "1x4096x4096" in LibraryMatmulProbe("bf16").variants(meta, quick=False)
    assert not [s for s in LibraryMatmulProbe("int8").variants(meta, quick=False) if int(s.split("x")[0]) <= 16]
    assert LibraryMatmulProbe("bf16").variants(meta, quick=True) == ["8192"]


def test_cpu_memory_buffers_are_shared_out_among_the_ranks_that_measure_one_host(monkeypatch):
    from pygpuperf.measure.backends import portable

    mib = 1 << 20
    monkeypatch.setattr(portable, "cpu_cache_facts", lambda: {"l3_cache_bytes": 480 * mib})
    monkeypatch.setattr(portable, "host_memory_bytes", lambda: 24 << 30)
    cpu = torch.device("cpu")
    assert portable.default_buffer_bytes(cpu) == 4 * 480 * mib  # four times the L3 streams from memory
    assert portable.default_buffer_bytes(cpu, sharers=3) == 4 * 480 * mib // 3  # three ranks fill it together
    monkeypatch.setattr(portable, "host_memory_bytes", lambda: 8 << 30)
    assert portable.default_buffer_bytes(cpu, sharers=2) == (8 << 30) // 16  # and share the memory
    monkeypatch.setattr(portable, "cpu_cache_facts", lambda: {"l3_cache_bytes": 8 * mib})
    assert portable.default_buffer_bytes(cpu, sharers=4) == 64 * mib  # never below the floor
