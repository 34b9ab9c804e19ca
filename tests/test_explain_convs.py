"""The convolution timing an AMP dtype fix is priced by: the step's shapes read from its profile, each dtype
timed and checked against fp32, and each convolution kernel of the prediction priced by its shape's ratio."""

import dataclasses
import pytest
import torch

from pygpuperf.core.results import Ceiling, MachineModel
from pygpuperf.compare import explained as compare
from pygpuperf.trials import convs, dtype_timing, fixes
from pygpuperf.explain.model import ExplainedStep, Explanation, Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.report.explained import explain_document
from pygpuperf.trials.record import Trials

# A 3x3 convolution of 64 channels on 8x56x56 in NHWC, as the profiler records it.
X, W = [8, 64, 56, 56], [64, 64, 3, 3]
X_STRIDES, W_STRIDES = [200704, 1, 3584, 64], [576, 1, 192, 64]
FORWARD = ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"]  # padding, stride, dilation, groups
BACKWARD = ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[True, True, False]"]


def conv(us, phase="forward", x=X, mask="[True, True, False]", op=None, concrete=None, stride="[1, 1]"):
    if phase == "forward":
        shapes, strides = [x, W, [], [], [], [], [], [], []], [X_STRIDES, W_STRIDES] + [[]] * 7
        concrete = concrete or FORWARD[:3] + [stride] + FORWARD[4:]
    else:
        shapes, strides = [x, x, W] + [[]] * 8, [X_STRIDES, X_STRIDES, W_STRIDES] + [[]] * 8
        concrete = concrete or BACKWARD[:4] + [stride] + BACKWARD[5:10] + [mask]
    return KernelRecord(name="conv", start_us=0.0, duration_us=us, phase=phase, kernel_class="tensor_gemm",
                        op=op or ("aten::cudnn_convolution" if phase == "forward" else "aten::convolution_backward"),
                        precision="fp16.acc32", flops=1e9, bytes=1e6, input_shapes=shapes, input_strides=strides,
                        concrete_inputs=concrete)


def test_each_convolution_is_read_from_its_forward_and_backward_kernels():
    strided = conv(10.0, stride="[2, 2]")
    stem_backward = conv(30.0, "backward", mask="[False, True, False]")
    records = [conv(20.0), strided, conv(50.0, "backward"), stem_backward,
               KernelRecord(name="mm", start_us=0.0, duration_us=99.0, op="aten::mm")]
    # The forward and backward of one convolution are one shape; another stride is another.
    assert convs.conv_key(records[0]) == convs.conv_key(records[2]) != convs.conv_key(strided)
    assert convs.conv_key(records[0]) == (tuple(X), tuple(W), (1, 1), (1, 1), (1, 1), 1, True)
    assert convs.conv_key(records[4]) is None
    shapes = convs.conv_shapes(records)
    assert [s.stride for s in shapes] == [[1, 1], [2, 2]]  # 100 us against 10: most time first
    assert shapes[0].channels_last and shapes[0].input_grad  # one of its backwards computes the input's gradient
    first_layer = convs.conv_shapes([conv(20.0), stem_backward])[0]
    assert not first_layer.input_grad
    # A transposed convolution is not timed as one; a convolution missing its arguments is, but by no shape.
    transposed = conv(5.0, "backward", concrete=BACKWARD[:7] + ["True"] + BACKWARD[8:])
    assert convs.conv_key(transposed) is None
    assert convs.conv_key(conv(5.0, concrete=["", ""])) == ()


def test_each_dtype_is_timed_and_one_off_the_fp32_reference_is_left_out(monkeypatch):
    shape = convs.ConvShape([2, 4, 6, 6], [8, 4, 3, 3], [1, 1], [1, 1], [1, 1], 1, True, True)
    timing = convs.time_conv(shape, True, "cpu", samples=3)
    assert set(timing.us) == {"fp32", "fp16", "bf16", "fp32.forward", "fp16.forward", "bf16.forward"}
    assert all(us > 0 for us in timing.us.values())
    monkeypatch.setitem(convs.TOLERANCE, "bf16", 0.0)  # bf16 rounds: no result of it is exactly fp32's
    checked = convs.time_conv(shape, True, "cpu", samples=3)
    assert "bf16" not in checked.us and "fp32" in checked.us and checked.ratio("bf16", "fp16") is None
    # A first layer's backward computes no input gradient (its input needs none): timed so, and still checked.
    first = convs.time_conv(convs.ConvShape([2, 3, 8, 8], [8, 3, 3, 3], [2, 2], [1, 1], [1, 1], 1, False, False),
                            True, "cpu", samples=3)
    assert not first.shape.input_grad and "fp32" in first.us


def _step(records, amp):
    t = 0.0
    for r in records:
        r.start_us, t = t, t + r.duration_us
    line = Timeline(wall_us=t, busy_us=t, idle=Idle())
    step = ExplainedStep(0, records, line, Waterfall(0.0, {}, t, 0.0, 1.0), [])
    return Explanation("cuda:0", [step], step, {}, None, {"amp": amp})


def _timing(us, x=X, stride=(1, 1)):
    return convs.ConvTiming(convs.ConvShape(list(x), list(W), list(stride), [1, 1], [1, 1], 1, True), True, us)


def test_an_amp_dtype_fix_prices_each_convolution_by_its_own_shapes_time_in_the_new_dtype(tmp_path):
    model = MachineModel(device="cuda:0")
    model.compute["tensor.fp16.acc32"] = Ceiling(800.0, "TFLOP/s", "compute.tensor.fp16.acc32", "native-cuda")
    model.compute["tensor.bf16.acc32"] = Ceiling(800.0, "TFLOP/s", "compute.tensor.bf16.acc32", "native-cuda")
    model.memory["hbm"] = Ceiling(4700.0, "GB/s", "memory.hbm.copy", "native-cuda")
    other = [8, 64, 28, 28]
    e = _step([conv(20.0), conv(50.0, "backward"), conv(30.0, x=other, stride="[2, 2]")], "fp16")
    without = fixes.predicted_step(e, model, "amp", {"amp": "bf16"}, None)
    # The one rate for both dtypes: the kernel model alone sees no change.
    assert without == pytest.approx(100.0, rel=1e-6)
    one = Trials(conv_timings=(_timing({"fp16": 10.0, "bf16": 12.0}),))  # the second shape was not timed: the
    # timed ratio
    assert fixes.predicted_step(e, model, "amp", {"amp": "bf16"}, None, timings=one) == pytest.approx(100.0 * 1.2)
    both = Trials(conv_timings=(*one.conv_timings, _timing({"fp16": 4.0, "bf16": 3.0}, other, (2, 2))))
    assert fixes.predicted_step(e, model, "amp", {"amp": "bf16"}, None, timings=both) == pytest.approx(
        70.0 * 1.2 + 30.0 * 0.75)
    # --try-fixes says what the prediction took from the timings (the build and timing are stand-ins here).
    from pygpuperf.core.results import Stats
    from pygpuperf.explain.model import Throughput
    from pygpuperf.workloads import BuiltWorkload

    target = fixes.Target(lambda b, k: BuiltWorkload(lambda: None, b or 4, {}), lambda k: True, 4)
    tried = fixes.try_fixes(e, model, target, "cuda", only=["amp"], timings=both,
                            measure=lambda step, device, samples, **_: Throughput(Stats.of([10.0 if samples == 1 else 110.0] * 3),
                                                                             samples))  # batch 1: 10 us
    trial = tried.fixes[0]
    assert trial.status == "measured" and trial.predicted_step_us == pytest.approx(70.0 * 1.2 + 30.0 * 0.75)
    assert "convolutions: 2 shapes timed in both dtypes on this device; the step's convolutions 0.10 → 0.11 ms " \
           "in bf16" in trial.notes
    # Written to explain.json and read back, the timings price the fix alike.
    (tmp_path / "explain.json").write_text(__import__("json").dumps(explain_document(e, None, tried)))
    back_e, back = compare.load_explained(tmp_path)
    assert [t.to_dict() for t in back.conv_timings] == [t.to_dict() for t in both.conv_timings]
    assert fixes.predicted_step(back_e, model, "amp", {"amp": "bf16"}, None, timings=back) == pytest.approx(
        70.0 * 1.2 + 30.0 * 0.75)


def test_an_fp32_steps_amp_fix_takes_the_timed_convolutions_ratio_instead_of_the_kernel_models_saving():
    from pygpuperf.diagnose import findings

    model = MachineModel(device="cuda:0")
    for key, value in {"tensor.tf32.acc32": 400.0, "tensor.bf16.acc32": 800.0, "cuda.fp32": 60.0}.items():
        model.compute[key] = Ceiling(value, "TFLOP/s", f"compute.{key}", "native-cuda")
    model.memory["hbm"] = Ceiling(4700.0, "GB/s", "memory.hbm.copy", "native-cuda")
    records = [conv(100.0), KernelRecord(name="mm", start_us=0.0, duration_us=100.0, op="aten::mm",
                                         kernel_class="tensor_gemm", precision="tf32.acc32", flops=2e10, bytes=1e6,
                                         phase="forward")]
    records[0].precision, records[0].flops = "tf32.acc32", 2e10
    e = _step(records, "none")
    found = findings.diagnose_step(e, {"amp": "none"}, model).causes
    by_model = fixes.predicted_step(e, model, "amp", {"amp": "bf16"}, None, found=found)
    assert by_model < 200.0 - 50.0  # both kernels at twice the rate, by the kernel model
    bf16_saves = Trials(conv_timings=(_timing({"fp32": 10.0, "fp16": 6.0, "bf16": 9.0}),))  # a tenth on this shape
    timed = fixes.predicted_step(e, model, "amp", {"amp": "bf16"}, None, found=found, timings=bf16_saves)
    saved_on_conv = 200.0 - by_model - (200.0 - by_model) / 2  # the model's saving splits evenly over the two
    assert timed == pytest.approx(by_model + saved_on_conv - 10.0, rel=1e-6)


def test_the_convolutions_are_timed_with_the_steps_own_library_settings_and_these_are_put_back(monkeypatch):
    before = torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32
    seen = []
    real = convs.time_conv

    def spy(shape, training, device, samples=20, dtypes=(), scale=1.0, layout=""):
        seen.append((torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32))
        return real(convs.ConvShape([1, 64, 4, 4], W, [1, 1], [1, 1], [1, 1], 1, False, True), training, device, 2,
                    dtypes, scale, layout)

    monkeypatch.setattr(convs, "time_conv", spy)
    forward = conv(20.0, concrete=FORWARD[:6] + ["True", "False", "False"])  # algorithm search on, TF32 off
    timed = convs.time_step_convs([forward], False, "cpu")
    assert seen == [(True, False)] != [before] and len(timed) == 1 and timed[0].us
    assert (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32) == before


def test_a_shape_that_cannot_run_leaves_the_other_shapes_timed(monkeypatch):
    real = torch.nn.functional.conv2d
    big = [2, 8, 6, 6]

    def short_of_memory(x, w, **kwargs):
        if list(x.shape) == big:
            raise torch.OutOfMemoryError("out of memory")
        return real(x, w, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "conv2d", short_of_memory)
    shapes = [convs.ConvShape(big, [8, 8, 3, 3], [1, 1], [1, 1], [1, 1], 1, False),
              convs.ConvShape([2, 4, 6, 6], [8, 4, 3, 3], [1, 1], [1, 1], [1, 1], 1, False)]
    monkeypatch.setattr(convs, "conv_shapes", lambda records: shapes)
    timed = convs.time_step_convs([], True, "cpu", samples=2)
    assert [t.us for t in timed][0] == {} and {"fp32", "fp16", "bf16"} < set(timed[1].us)


def test_a_shape_timed_at_twice_its_batch_keeps_its_key_and_merges_into_its_timing():
    shape = convs.ConvShape([2, 4, 6, 6], [8, 4, 3, 3], [1, 1], [1, 1], [1, 1], 1, True, True)
    now = convs.time_conv(shape, True, "cpu", samples=3, dtypes=["fp32"])
    doubled = convs.time_conv(shape, True, "cpu", samples=3, dtypes=["fp32"], scale=2.0)
    assert set(now.us) == {"fp32", "fp32.forward"} and set(doubled.us) == {"fp32@x2", "fp32@x2.forward"}
    assert doubled.key() == now.key()
    merged = dtype_timing.merged([now], [doubled])
    assert len(merged) == 1 and merged[0].ratio("fp32@x2", "fp32") == doubled.us["fp32@x2"] / now.us["fp32"]


def test_a_batch_fix_prices_each_timed_convolution_by_its_shapes_time_at_the_new_batch(monkeypatch):
    model = MachineModel(device="cuda:0")
    model.compute["tensor.fp16.acc32"] = Ceiling(800.0, "TFLOP/s", "compute.tensor.fp16.acc32", "native-cuda")
    model.memory["hbm"] = Ceiling(4700.0, "GB/s", "memory.hbm.copy", "native-cuda")
    records = [conv(20.0), conv(50.0, "backward"), conv(30.0, x=[8, 64, 28, 28], stride="[2, 2]")]
    for r in records:
        r.dtypes = ["c10::Half", "c10::Half"]
    e = _step(records, "fp16")
    by_model = fixes.predicted_at_batch(e, model, 2.0)
    assert by_model > 190.0  # the kernel model doubles work this far above its bound
    at_both = Trials(conv_timings=(_timing({"fp16": 10.0, "fp16@x2": 15.0}),))  # the other shape takes the timed
    # ones' ratio
    assert fixes.predicted_at_batch(e, model, 2.0, at_both) == pytest.approx(150.0)
    in_dtypes = Trials(conv_timings=(_timing({"fp16": 10.0, "bf16": 12.0}),))  # the kernel model prices it
    assert fixes.predicted_at_batch(e, model, 2.0, in_dtypes) == pytest.approx(by_model)
    # --try-fixes times the step's shapes at both batches before the batch fix (stand-ins for the timing here).
    from pygpuperf.core.results import Stats
    from pygpuperf.explain.model import Throughput
    from pygpuperf.workloads import BuiltWorkload

    asked, behind, held = [], [], [0]

    def timed(records, training, device, samples=20, dtypes=(), scale=1.0, layout=""):
        asked.append((tuple(dtypes), scale))
        behind.append(held[-1])
        return [_timing({dtype_timing.variant(d, scale): 10.0 * (1.5 if scale == 2 else 1.0) for d in dtypes})]

    monkeypatch.setattr(fixes, "_LIBRARY_FAMILIES", tuple(
        dataclasses.replace(f, time_step=timed) if f.field == "conv_timings" else f for f in fixes._LIBRARY_FAMILIES))
    real_spacer = fixes._spacer

    def spacer(device, size):  # the memory each round holds aside while it times
        held.append(size)
        return real_spacer(device, size)

    monkeypatch.setattr(fixes, "_spacer", spacer)
    e = dataclasses.replace(e, throughput=Throughput(Stats.of([100.0] * 3), 8))
    target = fixes.Target(lambda b, k: BuiltWorkload(lambda: None, b or 8, {}), lambda k: True, 8)
    tried = fixes.try_fixes(e, model, target, "cuda", only=["batch_size"],
                            measure=lambda step, device, samples, **_: Throughput(Stats.of([10.0 if samples == 1 else 160.0] * 3),
                                                                             samples))
    trial = tried.fixes[0]
    assert asked == [(("fp16",), 1.0), (("fp16",), 2.0)] * fixes.LIBRARY_ROUNDS
    # Released memory comes back in the same places: each round after the first times behind more held aside.
    assert behind[:2] == [0, 0] and len(set(behind)) == fixes.LIBRARY_ROUNDS and behind == sorted(behind)
    assert trial.predicted_step_us == pytest.approx(150.0)
    assert [t.us for t in tried.conv_timings] == [{"fp16": 10.0, "fp16@x2": 15.0}]  # kept with the trials
    assert "convolutions: 1 shapes timed at batch 8 and 16 on this device; the step's convolutions 0.10 → 0.15 ms " \
           "at batch 16" in trial.notes


def test_a_channels_last_fix_prices_the_timed_convolutions_by_their_nhwc_time_and_drops_the_other_transposes():
    from pygpuperf.diagnose import findings

    model = MachineModel(device="cuda:0")
    model.compute["tensor.tf32.acc32"] = Ceiling(400.0, "TFLOP/s", "compute.tensor.tf32.acc32", "native-cuda")
    model.memory["hbm"] = Ceiling(4700.0, "GB/s", "memory.hbm.copy", "native-cuda")
    forward = conv(100.0)
    forward.precision, forward.dtypes = "tf32.acc32", ["float32", "float32"]
    transpose = KernelRecord(name="void cudnn::engines_precompiled::nchwToNhwcKernel", start_us=0.0,
                             duration_us=20.0, op="aten::copy_", kernel_class="layout", bytes=1e6,
                             phase="forward")
    e = _step([forward, transpose], "none")
    d_e = findings.diagnose_step(e, {"memory_format": "nchw"}, model)
    assert any(c.id == "layout.nchw_nhwc" for c in d_e.causes.items)
    cl = {"memory_format": "channels_last"}
    untimed = fixes.predicted_step(e, model, "channels_last", cl, None, found=d_e.causes)
    faster = Trials(conv_timings=(_timing({"fp32": 10.0, "fp32@nhwc": 6.0}),))
    timed = fixes.predicted_step(e, model, "channels_last", cl, None, found=d_e.causes, timings=faster)
    assert timed == pytest.approx(120.0 - 40.0 - 20.0) and timed != pytest.approx(untimed)
    slower = Trials(conv_timings=(_timing({"fp32": 10.0, "fp32@nhwc": 13.0}),))  # NHWC can be the slower layout
    assert fixes.predicted_step(e, model, "channels_last", cl, None, found=d_e.causes, timings=slower) == \
        pytest.approx(120.0 + 30.0 - 20.0)


def test_an_nchw_shape_timed_in_nhwc_keeps_its_own_key(monkeypatch):
    seen = []
    real = torch.nn.functional.conv2d
    monkeypatch.setattr(torch.nn.functional, "conv2d", lambda x, w, **kw: seen.append(
        x.is_contiguous(memory_format=torch.channels_last)) or real(x, w, **kw))
    shape = convs.ConvShape([2, 4, 6, 6], [8, 4, 3, 3], [1, 1], [1, 1], [1, 1], 1, False, True)
    timing = convs.time_conv(shape, False, "cpu", samples=3, dtypes=("fp32",), layout=dtype_timing.NHWC)
    assert set(timing.us) == {"fp32@nhwc"} and timing.key() == convs.time_conv(shape, False, "cpu", samples=3,
                                                                                dtypes=("fp32",)).key()
    assert seen and seen[0]  # the NHWC variant ran on channels_last tensors


def test_a_backward_timed_apart_adds_the_forwards_time_to_make_the_whole(monkeypatch):
    # A forward of 2 ms and a backward of 3 ms, each run alone: the whole is their sum where the backward was
    # timed apart, and the backward alone's time where the run timed was the whole op.
    def run_in(dtype, forward_only):
        def run():
            return (torch.ones(2),)
        run.seconds = 0.002 if forward_only else 0.003
        return run

    monkeypatch.setattr(dtype_timing, "sample_seconds", lambda run, device, warmup, n, **_: [run.seconds] * n)
    reference = [torch.ones(2)]
    apart = dtype_timing.time_in_dtypes(run_in, reference, {"fp32": 1e-4}, torch.device("cpu"), 5, ("fp32",),
                                        split=True, backward_apart=True)
    whole = dtype_timing.time_in_dtypes(run_in, reference, {"fp32": 1e-4}, torch.device("cpu"), 5, ("fp32",),
                                        split=True)
    assert apart["fp32"] == pytest.approx(5000.0) and whole["fp32"] == pytest.approx(3000.0)
    timing = convs.ConvTiming(convs.ConvShape(X, W, [1, 1], [1, 1], [1, 1], 1, True), True, apart)
    assert timing.phase_us("fp32", "backward") == pytest.approx(3000.0)


def test_two_ways_of_timing_a_training_op_give_each_phase_its_faster_time():
    # Run in turn with the forward, the backward at twice the batch pays a re-initialised workspace (+1700 us);
    # run alone on a kept graph, the backward at the step's batch is 10 % slow. Each phase takes its faster way.
    in_turn = {"fp32": 1750.0, "fp32.forward": 390.0, "fp32@x2": 5140.0, "fp32@x2.forward": 800.0}
    apart = {"fp32": 1890.0, "fp32.forward": 392.0, "fp32@x2": 3500.0, "fp32@x2.forward": 802.0, "bf16": 900.0}
    both = dtype_timing.fastest_phases(in_turn, apart)
    assert both["fp32"] == pytest.approx(390.0 + 1360.0) and both["fp32.forward"] == 390.0
    assert both["fp32@x2"] == pytest.approx(800.0 + 2698.0) and both["fp32@x2.forward"] == 800.0
    assert both["bf16"] == 900.0  # timed one way only: kept as it is
    timing = convs.ConvTiming(convs.ConvShape(X, W, [1, 1], [1, 1], [1, 1], 1, True), True, both)
    assert timing.ratio("fp32@x2", "fp32", "backward") == pytest.approx(2698.0 / 1360.0)
