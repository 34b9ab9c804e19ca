"""Sums over some dimensions (bias gradients) timed per dtype and batch, and the batch fix priced by them."""

import json

import pytest

from pygpuperf.core.results import Ceiling, MachineModel, Stats
from pygpuperf.compare import explained as compare
from pygpuperf.trials import fixes, sums
from pygpuperf.explain.model import ExplainedStep, Explanation, Idle, KernelRecord, Throughput, Timeline, Waterfall
from pygpuperf.report.explained import explain_document
from pygpuperf.trials.record import Trials


def _sum(dims="[0]", shape=(16, 8), op="aten::sum"):
    return KernelRecord(name="reduce_kernel", start_us=0.0, duration_us=100.0, op=op, kernel_class="memory_bound",
                        precision="fp32", flops=0.0, bytes=1e6, phase="backward", input_shapes=[list(shape), [], [], []],
                        dtypes=["float32", "ScalarList", "Scalar", ""], input_strides=[[shape[1], 1], [], [], []],
                        concrete_inputs=["", dims, "True", ""])


def test_a_sum_kernel_is_keyed_by_its_shape_and_dims_and_other_kernels_are_not():
    assert sums._sum_of(_sum()) == ((16, 8), (0,), True, False)
    assert sums._sum_of(_sum("[-1]")) == ((16, 8), (1,), True, False)  # one spelling for a dimension
    assert sums._sum_of(_sum("[]")) == ()  # every dimension: not a shape to time
    assert sums._sum_of(_sum(op="aten::mm")) is None


def test_each_dtype_is_timed_at_each_batch_and_one_off_the_fp32_reference_is_left_out(monkeypatch):
    assert set(sums.time_sum([64, 32], [0], True, False, "cpu", samples=3).us) == {"fp32", "fp16", "bf16"}
    doubled = sums.time_sum([64, 32], [0], True, False, "cpu", samples=3, dtypes=("fp32",), scale=2)
    assert set(doubled.us) == {"fp32@x2"} and doubled.shape == [64, 32]  # keyed by the step's own shape
    # 70,000 values summed in fp16 past its largest finite value (65,504) if they were all positive
    assert "fp16" in sums.time_sum([70000, 4], [0], False, False, "cpu", samples=3, dtypes=("fp16",)).us
    monkeypatch.setitem(sums.TOLERANCE, "bf16", 0.0)  # bf16 rounds: no result of it is exactly fp32's
    assert "bf16" not in sums.time_sum([64, 32], [0], True, False, "cpu", samples=3).us


def _step_with_a_sum():
    model = MachineModel(device="cpu")
    model.memory["dram"] = Ceiling(20.0, "GB/s", "memory.dram.copy", "native-cpu")  # 1 MB: a 50 us bound
    line = Timeline(wall_us=150.0, busy_us=100.0, idle=Idle(host_bound_us=50.0))
    step = ExplainedStep(0, [_sum()], line, Waterfall(0.0, {}, 150.0, 0.0, 1.0), [])
    e = Explanation("cpu", [step], step, {}, Throughput(Stats.of([150.0] * 3), 16), {"batch_size": "16"})
    return e, model


def test_a_batch_fix_prices_a_timed_sum_by_its_ratio_between_the_batches(tmp_path):
    e, model = _step_with_a_sum()
    assert fixes.predicted_at_batch(e, model, 2.0) == pytest.approx(150.0 + 100.0)  # by the model: it doubles
    timed = Trials(sum_timings=(sums.SumTiming([16, 8], [0], True, False, {"fp32": 10.0, "fp32@x2": 15.0}),))
    assert fixes.predicted_at_batch(e, model, 2.0, timed) == pytest.approx(150.0 + 50.0)  # timed: 1.5x
    (tmp_path / "explain.json").write_text(json.dumps(explain_document(e, None, timed), default=str))
    _, back = compare.load_explained(tmp_path)  # validated against the schema
    assert [t.to_dict() for t in back.sum_timings] == [t.to_dict() for t in timed.sum_timings]
