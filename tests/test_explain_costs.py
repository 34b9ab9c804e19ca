"""FLOPs and bytes per aten op: exact counts on known shapes, and agreement with torch's FlopCounterMode."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from pygpuperf.explain import costs
from pygpuperf.explain.costs import UNKNOWN, op_cost

F32, F16, BF16 = "float", "c10::Half", "c10::BFloat16"  # as the profiler spells them


def n(*shape: int) -> int:
    return math.prod(shape)


def test_mm_fp16_counts_2mnk_and_each_matrix_once():
    c = op_cost("aten::mm", [[128, 256], [256, 64]], [F16, F16])
    assert c.flops == 2 * 128 * 256 * 64
    assert c.bytes == (128 * 256 + 256 * 64 + 128 * 64) * 2
    assert "2*m*n*k" in c.formula


def test_gemm_variants():
    addmm = op_cost("aten::addmm", [[16], [32, 64], [64, 16], [], []], [F32, F32, F32, "Scalar", "Scalar"],
                    extra=[None, None, None, 1, 1])
    assert addmm.flops == 2 * 32 * 64 * 16
    assert addmm.bytes == (16 + 32 * 64 + 64 * 16 + 32 * 16) * 4
    linear = op_cost("aten::linear", [[8, 4, 64], [16, 64], [16]], [BF16, BF16, BF16])
    assert linear.flops == 2 * 32 * 64 * 16
    assert linear.bytes == (8 * 4 * 64 + 16 * 64 + 16 + 8 * 4 * 16) * 2
    bmm = op_cost("aten::bmm", [[3, 5, 7], [3, 7, 11]], [F32, F32])
    assert bmm.flops == 2 * 3 * 5 * 7 * 11
    assert bmm.bytes == (3 * 5 * 7 + 3 * 7 * 11 + 3 * 5 * 11) * 4
    matmul = op_cost("aten::matmul", [[2, 1, 5, 7], [3, 7, 11]], [F32, F32])
    assert matmul.flops == 2 * 6 * 5 * 7 * 11  # batch broadcast to 2 x 3


def _profiled(step, source: str, tmp_path) -> list[tuple[str, list, list, list]]:
    """(op, input shapes, dtypes, concrete inputs) of every aten op, from the profiler's event objects
    or from its chrome trace (which writes concrete inputs as strings: '[2, 2]', 'False')."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    if source == "events":
        return [(e.name, e.input_shapes, e.input_dtypes, e.concrete_inputs) for e in prof.events()
                if e.name.startswith("aten::")]
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    ops = [e for e in json.loads(path.read_text())["traceEvents"]
           if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")]
    assert all("Concrete Inputs" in e["args"] for e in ops if e["name"] == "aten::convolution")
    return [(e["name"], e["args"].get("Input Dims", []), e["args"].get("Input type", []),
             e["args"].get("Concrete Inputs", [])) for e in ops]


def _flop_counter_by_op(step) -> dict[str, int]:
    with FlopCounterMode(display=False) as counter:
        step()
    return {f"aten::{packet._qualified_op_name.split('::')[1]}": v
            for packet, v in counter.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize("source", ["events", "chrome trace"])
@pytest.mark.parametrize("transposed", [False, True])
def test_profiled_step_matches_flop_counter_op_by_op(transposed, source, tmp_path):
    """What the CPU profiler records (shapes, dtypes, concrete inputs) costs what FlopCounterMode counts."""
    torch.manual_seed(0)
    conv = (torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1) if transposed
            else torch.nn.Conv2d(3, 8, 3, stride=2, padding=1))
    first = torch.nn.Conv2d(3, 6, 1) if transposed else torch.nn.Identity()
    head = torch.nn.LazyLinear(5)
    model = torch.nn.Sequential(first, conv, torch.nn.ReLU(), torch.nn.Flatten(), head)
    x = torch.randn(2, 3, 10, 10)
    model(x)  # materialise the lazy layer

    def step():
        model(x).sum().backward()

    reference = _flop_counter_by_op(step)
    counted: dict[str, float] = {}
    for name, shapes, dtypes, concrete in _profiled(step, source, tmp_path):
        if name in reference:
            counted[name] = counted.get(name, 0.0) + op_cost(name, shapes, dtypes, extra=concrete).flops
    assert set(reference) >= {"aten::convolution", "aten::convolution_backward", "aten::addmm", "aten::mm"}
    assert counted == {k: float(v) for k, v in reference.items()}


def test_conv_forward_bytes_and_inferred_output_shape():
    # 2x3x16x16 input, 8 filters 3x3, stride 2, padding 1 -> 2x8x8x8
    c = op_cost("aten::convolution", [[2, 3, 16, 16], [8, 3, 3, 3], [8], [], [], [], [], [], []],
                [F16, F16, F16] + ["ScalarList"] * 3 + ["Scalar", "ScalarList", "Scalar"],
                extra=[None, None, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1])
    assert c.flops == 2 * (2 * 8 * 8) * 9 * 8 * 3
    assert c.bytes == (n(2, 3, 16, 16) + n(8, 3, 3, 3) + 8 + n(2, 8, 8, 8)) * 2
    # cudnn_convolution puts padding before stride: the schema names them
    cudnn = op_cost("aten::cudnn_convolution", [[2, 3, 16, 16], [8, 3, 3, 3], [], [], [], [], [], [], []],
                    [F16, F16] + [""] * 7, extra=[None, None, [1, 1], [2, 2], [1, 1], 1, False, False, True])
    assert cudnn.flops == c.flops


def test_grouped_conv_backward_counts_the_weight_gradient_once():
    groups = 4
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, groups=groups, bias=False)
    x = torch.randn(2, 8, 12, 12, requires_grad=True)
    forward = 2 * 2 * 12 * 12 * 9 * 8 * (8 // groups)
    y = conv(x)
    with FlopCounterMode(display=False) as counter:
        y.sum().backward()
    c = op_cost("aten::convolution_backward",
                [[2, 8, 12, 12], [2, 8, 12, 12], [8, 2, 3, 3]] + [[]] * 8, [F32] * 3 + [""] * 8,
                extra=[None, None, None, None, [1, 1], [1, 1], [1, 1], False, [0, 0], groups, [True, True, False]])
    assert c.flops == 2 * forward  # grad_input and grad_weight each cost the forward
    assert counter.get_total_flops() > c.flops  # flop_counter counts the grouped weight gradient 4 times
    # read: grad_output, input, weight; written: grad_input, grad_weight
    assert c.bytes == (3 * n(2, 8, 12, 12) + 2 * n(8, 2, 3, 3)) * 4


def test_conv_backward_reads_only_what_its_gradients_need():
    # first layer: no grad_input, so the weight is not read
    c = op_cost("aten::convolution_backward", [[2, 8, 8, 8], [2, 3, 16, 16], [8, 3, 3, 3]] + [[]] * 8,
                [F16] * 3 + [""] * 8,
                extra=[None, None, None, [8], [2, 2], [1, 1], [1, 1], False, [0, 0], 1, [False, True, True]])
    assert c.flops == 2 * (2 * 8 * 8) * 9 * 8 * 3
    assert c.bytes == (n(2, 8, 8, 8) + n(2, 3, 16, 16) + n(8, 3, 3, 3) + 8) * 2


def test_batch_norm_training_and_backward():
    shape = [16, 32, 8, 8]
    dt = [F32] * 5 + ["Scalar"] * 3
    c = op_cost("aten::native_batch_norm", [shape, [32], [32], [32], [32], [], [], []], dt,
                extra=[None] * 5 + [True, 0.1, 1e-5])
    elems = n(*shape)
    assert c.flops == costs.NORM_TRAIN_FLOPS * elems == 8 * elems
    # read: input, weight, bias, running stats; written: output, saved mean and inverse std, running stats
    assert c.bytes == (elems + 4 * 32) * 4 + (elems + 4 * 32) * 4
    eval_ = op_cost("aten::cudnn_batch_norm", [shape, [32], [32], [32], [32], [], [], []], dt,
                    extra=[None] * 5 + [False, 0.1, 1e-5])
    assert eval_.flops == 4 * elems
    assert eval_.bytes == (elems + 4 * 32) * 4 + elems * 4
    back = op_cost("aten::native_batch_norm_backward", [shape, shape, [32], [32], [32], [32], [32], [], [], []],
                   [F32] * 7 + ["Scalar", "Scalar", ""], extra=[None] * 7 + [True, 1e-5, [True, True, True]])
    assert back.flops == 9 * elems
    # grad_out, input, weight, saved stats read (running stats are not); grad_input, grad_weight, grad_bias written
    assert back.bytes == (2 * elems + 3 * 32) * 4 + (elems + 2 * 32) * 4


def test_elementwise_relu_and_broadcast_add():
    relu = op_cost("aten::relu", [[4, 1024]], [F16])
    assert relu.flops == 4096 and relu.bytes == 2 * 4096 * 2
    add = op_cost("aten::add", [[8, 16, 4, 4], [16, 1, 1], []], [F32, F32, "Scalar"], extra=[None, None, 1])
    assert add.flops == n(8, 16, 4, 4)
    assert add.bytes == (n(8, 16, 4, 4) + 16 + n(8, 16, 4, 4)) * 4
    inplace = op_cost("aten::add_", [[1000], [1000], []], [F32, F32, "Scalar"], extra=[None, None, 0.5])
    assert inplace.flops == 2 * 1000  # a scaled add is an FMA
    assert inplace.bytes == 3 * 1000 * 4  # self and other read, self written
    gelu = op_cost("aten::gelu", [[10, 10], []], [BF16, ""], extra=[None, "tanh"])
    assert gelu.flops == costs.GELU_TANH_FLOPS * 100


def test_max_pool_counts_each_window_element_and_writes_indices():
    c = op_cost("aten::max_pool2d_with_indices", [[2, 4, 8, 8], [], [], [], [], []],
                [F16, "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                extra=[None, [2, 2], [2, 2], [0, 0], [1, 1], False])
    out = n(2, 4, 4, 4)
    assert c.flops == 4 * out
    assert c.bytes == n(2, 4, 8, 8) * 2 + out * 2 + out * 8
    # 3x3 stride 2 padding 1 on 112x112 -> 56x56 (ResNet's stem)
    stem = op_cost("aten::max_pool2d_with_indices", [[1, 1, 112, 112]] + [[]] * 5, [F32] + [""] * 5,
                   extra=[None, [3, 3], [2, 2], [1, 1], [1, 1], False])
    assert stem.flops == 9 * 56 * 56
    back = op_cost("aten::max_pool2d_with_indices_backward",
                   [[2, 4, 4, 4], [2, 4, 8, 8], [], [], [], [], [], [2, 4, 4, 4]],
                   [F16, F16, "", "", "", "", "", "long int"],
                   extra=[None, None, [2, 2], [2, 2], [0, 0], [1, 1], False, None])
    assert back.flops == out
    assert back.bytes == out * 2 + out * 8 + n(2, 4, 8, 8) * 2  # the input is passed for its shape only


def test_softmax_and_its_backward():
    c = op_cost("aten::_softmax", [[32, 1000], [], []], [F32, "Scalar", "Scalar"], extra=[None, -1, False])
    assert c.flops == 5 * 32000 and c.bytes == 2 * 32000 * 4
    half_to_float = op_cost("aten::_softmax", [[32, 1000], [], []], [F16, "Scalar", "Scalar"], extra=[None, -1, True])
    assert half_to_float.bytes == 32000 * 2 + 32000 * 4
    back = op_cost("aten::_log_softmax_backward_data", [[32, 1000], [32, 1000], [], []],
                   [F32, F32, "Scalar", "Scalar"], extra=[None, None, 1, 6])
    assert back.flops == 4 * 32000 and back.bytes == 3 * 32000 * 4


def test_reduction_output_follows_dim_and_keepdim():
    c = op_cost("aten::sum", [[4, 10], [], [], []], [F32, "ScalarList", "Scalar", ""], extra=[None, [0], True, None])
    assert c.flops == 40 and c.bytes == (40 + 10) * 4
    mean = op_cost("aten::mean", [[8, 64, 7, 7], [], [], []], [F16, "", "", ""], extra=[None, [2, 3], False, None])
    assert mean.bytes == (n(8, 64, 7, 7) + 8 * 64) * 2


def _adamw_step_foreach(shapes: list[list[int]]) -> float:
    """The _foreach_ ops torch's AdamW(foreach=True) runs for one step (steps already counted apart)."""
    ops = [("_foreach_mul_", 1), ("_foreach_lerp_", 2), ("_foreach_mul_", 1), ("_foreach_addcmul_", 3),
           ("_foreach_sqrt", 1), ("_foreach_div_", 1), ("_foreach_add_", 1), ("_foreach_addcdiv_", 3)]
    return sum(op_cost(f"aten::{op}", [shapes] * lists + [[]], ["TensorList"] * lists + ["Scalar"]).flops
               for op, lists in ops)


def test_adamw_per_parameter_element():
    shapes = [[64, 32], [64], [10, 64], [10]]
    elems = sum(n(*s) for s in shapes)
    steps = [[] for _ in shapes]
    lists = [shapes, shapes, shapes, shapes, [], steps]
    fused = op_cost("aten::_fused_adamw_", lists + [[]] * 9, ["TensorList"] * 6 + ["Scalar"] * 7 + ["", ""],
                    extra=[None] * 6 + [1e-3, 0.9, 0.999, 0.01, 1e-8, False, False, None, None])
    assert fused.flops == costs.ADAMW_FLOPS * elems == 14 * elems
    assert "not recorded" not in fused.formula  # max_exp_avg_sqs is empty without amsgrad, not unrecorded
    # read: params, grads, both moments (fp32) and the step counters; written: params and both moments
    assert fused.bytes == 4 * elems * 4 + len(shapes) * 4 + 3 * elems * 4
    assert _adamw_step_foreach(shapes) == fused.flops  # the unfused path does the same arithmetic
    adam = op_cost("aten::_fused_adam_", lists + [[]] * 9, ["TensorList"] * 6 + ["Scalar"] * 7 + ["", ""],
                   extra=[None] * 6 + [1e-3, 0.9, 0.999, 0.0, 1e-8, False, False, None, None])
    assert adam.flops == 13 * elems


def test_sgd_with_momentum_per_parameter_element():
    shapes = [[100], [20, 5]]
    c = op_cost("aten::_fused_sgd_", [shapes, shapes, shapes] + [[]] * 9, ["TensorList"] * 3 + ["Scalar"] * 9,
                extra=[None] * 3 + [0.0, 0.9, 0.1, 0.0, False, False, False, None, None])
    assert c.flops == (costs.SGD_FLOPS + costs.SGD_MOMENTUM_FLOPS) * 200 == 5 * 200
    assert c.bytes == 3 * 200 * 4 + 2 * 200 * 4


def test_tensor_lists_the_profiler_left_empty_count_zero_and_say_so():
    c = op_cost("aten::_foreach_add_", [[], [], []], ["TensorList", "float", "Scalar"], extra=[None, None, 1.0])
    assert c.flops == 0
    assert "not recorded" in c.formula


def test_attention_layouts_agree_and_causal_keeps_the_lower_triangle():
    b, h, s, d = 2, 8, 128, 64
    bhsd = op_cost("aten::_scaled_dot_product_flash_attention", [[b, h, s, d]] * 3 + [[]] * 4,
                   [BF16] * 3 + ["Scalar"] * 4, extra=[None] * 3 + [0.0, False, False, None])
    assert bhsd.flops == 4 * b * h * s * s * d
    # the kernel-level op takes [b, s, h, d]
    bshd = op_cost("aten::_efficient_attention_forward", [[b, s, h, d]] * 3 + [[]] * 11,
                   [BF16] * 3 + [""] * 11,
                   extra=[None] * 3 + [None, None, None, s, s, 0.0, 0, True, None, None, None])
    assert bshd.flops == bhsd.flops
    causal = op_cost("aten::_flash_attention_forward", [[b, s, h, d]] * 3 + [[]] * 14, [BF16] * 3 + [""] * 14,
                     extra=[None] * 3 + [None, None, s, s, 0.0, True, False] + [None] * 7)
    assert causal.flops == pytest.approx(bhsd.flops * (s + 1) / (2 * s))
    backward = op_cost("aten::_scaled_dot_product_flash_attention_backward",
                       [[b, h, s, d]] * 5 + [[b, h, s]] + [[]] * 9, [BF16] * 5 + [F32] + [""] * 9,
                       extra=[None] * 6 + [None, None, s, s, 0.0, False, None, None, None])
    assert backward.flops == 2.5 * bhsd.flops
    # packed varlen sequences, [total, h, d]: every query against at most max_k keys bounds the work
    total, max_k = 300, 100
    varlen = op_cost("aten::_flash_attention_forward", [[total, h, d]] * 3 + [[4], [4]] + [[]] * 12,
                     [BF16] * 3 + ["int", "int"] + [""] * 12,
                     extra=[None] * 5 + [max_k, max_k, 0.0, False, False] + [None] * 7)
    assert varlen.flops == 4 * h * total * max_k * d
    assert "upper bound" in varlen.formula
    qkv = 3 * b * h * s * d * 2
    assert bhsd.bytes == qkv + b * h * s * d * 2 + b * h * s * 4  # output and fp32 logsumexp written
    assert backward.bytes == qkv + 2 * b * h * s * d * 2 + b * h * s * 4 + qkv


def test_copies_fills_and_views():
    to_half = op_cost("aten::_to_copy", [[256, 256]] + [[]] * 6, [F32, "Scalar", "", "", "", "Scalar", ""],
                      extra=[None, 5, None, None, None, False, None])
    assert to_half.flops == 0 and to_half.bytes == 65536 * (4 + 2)
    assert op_cost("aten::zero_", [[1000]], [F16]).bytes == 2000
    assert op_cost("aten::copy_", [[10, 10], [10, 10], []], [F16, F32, "Scalar"]).bytes == 100 * (4 + 2)
    view = op_cost("aten::transpose", [[10, 10], [], []], [F32, "Scalar", "Scalar"])
    assert view.flops == 0 and view.bytes == 0


def test_gathers_read_only_the_rows_they_gather():
    emb = op_cost("aten::embedding", [[50000, 512], [8, 128], [], [], []], [F16, "long int", "", "", ""])
    tokens = 8 * 128
    assert emb.bytes == tokens * 8 + tokens * 512 * 2 + tokens * 512 * 2
    nll = op_cost("aten::nll_loss_forward", [[1024, 50000], [1024], [], [], []], [F32, "long int", "", "", ""],
                  extra=[None, None, None, 1, -100])
    assert nll.flops == 2 * 1024
    assert nll.bytes == 1024 * 4 + 1024 * 8 + 2 * 4  # gathered log-probabilities, targets; loss and total weight


def test_unknown_op_has_no_flops():
    c = op_cost("aten::some_future_op", [[10, 10]], [F32])
    assert c.flops == 0
    assert c.formula == UNKNOWN
    misfit = op_cost("aten::mm", [[10, 10]], [F32])  # a known op whose arguments do not fit its rule
    assert misfit.flops == 0 and misfit.formula.startswith(UNKNOWN)


def test_dtype_names():
    assert costs.element_bytes("c10::Half") == 2
    assert costs.element_bytes("torch.bfloat16") == 2
    assert costs.element_bytes("long int") == 8
    assert costs.element_bytes("Scalar") is None


def test_collective_bus_bytes():
    c = costs.collective_cost("all_reduce", 1e6, 4)
    assert c.bytes == 1e6 * 2 * 3 / 4


def test_a_strided_1x1_convolution_reads_only_the_input_its_windows_land_on():
    x, w = [256, 256, 56, 56], [512, 256, 1, 1]
    strided = op_cost("aten::cudnn_convolution", [x, w, [], [], [], [], [], [], []], [F16, F16] + ["ScalarList"] * 3
                      + ["Scalar"] * 4, extra=["", "", "[0, 0]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])
    out = 256 * 512 * 28 * 28
    assert strided.bytes == (256 * 256 * 56 * 56 // 4 + 512 * 256 + out) * 2  # every other row and column
    dense = op_cost("aten::cudnn_convolution", [x, [512, 256, 3, 3], [], [], [], [], [], [], []],
                    [F16, F16] + ["ScalarList"] * 3 + ["Scalar"] * 4,
                    extra=["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"])
    assert dense.bytes == (256 * 256 * 56 * 56 + 512 * 256 * 9 + out) * 2  # 3x3 windows at stride 2 touch it all


def test_an_expanded_input_counts_its_distinct_elements_once():
    # gather's index from index.unsqueeze(-1).expand(-1, 768): stride 0 along the expanded dim
    c = op_cost("aten::gather", [[50257, 768], [], [16384, 768], [], [16384, 768]],
                [F32, "Scalar", "long int", "Scalar", F32], extra=["", "0", "", "False", ""],
                input_strides=[[768, 1], [], [1, 0], [], [768, 1]])
    gathered = 16384 * 768 * 4
    assert c.bytes == gathered + 16384 * 8 + gathered  # gathered elements read, distinct indices, output written


def test_nll_loss_backward_writes_one_gradient_entry_per_target():
    c = op_cost("aten::nll_loss_backward", [[], [16384, 50257], [16384], [], [], [], []],
                [F32, F32, "long int", "", "Scalar", "Scalar", F32])
    assert c.bytes < 16384 * 50257 * 4 / 100  # not the whole zero-filled gradient, which another op writes
    assert c.bytes == 4 + 16384 * 8 + 4 + 16384 * 4


def test_tensor_lists_take_their_element_size_from_the_kernel_name():
    cat = "CatArrayBatchedCopy_vectorized<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 3, 128>"
    assert costs.kernel_element_bytes(cat) == 2
    assert costs.kernel_element_bytes("multi_tensor_apply_kernel<TensorListMetadata<3>, "
                                      "BinaryOpListAlphaFunctor<float, 3, 2, 2>, std::plus<float>, float>") == 4
    assert costs.kernel_element_bytes("vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>>") == 2
    assert costs.kernel_element_bytes("sm90_xmma_gemm_f16f16_f16f32") is None
    shapes = [[[16, 1024, 768]] * 3, []]
    assert op_cost("aten::cat", shapes, ["TensorList", "Scalar"], extra=["", "2"], list_item=2).bytes == \
        2 * 3 * 16 * 1024 * 768 * 2
    assert op_cost("aten::cat", shapes, ["TensorList", "Scalar"], extra=["", "2"]).bytes == 2 * 3 * 16 * 1024 * 768 * 4


def test_cudnn_attention_counts_like_sdpa_and_honours_the_causal_flag():
    q = [16, 12, 1024, 64]
    full = 4 * 16 * 12 * 1024 * 1024 * 64  # QK^T and PV
    causal = op_cost("aten::_cudnn_attention_forward", [q, q, q] + [[]] * 9, [F16] * 3 + [""] * 3 + ["Scalar"] * 6,
                     extra=["", "", "", "", "", "", "1024", "1024", "True", "0.0", "True", "False"])
    assert causal.flops == pytest.approx(full * (1024 + 1) / 2 / 1024)


def test_pointwise_losses_count_flops_per_element_and_reduce_unless_asked_not_to():
    x = [64, 10]
    bce = op_cost("aten::binary_cross_entropy", [x, x, [], []], [F32, F32, "", "Scalar"], extra=[None, None, None, 1])
    assert bce.flops == costs.BCE_FLOPS * 640 and bce.bytes == 2 * 640 * 4 + 4  # input, target; a scalar out
    unreduced = op_cost("aten::huber_loss", [x, x, [], []], [F32, F32, "Scalar", "Scalar"], extra=[None, None, 0, 1.0])
    assert unreduced.flops == costs.SMOOTH_L1_FLOPS * 640 and unreduced.bytes == 3 * 640 * 4
    back = op_cost("aten::smooth_l1_loss_backward", [x, x, x, [], []], [F32] * 3 + ["Scalar", "Scalar"],
                   extra=[None, None, None, 1, 1.0])
    assert back.flops == costs.SMOOTH_L1_FLOPS * 640 and back.bytes == 4 * 640 * 4  # grad, input, target in; grad out
