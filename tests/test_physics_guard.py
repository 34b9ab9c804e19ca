"""The physics guard: a figure above its theoretical peak is marked failed and sets no ceiling, in
every family the device's facts give a peak for; names without one are listed."""

import pytest

from pygpuperf.analyze import conclude
from pygpuperf.analyze.machine_model import build_machine_model
from pygpuperf.core.results import Measurement
from pygpuperf.facts import cpu, peaks

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "multiprocessor_count": 132, "sm_clock_max_mhz": 1980,
        "mem_clock_max_mhz": 3201, "memory_bus_width_bits": 6016, "pcie_generation_max": 5, "pcie_width_max": 16}


def figure(name, value, unit="TFLOP/s", params=None):
    seconds = 0.01
    work = value * (1e12 if unit == "TFLOP/s" else 1e9) * seconds
    flops, nbytes = (work, 0) if unit == "TFLOP/s" else (0, work)
    return Measurement.from_samples(name, sample_seconds=[seconds] * 5, bytes_read=nbytes, bytes_written=0,
                                    flops=flops, backend="test", device="cuda:0", verified=True,
                                    params=params or {"variant": "v"})


@pytest.mark.parametrize("name,value,unit,params,ceiling", [
    ("compute.library.bf16", 1200.0, "TFLOP/s", None, ("compute", "library.bf16")),  # peak 1,070 (4096 x 132 x 1.98 GHz)
    ("transfer.bidir.pinned", 140.0, "GB/s", None, ("links", "bidir.pinned")),  # 2 x 63.0
    ("memory.hbm.copy", 5200.0, "GB/s", None, ("memory", "hbm")),  # 3201 MHz x 2 x 6016 bits = 4,815
])
def test_a_figure_above_its_peak_sets_no_ceiling_and_is_named(name, value, unit, params, ceiling):
    honest = figure(name, value * 0.7, unit, params)
    bug = figure(name, value, unit, params)
    measurements = [bug, honest]
    conclude.guard_physics(measurements, H200)
    assert not bug.verified and bug.verify_detail.startswith(conclude.PHYSICS_GUARD) and honest.verified
    table, key = ceiling
    model = build_machine_model("H200", measurements)
    assert getattr(model, table)[key].value == pytest.approx(value * 0.7)
    found = conclude.findings_for(measurements, H200)
    assert [f.severity for f in found if name in f.title] == ["error"]  # the peak finding, not a second one
    assert "theoretical peak" in found[0].title


def test_a_library_figure_is_held_to_the_rate_of_the_precision_it_runs_in():
    fp32 = peaks.theoretical_peak("compute.library.fp32", H200)
    tf32 = peaks.theoretical_peak("compute.library.tf32", H200)
    assert fp32.value == pytest.approx(256 * 132 * 1980e6 / 1e12)  # CUDA cores, not the TF32 tensor rate
    assert tf32.value == pytest.approx(2 * fp32.value * 4)


def test_a_size_sweep_point_is_held_to_its_level_peak():
    assert peaks.theoretical_peak("memory.size.sweep", H200, {"level": "hbm"}).value == pytest.approx(4815.0, rel=1e-3)
    assert peaks.theoretical_peak("memory.size.sweep", H200, {"level": "l2"}) is None


def test_figures_without_a_known_peak_are_listed_not_passed_silently():
    unchecked = conclude.guard_physics([figure("memory.l2.copy", 9000.0, "GB/s"),
                                        figure("compute.cuda.fp32", 60.0)], H200)
    assert unchecked == ["memory.l2.copy"]


def test_a_cpu_simd_figure_is_held_to_cores_x_simd_width_x_clock(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor : 0\nflags : fpu sse2 avx avx2 fma avx512f\n")
    freq = tmp_path / "max_freq"
    freq.write_text("3000000\n")
    facts = cpu.cpu_simd_facts(info, freq)
    assert facts == {"simd_bits": 512, "cpu_clock_max_mhz": 3000}
    meta = {"cores": 4, **facts}
    assert peaks.theoretical_peak("compute.simd.fp32", meta).value == pytest.approx(4 * 64 * 3e9 / 1e12)
    assert peaks.theoretical_peak("compute.simd.fp64", meta).value == pytest.approx(4 * 32 * 3e9 / 1e12)
    assert peaks.theoretical_peak("compute.simd.fp32", {"cores": 4, "simd_bits": 512}) is None  # no clock: unknown
    assert cpu.cpu_simd_facts(info, tmp_path / "absent") == {"simd_bits": 512}


def test_a_host_link_faster_than_pcie_is_held_to_its_datasheet_figure():
    gh200 = {"name": "NVIDIA GH200 480GB", "pcie_generation_max": 5, "pcie_width_max": 16}
    assert peaks.theoretical_peak("transfer.h2d.pinned", gh200).value == pytest.approx(450.0)
    assert peaks.theoretical_peak("transfer.h2d.pinned", H200).value == pytest.approx(63.0, rel=1e-2)  # PCIe
