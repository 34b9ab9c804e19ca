"""GPU tests of the Hopper wgmma tensor-core probes (csrc/cuda/wgmma*.{h,cu,cpp}).

Every probe and variant must verify exactly (D = C + A*B bit for bit) on an sm_90 GPU;
elsewhere the tests skip with the probe's own waiver reason. Run with `pytest -m gpu`.
"""

import statistics

import pytest
import torch

from pygpuperf.facts import host
from pygpuperf.measure import native
from pygpuperf.facts import datasheets

pytestmark = pytest.mark.gpu

GPU = torch.device("cuda", 0)

# probe kind -> (K of one instruction, dense tensor FLOP or OP per clock per SM on Hopper)
KINDS = {
    "fp16.acc32": (16, 4096),
    "fp16.acc16": (16, 4096),
    "bf16.acc32": (16, 4096),
    "tf32.acc32": (8, 2048),
    "fp8.acc32": (32, 8192),
    "fp8.acc16": (32, 8192),
    "int8.acc32": (32, 8192),
}
NS = (256, 128, 64)
SOURCES = ("ss", "rs")


def variant_names(kind: str) -> list[str]:
    k = KINDS[kind][0]
    return [f"wgmma.m64n{n}k{k}.{source}" for n in NS for source in SOURCES]


VARIANTS = [(kind, variant) for kind in KINDS for variant in variant_names(kind)]


def probe_name(kind: str) -> str:
    """The stable name; wgmma and mma.sync share it as variants."""
    return f"compute.tensor.{kind}"


def runnable(kind: str) -> str:
    name = probe_name(kind)
    reason = native.probe_waiver(name, GPU)
    if reason:
        pytest.skip(f"{name} is waived here: {reason}")
    return name


@pytest.fixture(scope="module")
def device_meta():
    return host.device_facts(GPU)


def theoretical_peak(kind: str, device_meta) -> float | None:
    """FLOP/s (OP/s) at the maximum SM clock, or None when NVML gives no clock."""
    mhz, sms = device_meta.get("sm_clock_max_mhz"), device_meta.get("multiprocessor_count")
    if not mhz or not sms:
        return None
    return KINDS[kind][1] * sms * mhz * 1e6


def rate(run) -> float:
    return run.flops / statistics.median(run.sample_seconds)


@pytest.mark.parametrize("kind", KINDS)
def test_wgmma_probe_is_registered_with_every_shape(kind):
    name = probe_name(kind)
    assert name in native.list_probes("cuda")
    variants = native.probe_variants(name, GPU, False)
    assert set(variant_names(kind)) <= set(variants), variants
    quick = native.probe_variants(name, GPU, True)
    assert quick and set(quick) <= set(variants), quick


@pytest.mark.parametrize(("kind", "variant"), VARIANTS)
def test_wgmma_variant_verifies_and_counts_its_work(kind, variant, device_meta):
    name = runnable(kind)
    run = native.run_probe(name, GPU, variant=variant, warmup=1, samples=3)
    assert run.verified, f"{name} {variant}: {run.verify_detail}"
    p = run.params
    n, k = int(p["n"]), int(p["k"])
    assert variant == f"wgmma.m64n{n}k{k}.{p['a_source']}"
    assert p["instruction"].startswith(f"wgmma.mma_async.sync.aligned.m64n{n}k{k}."), p["instruction"]
    assert p["local_bytes_per_thread"] == 0, f"{variant} spills: {p}"
    # FLOP accounting: CTAs x warpgroups x wgmmas x 2*64*N*K, with the one extra +B per warpgroup.
    wgmmas = int(p["wgmmas_per_warpgroup"])
    assert wgmmas == int(p["iters"]) * int(p["wgmmas_per_iter"]) + 1
    assert int(p["warpgroups"]) == int(p["grid"]) * int(p["warpgroups_per_block"])
    assert int(p["grid"]) % device_meta["multiprocessor_count"] == 0, "persistent grid: whole blocks per SM"
    assert run.flops == int(p["grid"]) * int(p["warpgroups_per_block"]) * wgmmas * 2 * 64 * n * k
    peak = theoretical_peak(kind, device_meta)
    if peak is not None:
        assert rate(run) <= peak * 1.02, f"{name} {variant}: {rate(run) / 1e12:.1f} T/s > peak {peak / 1e12:.1f}"


@pytest.mark.parametrize("kind", KINDS)
def test_wgmma_poisoned_output_fails_verification(kind):
    name = runnable(kind)
    run = native.run_probe(name, GPU, variant=variant_names(kind)[0], warmup=1, samples=1, poison_after_runs=True)
    assert not run.verified, f"{name} verification passed on poisoned output: {run.verify_detail}"
    assert "wrong" in run.verify_detail and "poison" in run.verify_detail, run.verify_detail


def test_wgmma_fp16_reaches_80_percent_of_the_datasheet(device_meta):
    name = runnable("fp16.acc32")
    card = datasheets.datasheet_for(device_meta["name"])
    datasheet = datasheets.datasheet_value(card, "compute.tensor.fp16.acc32")
    if datasheet is None:
        pytest.skip(f"no fp16 tensor datasheet figure for {device_meta['name']}")
    runs = {v: native.run_probe(name, GPU, variant=v, warmup=3, samples=10)
            for v in ("wgmma.m64n256k16.ss", "wgmma.m64n256k16.rs")}
    for v, run in runs.items():
        assert run.verified, f"{v}: {run.verify_detail}"
    best_variant, best = max(((v, rate(r) / 1e12) for v, r in runs.items()), key=lambda x: x[1])
    assert best > 0.8 * datasheet, f"best {best_variant}: {best:.1f} TFLOP/s < 80% of {datasheet} TFLOP/s"
    peak = theoretical_peak("fp16.acc32", device_meta)
    if peak is not None:
        assert best < peak / 1e12, f"best {best_variant}: {best:.1f} TFLOP/s above the peak {peak / 1e12:.1f}"
