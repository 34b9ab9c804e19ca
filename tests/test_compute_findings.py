"""Compute findings on synthetic measurements shaped like a GeForce RTX 3090 and an H200."""

import pytest

from pygpuperf import analysis
from pygpuperf.results import Measurement, Telemetry

RTX3090 = {"name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6", "multiprocessor_count": 82,
           "sm_clock_max_mhz": 1695}
H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "multiprocessor_count": 132, "sm_clock_max_mhz": 1980}


def tensor(name, tflops, sm_mhz=None, reasons=()):
    flops = tflops * 1e12 * 0.01  # a 10 ms run
    m = Measurement.from_samples(name, sample_seconds=[0.01] * 5, bytes_read=0, bytes_written=0, flops=flops,
                                 backend="native-cuda", device="cuda:0", verified=True,
                                 params={"variant": "mma.sync.m16n8k16"})
    if sm_mhz is not None:
        m.telemetry = Telemetry(sm_clock_mhz=[sm_mhz] * 3, throttle_reasons=list(reasons))
    return m


def titles(findings):
    return [f.title for f in findings]


def test_geforce_half_rate_accumulate_is_named_with_its_cost():
    found = analysis.compute_findings([tensor("compute.tensor.fp16.acc32", 70.0), tensor("compute.tensor.fp16.acc16",
                                                                                           140.0)], RTX3090)
    half = [f for f in found if "half" in f.title]
    assert len(half) == 1 and half[0].severity == "warning"
    assert "FP32 accumulation runs at 50%" in half[0].title and "AMP training" in half[0].title
    assert "bf16" in half[0].suggestion and "allow_fp16_accumulation" in half[0].suggestion
    assert half[0].evidence["ratio"] == pytest.approx(0.5)


def test_data_center_part_has_no_half_rate_finding():
    found = analysis.compute_findings([tensor("compute.tensor.fp16.acc32", 940.0), tensor("compute.tensor.fp16.acc16",
                                                                                           938.0)], H200)
    assert not [t for t in titles(found) if "half" in t]
    assert any("same rate" in t for t in titles(found))


def test_ceiling_far_below_the_architecture_limit_is_reported():
    # 645 of 4096 x 132 x 1980 MHz = 1070 TFLOP/s: 60 %.
    found = analysis.compute_findings([tensor("compute.tensor.fp16.acc32", 645.0)], H200)
    assert any("reaches 60% of what the architecture allows" in t for t in titles(found))
    assert not analysis.compute_findings([tensor("compute.tensor.fp16.acc32", 940.0)], H200)


def test_clocks_below_max_during_compute_are_reported_with_reasons():
    found = analysis.compute_findings([tensor("compute.tensor.bf16.acc32", 900.0, 1700, ["software_power_cap"])], H200)
    clock = [f for f in found if "SM clock" in f.title]
    assert len(clock) == 1 and "software_power_cap" in clock[0].title and "1,700 MHz" in clock[0].title
    assert not [f for f in analysis.compute_findings([tensor("compute.tensor.bf16.acc32", 900.0, 1975)], H200)
                if "SM clock" in f.title]


def test_torch_figures_and_unverified_probes_are_not_judged():
    wrong = tensor("compute.tensor.fp16.acc32", 70.0)
    wrong.verified = False
    torch_only = tensor("compute.tensor.fp16.acc16", 140.0)
    torch_only.backend = "torch-cuda"
    assert analysis.compute_findings([wrong, torch_only], RTX3090) == []


def test_rate_per_clock_per_sm_uses_the_measured_clock():
    m = tensor("compute.tensor.fp16.acc32", 900.0, sm_mhz=1800)
    analysis.annotate_rates_per_clock([m], H200)
    assert float(m.params["flop_per_clock_per_sm"]) == pytest.approx(900e12 / (132 * 1800e6), rel=1e-3)
    assert m.params["measured_sm_clock_mhz"] == "1800"


def test_missing_native_extension_is_the_first_finding():
    from pygpuperf.results import Results

    meta = {"device": {"type": "cpu"}, "extension": {"error": "No module named 'pygpuperf._C'"}}
    results = Results(meta=meta, measurements=[tensor("compute.tensor.fp16.acc32", 1.0)])
    analysis.conclude(results, "cpu")
    assert "native extension did not load" in results.findings[0].title
    assert "pip install --no-build-isolation -e ." in results.findings[0].suggestion
    loaded = Results(meta={"device": {"type": "cpu"}, "extension": {"cuda": "0"}})
    analysis.conclude(loaded, "cpu")
    assert not any("extension" in f.title for f in loaded.findings)
