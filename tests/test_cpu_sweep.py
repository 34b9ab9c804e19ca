"""The CPU cache sweep (memory.sweep on native-cpu), the scale/triad streams, and the CLI's
sweep output end to end. Quick variants and few samples keep the file fast on two cores."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pygpuperf.analyze import hierarchy
from pygpuperf.facts import cpu
from pygpuperf.core import documents
from pygpuperf.measure import native
from pygpuperf.measure.probe import RunSettings
from pygpuperf.measure.backends.portable import PortableBackend

pytestmark = pytest.mark.skipif(not native.available(), reason=f"extension not built: {native.IMPORT_ERROR}")

CPU = torch.device("cpu")
KiB, MiB = 1 << 10, 1 << 20


def sweep(variant: str = "", **kwargs) -> native.NativeRun:
    options = {"warmup": 0, "samples": 2, **kwargs}
    return native.run_probe("memory.sweep", CPU, variant=variant, **options)


def test_sweep_variants_cover_4k_to_beyond_the_last_level_cache():
    full = native.probe_variants("memory.sweep", CPU, False)
    quick = native.probe_variants("memory.sweep", CPU, True)
    assert full[0] == quick[0] == "l1-4KiB"
    # 2^(1/2) steps against 2^1 steps: a half step after each power of two, and after the last one where it
    # still fits under the largest window (8x the L3, or a quarter of the memory, per thread)
    assert full[::2] == quick and len(full) - len(quick) in (len(quick) - 1, len(quick))
    assert all(v.startswith("l1-") for v in full)
    assert "memory.sweep" in native.list_probes("cpu", "memory")
    assert native.probe_waiver("memory.sweep", CPU) is None


@pytest.mark.parametrize("variant", ["l1-4KiB", "l1-5.5KiB", "l1-256KiB", "l1-1472KiB"])
def test_sweep_point_verifies_and_counts_bytes_exactly(variant):
    r = sweep(variant)
    assert r.verified, r.verify_detail
    assert r.verify_detail.startswith("ok: ")
    p = r.params
    threads, passes, window = int(p["threads"]), int(p["passes"]), int(p["window_bytes"])
    assert p["mode"] == "l1" and p["variant"] == variant and int(p["workers"]) == threads
    assert int(p["footprint_bytes"]) == window * threads
    assert r.bytes_read == threads * passes * window
    assert r.bytes_written == 0 and r.flops == 0 and r.operations == 0
    assert window % 512 == 0 and passes >= 1
    assert len(r.sample_seconds) == 2 and all(s > 0 for s in r.sample_seconds)


def test_window_sizes_follow_the_variant_names():
    expected = {"l1-4KiB": 4 * KiB, "l1-5.5KiB": 5632, "l1-8KiB": 8 * KiB, "l1-23KiB": 23 * KiB,
                "l1-1MiB": 1 * MiB, "l1-1472KiB": 1472 * KiB}
    names = native.probe_variants("memory.sweep", CPU, False)
    for variant, window in expected.items():
        assert variant in names
        assert int(sweep(variant, samples=1).params["window_bytes"]) == window


def test_largest_point_reaches_main_memory_and_verifies():
    last = native.probe_variants("memory.sweep", CPU, True)[-1]
    r = sweep(last, samples=1)
    assert r.verified, r.verify_detail
    l3 = cpu.cpu_cache_facts().get("l3_cache_bytes")
    if l3:
        assert 4 * l3 <= int(r.params["footprint_bytes"]) <= 8 * l3


def test_poisoned_sums_fail_verification():
    r = sweep("l1-16KiB", poison_after_runs=True)
    assert not r.verified
    assert "wrong" in r.verify_detail and "want" in r.verify_detail


def test_generic_kernel_verifies_when_forced(monkeypatch):
    monkeypatch.setenv("PYGPUPERF_CPU_ISA", "generic")
    r = sweep("l1-64KiB")
    assert r.verified, r.verify_detail
    assert r.params["isa"] == "generic"


def test_size_bytes_sets_the_window_without_a_variant():
    r = sweep(size_bytes=64 * KiB + 100)
    assert r.verified and int(r.params["window_bytes"]) == 64 * KiB
    with pytest.raises(RuntimeError, match="per-thread window and must be at least"):
        sweep(size_bytes=1000)
    with pytest.raises(RuntimeError, match="has no variant 'l1-3KiB'"):
        sweep("l1-3KiB")


def test_quick_sweep_is_fast():
    """The --quick sweep's settings (1 warm-up, 5 samples) over all quick points. On an idle
    two-core machine this takes about 2 s (the full sweep about 7 s); the bound leaves room
    for a loaded CI runner, where calibration stops at its time budget."""
    start = time.monotonic()
    for variant in native.probe_variants("memory.sweep", CPU, True):
        assert sweep(variant, warmup=1, samples=5).verified
    assert time.monotonic() - start < 20


# --------------------------------------------------------------------------- latency sweep


def chase(variant: str, **kwargs) -> native.NativeRun:
    return native.run_probe("latency.sweep", CPU, variant=variant, **{"warmup": 1, "samples": 2, **kwargs})


def test_latency_sweep_variants_and_accounting():
    full = native.probe_variants("latency.sweep", CPU, False)
    quick = native.probe_variants("latency.sweep", CPU, True)
    assert full[0] == quick[0] == "chase-4KiB" and set(quick) <= set(full)
    for variant, window in (("chase-4KiB", 4 * KiB), ("chase-1MiB", 1 * MiB)):
        r = chase(variant)
        assert r.verified, r.verify_detail
        p = r.params
        assert int(p["window_bytes"]) == int(p["footprint_bytes"]) == window
        assert int(p["lines"]) == window // 64 and p["stride_bytes"] == 64 and p["threads"] == 1
        assert r.operations == int(p["loads"]) >= 1024
        assert r.bytes_read == r.bytes_written == r.flops == 0
        ns = [s / r.operations * 1e9 for s in r.sample_seconds]
        assert all(0.1 < v < 10_000 for v in ns)


def test_latency_chase_poison_fails_verification():
    r = chase("chase-16KiB", poison_after_runs=True)
    assert not r.verified and "poison" in r.verify_detail


# --------------------------------------------------------------------------- scale and triad


def test_native_scale_stream():
    r = native.run_probe("memory.dram.scale", CPU, warmup=1, samples=2, size_bytes=8 * MiB)
    assert r.verified, r.verify_detail
    assert r.bytes_read == r.bytes_written == 8 * MiB and r.flops == MiB and r.params["scalar"] == 3
    assert not native.run_probe("memory.dram.scale", CPU, warmup=0, samples=1, size_bytes=8 * MiB,
                                poison_after_runs=True).verified


@pytest.mark.parametrize("kind, reads, flops_per_element", [("scale", 1, 1), ("triad", 2, 2)])
def test_portable_scale_and_triad_count_and_verify(kind, reads, flops_per_element):
    backend = PortableBackend()
    settings = RunSettings(warmup=1, samples=2, size_bytes=4 * MiB)
    m = backend.measure(f"memory.dram.{kind}", CPU, settings)
    assert m.verified, m.verify_detail
    assert m.bytes_read == reads * 4 * MiB and m.bytes_written == 4 * MiB
    assert m.flops == flops_per_element * MiB and m.params["scalar"] == 3
    poisoned = backend.measure(f"memory.dram.{kind}", CPU, RunSettings(warmup=0, samples=1, size_bytes=4 * MiB,
                                                                      poison_after_runs=True))
    assert not poisoned.verified and "differ" in poisoned.verify_detail


# --------------------------------------------------------------------------- the CLI


def test_cli_quick_sweep_writes_series_chart_and_derived_l1(tmp_path: Path):
    out = tmp_path / "sweep"
    env = dict(os.environ)
    if sys.flags.safe_path:  # keep the child's imports where ours come from
        env["PYTHONSAFEPATH"] = "1"
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", "--probes", "memory.sweep",
                           "--quick", "--model", "none", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "sweep.png").stat().st_size > 10_000
    results = documents.load_results(out / "results.json")
    points = [m for m in results.measurements if m.name == "memory.sweep"]
    assert len(points) == len(native.probe_variants("memory.sweep", CPU, True))
    assert all(m.status == "ok" and m.verified and m.params["mode"] == "l1" for m in points)
    assert results.meta["device"].get("l3_cache_bytes", 1) > 0

    derived = [m for m in results.measurements if m.params.get("derived_from") == "memory.sweep"]
    # What the CLI wrote is exactly what the analysis derives from the points it wrote.
    again = hierarchy.derive_cache_measurements(points, results.meta["device"])
    assert [(m.name, m.value) for m in derived] == [(m.name, m.value) for m in again]
    levels = hierarchy.detect_levels([float(m.quantities.footprint_bytes) for m in points], [m.value for m in points])
    if len(levels) < 2:
        pytest.skip(f"sweep too noisy on this machine right now to find a knee: {[round(m.value) for m in points]}")
    l1 = next(m for m in derived if m.name == "memory.l1.read")
    assert l1.verified and l1.unit == "GB/s" and l1.value > 0
    # Where the knee lands depends on the machine (and on its load); it lies inside the sweep.
    windows = [m.quantities.window_bytes for m in points]
    assert min(windows) <= float(l1.params["capacity_per_worker_bytes"]) <= max(windows)
    assert results.machine_model.memory["l1"].source == "memory.l1.read"
    assert "memory.l1.read" in proc.stdout and "sweep plateau" in proc.stdout
