"""Kernel classes and precisions from kernel names, launching ops, dtypes and math settings."""

import json
from pathlib import Path

import pytest

from pygpuperf.explain.classify import RULES, KernelContext, MathSettings, classify, classify_all
from pygpuperf.explain.model import KernelRecord
from pygpuperf.core.vocabulary import KernelClass

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "kernel_names.json").read_text())
KERNELS = FIXTURE["kernels"]


def record(name, op="", dtypes=()):
    return KernelRecord(name=name, start_us=0.0, duration_us=1.0, op=op, dtypes=list(dtypes))


@pytest.mark.parametrize("entry", KERNELS, ids=[f"{e['class']}-{i}" for i, e in enumerate(KERNELS)])
def test_fixture_names(entry):
    ctx = KernelContext(
        op_stack=tuple(entry.get("op_stack", ())),
        layout_copy=entry.get("layout_copy", False),
        settings=MathSettings(**entry.get("settings", {})),
    )
    got = classify(record(entry["name"], entry["op"], entry["dtypes"]), ctx)
    assert got == (entry["class"], entry["precision"]), entry["source"]


def test_fixture_covers_every_class():
    assert {e["class"] for e in KERNELS} == set(tuple(KernelClass))
    assert len({e["name"] for e in KERNELS if "op_stack" not in e and "layout_copy" not in e}) >= 50


# A cuBLAS-style FFMA/TF32-ambiguous name: fp32 operands, no tf32 field.
FP32_XMMA = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_execute_kernel__5x_cublas"


def test_fp32_gemm_follows_the_tf32_switches():
    mm = record(FP32_XMMA, "aten::mm", ["float32", "float32"])
    assert classify(mm) == (KernelClass.VECTOR_MATH, "fp32")  # torch's default: no TF32 for matmuls
    assert classify(mm, KernelContext(settings=MathSettings(matmul_tf32=True))) == (KernelClass.TENSOR_GEMM, "tf32.acc32")
    # Convolutions follow cuDNN's switch, which torch leaves on.
    conv = record(FP32_XMMA.replace("gemm", "fprop_implicit_gemm"), "aten::cudnn_convolution", ["float32"])
    assert classify(conv) == (KernelClass.TENSOR_GEMM, "tf32.acc32")
    assert classify(conv, KernelContext(settings=MathSettings(cudnn_tf32=False))) == (KernelClass.VECTOR_MATH, "fp32")


def test_fp16_accumulation_switch_when_the_name_does_not_say():
    # A GEMM kernel no name rule knows, launched by aten::mm: class and precision from the op.
    gemm = record("gemm_kernel_from_a_new_library", "aten::mm", ["float16", "float16"])
    assert classify(gemm) == (KernelClass.TENSOR_GEMM, "fp16.acc32")
    acc16 = KernelContext(settings=MathSettings(fp16_accumulation=True))
    assert classify(gemm, acc16) == (KernelClass.TENSOR_GEMM, "fp16.acc16")
    # Where the name spells the accumulator, the name wins over the switch.
    named = record("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT", "aten::mm", ["float16", "float16"])
    assert classify(named, acc16) == (KernelClass.TENSOR_GEMM, "fp16.acc32")
    # The same unknown name outside a GEMM op is not math.
    assert classify(record("gemm_kernel_from_a_new_library", "my_ext::op", ["float16"])) == (KernelClass.OTHER, "")


COPY = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >"
)


def test_copy_kernel_class_depends_on_the_launching_op():
    copy = record(COPY, "aten::copy_", ["float32", "float32"])
    assert classify(copy) == (KernelClass.MEMORY_BOUND, "fp32")
    assert classify(copy, KernelContext(op_stack=("aten::contiguous", "aten::clone", "aten::copy_"))) == (KernelClass.LAYOUT, "")
    assert classify(copy, KernelContext(op_stack=("aten::add_", "aten::copy_"))) == (KernelClass.MEMORY_BOUND, "fp32")
    assert classify(copy, KernelContext(layout_copy=True)) == (KernelClass.LAYOUT, "")
    # The record's own op counts as the innermost op when no stack is given.
    assert classify(record(COPY, "aten::contiguous", ["float32"])) == (KernelClass.LAYOUT, "")


def test_data_precision_falls_back_to_the_kernel_name():
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul> >"
    assert classify(record(name)) == (KernelClass.MEMORY_BOUND, "bf16")
    assert classify(record(name, "aten::fill_", ["float16", "Scalar"])) == (KernelClass.MEMORY_BOUND, "fp16")


def test_unknown_kernel_is_other():
    assert classify(record("totally_custom_kernel")) == (KernelClass.OTHER, "")


def test_classify_all_sets_the_fields():
    records = [record("ampere_sgemm_128x64_nn", "aten::mm", ["float32"]), record("Memset (Device)")]
    classify_all(records)
    assert [(r.kernel_class, r.precision) for r in records] == [(KernelClass.VECTOR_MATH, "fp32"), ("memcpy_memset", "")]


def test_every_rule_is_reached_by_the_fixture():
    # A rule no fixture name reaches is either dead or untested.
    reached = set()
    zoo = json.loads((Path(__file__).parent / "fixtures" / "kernel_names_h200_zoo.json").read_text())["kernels"]
    for e in [*KERNELS, *zoo]:
        rec = record(e["name"], e["op"], e["dtypes"])
        ctx = KernelContext(op_stack=tuple(e.get("op_stack", ())), layout_copy=e.get("layout_copy", False))
        for i, rule in enumerate(RULES):
            if rule.pattern.search(rec.name) and (rule.when is None or rule.when(rec, ctx)):
                reached.add(i)
                break
    unreached = [RULES[i].pattern.pattern for i in range(len(RULES)) if i not in reached]
    assert unreached == []


# Independent of the rule table: what a kernel of a ResNet-50 step must be, read off its name.
_RECORDED_EXPECTATIONS = (
    (r"xmma_(fprop|dgrad|wgrad)|nvjet_|s16816gemm", "tensor_gemm"),
    (r"nchwToNhwc|nhwcToNchw", "layout"),
    (r"bn_fw|bn_bw|batch_norm|elementwise|reduce_kernel|max_pool|multi_tensor_apply|reduce_wgrad", "memory_bound"),
    (r"^Memcpy|^Memset", "memcpy_memset"),
)


def test_kernels_recorded_on_the_h200_get_the_class_their_names_say():
    import re

    from pygpuperf.explain.model import KernelRecord

    recorded = json.loads((Path(__file__).parent / "fixtures" / "kernel_names_h200.json").read_text())["kernels"]
    checked = 0
    for k in recorded:
        record = KernelRecord(name=k["name"], start_us=0.0, duration_us=1.0, op=k["op"], dtypes=k["dtypes"])
        kernel_class, precision = classify(record)
        for pattern, expected in _RECORDED_EXPECTATIONS:
            if re.search(pattern, k["name"]):
                assert kernel_class == expected, f"{k['name'][:120]} ({k['op']}): {kernel_class}"
                if expected == "tensor_gemm":  # fp16 AMP convolutions accumulate in fp32
                    assert precision == "fp16.acc32", f"{k['name'][:120]}: {precision}"
                checked += 1
                break
    assert checked >= 0.9 * len(recorded)


# Name -> (class, precision or None for any) for the kernels of every built-in workload on the H200.
_ZOO_EXPECTATIONS = (
    (r"nvjet_sm90_hsh", "tensor_gemm", "fp16.acc32"),  # cuBLASLt: half in, single accumulate, half out
    (r"nvjet_sm90_tst", "tensor_gemm", "bf16.acc32"),  # bfloat16 in and out
    (r"xmma\w*_f16f16_f16f32", "tensor_gemm", "fp16.acc32"),
    (r"xmma\w*_bf16bf16_bf16f32", "tensor_gemm", "bf16.acc32"),
    (r"xmma\w*_tf32f32", "tensor_gemm", "tf32.acc32"),
    (r"_ffma_", "vector_math", "fp32"),  # xmma SIMT GEMMs of fp32 without TF32
    (r"wgrad_alg0_engine|dgrad_engine", "vector_math", "fp32"),
    (r"sdpa\w*_(?:fprop|bprop)_wgmma", "tensor_gemm", None),
    (r"nchwToNhwc|nhwcToNchw|nhwcAddPadding|FoldedNhwc", "layout", None),
    (r"scalePackedTensor|compute_dot_do_o|convert_dq_to|epilogue::impl", "memory_bound", None),
    (r"bn_fw|bn_bw|batchnorm|elementwise_kernel|reduce_kernel|multi_tensor_apply|CatArray", "memory_bound", None),
    (r"^Memcpy|^Memset", "memcpy_memset", None),
    (r"ImplicitGemmConvolution", "tensor_gemm", None),  # mangled cuDNN CUTLASS convolutions
    (r"ReduceSplitK", "memory_bound", None),  # split-K partial sums, though their template names a tensor-op GEMM
    (r"tensorop_s1688gemm_\d", "tensor_gemm", "tf32.acc32"),  # fp32 data on TF32 tensor cores, as the name says
    (r"tensorop\w*bf16", "tensor_gemm", "bf16.acc32"),
    (r"softmax|max_pool|nll_loss|batch_norm_|layer_norm|GammaBeta|SoftMax|gather|embedding|cub::", "memory_bound", None),
    (r"image_first_layer_f16f16", "tensor_gemm", "fp16.acc32"),
    (r"convertTensor", "layout", None),
)


def test_kernels_of_every_built_in_workload_get_the_class_their_names_say():
    import re

    from pygpuperf.explain.model import KernelRecord

    recorded = json.loads((Path(__file__).parent / "fixtures" / "kernel_names_h200_zoo.json").read_text())["kernels"]
    checked, other = 0, []
    for k in recorded:
        record = KernelRecord(name=k["name"], start_us=0.0, duration_us=1.0, op=k["op"], dtypes=k["dtypes"])
        kernel_class, precision = classify(record)
        other += [k["name"][:80]] if kernel_class == "other" else []
        for pattern, expected, expected_precision in _ZOO_EXPECTATIONS:
            if re.search(pattern, k["name"]):
                assert kernel_class == expected, f"{k['name'][:120]} ({k['op']}, {k['workload']}): {kernel_class}"
                if expected_precision is not None:
                    assert precision == expected_precision, f"{k['name'][:120]} ({k['workload']}): {precision}"
                checked += 1
                break
    assert checked >= 0.9 * len(recorded), checked
    assert len(other) <= 3, other  # bookkeeping kernels only (offset tables, workspace init)


def test_a_split_k_convolution_keeps_its_flops_on_the_gemm_and_stays_within_its_bound():
    """One weight-gradient call from the H200 ResNet-50 fp32 step: padding, format conversion, a mangled
    CUTLASS implicit-GEMM and its split-K reduction. The GEMM carries the FLOPs; nothing beats its bound."""
    from pygpuperf.core import documents
    from pygpuperf.explain import attribution, explainer
    from pygpuperf.explain.model import KernelRecord

    fixture = json.loads((Path(__file__).parent / "fixtures" / "splitk_conv_backward_h200.json").read_text())
    records = [KernelRecord(**{k: v for k, v in e.items() if k not in ("kernel_class", "precision")})
               for e in fixture["kernels"]]
    for r in records:
        r.kernel_class, r.precision = classify(r)

    class Step:
        kernels = records

    explainer._cost_records(Step)
    results = (Path(__file__).parents[1] / "benchmarks" / "reference" / "machines"
               / "nvidia-h200_2026-11-30_compute-transfers_results.json")
    attribution.assign_bounds(records, documents.load_results(results).machine_model)
    gemm = next(r for r in records if "ImplicitGemmConvolution" in r.name)
    assert (gemm.kernel_class, gemm.precision) == ("tensor_gemm", "tf32.acc32")
    assert gemm.flops > 0 and all(r.flops == 0 for r in records if r is not gemm)
    assert attribution.self_check(records) == []


def test_a_library_zeroing_its_workspace_is_a_fill_whatever_gemm_its_template_names():
    from pygpuperf.explain.model import KernelRecord

    name = ("void cask__5x_cudnn::init_device_workspace_kernel<cask__5x_cudnn::xmma_fprop_implicit_gemm_f16f16_"
            "f16f32_nhwckrsc_nhwc_tilesize128x128x64>(int*, int)")
    assert classify(KernelRecord(name=name, start_us=0.0, duration_us=1.0, op="aten::cudnn_convolution",
                                 dtypes=["c10::Half"]))[0] == "memcpy_memset"
