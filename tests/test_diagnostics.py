"""Datasheet-based findings, each on synthetic inputs that should and should not raise it."""

import pytest

from pygpuperf.analyze.diagnostics import datasheet_findings
from pygpuperf.core.results import Measurement, Telemetry
from pygpuperf.analyze.machine_model import build_machine_model

H100 = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "multiprocessor_count": 132,
        "sm_clock_max_mhz": 1980, "power_limit_w": 700.0, "power_limit_default_w": 700.0, "ecc_enabled": True,
        "mig_enabled": False}
A6000 = {"type": "cuda", "name": "NVIDIA RTX A6000", "compute_capability": "8.6", "multiprocessor_count": 84,
         "sm_clock_max_mhz": 1800, "ecc_enabled": True, "mig_enabled": False}


def _m(name: str, value: float, clock: float | None = None, backend: str = "native-cuda") -> Measurement:
    """A verified measurement of `value` in the name's unit, optionally run at an SM clock."""
    seconds = 1e-3
    work = value * (1e12 if name.startswith("compute.") else 1e9) * seconds
    is_memory = not name.startswith("compute.")
    return Measurement.from_samples(
        name, sample_seconds=[seconds] * 3, bytes_read=work if is_memory else 0.0, bytes_written=0.0,
        flops=0.0 if is_memory else work, backend=backend, device="cuda:0", verified=True,
        telemetry=Telemetry(sm_clock_mhz=[clock] * 3) if clock else None)


def _findings(measurements, meta):
    return datasheet_findings(measurements, build_machine_model("cuda:0", measurements), meta)


def _titles(findings, fragment):
    return [f.title for f in findings if fragment in f.title]


def _healthy_h100():
    return [_m("memory.hbm.read", 3100), _m("memory.hbm.copy", 2900),
            _m("compute.tensor.fp16.acc32", 850, clock=1830), _m("compute.tensor.fp8.acc32", 1700, clock=1830)]


def test_a_healthy_card_gets_only_the_ecc_note():
    findings = _findings(_healthy_h100(), H100)
    assert [f.severity for f in findings] == ["info"]
    assert "no bandwidth cost" in findings[0].title and "HBM3" in findings[0].title


@pytest.mark.parametrize("read, raised", [(2500, True), (0.84 * 3350, True), (0.86 * 3350, False)])
def test_memory_bandwidth_below_85_percent_of_the_datasheet(read, raised):
    findings = _findings([_m("memory.hbm.read", read), _m("compute.tensor.fp16.acc32", 850, clock=1830)], H100)
    hits = [f for f in findings if f.title.startswith("Memory bandwidth reaches")]
    assert len(hits) == (1 if raised else 0)
    if raised:
        assert f"{100 * read / 3350:.0f}% of the datasheet's 3,350 GB/s" in hits[0].title
        assert hits[0].severity == "warning" and hits[0].evidence["measurement"] == "memory.hbm.read"


def test_the_best_stream_counts_not_the_first():
    findings = _findings([_m("memory.hbm.copy", 2000), _m("memory.hbm.read", 3100)], H100)
    assert not _titles(findings, "Memory bandwidth reaches")


def test_tensor_ceiling_below_80_percent_at_full_clock():
    findings = _findings([_m("memory.hbm.read", 3100), _m("compute.tensor.fp16.acc32", 700, clock=1830)], H100)
    (title,) = _titles(findings, "tensor.fp16.acc32 reaches")
    assert "71% of the datasheet's 990 TFLOP/s" in title and "MHz it ran at" not in title


def test_a_low_clock_explains_a_low_tensor_ceiling():
    # 700 of 989.5 at 1,400 of the 1,830 MHz the figure assumes: 93 % of what that clock allows.
    findings = _findings([_m("memory.hbm.read", 3100), _m("compute.tensor.fp16.acc32", 700, clock=1400)], H100)
    assert not _titles(findings, "tensor.fp16.acc32")


def test_the_clock_correction_is_named_when_it_does_not_explain_the_gap():
    findings = _findings([_m("compute.tensor.fp16.acc32", 500, clock=1400)], H100)
    (title,) = _titles(findings, "tensor.fp16.acc32 reaches")
    assert "even at the 1,400 MHz it ran at (757 TFLOP/s expected there)" in title


def test_a_clock_above_the_datasheet_clock_is_not_credited():
    # Above 1,830 MHz the expectation stays at the datasheet figure, never above it.
    findings = _findings([_m("compute.tensor.fp16.acc32", 780, clock=1980)], H100)
    assert _titles(findings, "tensor.fp16.acc32 reaches 79%")
    assert not _titles(_findings([_m("compute.tensor.fp16.acc32", 800, clock=1980)], H100), "tensor.fp16.acc32")


def test_a_tensor_ceiling_without_clock_samples_is_held_against_the_datasheet():
    assert _titles(_findings([_m("compute.tensor.fp8.acc32", 1200)], H100), "tensor.fp8.acc32 reaches 61%")


def test_half_rate_geforce_figures_are_held_against_their_own_datasheet_rate():
    meta = {"type": "cuda", "name": "NVIDIA GeForce RTX 3090", "multiprocessor_count": 82, "sm_clock_max_mhz": 1695}
    findings = _findings([_m("compute.tensor.fp16.acc32", 68, clock=1695), _m("compute.tensor.fp16.acc16", 136, clock=1695),
                          _m("memory.hbm.read", 880)], meta)
    assert findings == []


@pytest.mark.parametrize("limit, raised", [(500.0, True), (650.0, True), (695.0, False), (700.0, False)])
def test_power_limit_below_the_default(limit, raised):
    findings = _findings(_healthy_h100(), {**H100, "power_limit_w": limit})
    hits = _titles(findings, "The power limit is set to")
    assert len(hits) == (1 if raised else 0)
    if raised:
        assert f"{limit:.0f} W" in hits[0] and "default 700 W" in hits[0]


def test_power_limit_facts_missing_raise_nothing():
    meta = {k: v for k, v in H100.items() if not k.startswith("power_limit")}
    assert not _titles(_findings(_healthy_h100(), meta), "power limit")


def test_mig_is_reported_and_whole_card_comparisons_skipped():
    meta = {**H100, "mig_enabled": True, "multiprocessor_count": 16}
    findings = _findings([_m("memory.hbm.read", 400), _m("compute.tensor.fp16.acc32", 120, clock=1830)], meta)
    (mig,) = [f for f in findings if f.title.startswith("MIG is on")]
    assert "16 of 132 SMs" in mig.title and mig.severity == "warning"
    assert not _titles(findings, "reaches")


def test_ecc_on_hbm_costs_nothing_and_off_gains_nothing():
    assert _titles(_findings(_healthy_h100(), H100), "ECC is on at no bandwidth cost")
    off = _findings(_healthy_h100(), {**H100, "ecc_enabled": False})
    assert _titles(off, "ECC is off, which gains nothing")
    assert not _titles(_findings(_healthy_h100(), {**H100, "ecc_enabled": None}), "ECC")


def test_ecc_on_gddr_costs_bandwidth_and_explains_part_of_a_shortfall():
    findings = _findings([_m("memory.hbm.read", 620), _m("compute.tensor.fp16.acc32", 140, clock=1800)], A6000)
    (ecc,) = [f for f in findings if f.title.startswith("ECC")]
    assert "in-band" in ecc.title and "6-12 %" in ecc.title and ecc.severity == "info"
    (bandwidth,) = [f for f in findings if f.title.startswith("Memory bandwidth reaches 81%")]
    assert "In-band ECC on GDDR6" in bandwidth.suggestion
    off = _findings([_m("memory.hbm.read", 620)], {**A6000, "ecc_enabled": False})
    assert _titles(off, "ECC is off, so the full GDDR6 bandwidth is available")
    assert "ECC" not in [f for f in off if f.title.startswith("Memory bandwidth")][0].suggestion


def test_an_unknown_card_gets_one_note_and_no_datasheet_comparisons():
    meta = {**H100, "name": "NVIDIA Future GPU"}
    findings = _findings([_m("memory.hbm.read", 100), _m("compute.tensor.fp16.acc32", 10)], meta)
    assert _titles(findings, "not in the datasheet table, so only measured ceilings are shown")
    assert not _titles(findings, "reaches")
    (ecc,) = _titles(findings, "ECC is on")
    assert "nothing on HBM" in ecc and "GDDR" in ecc


def test_a_cpu_gets_no_datasheet_findings():
    assert datasheet_findings([_m("memory.dram.read", 10)], None, {"type": "cpu", "name": "Some CPU"}) == []


def test_each_die_of_a_two_die_board_is_held_against_half_the_board():
    die = {"type": "cuda", "name": "AMD Instinct MI250X", "multiprocessor_count": 110}
    assert not _titles(_findings([_m("memory.hbm.read", 1450)], die), "Memory bandwidth")  # 89 % of 1,638
    (title,) = _titles(_findings([_m("memory.hbm.read", 1300)], die), "Memory bandwidth")
    assert "1,638 GB/s" in title


def test_a_missing_machine_model_is_built_from_the_measurements():
    findings = datasheet_findings([_m("memory.hbm.read", 2000)], None, H100)
    assert _titles(findings, "Memory bandwidth reaches 60%")
