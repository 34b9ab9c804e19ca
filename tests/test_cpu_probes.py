"""CPU native probes: registry, exact work accounting, verification and input checks.

Runs use 8 MiB arrays and 1 + 3 runs, so the whole file stays fast on 2 cores.
"""

from __future__ import annotations

import pytest
import torch

from pygpuperf.measure import native

pytestmark = pytest.mark.skipif(not native.available(), reason=f"extension not built: {native.IMPORT_ERROR}")

CPU = torch.device("cpu")
SMALL = 8 << 20  # bytes per array: small enough for CI, a multiple of the 512 B rounding

# Arrays streamed in, arrays streamed out and FLOPs per element of one run.
STREAM_WORK = {
    "memory.dram.read": (1, 0, 0),
    "memory.dram.write": (0, 1, 0),
    "memory.dram.copy": (1, 1, 0),
    "memory.dram.scale": (1, 1, 1),
    "memory.dram.triad": (2, 1, 2),
}
STREAM = list(STREAM_WORK)
FMA_ELEMENT_BYTES = {"compute.simd.fp32": 4, "compute.simd.fp64": 8}
FMA = list(FMA_ELEMENT_BYTES)
ALL = STREAM + FMA
VECTOR_BYTES = {"avx512f": 64, "avx2+fma": 32, "generic": 16}


def run(name: str, **kwargs) -> native.NativeRun:
    options = {"warmup": 1, "samples": 3, "size_bytes": SMALL, **kwargs}
    return native.run_probe(name, CPU, **options)


def test_all_cpu_probes_are_listed_described_and_not_waived():
    names = native.list_probes("cpu")
    assert set(ALL) <= set(names)
    for name in ALL:
        assert native.probe_waiver(name, CPU) is None
        description = native.describe_probe("cpu", name)
        assert description and "\n" not in description


def test_prefix_filter_selects_exactly_the_stream_probes():
    assert sorted(native.list_probes("cpu", "memory.dram")) == sorted(STREAM)
    assert native.list_probes("cpu", "memory.dram.copy") == ["memory.dram.copy"]
    assert native.list_probes("cpu", "memory.dra") == []  # whole dotted components only
    assert sorted(native.list_probes("cpu", "compute.simd")) == sorted(FMA)


@pytest.mark.parametrize("name", STREAM)
def test_stream_probe_verifies_and_counts_bytes_exactly(name):
    r = run(name)
    assert r.verified, r.verify_detail
    assert r.verify_detail.startswith("ok: ")
    assert len(r.sample_seconds) == 3 and all(s > 0 for s in r.sample_seconds)

    array_bytes, elements = int(r.params["array_bytes"]), int(r.params["elements"])
    assert array_bytes == SMALL == elements * 8
    arrays_read, arrays_written, flops_per_element = STREAM_WORK[name]
    assert r.bytes_read == arrays_read * array_bytes
    assert r.bytes_written == arrays_written * array_bytes
    assert r.flops == flops_per_element * elements
    assert r.params["element"] == "fp64"
    assert int(r.params["threads"]) >= 1
    assert "write_allocate" in r.params


def test_stream_size_rounds_down_to_whole_cache_lines_per_thread():
    r = run("memory.dram.write", size_bytes=SMALL + 100)
    assert r.verified, r.verify_detail
    assert int(r.params["array_bytes"]) == SMALL  # elements rounded to a multiple of 64


def test_stream_default_size_spills_the_last_level_cache():
    r = run("memory.dram.read", size_bytes=0)
    assert r.verified, r.verify_detail
    array_bytes = int(r.params["array_bytes"])
    assert 64 << 20 <= array_bytes <= 1 << 30
    assert array_bytes % 512 == 0


@pytest.mark.parametrize("name", FMA)
def test_fma_probe_verifies_and_counts_flops(name):
    r = run(name)
    assert r.verified, r.verify_detail
    assert len(r.sample_seconds) == 3 and all(s > 0 for s in r.sample_seconds)
    assert r.bytes_read == 0 and r.bytes_written == 0

    p = r.params
    lanes = int(p["lanes"])
    assert lanes * FMA_ELEMENT_BYTES[name] == VECTOR_BYTES[p["isa"]]
    expected_flops = int(p["threads"]) * int(p["iters"]) * int(p["accumulators"]) * lanes * 2
    assert r.flops == expected_flops
    assert int(p["accumulators"]) >= 8  # enough chains to cover FMA latency x pipes


@pytest.mark.parametrize("name", FMA)
def test_fma_generic_kernel_verifies_when_forced(name, monkeypatch):
    monkeypatch.setenv("PYGPUPERF_CPU_ISA", "generic")
    r = run(name)
    assert r.verified, r.verify_detail
    assert r.params["isa"] == "generic"
    assert int(r.params["lanes"]) * FMA_ELEMENT_BYTES[name] == 16


def test_fma_rejects_an_isa_the_cpu_cannot_run(monkeypatch):
    monkeypatch.setenv("PYGPUPERF_CPU_ISA", "sse9")
    with pytest.raises(RuntimeError, match="PYGPUPERF_CPU_ISA=sse9 .*use one of: .*generic"):
        run("compute.simd.fp32")


@pytest.mark.parametrize("name", ALL)
def test_poisoned_outputs_fail_verification(name):
    r = run(name, poison_after_runs=True)
    assert not r.verified
    assert "got nan" in r.verify_detail


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"size_bytes": 1000}, "must be at least 1 MiB"),
        ({"size_bytes": -1}, "size_bytes must be non-negative"),
        ({"size_bytes": 1 << 50}, "pass a smaller size_bytes"),
        ({"samples": 0}, "samples must be at least 1"),
        ({"warmup": -1}, "warmup must be non-negative"),
    ],
)
def test_bad_input_raises_a_useful_error(kwargs, message):
    with pytest.raises(RuntimeError, match=message):
        run("memory.dram.triad", **kwargs)


def test_unknown_probe_is_named_in_the_error():
    with pytest.raises(RuntimeError, match="unknown native probe 'memory.dram.nope'"):
        run("memory.dram.nope")
