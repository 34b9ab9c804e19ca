"""Matrix products timed per dtype and batch on the step's own shapes and layouts, and the batch fix priced by
them."""

import dataclasses
import json

import pytest
import torch

from pygpuperf.core.results import Ceiling, MachineModel, Stats
from pygpuperf.compare import explained as compare
from pygpuperf.trials import dtype_timing, fixes, matmuls
from pygpuperf.explain.model import ExplainedStep, Explanation, Idle, KernelRecord, Throughput, Timeline, Waterfall
from pygpuperf.report.explained import explain_document
from pygpuperf.trials.record import Trials


def _gemm(op="aten::mm", shapes=([64, 32], [32, 16]), strides=([32, 1], [1, 32]), precision="fp32",
          phase="forward"):
    return KernelRecord(name="sm80_xmma_gemm_f32f32_tilesize64x64x8", start_us=0.0, duration_us=100.0, op=op,
                        kernel_class="vector_math", precision=precision, flops=2 * 64 * 32 * 16, bytes=1e4,
                        phase=phase, input_shapes=[list(s) for s in shapes], dtypes=["float32"] * len(shapes),
                        input_strides=[list(s) for s in strides])


def test_a_gemm_is_keyed_by_its_shapes_layout_and_tf32_and_other_kernels_are_not():
    assert matmuls._matmul_of(_gemm()) == ("aten::mm", ((64, 32), (32, 16)), (False, True), False)
    assert matmuls._matmul_of(_gemm(precision="tf32.acc32"))[3] is True
    bias = _gemm("aten::addmm", ([16], [64, 32], [32, 16]), ([1], [32, 1], [16, 1]))
    assert matmuls._matmul_of(bias) == ("aten::addmm", ((16,), (64, 32), (32, 16)), (False, False), False)
    assert matmuls._matmul_of(_gemm(shapes=([64, 32], []))) == ()  # an operand's shape not recorded
    assert matmuls._matmul_of(_gemm(op="aten::sum")) is None


def test_each_dtype_is_timed_at_each_batch_on_the_layout_the_step_ran():
    timing = matmuls.time_matmul("aten::mm", [[64, 32], [32, 16]], [False, True], False, "cpu", samples=3)
    assert set(timing.us) == {"fp32", "fp16", "bf16"}
    step = [_gemm()]
    doubled = matmuls.time_step_matmuls(step, True, "cpu", samples=3, dtypes=("fp32",), scale=2)
    assert [set(t.us) for t in doubled] == [{"fp32@x2"}] and doubled[0].shapes == [[64, 32], [32, 16]]
    # A weight gradient has the batch in K: its timed output stays the weight's shape.
    weights = [_gemm(shapes=([64, 16], [16, 32]), strides=([16, 1], [32, 1])),
               _gemm(shapes=([16, 64], [64, 32]), strides=([1, 16], [32, 1]), phase="backward")]
    grad = matmuls.time_step_matmuls(weights, True, "cpu", samples=3, dtypes=("fp32",), scale=2)
    assert {t.shapes[0][1] for t in grad} == {16, 64}  # keyed by the step's own shapes


def test_a_product_off_its_reference_is_left_out(monkeypatch):
    monkeypatch.setitem(matmuls.TOLERANCE, "bf16", 0.0)  # bf16 rounds: no product of it is exactly fp32's
    assert "bf16" not in matmuls.time_matmul("aten::bmm", [[2, 8, 4], [2, 4, 8]], [False, False], False, "cpu",
                                             samples=3).us


def test_operands_keep_the_layout_the_step_ran_them_in():
    seen = []
    real = torch.mm
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(torch, "mm", lambda a, b: seen.append((a.stride(), b.stride())) or real(a, b))
    try:
        matmuls.time_matmul("aten::mm", [[64, 32], [32, 16]], [False, True], False, "cpu", samples=3,
                            dtypes=("fp32",))
    finally:
        monkeypatch.undo()
    assert seen and all(a == (32, 1) and b == (1, 32) for a, b in seen)


def test_a_batch_fix_prices_a_timed_gemm_by_its_ratio_between_the_batches(tmp_path):
    model = MachineModel(device="cpu")
    model.compute["simd.fp32"] = Ceiling(1e-3, "TFLOP/s", "compute.simd.fp32", "native-cpu")
    line = Timeline(wall_us=150.0, busy_us=100.0, idle=Idle(host_bound_us=50.0))
    step = ExplainedStep(0, [_gemm()], line, Waterfall(0.0, {}, 150.0, 0.0, 1.0), [])
    e = Explanation("cpu", [step], step, {}, Throughput(Stats.of([150.0] * 3), 64), {"batch_size": "64"})
    by_model = fixes.predicted_at_batch(e, model, 2.0)
    timed = Trials(matmul_timings=(matmuls.MatmulTiming("aten::mm", [[64, 32], [32, 16]], [False, True], False,
                                                        {"fp32": 10.0, "fp32@x2": 17.0}),))
    assert by_model != pytest.approx(150.0 + 70.0)
    assert fixes.predicted_at_batch(e, model, 2.0, timed) == pytest.approx(150.0 + 70.0)  # timed: 1.7x
    (tmp_path / "explain.json").write_text(json.dumps(explain_document(e, None, timed), default=str))
    _, back = compare.load_explained(tmp_path)  # validated against the schema
    assert [t.to_dict() for t in back.matmul_timings] == [t.to_dict() for t in timed.matmul_timings]


def test_an_addmm_whose_bias_shape_was_not_recorded_is_not_timed_by_shape():
    assert matmuls._matmul_of(_gemm("aten::addmm", ([], [64, 32], [32, 16]), ([], [32, 1], [16, 1]))) == ()


def test_a_channels_last_fix_times_no_gemm_and_a_batch_fix_does(monkeypatch):
    asked = []

    def spy(records, training, device, samples=20, dtypes=(), scale=1.0, **layout):
        asked.append((scale, layout.get("layout", "")))
        return []

    monkeypatch.setattr(fixes, "_LIBRARY_FAMILIES", tuple(
        dataclasses.replace(f, time_step=spy, step_dtype=lambda records: "fp32") for f in fixes._LIBRARY_FAMILIES))
    line = Timeline(wall_us=100.0, busy_us=100.0, idle=Idle())
    step = ExplainedStep(0, [_gemm()], line, Waterfall(0.0, {}, 100.0, 0.0, 1.0), [])
    e = Explanation("cpu", [step], step, {}, None, {})
    fixes._time_library_ops(e, Trials(), torch.device("cpu"), layout="nhwc")
    assert sorted(asked) == [(1.0, ""), (1.0, ""), (1.0, ""), (1.0, "nhwc"), (1.0, "nhwc"), (1.0, "nhwc")]
    asked.clear()
    released = []  # how many timings had run at each release of the allocator's cached memory
    monkeypatch.setattr(fixes, "release_device_memory", lambda device: released.append(len(asked)))
    fixes._time_library_ops(e, Trials(), torch.device("cpu"), scale=2.0)
    assert len(asked) == 2 * len(fixes._LIBRARY_FAMILIES)  # the GEMMs too, at both batches
    assert released == list(range(len(asked)))  # each timing's operands in fresh memory, not the step's pools


def test_on_an_accelerator_each_variant_is_timed_in_turn_and_its_fastest_placement_kept(monkeypatch):
    asked = []
    slow_first = {1.0: [12.0, 10.0, 11.0], 2.0: [20.0, 23.0, 21.0]}  # µs of each round: slow placements

    def spy(records, training, device, samples=20, dtypes=(), scale=1.0, **layout):
        asked.append(scale)
        us = slow_first[scale][asked.count(scale) - 1]
        return [matmuls.MatmulTiming("aten::mm", [[64, 32], [32, 16]], [False, True], False,
                                     {dtype_timing.variant("fp32", scale): us})]

    monkeypatch.setattr(fixes, "_LIBRARY_FAMILIES", tuple(
        dataclasses.replace(f, time_step=spy, step_dtype=lambda records: "fp32") for f in fixes._LIBRARY_FAMILIES
        if f.field == "matmul_timings"))
    monkeypatch.setattr(fixes, "release_device_memory", lambda device: None)
    line = Timeline(wall_us=100.0, busy_us=100.0, idle=Idle())
    step = ExplainedStep(0, [_gemm()], line, Waterfall(0.0, {}, 100.0, 0.0, 1.0), [])
    e = Explanation("cuda:0", [step], step, {}, None, {})
    timed = fixes._time_library_ops(e, Trials(), torch.device("cuda"), scale=2.0)
    assert asked == [1.0, 2.0] * fixes.LIBRARY_ROUNDS  # in turn, so that a drift of the card falls on both
    assert timed.matmul_timings[0].us == {"fp32": 10.0, "fp32@x2": 20.0}  # each variant's faster round
    assert timed.matmul_timings[0].ratio("fp32@x2", "fp32") == 2.0  # not 1.67 (the slow base) nor 2.3
    asked.clear()
    assert fixes._time_library_ops(e, timed, torch.device("cuda"), scale=2.0) == timed
    assert asked == []  # timed already
