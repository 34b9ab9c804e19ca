"""GPU tests: the CUDA probes, the portable backend on CUDA, and the main command on a GPU.

Run on a GPU machine with `pytest -m gpu`; they skip elsewhere.
"""

import re
import statistics
import subprocess
import sys

import pytest
import torch

from pygpuperf.core import documents
from pygpuperf.facts import host
from pygpuperf.measure import native
from pygpuperf.measure.probe import RunSettings
from pygpuperf.measure.backends.native import NativeBackend
from pygpuperf.measure.backends.portable import PortableBackend
from pygpuperf.facts import peaks

pytestmark = pytest.mark.gpu

GPU = torch.device("cuda", 0)
CUDA_PROBES = ["memory.hbm.read", "memory.hbm.write", "memory.hbm.copy", "memory.hbm.scale", "memory.hbm.triad",
               "compute.tensor.fp16.acc32",
               "compute.tensor.fp16.acc16", "transfer.h2d.pinned", "transfer.d2h.pinned"]
QUICK = RunSettings(warmup=2, samples=10)


@pytest.fixture(scope="module")
def device_meta():
    return host.device_facts(GPU)


def test_every_first_cuda_probe_is_registered():
    assert set(CUDA_PROBES) <= set(native.list_probes("cuda"))


@pytest.mark.parametrize("name", CUDA_PROBES)
def test_cuda_probe_verifies_and_stays_under_its_peak(name, device_meta):
    backend = NativeBackend()
    assert backend.waiver(name, GPU) is None
    m = backend.measure(name, GPU, QUICK)
    assert m.verified, m.verify_detail
    assert m.value > 0 and m.stats.n == QUICK.samples
    assert m.backend == "native-cuda"
    peak = peaks.theoretical_peak(name, device_meta)
    if peak is not None:
        assert m.value <= peak.value * 1.02, f"{m.value} {m.unit} above the {peak.source} peak {peak.value}"


@pytest.mark.parametrize("name", CUDA_PROBES)
def test_cuda_probe_detects_unwritten_output(name):
    run = native.run_probe(name, GPU, warmup=1, samples=2, poison_after_runs=True)
    assert not run.verified, f"{name} verification passed on poisoned output: {run.verify_detail}"


def test_hbm_buffers_are_at_least_four_times_l2():
    props = torch.cuda.get_device_properties(GPU)
    run = native.run_probe("memory.hbm.copy", GPU, warmup=1, samples=2)
    assert run.bytes_read >= 4 * props.L2_cache_size


def test_hbm_copy_reaches_half_the_theoretical_bandwidth(device_meta):
    peak = peaks.theoretical_peak("memory.hbm.copy", device_meta)
    if peak is None:
        pytest.skip("NVML gives no memory clock or bus width here")
    m = NativeBackend().measure("memory.hbm.copy", GPU, QUICK)
    assert m.value > 0.5 * peak.value


def test_cuda_errors_arrive_as_exceptions_with_error_name_and_site():
    with pytest.raises(RuntimeError) as info:
        native.run_probe("memory.hbm.copy", GPU, warmup=0, samples=1, size_bytes=1 << 40)  # 1 TiB: launchable grid, impossible allocation
    text = str(info.value)
    assert "cudaErrorMemoryAllocation" in text
    assert re.search(r"\(at \w+\.(cpp|cu|h):\d+\)", text), text


@pytest.mark.parametrize("name", ["memory.hbm.copy", "memory.hbm.read", "memory.hbm.write", "compute.library.fp16",
                                  "compute.library.bf16", "compute.library.fp8", "compute.library.int8",
                                  "transfer.h2d.pinned", "transfer.d2h.pinned"])
def test_portable_backend_on_cuda(name):
    backend = PortableBackend()
    assert backend.waiver(name, GPU) is None
    m = backend.measure(name, GPU, QUICK)
    assert m.verified, m.verify_detail
    assert m.backend == "torch-cuda" and m.value > 0


def test_native_and_portable_copy_agree(device_meta):
    nat = NativeBackend().measure("memory.hbm.copy", GPU, QUICK)
    port = PortableBackend().measure("memory.hbm.copy", GPU, QUICK)
    assert 0.5 < nat.value / port.value < 2.0


def test_main_command_on_gpu(tmp_path):
    out = tmp_path / "gpu"
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cuda:0", "--quick", "--model",
                           "none", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = documents.load_results(out / "results.json")
    assert results.meta["device"]["multiprocessor_count"] > 0
    backends = {m.backend for m in results.measurements if m.usable}
    assert "native-cuda" in backends
    assert results.machine_model.memory["hbm"].value > 0
    assert results.machine_model.compute["tensor.fp16.acc32"].value > 0
    assert not [f for f in results.findings if f.severity == "error"], results.findings


def test_reported_bandwidth_is_bytes_over_sample_time():
    m = NativeBackend().measure("memory.hbm.triad", GPU, QUICK)
    per_sample = sorted((m.bytes_read + m.bytes_written) / s / 1e9 for s in m.sample_seconds)
    assert m.value == pytest.approx(per_sample[len(per_sample) // 2], rel=0.05)
    assert m.bytes_read > 0 and m.bytes_written > 0


def test_missing_device_is_waived_with_a_reason():
    missing = torch.device("cuda", torch.cuda.device_count() + 3)
    for name in native.list_probes("cuda"):
        reason = native.probe_waiver(name, missing)
        assert reason, f"{name} claims to run on {missing}"


@pytest.mark.parametrize("dtype", ["fp16", "fp8", "int8"])
def test_library_shape_sweep_verifies_counts_and_flushes_l2(dtype):
    backend, name = PortableBackend(), f"compute.library.{dtype}"
    if backend.waiver(name, GPU):
        pytest.skip(backend.waiver(name, GPU))
    shapes = backend.variants(name, GPU)
    assert "16384" in shapes and "65536x1024x4096" in shapes
    for shape in ("1024", "65536x1024x4096"):
        m = backend.measure(name, GPU, RunSettings(warmup=1, samples=3), shape)
        assert m.verified, m.verify_detail
        p = m.params
        assert m.flops == 2 * int(p["M"]) * int(p["N"]) * int(p["K"])
        assert p["variant"] == shape and p["l2_flushed"] == "True"
        if dtype == "int8":
            assert m.unit == "TOP/s" and p["accumulate"] == "int32"


# mma.sync implementations of the bf16, tf32, int8 and fp8 tensor names: (name, variant,
# instruction, K, minimum compute capability, newest major they run on natively).
MMA_SYNC_TYPED = [
    ("compute.tensor.bf16.acc32", "mma.sync.m16n8k16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16,
     (8, 0), 99),
    ("compute.tensor.tf32.acc32", "mma.sync.m16n8k8", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 8,
     (8, 0), 99),
    ("compute.tensor.int8.acc32", "mma.sync.m16n8k32", "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32", 32,
     (8, 0), 99),
    ("compute.tensor.fp8.acc32", "mma.sync.m16n8k32", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32", 32,
     (8, 9), 8),
]


def _mma_sync_runs_here(min_cc, max_major):
    cc = torch.cuda.get_device_capability(GPU)
    return cc >= min_cc and cc[0] <= max_major


@pytest.mark.parametrize("name,variant,instruction,k,min_cc,max_major", MMA_SYNC_TYPED)
def test_mma_sync_typed_probe_verifies_and_counts_flops(name, variant, instruction, k, min_cc, max_major):
    variants = native.probe_variants(name, GPU)
    if not _mma_sync_runs_here(min_cc, max_major):
        assert variant not in variants  # waived: e.g. fp8 mma.sync is emulated on sm_90
        pytest.skip(f"{instruction} is waived on compute capability {torch.cuda.get_device_capability(GPU)}")
    assert variant in variants
    run = native.run_probe(name, GPU, variant=variant, warmup=1, samples=3)
    assert run.verified, run.verify_detail
    p = run.params
    assert p["instruction"] == instruction
    warps = int(p["grid"]) * int(p["block"]) // 32
    assert run.flops == warps * int(p["accumulators"]) * (2 * int(p["iters"]) + 1) * 2 * 16 * 8 * k
    assert len(run.sample_seconds) == 3 and min(run.sample_seconds) > 0


@pytest.mark.parametrize("name,variant,instruction,k,min_cc,max_major", MMA_SYNC_TYPED)
def test_mma_sync_typed_probe_detects_unwritten_output(name, variant, instruction, k, min_cc, max_major):
    if not _mma_sync_runs_here(min_cc, max_major):
        pytest.skip(f"{instruction} is waived on compute capability {torch.cuda.get_device_capability(GPU)}")
    run = native.run_probe(name, GPU, variant=variant, warmup=1, samples=2, poison_after_runs=True)
    assert not run.verified, f"{name} {variant} verification passed on poisoned output: {run.verify_detail}"


def test_fixed_cost_of_a_kernel_probes():
    """latency.kernel.*: a tiny kernel's own duration is under its back-to-back period (which adds the gap
    to the next kernel), graphs shorten the period, and a launch costs the host microseconds."""
    backend = PortableBackend()
    settings = RunSettings(warmup=3, samples=15)
    got = {mode: backend.measure(f"latency.kernel.{mode}", GPU, settings)
           for mode in ("duration", "back_to_back", "graph", "launch", "single")}
    for mode, m in got.items():
        assert m.verified, (mode, m.verify_detail)
        assert m.unit == "ns" and 100 < m.value < 1e6, (mode, m.value)
    assert got["duration"].value < got["back_to_back"].value
    assert got["graph"].value <= got["back_to_back"].value * 1.1
    assert got["single"].value > got["duration"].value
    assert got["duration"].params["timer"] == "kernels" and got["launch"].params["timer"] == "host"


def test_the_host_launch_probe_is_not_slowed_by_the_kernel_duration_probe_before_it():
    """latency.kernel.duration traces its kernels; the tracing library it leaves attached would slow every
    later launch (the launch probe runs after it) unless the next timing releases it. A second duration
    probe, after the release, still sees its kernels."""
    backend = PortableBackend()
    settings = RunSettings(warmup=3, samples=15)

    def launch_ns() -> float:
        return statistics.median(backend.measure("latency.kernel.launch", GPU, settings).value for _ in range(3))

    before = launch_ns()
    first = backend.measure("latency.kernel.duration", GPU, settings)
    after = launch_ns()
    second = backend.measure("latency.kernel.duration", GPU, settings)
    assert first.verified and second.verified and 100 < second.value < 1e6, (first.value, second.value)
    assert after / before < 1.15, f"{before:.0f} ns before the duration probe, {after:.0f} ns after"


def test_bandwidth_against_bytes_per_kernel(device_meta):
    """memory.size.sweep: small kernels reach a small share of what large ones do; both levels verify."""
    backend = PortableBackend()
    variants = backend.variants("memory.size.sweep", GPU, quick=True)
    assert {v.split(".")[0] for v in variants} == {"l2", "hbm"}
    settings = RunSettings(warmup=2, samples=7)
    small = backend.measure("memory.size.sweep", GPU, settings, "hbm.copy.65536")
    large = backend.measure("memory.size.sweep", GPU, settings, f"hbm.copy.{256 << 20}")
    for m in (small, large):
        assert m.verified, m.verify_detail
        assert m.bytes_read == m.bytes_written == m.quantities.bytes
    assert small.value < 0.5 * large.value
    peak = peaks.theoretical_peak("memory.hbm.copy", device_meta)
    assert peak is not None and large.value <= peak.value * 1.02
