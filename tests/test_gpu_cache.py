"""GPU tests of the memory-hierarchy probes: bandwidth vs working set (memory.sweep),
shared memory with and without bank conflicts, and pointer-chase latency.

Run on a GPU machine with `pytest -m gpu`; they skip elsewhere.
"""

import re
import statistics

import pytest
import torch

from pygpuperf.measure import native

pytestmark = pytest.mark.gpu

GPU = torch.device("cuda", 0)
PROBES = ["memory.sweep", "memory.shared.read", "memory.shared.read_stride32", "latency.l1", "latency.l2",
          "latency.dram", "latency.sweep"]
FEW = {"warmup": 1, "samples": 3}


def run(name, variant="", **kwargs):
    return native.run_probe(name, GPU, variant=variant, **{**FEW, **kwargs})


def gbps(r):
    return (r.bytes_read + r.bytes_written) / statistics.median(r.sample_seconds) / 1e9


def ns(r):
    return statistics.median(r.sample_seconds) / r.operations * 1e9


@pytest.fixture(scope="module")
def sweep_variants():
    return native.probe_variants("memory.sweep", GPU, quick=False)


def test_probes_are_registered_and_runnable_here():
    assert set(PROBES) <= set(native.list_probes("cuda"))
    for name in PROBES:
        assert native.probe_waiver(name, GPU) is None


def test_sweep_variants_cover_both_modes_and_quick_is_a_subset(sweep_variants):
    quick = native.probe_variants("memory.sweep", GPU, quick=True)
    assert all(re.fullmatch(r"l[12]\.\d+", v) for v in sweep_variants)
    assert set(quick) < set(sweep_variants)
    l1 = [int(v[3:]) for v in sweep_variants if v.startswith("l1.")]
    l2 = [int(v[3:]) for v in sweep_variants if v.startswith("l2.")]
    assert l1[0] == 16 << 10 and l1[-1] == 2 << 20 and l1 == sorted(l1)
    l2_bytes = torch.cuda.get_device_properties(GPU).L2_cache_size
    assert l2[0] == 1 << 20 and l2[-1] >= 3 * l2_bytes and l2 == sorted(l2)


@pytest.mark.parametrize("name", PROBES)
def test_first_variant_verifies(name):
    r = run(name)
    assert r.verified, r.verify_detail
    assert all(s > 0 for s in r.sample_seconds)


@pytest.mark.parametrize("pick", [0, -1])
@pytest.mark.parametrize("mode", ["l1", "l2"])
def test_sweep_points_verify_and_count_requested_bytes(sweep_variants, mode, pick):
    variant = [v for v in sweep_variants if v.startswith(mode + ".")][pick]
    r = run("memory.sweep", variant)
    assert r.verified, r.verify_detail
    p = r.params
    assert p["mode"] == mode and p["load"] == ("ca" if mode == "l1" else "cg")
    blocks = int(p["grid"]) if mode == "l1" else 1
    assert r.bytes_read == int(p["passes"]) * int(p["window_bytes"]) * blocks
    assert int(p["footprint_bytes"]) == int(p["window_bytes"]) * blocks
    assert r.bytes_written == 0 and r.operations == 0


@pytest.mark.parametrize("variant", ["8192", "1073741824"])
def test_latency_sweep_ends_verify(variant):
    r = run("latency.sweep", variant)
    assert r.verified, r.verify_detail
    assert int(r.params["chain_bytes"]) == int(variant)


@pytest.mark.parametrize("name", PROBES)
def test_poison_after_runs_fails_verification(name):
    r = native.run_probe(name, GPU, warmup=1, samples=1, poison_after_runs=True)
    assert not r.verified, f"{name} verified a poisoned output: {r.verify_detail}"


def test_latency_orders_l1_below_l2_below_dram():
    runs = {name: run(name) for name in ("latency.l1", "latency.l2", "latency.dram")}
    for name, r in runs.items():
        assert r.verified, r.verify_detail
        assert r.operations > 0 and r.bytes_read == 0
        assert float(r.params["cycles_per_load"]) > 0 and float(r.params["implied_sm_clock_mhz"]) > 0
    l1, l2, dram = (ns(runs[n]) for n in ("latency.l1", "latency.l2", "latency.dram"))
    assert l1 < l2 < dram, (l1, l2, dram)


def test_bank_conflicts_cost_shared_bandwidth():
    v16 = run("memory.shared.read")
    stride32 = run("memory.shared.read_stride32")
    assert v16.verified and stride32.verified
    assert v16.params["access"] == "v16" and stride32.params["access"] == "stride32"
    assert gbps(stride32) < 0.25 * gbps(v16), (gbps(stride32), gbps(v16))


def test_l1_sweep_small_window_beats_dram_sized_window(sweep_variants):
    l1 = [v for v in sweep_variants if v.startswith("l1.")]
    small, large = run("memory.sweep", l1[0]), run("memory.sweep", l1[-1])
    assert gbps(small) > 1.5 * gbps(large), (gbps(small), gbps(large))
