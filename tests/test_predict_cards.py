"""Predicting another card: achievable ceilings, the time kernels spend off the roof, the host's floor and the
interval, on synthetic steps with known answers."""

from __future__ import annotations

import json
import math

import jsonschema
import pytest

from pygpuperf.analyze import machine_model
from pygpuperf.core.results import Ceiling, MachineModel
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.explain import attribution
from pygpuperf.explain.model import ExplainedStep, Explanation, Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.facts import datasheets
from pygpuperf.predict import interval as intervals
from pygpuperf.predict import predict, prediction_documents


def _card(units: float = 100, clock: float = 1500.0, hbm: float = 1000.0, tensor: float = 100.0,
          library: float | None = None, launch_ns: float | None = None, name: str = "m") -> MachineModel:
    compute = {"tensor.fp16.acc32": Ceiling(tensor, "TFLOP/s", "t", "t"), "cuda.fp32": Ceiling(20.0, "TFLOP/s", "t", "t")}
    if library is not None:
        compute["library.fp16"] = Ceiling(library, "TFLOP/s", "t", "t")
    model = MachineModel(device=name, compute=compute, memory={"hbm": Ceiling(hbm, "GB/s", "t", "t")},
                         facts={"compute_units": units, "clock_mhz": clock})
    if launch_ns:
        model.latency["kernel.launch"] = Ceiling(launch_ns, "ns", "t", "t")
    return model


def _step(kernels: list[KernelRecord], wall_us: float | None = None, settings: dict | None = None) -> Explanation:
    attribution.assign_bounds(kernels, _card())
    busy = sum(k.duration_us for k in kernels)
    line = Timeline(wall_us=wall_us or busy, busy_us=busy, idle=Idle(launch_gap_us=(wall_us or busy) - busy))
    step = ExplainedStep(0, kernels, line, Waterfall(0, {}, line.wall_us, 0, 1), [])
    return Explanation("synthetic", [step], step, settings=settings or {})


def _memory_kernel(start: float = 0.0, bound_us: float = 1000.0, measured_us: float = 3000.0) -> KernelRecord:
    return KernelRecord("add", start_us=start, duration_us=measured_us, kernel_class=KernelClass.MEMORY_BOUND,
                        precision="fp16", bytes=1000e9 * bound_us * 1e-6)


# --------------------------------------------------------------------------- off the roof


def test_time_off_the_roof_moves_with_the_multiprocessors_not_the_bandwidth():
    # 1 ms at the roof and 2 ms off it; the target has twice the bandwidth and half the multiprocessors.
    profile = _step([_memory_kernel()])
    target = _card(units=50, hbm=2000.0)
    sm = predict(profile, _card(), target, residual="sm")
    assert sm.step_us == pytest.approx(500.0 + 2 * 2000.0)
    proportional = predict(profile, _card(), target, residual="proportional")
    assert proportional.step_us == pytest.approx(1500.0)


# --------------------------------------------------------------------------- achievable ceilings


def test_achievable_ceilings_price_gemms_at_the_library_rate_on_both_cards():
    gemm = KernelRecord("gemm", start_us=0.0, duration_us=2000.0, kernel_class=KernelClass.TENSOR_GEMM,
                        precision="fp16.acc32", flops=100e12 * 1e-3, bytes=1e6)
    profile = _step([gemm])
    # The source's library reaches 80 % of its instruction rate, the target's 40 %: the target's peak is the
    # same, so peak ceilings predict no change and achievable ones twice the GEMM's time.
    source, target = _card(library=80.0), _card(library=40.0)
    assert predict(profile, source, target, ceilings="peak").step_us == pytest.approx(2000.0)
    assert predict(profile, source, target, ceilings="achievable", residual="proportional").step_us == \
        pytest.approx(4000.0)


def test_a_view_keeps_only_the_memory_levels_both_cards_have():
    model = _card()
    model.memory["l2"] = Ceiling(5000.0, "GB/s", "t", "t")
    view = machine_model.achievable_view(model, levels={"hbm"})
    assert set(view.memory) == {"hbm"} and "l2" in model.memory  # the model itself is left as it was


def test_a_datasheet_card_takes_its_published_figure_and_else_its_familys_fraction():
    key, name = next((k, n) for k, figures in datasheets.achievable_document()["cards"].items()
                     for n in figures if n == "memory.hbm" and k in machine_model.card_keys())
    published = datasheets.achievable_figures(key)[name]["value"]
    sheet = machine_model.card(key)["values"][name]["value"]
    assert machine_model.achievable_model(key).memory["hbm"].value == pytest.approx(published)
    held_out = machine_model.achievable_model(key, held_out=True).memory["hbm"].value
    fraction, learned = machine_model.achievable_fraction(key, name)
    assert held_out == pytest.approx(sheet * fraction) and 0.5 < fraction < 1.0
    assert "memory.hbm" in learned
    # Leaving the card out is leaving it out: its own figure does not move the fraction it is priced by.
    assert machine_model.achievable_fraction(key, name) == machine_model.achievable_fraction(key, name, exclude=[key])


def test_no_published_figure_is_above_its_cards_datasheet_peak():
    for key, figures in datasheets.achievable_document()["cards"].items():
        sheet = machine_model.card(key)["values"]
        for name, entry in figures.items():
            if name in sheet:
                assert entry["value"] <= sheet[name]["value"], (key, name)


# --------------------------------------------------------------------------- the host


def test_a_step_of_many_short_kernels_is_held_to_the_time_its_host_takes_to_issue_them():
    kernels = [_memory_kernel(start=10.0 * n, bound_us=1.0, measured_us=4.0) for n in range(200)]
    profile = _step(kernels, wall_us=2000.0)  # 10 µs per kernel: the launches set the pace
    fast = _card(hbm=4000.0, units=400, launch_ns=8000.0)
    p = predict(profile, _card(launch_ns=8000.0), fast, residual="sm")
    assert p.host_us == pytest.approx(200 * 8.0)
    assert p.step_us == pytest.approx(1600.0) and p.host_bound
    assert any("host-bound" in n for n in p.notes)
    # The same step replayed as a CUDA graph launches once: no floor.
    graphed = _step(kernels, wall_us=2000.0, settings={"cuda_graphs": "on"})
    assert predict(graphed, _card(launch_ns=8000.0), fast, residual="sm").host_us is None


# --------------------------------------------------------------------------- the interval


def test_the_interval_widens_for_another_family_and_for_a_host_bound_step():
    spread = intervals.Spread({"memory_bound": 0.03}, other=0.2, host=0.3, default_class=0.05)
    parts = {KernelClass.MEMORY_BOUND: 900.0, "idle_launch_gaps": 100.0}
    same, no_doubt = intervals.sigma(parts, 1000.0, None, True, spread)
    assert same == pytest.approx(0.9 * 0.03 + 0.1 * 0.05) and no_doubt == []
    other, doubts = intervals.sigma(parts, 1000.0, None, False, spread)
    assert other == pytest.approx(math.hypot(same, 0.2)) and len(doubts) == 1
    hosted, doubts = intervals.sigma(parts, 1000.0, 800.0, True, spread)
    assert hosted == pytest.approx(math.hypot(same, 0.3 * 0.8)) and "host" in doubts[0]
    low, high = intervals.bounds(100.0, 0.1)
    assert low < 100.0 < high and high / 100.0 == pytest.approx(100.0 / low)


def test_a_prediction_carries_its_interval_into_prediction_json():
    profile = _step([_memory_kernel()])
    p = predict(profile, _card(), _card(hbm=2000.0, name="other"), residual="sm")
    low, high = p.interval_per_s
    assert low < p.throughput < high
    docs = prediction_documents([p], {})
    schema = json.loads(open(machine_model.__file__.replace("analyze/machine_model.py",
                                                            "data/prediction.schema.json")).read())
    jsonschema.validate(docs, schema)
    assert docs[0]["interval_80_per_s"] == [low, high] and docs[0]["host_bound"] is False


def test_the_shipped_spread_is_read_and_an_unknown_version_refused():
    assert intervals.shipped().other > 0
    with pytest.raises(ValueError, match="prediction-spread/1"):
        intervals.Spread.from_dict({"schema": "pygpuperf/prediction-spread/0"})


# --------------------------------------------------------------------------- the harness, from the reference data


def test_the_prediction_harness_holds_the_cross_card_goals_on_the_reference_data():
    """benchmarks/validate_predictions.py on the recorded H100/H200 pairs and published figures, in predict's default
    mode: device-bound pairs within 3 % on average and none beyond 8 % outside its interval, and the 80 % intervals
    covering 70-90 % of all rows."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import validate_predictions as harness
    from pygpuperf.predict import DEFAULT_CEILINGS, DEFAULT_RESIDUAL

    rows = harness.run(DEFAULT_CEILINGS, DEFAULT_RESIDUAL)
    s = harness.summary(rows)
    assert s["pairs"]["device_bound"] >= 20 and s["pairs"]["mae_device_bound"] <= 0.03
    assert all(r.covered for r in rows if r.set == "pairs" and r.device_bound and abs(r.error) > 0.08)
    assert 0.70 <= s["coverage"]["covered"] <= 0.90


def test_a_given_target_host_moves_a_host_bound_step_and_narrows_its_interval():
    kernels = [_memory_kernel(start=10.0 * n, bound_us=1.0, measured_us=4.0) for n in range(200)]
    profile = _step(kernels, wall_us=2000.0)
    source, target = _card(launch_ns=8000.0), _card(hbm=4000.0, units=400, launch_ns=8000.0)
    unknown = predict(profile, source, target, residual="sm")
    slower = predict(profile, source, target, residual="sm", target_host_scale=1.5)
    assert slower.step_us == pytest.approx(1.5 * unknown.step_us)
    assert slower.sigma_log < unknown.sigma_log and not any("host" in d for d in slower.doubts)
