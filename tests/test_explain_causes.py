"""Named causes inside the waterfall's under-use parts, their advice by what the model contains, and the
kernel model's prediction of what a fix buys."""

import dataclasses

import pytest

from pygpuperf import diagnose
from pygpuperf.analyze.kernel_time import Access, CardTerms
from pygpuperf.core.results import Ceiling, MachineModel
from pygpuperf.explain import attribution, costs, explainer
from pygpuperf.diagnose import causes, findings
from pygpuperf.explain.model import (CallAccesses, ExplainedStep, Explanation, HostTime, Idle, KernelRecord, Timeline,
                                     Waterfall)
from pygpuperf.explain.pricing import Pricing, kernel_bound, kernel_timing


def gpu_model() -> MachineModel:
    m = MachineModel(device="cuda:0")
    for key, value in {"tensor.fp16.acc32": 800.0, "tensor.tf32.acc32": 490.0, "cuda.fp32": 66.0}.items():
        m.compute[key] = Ceiling(value, "TFLOP/s", f"compute.{key}", "native-cuda")
    m.memory["hbm"] = Ceiling(4700.0, "GB/s", "memory.hbm.copy", "native-cuda")
    return m


def cpu_model() -> MachineModel:
    m = MachineModel(device="cpu")
    m.compute["simd.fp32"] = Ceiling(1.0, "TFLOP/s", "compute.simd.fp32", "native-cpu")
    m.memory["dram"] = Ceiling(20.0, "GB/s", "memory.dram.copy", "native-cpu")
    return m


def k(cls, us, op="aten::add", precision="", flops=0.0, nbytes=0.0, module="", name="kernel", call=None,
      phase="forward"):
    return KernelRecord(name=name, start_us=0.0, duration_us=us, op=op, module=module, kernel_class=cls,
                        precision=precision, flops=flops, bytes=nbytes, call=call, phase=phase)


def explanation(records, idle=None, device="cuda:0", calls=()):
    t = 0.0
    for r in records:
        r.start_us, t = t, t + r.duration_us
    idle = idle or Idle()
    line = Timeline(wall_us=t + idle.total_us, busy_us=t, idle=idle)
    step = ExplainedStep(0, records, line, Waterfall(0.0, {}, line.wall_us, 0.0, 1.0), [])
    return Explanation(device, [step], step, {}, calls=list(calls))


def all_text(diagnosis):
    parts = [f.title + " " + f.suggestion for f in diagnosis.findings]
    parts += [c.title + " " + c.advice for c in diagnosis.causes.items]
    return "\n".join(parts)


def test_transformer_layout_copies_get_attention_advice_and_no_channels_last():
    records = [k("tensor_gemm", 100, "aten::addmm", "fp16.acc32", 1e9, 1e6, "blocks.0.attn.qkv"),
               k("layout", 40, "aten::contiguous", module="blocks.0.attn", name="elementwise_kernel copy"),
               k("tensor_gemm", 60, "aten::_scaled_dot_product_flash_attention", "fp16.acc32", 1e8, 1e6,
                 "blocks.0.attn"),
               k("layout", 30, "aten::contiguous", module="blocks.0.attn", name="elementwise_kernel copy"),
               k("memory_bound", 20, "aten::add", nbytes=1e6)]
    e = explanation(records)
    d_e = findings.diagnose_step(e, {"batch_size": "8"}, gpu_model())
    found = list(d_e.findings)
    ids = {c.id: c for c in d_e.causes.items}
    assert "layout.attention_heads" in ids and "layout.nchw_nhwc" not in ids
    heads = ids["layout.attention_heads"]
    assert heads.us == pytest.approx(70.0) and heads.kernels == [1, 3]
    assert heads.fix is not None and heads.fix.predicted_step_us == pytest.approx(250 - 70)
    assert "channels_last" not in all_text(d_e)
    layout = next(f for f in found if f.title.startswith("Layout"))
    assert "scaled_dot_product_attention" in layout.suggestion and layout.evidence["fix"]["saves_us"] == 70.0


def test_convolution_transposes_get_channels_last():
    records = [k("tensor_gemm", 100, "aten::cudnn_convolution", "fp16.acc32", 1e9, 1e6, "layer1.conv1"),
               k("layout", 50, "aten::cudnn_convolution", module="layer1.conv1", name="nchwToNhwcKernel")]
    e = explanation(records)
    d_e = findings.diagnose_step(e, {"memory_format": "nchw"}, gpu_model())
    cause = next(c for c in d_e.causes.items if c.id == "layout.nchw_nhwc")
    assert "channels_last" in cause.advice and cause.fix.knobs == {"memory_format": "channels_last"}


def test_cpu_profile_gets_no_gpu_advice():
    records = [k("vector_math", 300, "aten::mm", "fp32", 1e8, 1e6), k("layout", 50, "aten::contiguous"),
               k("memory_bound", 100, "aten::add", nbytes=1e5), k("memory_bound", 100, "aten::mul", nbytes=1e5)]
    e = explanation(records, Idle(host_bound_us=300.0), device="cpu")
    d_e = findings.diagnose_step(e, {"batch_size": "4"}, cpu_model())
    text = all_text(d_e)
    for word in ("CUDA", "TF32", "tensor core", "tensor-core", "cuDNN", "channels_last", "HBM", "kernel"):
        assert word not in text, word
    ids = {c.id for c in d_e.causes.items}
    assert "cpu.framework" in ids and "cpu.simd_under_use" in ids


def test_rnn_ops_are_costed():
    # cuDNN LSTM, 1 layer, 16 steps x 4 sequences, input and hidden 32: 4 gate matrices of 128 x 32.
    weights = [[128, 32], [128, 32], [128], [128]]
    shapes = [[16, 4, 32], weights, [], [], [1, 4, 32], [1, 4, 32]] + [[]] * 10
    extra = ["", "", "4", "", "", "", "2", "32", "0", "1", "False", "0.0", "True", "False", "[]", ""]
    fwd = costs.op_cost("aten::_cudnn_rnn", shapes, ["float", "TensorList", "Scalar", "", "float", "float"], extra=extra)
    gemm = 2 * 64 * (2 * 128 * 32)
    gates = costs.RNN_GATE_FLOPS * 64 * 128
    assert fwd.flops == pytest.approx(gemm + gates) and not fwd.formula.startswith(costs.UNKNOWN)
    bwd_shapes = [[16, 4, 32], weights, [], [], [1, 4, 32], [1, 4, 32], [16, 4, 32], [16, 4, 32]] + [[]] * 14
    bwd = costs.op_cost("aten::_cudnn_rnn_backward", bwd_shapes, ["float", "TensorList"], extra=[""] * 22)
    assert bwd.flops == pytest.approx(2 * (gemm + gates))
    # The CPU op with its weight list unrecorded: the same work from hidden size, layers and directions.
    cpu = costs.op_cost("aten::lstm", [[4, 16, 32], [[1, 4, 32], [1, 4, 32]], [], [], [], [], [], [], []],
                        ["float", "TensorList", "TensorList"],
                        extra=["", "", "", "True", "1", "0.0", "True", "False", "True"])
    assert cpu.flops == pytest.approx(gemm + gates) and costs.is_math_op("aten::lstm")
    two_layer_bidir = costs.op_cost("aten::gru", [[4, 16, 32], [2 * 2, 4, 32], [], [], [], [], [], [], []],
                                    ["float", "float", "TensorList"],
                                    extra=["", "", "", "True", "2", "0.0", "True", "True", "True"])
    # layer 0: 2 directions x (96x32 + 96x32); layer 1: 2 x (96x64 + 96x32)
    assert two_layer_bidir.flops > 0 and two_layer_bidir.flops == pytest.approx(
        2 * 64 * (2 * (96 * 32 + 96 * 32) + 2 * (96 * 64 + 96 * 32)) + costs.RNN_GATE_FLOPS * 64 * 96 * 4)


def test_cpu_lstm_step_time_is_held_against_the_lstm_op():
    import torch

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(16, 16, batch_first=True)
    x = torch.randn(2, 8, 16)

    def step():
        lstm(x)[0].sum().backward()

    e = explainer.explain(step, cpu_model(), "cpu", steps=1, warmup=1, timed_steps=0)
    ops = {r.op: r for r in e.median.kernels}
    assert "aten::lstm" in ops and ops["aten::lstm"].kernel_class == "vector_math" and ops["aten::lstm"].flops > 0
    assert not e.unknown_ops


def test_elementwise_chain_is_found_with_its_saved_bytes():
    mb = 1_000_000
    calls = [CallAccesses(0, "aten::mul", (Access(1, mb, False), Access(2, mb, True))),
             CallAccesses(1, "aten::add", (Access(2, mb, False), Access(3, mb, True))),
             CallAccesses(2, "aten::relu", (Access(3, mb, False), Access(4, mb, True))),
             CallAccesses(3, "aten::mm", (Access(4, mb, False), Access(5, mb, True))),
             CallAccesses(4, "aten::sum", (Access(9, mb, False), Access(10, 4, True)))]
    records = [k("memory_bound", 20, "aten::mul", nbytes=2 * mb, call=0),
               k("memory_bound", 20, "aten::add", nbytes=2 * mb, call=1),
               k("memory_bound", 20, "aten::relu", nbytes=2 * mb, call=2),
               k("tensor_gemm", 50, "aten::mm", "fp16.acc32", 1e9, 2 * mb, call=3),
               k("memory_bound", 20, "aten::sum", nbytes=mb, call=4)]
    e = explanation(records, calls=calls)
    result = causes.step_causes(e.median.kernels, e.median.timeline, gpu_model(), calls)
    chain = next(c for c in result.items if c.id == "unfused_chain")
    assert chain.kernels == [0, 1, 2] and chain.evidence["chain_kernels"] == 3
    assert chain.evidence["saved_bytes"] == 4 * mb  # storages 2 and 3: each written once and read back once
    # The sum after the GEMM reads nothing the chain wrote: not part of it.
    assert 4 not in chain.kernels
    assert 0 < chain.fix.saves_us < 60 and chain.fix.knobs == {"compile": "inductor"}


def test_a_graph_saves_the_streams_back_to_back_gap_where_the_profile_shows_less_idle():
    terms = lambda gap, graph: CardTerms(fixed_us=1.0, gap_us=gap, units=132, caches=(),  # noqa: E731
                                         graph_gap_us=graph)
    device_bound = Idle(launch_gap_us=1.0)  # 11 kernels back to back: the profile saw 1 µs of idle in all
    assert causes.graph_saving_us(11, device_bound, terms(2.0, 0.5)) == pytest.approx(10 * (2.0 - 0.5))
    host_bound = Idle(host_bound_us=400.0, launch_gap_us=100.0)
    assert causes.graph_saving_us(11, host_bound, terms(2.0, 0.5)) == pytest.approx(500.0 - 10 * 0.5)
    # Without a measured graph period nothing says what the graph leaves: only the idle seen is saved.
    assert causes.graph_saving_us(11, device_bound, terms(2.0, 0.0)) == pytest.approx(1.0)
    assert causes.graph_saving_us(1, host_bound, terms(2.0, 0.5)) == pytest.approx(500.0)


def test_tf32_fix_predicts_the_step_by_the_kernel_model():
    flops = 6.6e9  # 100 us on 66 TFLOP/s CUDA cores; ran in 150 us (residual 1.5)
    records = [k("vector_math", 150, "aten::mm", "fp32", flops, 1e3), k("tensor_gemm", 50, "aten::mm", "fp16.acc32",
                                                                          1e9, 1e3)]
    e = explanation(records)
    d_e = findings.diagnose_step(e, {"tf32": "off"}, gpu_model())
    found = list(d_e.findings)
    cause = next(c for c in d_e.causes.items if c.id == "precision.fp32_no_tf32")
    tf32_us = flops / 490e12 * 1e6 * 1.5  # the TF32 work term, keeping the measured residual
    assert cause.fix.predicted_step_us == pytest.approx(200 - (150 - tf32_us), rel=1e-3)
    assert cause.fix.words().startswith("TF32 on: 0.20 → 0.07 ms")
    f = next(f for f in found if "without TF32" in f.title)
    assert f.evidence["fix"]["name"] == "tf32" and "(predicted)" in f.suggestion


def test_idle_causes_share_one_cuda_graph_fix_and_split_the_parts_honestly():
    records = [k("memory_bound", 10, "aten::add", nbytes=1e3) for _ in range(5)]
    e = explanation(records, Idle(host_bound_us=30.0, launch_gap_us=20.0))
    result = causes.step_causes(e.median.kernels, e.median.timeline, gpu_model(), device="cuda:0")
    graphs = [c.fix for c in result.items if c.fix is not None and c.fix.name == "cuda_graphs"]
    assert len(graphs) == 1 and graphs[0].saves_us == pytest.approx(50.0)
    # A replayed graph still pays its own gap per kernel, where the card's graph period was measured.
    graphed = gpu_model()
    graphed.latency["kernel.duration"] = Ceiling(1000.0, "ns", "latency.kernel.duration", "native-cuda")
    graphed.latency["kernel.graph"] = Ceiling(3000.0, "ns", "latency.kernel.graph", "native-cuda")
    result = causes.step_causes(e.median.kernels, e.median.timeline, graphed, device="cuda:0")
    fix = next(c.fix for c in result.items if c.fix is not None and c.fix.name == "cuda_graphs")
    assert fix.saves_us == pytest.approx(50.0 - 4 * 2.0)  # 5 kernels, 4 gaps between them
    # A memory set between two kernels is one more boundary, and pays the graph's gap like the others.
    with_memset = explanation([*records[:2], k("memcpy_memset", 1, "", name="Memset (Device)"), *records[2:]],
                              Idle(host_bound_us=30.0, launch_gap_us=20.0))
    result = causes.step_causes(with_memset.median.kernels, with_memset.median.timeline, graphed, device="cuda:0")
    fix = next(c.fix for c in result.items if c.fix is not None and c.fix.name == "cuda_graphs")
    assert fix.saves_us == pytest.approx(50.0 - 5 * 2.0)
    for part, split in result.by_part.items():
        assert split["named_us"] <= split["us"] + 1e-9 and split["rest_us"] == pytest.approx(
            split["us"] - split["named_us"], abs=1e-9), part
    # A step that synchronizes cannot be captured: no graph fix then.
    synced = explanation([k("memory_bound", 10, nbytes=1e3)], Idle(host_bound_us=30.0, sync_us=10.0))
    result = causes.step_causes(synced.median.kernels, synced.median.timeline, gpu_model(), device="cuda:0")
    assert not [c for c in result.items if c.fix is not None and c.fix.name == "cuda_graphs"]


def test_a_well_shaped_convolution_splits_its_excess_into_the_library_rate_and_the_kernel_choice():
    m = gpu_model()
    m.compute["library.fp16"] = Ceiling(400.0, "TFLOP/s", "compute.library.fp16", "torch-cuda")  # half the 800
    conv = k("tensor_gemm", 40.0, "aten::cudnn_convolution", "fp16.acc32", 8e9, 1e6, "layer1.0.conv1",
             name="sm90_xmma_fprop_implicit_gemm_f16f16_f16f32")  # bound 10 us at 800 TFLOP/s, 20 us at 400
    records = [conv, k("memory_bound", 10.0, nbytes=47e6)]
    e = explanation(records)
    d_e = findings.diagnose_step(e, {"memory_format": "nchw", "batch_size": "8"}, m)
    ids = {c.id: c for c in d_e.causes.items}
    library, choice = ids["library_rate"], ids["kernel_choice.convolution"]
    assert library.us == pytest.approx(10.0, rel=0.1)  # the bound at the library's rate minus the one at 800
    assert library.us + choice.us == pytest.approx(30.0, rel=0.1)  # the whole excess of the kernel is named
    assert "channels_last" in choice.advice and "NCHW" in choice.advice
    assert library.evidence["ceilings"]["fp16.acc32"] == {"instruction": 800.0, "library": 400.0, "unit": "TFLOP/s"}
    e2 = explanation([k("tensor_gemm", 40.0, "aten::cudnn_convolution", "fp16.acc32", 8e9, 1e6, "layer1.0.conv1")])
    d_e2 = findings.diagnose_step(e2, {"memory_format": "channels_last", "cudnn_benchmark": "on"}, m)
    advice = {c.id: c.advice for c in d_e2.causes.items}["kernel_choice.convolution"]
    assert "channels_last" not in advice and "benchmark" not in advice


def _attention_step_compiled(module: str):
    """A step whose attention head copies are a cause, and a measured torch.compile trial (97 us)."""
    from pygpuperf.core.results import Stats
    from pygpuperf.trials.record import FixTrial, Trials
    from pygpuperf.explain.model import Throughput

    records = [k("tensor_gemm", 100, "aten::addmm", "fp16.acc32", 1e9, 1e6, "blocks.0.attn.qkv"),
               k("layout", 40, "aten::contiguous", module=module, name="elementwise_kernel copy")]
    e = dataclasses.replace(explanation(records), throughput=Throughput(Stats.of([140.0] * 3), 8))
    d_e = findings.diagnose_step(e, {"batch_size": "8"}, gpu_model())
    trials = Trials((FixTrial("compile", "torch.compile", {"compile": "inductor"}, "measured", predicted_step_us=100.0,
                              measured_step_us=97.0, baseline_step_us=140.0, samples_per_step=8,
                              baseline_samples_per_step=8),))
    return e, next(c for c in d_e.causes.items if c.id == "layout.attention_heads"), d_e, trials


def test_explain_html_shows_each_cause_with_its_fix_and_the_measured_step():
    from pygpuperf.trials.record import FixTrial, Trials
    from pygpuperf.report.explain_html import explain_html

    e, layout, diagnosis, compiled = _attention_step_compiled("blocks.0.<script>attn")
    trials = Trials((*compiled.fixes, FixTrial("cuda_graphs", "CUDA graph of the step", {"cuda_graphs": "on"},
                                               "failed", reason="RuntimeError: capture <failed>",
                                               notes=["a flag <was> put back"])))
    page = explain_html(e, gpu_model(), diagnosis=diagnosis, trials=trials)
    assert "capture &lt;failed&gt;<br><span class=\"note\">a flag &lt;was&gt; put back</span>" in page
    assert 'id="explain-causes"' in page and 'id="explain-fixes"' in page
    assert "<script" not in page and "&lt;failed&gt;" in page  # every document string goes through autoescape
    assert layout.title.split(" (")[0][:40] in page.replace("&#39;", "'")
    assert '<td>torch.compile</td><td>measured</td><td class="num">0.14</td><td class="num">0.10</td>' in page
    assert "the host&#39;s own time per step" not in page  # nothing timed the host's pace here
    timed = dataclasses.replace(trials, host_at_batch=HostTime(19430.0, 2310.0), host_at_batch_one=HostTime(17160.0))
    page = explain_html(e, gpu_model(), diagnosis=diagnosis, trials=timed)
    assert ("the host&#39;s own time per step, without the profiler: 19.43 ms at the step&#39;s batch, each step "
            "after a drain, 2.31 of it in the optimizer&#39;s step; 17.16 ms at batch 1.") in page


def test_the_findings_after_try_fixes_say_what_the_trial_of_a_causes_fix_measured():
    e, heads, diagnosis, trials = _attention_step_compiled("blocks.0.attn")

    def heads_fix(d):
        return next(c["fix"] for f in d.findings for c in f.evidence.get("causes", []) if c["id"] == heads.id)

    assert "measured_step_us" not in heads_fix(diagnosis)  # diagnosed before the trials ran
    again = diagnose.diagnose(e, gpu_model(), causes=diagnosis.causes, trials=trials.fixes)
    assert again.causes is diagnosis.causes  # the causes already named, not named twice
    fix = heads_fix(again)
    assert fix["trial"] == "compile" and fix["measured_step_us"] == 97.0 and fix["trial_predicted_step_us"] == 100.0
    assert any("Measured with --try-fixes (torch.compile): 0.10 ms" in f.suggestion for f in again.findings)


def test_channels_last_prices_nchw_batch_norms_at_the_steps_own_streaming_efficiency():
    records = [k("tensor_gemm", 100, "aten::cudnn_convolution", "fp16.acc32", 1e9, 1e6, "layer1.conv1"),
               k("layout", 50, "aten::cudnn_convolution", module="layer1.conv1", name="nchwToNhwcKernel"),
               k("memory_bound", 50, "aten::cudnn_batch_norm", "fp16", nbytes=47e6, module="layer1.bn1"),
               k("memory_bound", 12.5, "aten::add_", "fp16", nbytes=47e6, module="layer1")]
    e = explanation(records)
    d_e = findings.diagnose_step(e, {"memory_format": "nchw"}, gpu_model())
    bn, add = (kernel_bound(e.median.kernels[i], gpu_model())[0] for i in (2, 3))
    efficiency = add / 12.5
    cause = next(c for c in d_e.causes.items if c.id == "layout.nchw_nhwc")
    assert 0.5 < efficiency < 1 and cause.evidence["streaming_efficiency"] == pytest.approx(efficiency, abs=1e-3)
    # The transposes go, and the batch norm (inference: one pass) runs at the add's share of its bound.
    assert cause.fix.saves_us == pytest.approx(50 + 50 - bn / efficiency, rel=1e-3)
    assert "batch norms" in cause.advice
    # Training: the backward batch norm streams its input and grad_out twice (4 reads + 1 write, not 2 + 1).
    records += [k("memory_bound", 80, "aten::cudnn_batch_norm_backward", "fp16", nbytes=70.5e6, module="layer1.bn1",
                  phase="backward")]
    e = explanation(records)
    d_e = findings.diagnose_step(e, {"memory_format": "nchw"}, gpu_model())
    forward, backward = (kernel_bound(e.median.kernels[i], gpu_model())[0] for i in (2, 4))
    cause = next(c for c in d_e.causes.items if c.id == "layout.nchw_nhwc")
    assert cause.fix.saves_us == pytest.approx(
        50 + (50 - 1.5 * forward / efficiency) + (80 - 5 / 3 * backward / efficiency), rel=1e-3)


def test_amp_halves_activation_traffic_outside_autocasts_fp32_list_and_not_for_access_bound_kernels():
    m = gpu_model()
    m.compute["tensor.bf16.acc32"] = Ceiling(800.0, "TFLOP/s", "compute.tensor.bf16.acc32", "native-cuda")
    flops = 6.6e9
    records = [k("vector_math", 150, "aten::mm", "fp32", flops, 1e3),
               k("memory_bound", 12.5, "aten::add", "fp32", nbytes=47e6),
               k("memory_bound", 12.5, "aten::native_layer_norm", "fp32", nbytes=47e6),
               k("memory_bound", 50.0, "aten::cudnn_batch_norm", "fp32", nbytes=47e6),  # a fifth of the add's rate
               k("memory_bound", 12.5, "aten::_foreach_add_", "fp32", nbytes=47e6, phase="optimizer")]
    e = explanation(records)
    d_e = findings.diagnose_step(e, {"amp": "none"}, m)
    timing = kernel_timing(e.median.kernels[1], m)
    cause = next(c for c in d_e.causes.items if c.id == "precision.bf16_unused")
    traffic = cause.evidence["activation_traffic_saving_us"]
    # Only the add halves its bytes (keeping its residual): layer norm runs in fp32 under autocast, the batch
    # norm is held by its access pattern, the optimizer keeps fp32 master weights.
    residual = (12.5 - timing.fixed_us) / timing.work_us
    assert traffic == pytest.approx(12.5 - (timing.fixed_us + timing.work_us / 2 * residual), rel=0.05)
    assert cause.fix.saves_us == pytest.approx(cause.us + traffic, rel=1e-3)


def test_a_cause_whose_fix_try_fixes_applies_as_compile_shows_the_measured_step():
    from pygpuperf.report.explain_html import explain_html

    e, heads, diagnosis, trials = _attention_step_compiled("blocks.0.attn")
    assert heads.fix.name == "remove_layout" and heads.fix.trial == "compile"
    page = explain_html(e, gpu_model(), diagnosis=diagnosis, trials=trials)
    row = next(r for r in page.split("<tr>") if r.startswith("<td>Copies splitting"))
    assert row.split("</tr>")[0].endswith('<td class="num">0.10</td>')  # the compile trial's measured step


def test_a_fused_optimizer_is_priced_as_one_pass_over_the_storages_the_update_touches():
    # A foreach update in three kernels over one 100 MB parameter, its gradient and a state: each kernel reads
    # and writes what it touches (8 passes in all, 800 MB); one fused kernel reads 3 tensors and writes 2.
    mb = 100_000_000
    param, grad, state = 1, 2, 3
    touched = [[(state, False), (state, True)], [(state, False), (grad, False), (state, True)],
               [(param, False), (state, False), (param, True)]]
    calls = [CallAccesses(i, "aten::_foreach_add_", tuple(Access(s, mb, w, True) for s, w in t))
             for i, t in enumerate(touched)]
    records = [k("memory_bound", 200.0, "aten::_foreach_add_", nbytes=len(t) * mb, call=i, phase="optimizer")
               for i, t in enumerate(touched)]
    model = gpu_model()
    explanation(records, calls=calls)  # lays the kernels end to end
    exclusive = attribution.exclusive_times(records)
    pricing = Pricing.bound(records, calls, model)
    saves, evidence = causes._fused_optimizer_saving(records, exclusive, calls, pricing)
    assert evidence["fused_traffic_bytes"] == 5 * mb
    # the update's kernels run at 800 MB / 4700 GB/s over 600 us; the fused one at the same efficiency
    efficiency = (8 * mb / 4700e9 * 1e6) / 600.0
    assert saves == pytest.approx(600.0 - (5 * mb / 4700e9 * 1e6) / efficiency, rel=1e-3)
    assert 0 < saves < 600.0
    # an update that is fused already has nothing to gain
    fused = [k("memory_bound", 200.0, "aten::_fused_adamw_", nbytes=5 * mb, call=0, phase="optimizer")]
    assert causes._fused_optimizer_saving(fused, [200.0], calls[:1], pricing)[0] == 0.0


def test_kernels_whose_shapes_the_profiler_dropped_take_their_bytes_from_the_traced_call():
    calls = [CallAccesses(0, "aten::_foreach_mul_", (Access(1, 4000, False, True), Access(1, 4000, True, True)))]
    chunks = [k("memory_bound", 30.0, "aten::_foreach_mul_", call=0, phase="optimizer") for _ in range(2)]
    for r in chunks:
        r.op_call_id = 7
    assert explainer.bytes_from_traced_calls(chunks, calls) == 2
    assert sum(r.bytes for r in chunks) == pytest.approx(8000.0)  # the call's bytes once, split
    # chunks with the same kernel name and no op call id are still one call's
    bare = [k("memory_bound", 30.0, "aten::_foreach_mul_", name="multi_tensor_apply", call=0) for _ in range(3)]
    explainer.bytes_from_traced_calls(bare, calls)
    assert sum(r.bytes for r in bare) == pytest.approx(8000.0)
    # a call costed from its shapes keeps its split, even where a short helper kernel got no bytes
    costed = [k("memory_bound", 50.0, "aten::add", nbytes=900.0, call=0), k("layout", 2.0, "aten::add", call=0)]
    assert explainer.bytes_from_traced_calls(costed, calls) == 0 and costed[1].bytes == 0.0


def test_a_recorded_step_explained_again_gets_bounds_causes_and_findings_from_the_current_model():
    records = [k("tensor_gemm", 100, "aten::mm", "fp16.acc32", 1e9, 1e6), k("memory_bound", 50, nbytes=1e8)]
    e = explanation(records)
    assert all(r.bound_us is None for r in records)
    diagnosis = diagnose.explain_again(e, gpu_model())
    assert all(r.bound_us is not None and r.bound_us > 0 for r in records)
    assert diagnosis.causes is not None and diagnosis.findings
    assert e.median.waterfall.ideal_us == pytest.approx(sum(r.bound_us for r in records))


def test_the_explain_package_called_as_a_function_explains_and_diagnoses_a_step():
    import torch

    import pygpuperf

    linear = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)

    def step():
        linear(x).relu().sum().backward()

    got = pygpuperf.explain(step, cpu_model(), "cpu", steps=1, warmup=1, timed_steps=0)
    assert got.explanation.median.kernels and got.explanation.device == "cpu"
    assert got.causes is not None and got.causes.items and got.findings is got.diagnosis.findings
