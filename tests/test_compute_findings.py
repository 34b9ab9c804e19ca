"""Compute findings on synthetic measurements shaped like a GeForce RTX 3090 and an H200."""

import pytest

from pygpuperf.analyze import conclude
from pygpuperf.core.results import Measurement, Telemetry
from pygpuperf.analyze.machine_model import build_machine_model

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
    found = conclude.compute_findings([tensor("compute.tensor.fp16.acc32", 70.0), tensor("compute.tensor.fp16.acc16",
                                                                                           140.0)], RTX3090)
    half = [f for f in found if "half" in f.title]
    assert len(half) == 1 and half[0].severity == "warning"
    assert "FP32 accumulation runs at 50%" in half[0].title and "AMP training" in half[0].title
    assert "bf16" in half[0].suggestion and "allow_fp16_accumulation" in half[0].suggestion
    assert half[0].evidence["ratio"] == pytest.approx(0.5)


def test_data_center_part_has_no_half_rate_finding():
    found = conclude.compute_findings([tensor("compute.tensor.fp16.acc32", 940.0), tensor("compute.tensor.fp16.acc16",
                                                                                           938.0)], H200)
    assert not [t for t in titles(found) if "half" in t]
    assert any("same rate" in t for t in titles(found))


def test_ceiling_far_below_the_architecture_limit_is_reported():
    # 645 of 4096 x 132 x 1980 MHz = 1070 TFLOP/s: 60 %.
    found = conclude.compute_findings([tensor("compute.tensor.fp16.acc32", 645.0)], H200)
    assert any("reaches 60% of what the architecture allows" in t for t in titles(found))
    assert not conclude.compute_findings([tensor("compute.tensor.fp16.acc32", 940.0)], H200)


def test_clocks_below_max_during_compute_are_reported_with_reasons():
    found = conclude.compute_findings([tensor("compute.tensor.bf16.acc32", 900.0, 1700, ["software_power_cap"])], H200)
    clock = [f for f in found if "SM clock" in f.title]
    assert len(clock) == 1 and "software_power_cap" in clock[0].title and "1,700 MHz" in clock[0].title
    assert not [f for f in conclude.compute_findings([tensor("compute.tensor.bf16.acc32", 900.0, 1975)], H200)
                if "SM clock" in f.title]


def test_torch_figures_and_unverified_probes_are_not_judged():
    wrong = tensor("compute.tensor.fp16.acc32", 70.0)
    wrong.verified = False
    torch_only = tensor("compute.tensor.fp16.acc16", 140.0)
    torch_only.backend = "torch-cuda"
    assert conclude.compute_findings([wrong, torch_only], RTX3090) == []


def test_rate_per_clock_per_sm_uses_the_measured_clock():
    m = tensor("compute.tensor.fp16.acc32", 900.0, sm_mhz=1800)
    conclude.annotate_rates_per_clock([m], H200)
    assert float(m.params["flop_per_clock_per_sm"]) == pytest.approx(900e12 / (132 * 1800e6), rel=1e-3)
    assert m.params["measured_sm_clock_mhz"] == 1800


def test_missing_native_extension_is_the_first_finding():
    from pygpuperf.core.results import Results

    meta = {"device": {"type": "cpu"}, "extension": {"error": "No module named 'pygpuperf._C'"}}
    results = Results(meta=meta, measurements=[tensor("compute.tensor.fp16.acc32", 1.0)])
    conclude.conclude(results, "cpu")
    assert "native extension did not load" in results.findings[0].title
    assert "pip install --no-build-isolation -e ." in results.findings[0].suggestion
    loaded = Results(meta={"device": {"type": "cpu"}, "extension": {"cuda": "0"}})
    conclude.conclude(loaded, "cpu")
    assert not any("extension" in f.title for f in loaded.findings)


def sweep_point(precision, flop_per_byte, tflops):
    """One compute.sweep point: `tflops` achieved at `flop_per_byte` over a 10 ms run."""
    flops = tflops * 1e12 * 0.01
    return Measurement.from_samples("compute.sweep", sample_seconds=[0.01] * 3, bytes_read=flops / flop_per_byte / 2,
                                    bytes_written=flops / flop_per_byte / 2, flops=flops, backend="native-cuda",
                                    device="cuda:0", verified=True,
                                    params={"variant": f"{precision}.{flop_per_byte:g}", "flop_per_byte": f"{flop_per_byte:g}"})


def stream(name, gbs):
    return Measurement.from_samples(name, sample_seconds=[0.01] * 3, bytes_read=gbs * 1e9 * 0.005,
                                    bytes_written=gbs * 1e9 * 0.005, flops=0, backend="native-cuda", device="cuda:0",
                                    verified=True)


def sweep(precision, bandwidth_gbs, top_tflops):
    """A roofline-shaped sweep: min(top, intensity x bandwidth) at 0.25 ... 1024 FLOP/B."""
    return [sweep_point(precision, i, min(top_tflops, i * bandwidth_gbs / 1e3))
            for i in (0.25, 1, 4, 16, 64, 256, 1024)]


def sweep_findings(points, peak_tflops, copy_gbs=4300.0, name="compute.cuda.fp32"):
    ms = points + [tensor(name, peak_tflops), stream("memory.hbm.copy", copy_gbs), stream("memory.hbm.write", 4700.0)]
    return conclude.intensity_sweep_findings(ms, build_machine_model("cuda:0", ms))


def test_sweep_that_meets_the_ceilings_confirms_the_ridge_point():
    (f,) = sweep_findings(sweep("fp32", 4000.0, 65.8), 66.0)
    assert f.severity == "info" and "the roofline holds" in f.title
    # The copy roof, not the faster write roof, is the sweep's memory ceiling: 66 TFLOP/s / 4300 GB/s.
    assert f.evidence["model_ridge_flop_per_byte"] == pytest.approx(15.3, abs=0.1)
    assert f.evidence["sweep_ridge_flop_per_byte"] == pytest.approx(16.4, abs=0.1)


def test_sweep_above_the_peak_probe_says_the_peak_kernel_needs_tuning():
    (f,) = sweep_findings(sweep("fp16x2", 4000.0, 124.0), 105.0, name="compute.cuda.fp16x2")
    assert f.severity == "warning" and "above the 105.0" in f.title and "124.0 TFLOP/s" in f.title


def test_sweep_below_the_memory_roof_is_called_out():
    (f,) = sweep_findings(sweep("fp32", 3000.0, 65.0), 66.0)
    assert f.severity == "warning" and "stays below the ceilings" in f.title and "3,000 GB/s of 4,300" in f.title


def test_no_sweep_finding_without_enough_points_or_a_peak_probe():
    assert sweep_findings(sweep("fp32", 4000.0, 65.8)[:2], 66.0) == []
    ms = sweep("bf16x2", 4000.0, 100.0) + [stream("memory.hbm.copy", 4300.0)]
    assert conclude.intensity_sweep_findings(ms, build_machine_model("cuda:0", ms)) == []
