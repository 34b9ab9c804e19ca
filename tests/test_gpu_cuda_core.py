"""GPU tests of the CUDA-core arithmetic probes: compute.cuda.* peaks and the compute.sweep
arithmetic-intensity sweep. Run on a GPU machine with `pytest -m gpu`; they skip elsewhere.
"""

import statistics

import pytest
import torch

from pygpuperf.facts import host
from pygpuperf.measure import native
from pygpuperf.facts import peaks

pytestmark = pytest.mark.gpu

GPU = torch.device("cuda", 0)
PEAKS = ["compute.cuda.fp32", "compute.cuda.fp16x2", "compute.cuda.bf16x2", "compute.cuda.fp64", "compute.cuda.int32"]
SWEEP = "compute.sweep"
FAST = dict(warmup=1, samples=3)
# FP32 FMA lanes per SM per clock by compute capability (CUDA C++ Programming Guide).
FP32_LANES_PER_SM = {(7, 0): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128, (8, 9): 128, (9, 0): 128,
                     (10, 0): 128, (12, 0): 128}


def median_seconds(run) -> float:
    return statistics.median(run.sample_seconds)


def tflops(run) -> float:
    return run.flops / median_seconds(run) / 1e12


def gbps(run) -> float:
    return (run.bytes_read + run.bytes_written) / median_seconds(run) / 1e9


def describe(run) -> str:
    return f"{tflops(run):.2f} TFLOP/s, {gbps(run):.0f} GB/s, median {median_seconds(run) * 1e3:.3f} ms; {run.params}"


@pytest.fixture(scope="module")
def device_meta():
    return host.device_facts(GPU)


@pytest.fixture(scope="module")
def fp32_peak():
    run = native.run_probe("compute.cuda.fp32", GPU, warmup=2, samples=10)
    assert run.verified, run.verify_detail
    return run


@pytest.fixture(scope="module")
def sweep_runs():
    """The quick sweep points, measured once: {variant: NativeRun}."""
    runs = {}
    for variant in native.probe_variants(SWEEP, GPU, quick=True):
        run = native.run_probe(SWEEP, GPU, variant=variant, warmup=2, samples=5)
        assert run.verified, f"{variant}: {run.verify_detail}"
        runs[variant] = run
    return runs


def test_cuda_core_probes_are_registered():
    assert set(PEAKS + [SWEEP]) <= set(native.list_probes("cuda"))


@pytest.mark.parametrize("name", PEAKS)
def test_peak_verifies_and_counts_its_flops(name):
    assert native.probe_waiver(name, GPU) is None  # bf16x2 needs sm_80: true of every GPU this runs on
    run = native.run_probe(name, GPU, **FAST)
    assert run.verified, run.verify_detail
    p = run.params
    assert int(p["threads"]) == int(p["grid"]) * int(p["block"])
    assert int(p["iters"]) == int(p["trips"]) * int(p["unroll"])
    expected = int(p["threads"]) * int(p["chains"]) * int(p["iters"]) * int(p["flops_per_instruction"])
    assert run.flops == expected, f"flops {run.flops} != threads x chains x iters x flops_per_instruction {expected}"
    assert int(p["flops_per_instruction"]) == (4 if name.endswith("x2") else 2)
    # Sized for 2-10 ms at the expected rate; far outside means the rate or the sizing is off.
    assert 0.5e-3 < median_seconds(run) < 50e-3, describe(run)


@pytest.mark.parametrize("name", PEAKS)
def test_peak_detects_unwritten_output(name):
    run = native.run_probe(name, GPU, warmup=1, samples=2, poison_after_runs=True)
    assert not run.verified, f"{name} verification passed on poisoned output: {run.verify_detail}"


@pytest.mark.parametrize("variant", ["registers", "uniform-offsets"])
def test_packed_fp16_forms_verify_and_say_where_the_addends_live(variant):
    assert native.probe_variants("compute.cuda.fp16x2", GPU) == ["registers", "uniform-offsets"]
    run = native.run_probe("compute.cuda.fp16x2", GPU, variant=variant, **FAST)
    assert run.verified, run.verify_detail
    assert ("kernel parameters" in run.params["addends"]) == (variant == "uniform-offsets")
    poisoned = native.run_probe("compute.cuda.fp16x2", GPU, variant=variant, warmup=1, samples=2,
                                poison_after_runs=True)
    assert not poisoned.verified


def test_int32_says_how_it_counts():
    run = native.run_probe("compute.cuda.int32", GPU, **FAST)
    assert "2 ops" in run.params["op_count"]


def test_fp32_peak_is_between_80_and_100_percent_of_theoretical(device_meta, fp32_peak):
    major, minor = (int(x) for x in device_meta["compute_capability"].split("."))
    lanes = FP32_LANES_PER_SM.get((major, minor))
    if lanes is None:
        pytest.skip(f"FP32 lanes per SM unknown for compute capability {major}.{minor}")
    mhz = device_meta.get("sm_clock_max_mhz") or int(fp32_peak.params["sm_clock_khz"]) / 1e3
    theoretical = lanes * 2 * device_meta["multiprocessor_count"] * mhz * 1e6 / 1e12
    value = tflops(fp32_peak)
    best = fp32_peak.flops / min(fp32_peak.sample_seconds) / 1e12
    context = f"theoretical {theoretical:.2f} TFLOP/s ({lanes} lanes x 2 x SMs x {mhz} MHz); {describe(fp32_peak)}"
    assert best <= theoretical * 1.01, f"best sample {best:.2f} TFLOP/s above the {context}"
    assert value > 0.8 * theoretical, f"{value:.2f} TFLOP/s below 0.8 x the {context}"


def test_packed_fp16_stays_between_the_sanity_floor_and_its_peak(device_meta):
    """Physics guard and sanity floor; the performance goal itself lives in the benchmark notes."""
    peak = peaks.theoretical_peak("compute.cuda.fp16x2", device_meta)
    if peak is None:
        pytest.skip("no packed-fp16 rate known for this architecture")
    fp16x2 = native.run_probe("compute.cuda.fp16x2", GPU, warmup=2, samples=10)
    assert fp16x2.verified, fp16x2.verify_detail
    assert 0.7 * peak.value < tflops(fp16x2) <= 1.01 * peak.value, f"{peak.source}; {describe(fp16x2)}"


def test_sweep_variants():
    full = native.probe_variants(SWEEP, GPU)
    quick = native.probe_variants(SWEEP, GPU, quick=True)
    intensities = ["0.25", "0.5", "1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024"]
    assert full == [f"{p}.{i}" for p in ("fp32", "fp16x2") for i in intensities]
    assert quick == [f"{p}.{i}" for p in ("fp32", "fp16x2") for i in ("0.25", "4", "64", "1024")]


@pytest.mark.parametrize("variant", [f"{p}.{i}" for p in ("fp32", "fp16x2")
                                     for i in ("0.5", "1", "2", "8", "16", "32", "128", "256", "512")])
def test_sweep_point_verifies(variant):
    """The points the quick set (sweep_runs) does not cover."""
    run = native.run_probe(SWEEP, GPU, variant=variant, warmup=1, samples=2)
    assert run.verified, f"{variant}: {run.verify_detail}"


def test_sweep_accounting(sweep_runs):
    l2 = torch.cuda.get_device_properties(GPU).L2_cache_size
    for variant, run in sweep_runs.items():
        p = run.params
        precision, intensity = variant.split(".", 1)
        assert p["precision"] == precision and p["flop_per_byte"] == float(intensity)
        buffer_bytes = int(p["buffer_bytes"])
        assert run.bytes_read == buffer_bytes and run.bytes_written == buffer_bytes
        assert buffer_bytes >= 4 * l2, f"{variant}: buffer {buffer_bytes} B < 4 x L2 {l2} B"
        assert float(p["bytes_per_run"]) == run.bytes_read + run.bytes_written
        assert run.flops == pytest.approx(float(p["flops_per_element"]) * int(p["elements"]), rel=1e-12)
        assert run.flops / (run.bytes_read + run.bytes_written) == pytest.approx(float(intensity), rel=1e-12)


@pytest.mark.parametrize("variant", ["fp32.4", "fp16x2.0.25", "fp16x2.1024"])
def test_sweep_detects_unwritten_output(variant):
    run = native.run_probe(SWEEP, GPU, variant=variant, warmup=1, samples=2, poison_after_runs=True)
    assert not run.verified, f"{variant} verification passed on poisoned output: {run.verify_detail}"


def test_sweep_low_end_is_memory_bound(sweep_runs):
    copy = native.run_probe("memory.hbm.copy", GPU, warmup=2, samples=10)
    assert copy.verified, copy.verify_detail
    copy_gbps = gbps(copy)
    for variant in ("fp32.0.25", "fp16x2.0.25"):
        run = sweep_runs[variant]
        ratio = gbps(run) / copy_gbps
        context = f"memory.hbm.copy {copy_gbps:.0f} GB/s ({copy.params})"
        assert 0.5 < ratio < 2.0, f"{variant}: {describe(run)}; vs {context}"


def test_sweep_high_end_approaches_fp32_peak(sweep_runs, fp32_peak):
    top = sweep_runs["fp32.1024"]
    assert tflops(top) > 0.7 * tflops(fp32_peak), f"fp32.1024 {describe(top)} vs peak {tflops(fp32_peak):.2f} TFLOP/s"


def test_sweep_rate_rises_with_intensity(sweep_runs):
    for precision in ("fp32", "fp16x2"):
        points = [(v, tflops(r)) for v, r in sweep_runs.items() if v.startswith(precision + ".")]
        for (low_v, low), (high_v, high) in zip(points, points[1:]):
            assert high > 0.85 * low, f"{high_v} {high:.2f} TFLOP/s < 0.85 x {low_v} {low:.2f} TFLOP/s"
        # Memory-bound from 0.25 to 4 FLOP/byte: 16x the intensity is many times the rate.
        assert points[1][1] > 4 * points[0][1], points
