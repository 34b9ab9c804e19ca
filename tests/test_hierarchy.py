"""Memory-hierarchy analysis: plateau and knee detection on synthetic sweeps, derived cache
measurements, capacity evidence, the sweep series and chart. No probes run here."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from pygpuperf.analyze import conclude
from pygpuperf.analyze import hierarchy
from pygpuperf.facts import cpu
from pygpuperf.core import documents
from pygpuperf.core import units
from pygpuperf.analyze.hierarchy import Level, detect_levels
from pygpuperf.report.sweep_chart import draw_sweep_chart, sweep_svg
from pygpuperf.core.results import Measurement, Quantities, Results
from pygpuperf.analyze.machine_model import build_machine_model

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
H200_SMS = 132


def size_grid(first: float, last: float, per_octave: int) -> np.ndarray:
    """Sizes from first to last in 2^(1/per_octave) steps, as a sweep takes them."""
    steps = int(round(math.log2(last / first) * per_octave))
    return first * 2.0 ** (np.arange(steps + 1) / per_octave)


def staircase(sizes: np.ndarray, levels: list[float], capacities: list[float], width_octaves: float,
              noise: float, seed: int) -> np.ndarray:
    """Bandwidth falling from level to level through a smooth (logistic in log-log) transition
    of the given width that has fallen KNEE_FALL below the upper level exactly at each
    capacity (a cache misses beyond its size), times lognormal noise of the given sigma."""
    x = np.log2(sizes)
    y = np.full(x.size, math.log(levels[0]))
    for k, capacity in enumerate(capacities):
        fall = math.log(levels[k + 1]) - math.log(levels[k])
        q = math.log(hierarchy.KNEE_FALL) / fall  # fraction of the fall done at the capacity
        centre = math.log2(capacity) - math.log(q / (1 - q)) * width_octaves
        z = np.clip((x - centre) / width_octaves, -60, 60)
        y += fall / (1 + np.exp(-z))
    return np.exp(y + np.random.default_rng(seed).normal(0, noise, x.size))


def _capacity_found(level: Level, capacity: float, tol: float) -> bool:
    """Within `tol` of the knee, or inside the gap a sharp step leaves it in (as CapacityCheck judges)."""
    if level.capacity is None:
        return False
    low, high = level.capacity_low or level.capacity, level.capacity_high or level.capacity
    return low * (1 - tol) <= capacity <= high * (1 + tol)


def matches(found: list[Level], levels: list[float], capacities: list[float], level_tol: float = 0.05,
            capacity_tol: float = 0.10) -> bool:
    if len(found) != len(levels):
        return False
    for k, level in enumerate(found):
        if abs(level.bandwidth / levels[k] - 1) > level_tol:
            return False
        if k < len(capacities) and not _capacity_found(level, capacities[k], capacity_tol):
            return False
    return True


# --------------------------------------------------------------------------- detection

# An H200-like per-SM sweep: L1 256 KiB x 132 SMs, L2 up to 60 MiB, HBM beyond.
GPU_LEVELS = [30000.0, 10000.0, 4000.0]
GPU_CAPACITIES = [256 * KiB * H200_SMS, 60 * MiB]
GPU_SIZES = size_grid(4 * KiB * H200_SMS, 1 * GiB, 4)


def test_three_plateaus_with_noise_and_smooth_transitions():
    bandwidth = staircase(GPU_SIZES, GPU_LEVELS, GPU_CAPACITIES, width_octaves=0.05, noise=0.03, seed=1)
    found = detect_levels(GPU_SIZES, bandwidth)
    assert [round(lv.bandwidth, -2) for lv in found] == pytest.approx(GPU_LEVELS, rel=0.05)
    assert found[0].capacity == pytest.approx(GPU_CAPACITIES[0], rel=0.10)
    assert found[1].capacity == pytest.approx(GPU_CAPACITIES[1], rel=0.10)
    assert found[2].capacity is None  # HBM: the last level
    # The knee lies between the measured sizes that bracket it, and plateaus exclude it.
    for level in found[:2]:
        assert level.capacity_low <= level.capacity <= level.capacity_high
        assert level.last_size <= level.capacity_low * 1.0001
    assert found[0].first_size == GPU_SIZES[0]


def test_three_plateaus_hold_across_noise_draws():
    """The same staircase under 40 noise draws. The L2 plateau is short (33 to 60 MiB: two or
    three points, the last one already ~9 % into the fall to HBM), so its median is held to
    10 %; the long plateaus to 5 %. Never a level too many, rarely one too few."""
    found = [detect_levels(GPU_SIZES, staircase(GPU_SIZES, GPU_LEVELS, GPU_CAPACITIES, 0.05, 0.03, seed))
             for seed in range(40)]
    assert all(len(levels) <= 3 for levels in found)
    complete = [levels for levels in found if len(levels) == 3]
    assert len(complete) >= 38
    for l1, l2, hbm in complete:
        assert l1.bandwidth == pytest.approx(30000, rel=0.05) and hbm.bandwidth == pytest.approx(4000, rel=0.05)
        assert l2.bandwidth == pytest.approx(10000, rel=0.10)
        assert l1.capacity == pytest.approx(GPU_CAPACITIES[0], rel=0.10)
        assert l2.capacity == pytest.approx(GPU_CAPACITIES[1], rel=0.10)


def test_four_cpu_like_levels_on_a_sqrt2_grid():
    sizes = size_grid(4 * KiB, 512 * MiB, 2)
    levels, capacities = [3000.0, 1500.0, 700.0, 200.0], [64 * KiB, 1 * MiB, 32 * MiB]
    # A sqrt(2) grid is 41 % between points: where a fall begins is found to about 15 %.
    ok = [matches(detect_levels(sizes, staircase(sizes, levels, capacities, 0.1, 0.03, seed)), levels, capacities,
                  capacity_tol=0.15) for seed in range(20)]
    assert all(ok)


def test_single_plateau_gives_one_level_without_a_knee():
    sizes = size_grid(4 * KiB, 256 * MiB, 2)
    found = detect_levels(sizes, staircase(sizes, [500.0], [], 0.1, 0.03, seed=3))
    assert len(found) == 1
    assert found[0].capacity is None
    assert found[0].bandwidth == pytest.approx(500, rel=0.03)
    assert found[0].points == sizes.size


@pytest.mark.parametrize("per_octave", [1, 2, 4])
def test_noise_alone_never_makes_an_extra_level(per_octave):
    sizes = size_grid(4 * KiB, 1 * GiB, per_octave)
    for seed in range(30):
        assert len(detect_levels(sizes, staircase(sizes, [800.0], [], 0.1, 0.03, seed))) == 1, seed


@pytest.mark.parametrize("width_octaves, tolerance", [(0.3, 0.10), (0.5, 0.15)])
def test_gradual_transition_is_one_knee_not_a_staircase(width_octaves, tolerance):
    """300 -> 100 spread over two to three octaves: still two levels, knee where it begins."""
    sizes = size_grid(8 * KiB, 128 * MiB, 2)
    results = [detect_levels(sizes, staircase(sizes, [300.0, 100.0], [1 * MiB], width_octaves, 0.03, seed))
               for seed in range(30)]
    assert sum(len(found) == 2 for found in results) >= 29
    for found in results:
        if len(found) == 2:
            # Where a wide fall begins is less sharply defined under 3 % noise than its middle.
            assert found[0].capacity == pytest.approx(1 * MiB, rel=tolerance)


def test_long_gradual_fall_makes_no_false_levels():
    """300 -> 40 over three octaves: two levels, the knee where the fall begins."""
    sizes = size_grid(8 * KiB, 128 * MiB, 2)
    results = [detect_levels(sizes, staircase(sizes, [300.0, 40.0], [1 * MiB], 0.5, 0.03, seed)) for seed in range(30)]
    assert sum(len(found) == 2 for found in results) >= 28
    for found in results:
        if len(found) == 2:
            assert found[0].capacity == pytest.approx(1 * MiB, rel=0.15)


def test_sharp_step_between_grid_points_is_bracketed():
    sizes = size_grid(4 * KiB, 64 * MiB, 2)
    bandwidth = np.where(sizes <= 48 * KiB, 300.0, 100.0)
    (l1, memory) = detect_levels(sizes, bandwidth)
    assert l1.capacity_low <= 48 * KiB < l1.capacity_high
    assert l1.capacity_low < l1.capacity < l1.capacity_high
    assert memory.bandwidth == 100 and memory.capacity is None


def test_steady_slope_has_no_plateau():
    sizes = size_grid(4 * KiB, 64 * MiB, 2)
    assert detect_levels(sizes, 1000.0 * (sizes / sizes[0]) ** -0.4) == []


def test_slowly_sagging_level_is_still_one_plateau():
    sizes = size_grid(1 * MiB, 16 * MiB, 2)  # 150 -> 140 GB/s over four octaves, then memory
    sag = 150.0 * (sizes / sizes[0]) ** (-0.025)
    tail = size_grid(32 * MiB, 256 * MiB, 2)
    found = detect_levels(np.r_[sizes, tail], np.r_[sag, np.full(tail.size, 30.0)])
    assert len(found) == 2
    assert found[0].capacity_low == 16 * MiB and found[0].capacity_high == 32 * MiB
    assert 16 * MiB <= found[0].capacity <= 32 * MiB


def test_low_start_is_not_a_cache_level():
    """Tiny windows slowed by loop or thread start-up overhead sit below L1: not a level."""
    sizes = size_grid(4 * KiB, 64 * MiB, 2)
    bandwidth = staircase(sizes, [300.0, 150.0, 40.0], [64 * KiB, 8 * MiB], 0.1, 0.01, seed=5)
    bandwidth[:3] *= 0.7
    found = detect_levels(sizes, bandwidth)
    assert [round(lv.bandwidth, -1) for lv in found] == [300, 150, 40]
    assert found[0].first_size == sizes[3]


def test_sweep_that_stops_inside_the_last_fall_still_gets_a_knee():
    sizes = size_grid(4 * KiB, 64 * MiB, 2)
    x = np.log2(sizes / (8 * MiB))
    bandwidth = np.where(x <= 0, 150.0, 150.0 * 2.0 ** (-1.2 * x))  # still falling at the end
    (level,) = detect_levels(sizes, bandwidth)
    assert level.capacity is not None and 8 * MiB < level.capacity < 64 * MiB


def test_unsorted_input_and_bad_points():
    sizes = size_grid(4 * KiB, 64 * MiB, 2)
    bandwidth = staircase(sizes, [300.0, 50.0], [1 * MiB], 0.1, 0.01, seed=2)
    order = np.random.default_rng(0).permutation(sizes.size)
    shuffled_sizes, shuffled_bw = list(sizes[order]) + [0.0, 8.0], list(bandwidth[order]) + [100.0, math.nan]
    found = detect_levels(shuffled_sizes, shuffled_bw)
    assert [round(lv.bandwidth, -1) for lv in found] == [300, 50]
    for level in found:  # indices point into the inputs as given
        assert all(level.first_size <= shuffled_sizes[i] <= level.last_size for i in level.indices)
    assert detect_levels([], []) == []
    assert detect_levels([4096], [10.0])[0].bandwidth == 10.0
    with pytest.raises(ValueError, match="sizes but"):
        detect_levels([1, 2], [1.0])


def test_a_series_too_noisy_to_trust_has_no_levels():
    sizes = size_grid(4 * KiB, 64 * MiB, 2)
    jumpy = 100.0 * np.exp(np.random.default_rng(9).normal(0, 0.8, sizes.size))  # a machine under load
    assert detect_levels(sizes, jumpy) == []


# --------------------------------------------------------------------------- derived measurements


def sweep_point(window: float, value: float, *, mode: str, workers: int, backend: str = "native-cuda",
                device: str = "cuda:0", verified: bool = True) -> Measurement:
    """A memory.sweep point as a probe reports it, with its median at `value` GB/s."""
    footprint = window * workers if mode == "l1" else window
    seconds = footprint / (value * 1e9)
    return Measurement.from_samples(
        "memory.sweep", sample_seconds=[seconds * f for f in (0.98, 1.0, 1.02)], bytes_read=footprint,
        bytes_written=0, flops=0, backend=backend, device=device, verified=verified,
        params={"mode": mode, "window_bytes": str(int(window)), "footprint_bytes": str(int(footprint)),
                "workers": str(workers), "variant": f"{mode}-{int(window)}"})


def gpu_sweeps(unverified_l1_window: float | None = None, per_octave: int = 4) -> list[Measurement]:
    """Per-SM windows (L1 256 KiB, then L2, then HBM) and a shared window (L2 50 MiB, then HBM)."""
    windows = size_grid(4 * KiB, 8 * MiB, per_octave)
    l1_mode = staircase(windows * H200_SMS, GPU_LEVELS, GPU_CAPACITIES, 0.05, 0.0, seed=0)
    points = [sweep_point(w, v, mode="l1", workers=H200_SMS, verified=w != unverified_l1_window)
              for w, v in zip(windows, l1_mode)]
    shared = size_grid(1 * MiB, 1 * GiB, 2)
    l2_mode = staircase(shared, [11000.0, 4200.0], [50 * MiB], 0.05, 0.0, seed=0)
    points += [sweep_point(w, v, mode="l2", workers=1) for w, v in zip(shared, l2_mode)]
    return points


H200_META = {"type": "cuda", "name": "NVIDIA H200", "compute_capability": "9.0", "l2_cache_bytes": 50 * MiB,
             "multiprocessor_count": H200_SMS}


def test_gpu_sweeps_give_l1_and_l2_reads():
    points = gpu_sweeps()
    derived = {m.name: m for m in hierarchy.derive_cache_measurements(points, H200_META)}
    assert set(derived) == {"memory.l1.read", "memory.l2.read"}
    l1, l2 = derived["memory.l1.read"], derived["memory.l2.read"]
    assert l1.value == pytest.approx(30000, rel=0.01) and l2.value == pytest.approx(11000, rel=0.01)
    assert l1.verified and l2.verified and l1.usable
    assert l1.params["derived_from"] == "memory.sweep" and l1.params["mode"] == "l1"
    assert l1.quantities.workers == H200_SMS
    assert float(l1.params["capacity_per_worker_bytes"]) == pytest.approx(256 * KiB, rel=0.10)
    assert l1.quantities.capacity_bytes == pytest.approx(256 * KiB * H200_SMS, rel=0.10)
    assert l2.quantities.capacity_bytes == pytest.approx(50 * MiB, rel=0.10)
    # Statistics, samples and byte counts are the plateau's median point's.
    source = next(m for m in points if m.params["variant"] == l1.params["source_variant"])
    assert l1.stats == source.stats and l1.sample_seconds == source.sample_seconds
    assert l1.bytes_read == source.bytes_read and l1.unit == "GB/s"
    assert int(l1.params["plateau_points"]) >= 5
    assert l1.quantities.plateau_first_bytes == 4 * KiB * H200_SMS


def test_l1_knee_holds_when_a_coarse_sweep_misses_the_l2_shoulder():
    """In sqrt(2) steps the per-SM sweep has one point on L2 (33 to 60 MiB in total): no L2
    plateau, yet the L1 knee stays at the first fall, not halfway to HBM."""
    points = [m for m in gpu_sweeps(per_octave=2) if m.params["mode"] == "l1"]
    (l1,) = hierarchy.derive_cache_measurements(points, H200_META)
    assert float(l1.params["capacity_per_worker_bytes"]) == pytest.approx(256 * KiB, rel=0.15)


def test_one_unverified_plateau_point_unverifies_the_derived_figure():
    derived = {m.name: m for m in hierarchy.derive_cache_measurements(gpu_sweeps(16 * KiB), H200_META)}
    l1 = derived["memory.l1.read"]
    assert not l1.verified and not l1.usable
    assert "1 of" in l1.verify_detail and f"l1-{16 * KiB}" in l1.verify_detail
    assert derived["memory.l2.read"].verified
    # A wrong point outside every plateau (in the fall to HBM) leaves the derived figures alone.
    beyond = hierarchy.derive_cache_measurements(gpu_sweeps(8 * MiB), H200_META)
    assert all(m.verified for m in beyond)


def test_cpu_private_sweep_gives_l1_l2_l3():
    windows = size_grid(4 * KiB, 64 * MiB, 2)
    values = staircase(windows * 2, [330.0, 180.0, 100.0, 35.0], [64 * KiB, 2 * MiB, 32 * MiB], 0.1, 0.0, 0)
    points = [sweep_point(w, v, mode="l1", workers=2, backend="native-cpu", device="cpu")
              for w, v in zip(windows, values)]
    meta = {"type": "cpu", "l1d_cache_bytes_per_cpu": 32 * KiB, "l2_cache_bytes_per_cpu": 1 * MiB,
            "l3_cache_bytes": 32 * MiB}
    derived = {m.name: m for m in hierarchy.derive_cache_measurements(points, meta)}
    assert set(derived) == {"memory.l1.read", "memory.l2.read", "memory.l3.read"}
    assert [round(derived[f"memory.{k}.read"].value, -1) for k in ("l1", "l2", "l3")] == [330, 180, 100]
    checks = {c.level: c for c in hierarchy.capacity_checks(derived.values(), meta)}
    assert checks["l1"].scope == "per worker" and checks["l1"].detected_bytes == pytest.approx(32 * KiB, rel=0.1)
    assert checks["l2"].detected_bytes == pytest.approx(1 * MiB, rel=0.1)
    assert checks["l3"].scope == "total" and checks["l3"].detected_bytes == pytest.approx(32 * MiB, rel=0.1)
    assert not any(c.differs() for c in checks.values())


def test_last_plateau_is_memory_not_a_cache():
    windows = size_grid(4 * KiB, 1 * MiB, 2)  # the sweep stops in L2: L1 has a knee, L2 has none
    values = staircase(windows, [300.0, 150.0], [32 * KiB], 0.05, 0.0, 0)
    points = [sweep_point(w, v, mode="l1", workers=1, backend="native-cpu", device="cpu")
              for w, v in zip(windows, values)]
    assert [m.name for m in hierarchy.derive_cache_measurements(points, {"type": "cpu"})] == ["memory.l1.read"]


def test_capacity_evidence_and_findings():
    points = gpu_sweeps()
    derived = hierarchy.derive_cache_measurements(points, H200_META)
    checks = {c.level: c for c in hierarchy.capacity_checks(derived, H200_META)}
    assert checks["l1"].expected_bytes == 256 * KiB and checks["l1"].scope == "per worker"
    assert checks["l2"].expected_bytes == 50 * MiB and checks["l2"].scope == "total"
    assert not checks["l1"].differs() and not checks["l2"].differs()
    assert abs(checks["l2"].relative_difference) < 0.1
    found = conclude.hierarchy_findings(points + derived, H200_META)
    assert [f.severity for f in found] == ["info"] and "agree" in found[0].title

    # The driver claims 80 MiB of L2 but the knee is at 50 MiB: a warning with the numbers.
    claims_more = dict(H200_META, l2_cache_bytes=80 * MiB)
    (warning, agreeing) = conclude.hierarchy_findings(points + derived, claims_more)
    assert warning.severity == "warning" and "L2" in warning.title and "below" in warning.title
    assert warning.evidence["expected_bytes"] == 80 * MiB
    assert "L1" in agreeing.title
    # An unknown architecture has no L1 reference: reported, not warned about.
    unknown = dict(H200_META, compute_capability="12.0")
    assert any("no reported size" in f.title for f in conclude.hierarchy_findings(derived, unknown))


def test_derived_figures_become_ceilings_and_sweeps_do_not():
    points = gpu_sweeps()
    derived = hierarchy.derive_cache_measurements(points, H200_META)
    model = build_machine_model("cuda:0", points + derived)
    assert model.memory["l1"].source == "memory.l1.read" and model.memory["l2"].value == pytest.approx(11000, rel=0.01)
    assert set(model.memory) == {"l1", "l2"}
    # An unverified derived figure is not a second 'wrong result' finding: its sweep point is.
    wrong = hierarchy.derive_cache_measurements(gpu_sweeps(16 * KiB), H200_META)
    errors = [f for f in conclude.findings_for(gpu_sweeps(16 * KiB) + wrong, H200_META) if f.severity == "error"]
    assert len(errors) == 1 and errors[0].evidence["probe"] == "memory.sweep"


def test_sweep_series_lists_each_backend_and_mode():
    series = hierarchy.sweep_series(gpu_sweeps())
    modes = {(s["backend"], s["mode"]): s for s in series["bandwidth"]}
    assert set(modes) == {("native-cuda", "l1"), ("native-cuda", "l2")}
    l1 = modes[("native-cuda", "l1")]
    assert l1["footprint_bytes"] == sorted(l1["footprint_bytes"]) and len(l1["value"]) == len(l1["verified"])
    assert [lv["name"] for lv in l1["levels"]][:1] == ["l1"]
    assert l1["levels"][-1]["capacity"] is None
    assert series["latency"] == []


def latency_points() -> list[Measurement]:
    sizes = size_grid(4 * KiB, 256 * MiB, 2)
    ns = 1.0 / staircase(sizes, [1 / 1.2, 1 / 4.0, 1 / 12.0, 1 / 90.0], [32 * KiB, 1 * MiB, 32 * MiB], 0.1, 0.02, 0)
    return [Measurement.from_samples("latency.sweep", sample_seconds=[v * 1e-9 * 1e6] * 3, bytes_read=0,
                                     bytes_written=0, flops=0, operations=1e6, backend="native-cpu", device="cpu",
                                     verified=True, params={"footprint_bytes": str(int(s))})
            for s, v in zip(sizes, ns)]


def test_latency_series_levels_rise():
    (latency,) = hierarchy.sweep_series(latency_points())["latency"]
    assert latency["unit"] == "ns"
    assert [round(lv["bandwidth"]) for lv in latency["levels"]] == [1, 4, 12, 90]
    assert latency["levels"][0]["capacity"] == pytest.approx(32 * KiB, rel=0.1)


def test_chase_that_names_its_size_chain_bytes_is_a_series_too():
    points = [dataclasses.replace(m, params={"chain_bytes": str(m.quantities.footprint_bytes)}, quantities=Quantities())
              for m in latency_points()]
    assert all(m.quantities.footprint_bytes is None for m in points)
    (latency,) = hierarchy.sweep_series(points)["latency"]
    assert latency["footprint_bytes"] == sorted(float(m.quantities.chain_bytes) for m in points)


def test_cpu_latency_sweep_gives_named_latencies():
    meta = {"type": "cpu", "l3_cache_bytes": 32 * MiB}
    derived = {m.name: m for m in hierarchy.derive_cache_measurements(latency_points(), meta)}
    assert set(derived) == {"latency.l1", "latency.l2", "latency.l3", "latency.dram"}
    assert [round(derived[n].value) for n in ("latency.l1", "latency.l2", "latency.l3", "latency.dram")] == \
        [1, 4, 12, 90]
    assert derived["latency.l1"].unit == "ns" and derived["latency.l1"].params["derived_from"] == "latency.sweep"
    assert derived["latency.dram"].quantities.capacity_bytes is None
    model = build_machine_model("cpu", list(derived.values()))
    assert set(model.latency) == {"l1", "l2", "l3", "dram"}
    assert hierarchy.capacity_checks(derived.values(), meta) == []  # capacities come from the bandwidth sweep
    # On a GPU the latency probes name their points themselves.
    gpu_points = [dataclasses.replace(m, device="cuda:0") for m in latency_points()]
    assert hierarchy.derive_cache_measurements(gpu_points, H200_META) == []


def results_with(measurements: list[Measurement]) -> Results:
    meta = {"versions": {"pygpuperf": "0", "torch": "2", "python": "3"}, "device": dict(H200_META),
            "host": {}, "time_utc": "2026-01-01T00:00:00+00:00", "counting": "1 GB = 1e9 B"}
    return Results(meta=meta, measurements=measurements)


def test_sweep_chart_draws_both_panels(tmp_path: Path):
    points = gpu_sweeps(16 * KiB) + latency_points()
    paths, page = draw_sweep_chart(results_with(points), tmp_path / "sweep.png")
    assert paths == [tmp_path / "sweep.png"] and (tmp_path / "sweep.png").stat().st_size > 20_000
    assert page == sweep_svg(results_with(points))  # what report.html inlines is the drawing sweep.png came from
    assert draw_sweep_chart(results_with([]), tmp_path / "none.png") == ([], None)
    assert not (tmp_path / "none.png").exists()


def test_results_with_derived_figures_round_trip(tmp_path: Path):
    points = gpu_sweeps()
    results = results_with(points + hierarchy.derive_cache_measurements(points, H200_META))
    results.machine_model = build_machine_model("cuda:0", results.measurements)
    results.findings = conclude.hierarchy_findings(results.measurements, H200_META)
    loaded = documents.load_results(documents.write_results(results, tmp_path)["json"])
    assert [m.name for m in loaded.measurements] == [m.name for m in results.measurements]
    derived = [m for m in loaded.measurements if m.params.get("derived_from")]
    assert {m.name for m in derived} == {"memory.l1.read", "memory.l2.read"}
    series = hierarchy.sweep_series(loaded.measurements)  # the series live in the measurements
    assert series == hierarchy.sweep_series(results.measurements)


def test_cpu_cache_facts_from_sysfs(tmp_path: Path):
    def cache(cpu: int, index: int, level: int, kind: str, size: str, shared: str) -> None:
        folder = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
        folder.mkdir(parents=True)
        for name, text in (("level", str(level)), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (folder / name).write_text(text + "\n")

    for n in (0, 1, 2, 3):
        cache(n, 0, 1, "Data", "48K", f"{n},{n + 4}")  # SMT: two threads share each L1 and L2
        cache(n, 2, 2, "Unified", "2048K", f"{n},{n + 4}")
        cache(n, 3, 3, "Unified", "32768K", "0-3,4-7" if n < 2 else "8-11")  # two L3 instances
    facts = cpu.cpu_cache_facts(tmp_path)
    assert facts == {"l1d_cache_bytes_per_cpu": 24 * KiB, "l2_cache_bytes_per_cpu": 1 * MiB,
                     "l3_cache_bytes": 64 * MiB}
    assert cpu.cpu_cache_facts(tmp_path / "missing") == {}


def test_format_bytes():
    assert units.format_bytes(32 * KiB) == "32 KiB"
    assert units.format_bytes(1.5 * MiB) == "1.5 MiB"
    assert units.format_bytes(50 * MiB) == "50 MiB"
    assert units.format_bytes(512) == "512 B"
    assert units.format_bytes(1020 * KiB) == "1020 KiB"


def test_level_is_plain_data():
    level = Level(100.0, 1.0, 2.0, None, (0, 1))
    assert level.points == 2 and dataclasses.asdict(level)["bandwidth"] == 100.0
    assert level.to_dict()["capacity"] is None
