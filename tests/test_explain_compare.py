"""A/B comparison of explained steps: category deltas, matched vs unmatched work, the sentence, the loader."""

import dataclasses
import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pygpuperf.explain import attribution
from pygpuperf.compare import explained as compare
from pygpuperf.explain.model import ExplainedStep, Explanation
from pygpuperf.explain.model import Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.core.vocabulary import KernelClass

FIXTURES = Path(__file__).parent / "fixtures"
# The three recorded H200 profiles the fixture describes, with what loading and comparing them reads.
PROFILES = FIXTURES / "explain_resnet50_h200_profiles.json.gz"


def kernel(cls: str, us: float, op: str, shapes=((256, 64, 56, 56),), phase: str = "forward",
           name: str = "k") -> KernelRecord:
    return KernelRecord(name=name, start_us=0.0, duration_us=us, op=op, input_shapes=[list(s) for s in shapes],
                        phase=phase, kernel_class=cls)


def step(records: list[KernelRecord], idle: Idle | None = None) -> Explanation:
    t = 0.0
    for r in records:
        r.start_us, t = t, t + r.duration_us
    idle = idle or Idle()
    line = Timeline(wall_us=t + idle.total_us, busy_us=t, idle=idle)
    water = Waterfall(ideal_us=0.0, parts={}, measured_us=line.wall_us, unexplained_us=0.0, coverage=1.0)
    s = ExplainedStep(0, records, line, water, [])
    return Explanation("cuda:0", [s], s)


def runs():
    """B (nchw-like) adds layout kernels under the conv, runs batch norm slower and idles less than A."""
    a = step([kernel("tensor_gemm", 400, "aten::cudnn_convolution"),
              kernel("memory_bound", 300, "aten::native_batch_norm"),
              kernel("memory_bound", 100, "aten::relu_")], Idle(host_bound_us=200.0))
    b = step([kernel("layout", 150, "aten::cudnn_convolution", name="nchwToNhwc"),
              kernel("tensor_gemm", 420, "aten::cudnn_convolution"),
              kernel("layout", 150, "aten::cudnn_convolution", name="nhwcToNchw"),
              kernel("memory_bound", 600, "aten::native_batch_norm"),
              kernel("memory_bound", 100, "aten::relu_")], Idle(host_bound_us=50.0))
    return a, b


def changes(pair: compare.PairComparison) -> dict[str, compare.CategoryChange]:
    return {c.category: c for c in pair.changes}


# --------------------------------------------------------------------------- synthetic runs


def test_pair_matches_compare_categories():
    a, b = runs()
    pair = compare.compare_pair((a.median.kernels, a.median.timeline), (b.median.kernels, b.median.timeline), "A", "B")
    reference = attribution.compare_categories((a.median.kernels, a.median.timeline),
                                               (b.median.kernels, b.median.timeline))
    got = changes(pair)
    for d in reference:
        assert got[d.category].delta_us == pytest.approx(d.delta_us)
        assert got[d.category].base_us == pytest.approx(d.a_us) and got[d.category].other_us == pytest.approx(d.b_us)
        if d.category in tuple(KernelClass):
            assert got[d.category].matched_us == pytest.approx(d.matched_us)
            assert got[d.category].unmatched_us == pytest.approx(d.unmatched_us)
        else:
            assert got[d.category].matched_us is None
    assert sum(c.delta_us for c in pair.changes) == pytest.approx(pair.delta_us) == pytest.approx(1470 - 1000)
    assert got["layout"].unmatched_us == pytest.approx(300) and got["memory_bound"].matched_us == pytest.approx(300)


def test_sentence_names_moves_largest_first_then_offsets():
    a, b = runs()
    c = compare.compare([compare.Config("nchw", b, 256), compare.Config("channels_last", a, 256)])
    assert c.baseline == "channels_last" and c.unit == "step"  # the fastest is the baseline
    (pair,) = c.pairs
    text = pair.sentence()
    assert text.startswith("nchw is 0.47 ms slower per step than channels_last (1.47 vs 1.00 ms per step): ")
    # Equal moves keep the category order (kernel classes: memory-bound before layout).
    assert ("0.30 ms more in memory-bound kernels (the same work running slower), 0.30 ms more in layout "
            "transforms (100% of it in kernels only nchw runs)") in text
    assert "0.02 ms more in tensor-core GEMMs" in text
    assert "; offset by 0.15 ms less in host-bound idle." in text
    assert "Named categories carry 100% of the difference." in text
    assert pair.named_share == 1.0


def test_faster_config_reads_the_other_way():
    a, b = runs()
    c = compare.compare([compare.Config("nchw", b), compare.Config("channels_last", a)], baseline="nchw")
    text = c.pairs[0].sentence()
    assert text.startswith("channels_last is 0.47 ms faster per step than nchw")
    assert "0.30 ms less in layout transforms (100% of it in kernels only nchw runs)" in text
    assert "offset by 0.15 ms more in host-bound idle" in text


def test_unnamed_time_lowers_the_named_share():
    a, _ = runs()
    b = step([kernel("tensor_gemm", 400, "aten::cudnn_convolution"), kernel("memory_bound", 300,
              "aten::native_batch_norm"), kernel("memory_bound", 100, "aten::relu_"),
              kernel("other", 150, "aten::mystery"), kernel("memory_bound", 50, "aten::add_")],
             Idle(host_bound_us=200.0))
    c = compare.compare([compare.Config("A", a), compare.Config("B", b)], baseline="A")
    pair = c.pairs[0]
    assert pair.delta_us == pytest.approx(200) and pair.unnamed_us == pytest.approx(150)
    assert pair.named_share == pytest.approx(0.25)
    text = "\n".join(c.summary_lines())
    assert "only 25% of the B vs A difference is in named categories (goal 80%)" in text
    assert "unclassified kernels" in text


def test_same_speed_and_table():
    a, _ = runs()
    a2, _ = runs()
    c = compare.compare([compare.Config("x", a), compare.Config("y", a2)], baseline="x")
    assert c.pairs[0].sentence() == "y runs at the same speed as x (1.00 vs 1.00 ms per step)."
    table = c.table_lines()
    assert table[0].split()[:3] == ["ms", "per", "step"] and table[-1].split()[:2] == ["=", "step"]
    assert any(line.startswith("host-bound idle") for line in table)
    assert not any(line.startswith("layout") for line in table)  # all zero: left out


def test_different_batches_compare_per_sample():
    small = step([kernel("tensor_gemm", 100, "aten::mm", ((64, 8),))], Idle(host_bound_us=300.0))
    large = step([kernel("tensor_gemm", 400, "aten::mm", ((256, 8),))], Idle(host_bound_us=100.0))
    c = compare.compare([compare.Config("bs64", small, 64), compare.Config("bs256", large, 256)])
    assert c.unit == "sample" and c.baseline == "bs256"
    assert c.wall_us == {"bs64": pytest.approx(400 / 64), "bs256": pytest.approx(500 / 256)}
    got = changes(c.pairs[0])
    assert got["idle_host_bound"].delta_us == pytest.approx(300 / 64 - 100 / 256)
    assert got["tensor_gemm"].matched_us is None  # shapes differ with the batch: no pairing
    assert "per sample" in c.pairs[0].sentence()
    json.dumps(c.to_dict())


def test_bad_comparisons():
    a, b = runs()
    with pytest.raises(ValueError, match="at least two"):
        compare.compare([compare.Config("a", a)])
    with pytest.raises(ValueError, match="must differ"):
        compare.compare([compare.Config("a", a), compare.Config("a", b)])
    with pytest.raises(ValueError, match="baseline"):
        compare.compare([compare.Config("a", a), compare.Config("b", b)], baseline="c")


def test_explanation_round_trips_through_json():
    a, _ = runs()
    a.median.kernels[0].bound_us = 500.0  # faster than its bound: the self-check must come back
    a = dataclasses.replace(a, unknown_ops={"aten::mystery": 3.0})
    doc = json.loads(json.dumps(a.to_dict(), default=str))
    back = compare.explanation_from_json(doc)
    assert [dataclasses.asdict(r) for r in back.median.kernels] == [dataclasses.asdict(r) for r in a.median.kernels]
    assert back.median.timeline == a.median.timeline and back.median.waterfall == a.median.waterfall
    assert [r.op for r in back.median.self_check] == ["aten::cudnn_convolution"]
    assert back.unknown_ops == {"aten::mystery": 3.0} and back.steps == [back.median]


def test_the_steps_window_and_its_host_syncs_load_back_validated(tmp_path):
    a, _ = runs()
    a.median.window_us, a.median.syncs = (100.0, 900.0), [(400.0, 420.5), (880.0, 899.0)]
    (tmp_path / "explain.json").write_text(json.dumps(a.to_dict(), default=str))
    back = compare.load_explanation(tmp_path)  # validated against the schema
    assert back.median.window_us == (100.0, 900.0) and back.median.syncs == [(400.0, 420.5), (880.0, 899.0)]
    doc = a.to_dict()
    del doc["step_window_us"], doc["syncs_us"]  # a file written before they were kept
    assert compare.explanation_from_json(doc).median.syncs == [] and \
        compare.explanation_from_json(doc).median.window_us is None


def test_batch_norm_timings_load_back_in_either_form(tmp_path):
    """Every shape timed (a list) is what explain.json holds now; a file written when only the largest shape
    was timed holds one object, and loads as that one shape."""
    from pygpuperf.trials.norms import NormTiming
    from pygpuperf.report.explained import explain_document
    from pygpuperf.trials.record import Trials

    a, _ = runs()
    timed = Trials(norm_timings=(NormTiming([8, 32, 8, 8], True, True, {"fp16": 10.0, "bf16": 17.5}),
                                 NormTiming([8, 16, 4, 4], False, True, {"fp16": 1.0})))
    doc = json.loads(json.dumps(explain_document(a, None, timed), default=str))
    (tmp_path / "explain.json").write_text(json.dumps(doc))
    _, back = compare.load_explained(tmp_path)  # validated against the schema
    assert [t.to_dict() for t in back.norm_timings] == [t.to_dict() for t in timed.norm_timings]
    doc["batch_norm_timing"] = doc["batch_norm_timing"][0]
    (tmp_path / "explain.json").write_text(json.dumps(doc))
    assert [t.shape for t in compare.load_explained(tmp_path)[1].norm_timings] == [[8, 32, 8, 8]]

# --------------------------------------------------------------------------- H200 ResNet-50 numbers


def h200_pair():
    """channels_last and nchw rebuilt from the fixture's matched/unmatched kernel time per class: all matched
    kernels share one op key (so cross-class pairs stay possible), each unmatched one has a key of its own."""
    doc = json.loads((FIXTURES / "explain_resnet50_h200.json").read_text())
    by_class = doc["pair"]["by_class"]
    matched = {side: [kernel(cls, v[f"{side}_matched_us"], "aten::shared") for cls, v in by_class.items()
                      if v[f"{side}_matched_us"] > 0] for side in "ab"}
    while len(matched["a"]) != len(matched["b"]):  # split the largest kernel of the shorter side
        short = min(matched.values(), key=len)
        big = max(short, key=lambda r: r.duration_us)
        big.duration_us -= 1.0
        short.append(kernel(big.kernel_class, 1.0, "aten::shared"))
    runs = {}
    for side, label in (("a", doc["pair"]["a"]), ("b", doc["pair"]["b"])):
        only = [kernel(cls, v[f"{side}_unmatched_us"], f"aten::only_{side}_{cls}") for cls, v in by_class.items()
                if v[f"{side}_unmatched_us"] > 0]
        config = doc["configs"][label]
        runs[label] = step(matched[side] + only, Idle(**config["timeline"]["idle"]))
        assert runs[label].median.timeline.wall_us == pytest.approx(config["timeline"]["wall_us"], abs=0.01)
    return runs, doc


def test_h200_nchw_against_channels_last():
    runs, doc = h200_pair()
    c = compare.compare([compare.Config("nchw", runs["nchw"], 256),
                         compare.Config("channels_last", runs["channels_last"], 256)])
    pair = c.pairs[0]
    got = changes(pair)
    for category, ref in doc["pair"]["compare_categories"].items():
        assert got[category].delta_us == pytest.approx(ref["delta_us"], abs=0.05)
        if category in tuple(KernelClass):
            assert got[category].matched_us == pytest.approx(ref["matched_us"], abs=0.05)
            assert got[category].unmatched_us == pytest.approx(ref["unmatched_us"], abs=0.05)
    assert pair.named_share >= compare.NAMED_SHARE_GOAL
    text = pair.sentence()
    assert text.startswith("nchw is 32.2 ms slower per step than channels_last (86.0 vs 53.8 ms per step): "
                           "26.0 ms more in memory-bound kernels (the same work running slower), 13.5 ms more in "
                           "layout transforms (85% of it in kernels only nchw runs)")
    assert "offset by 7.45 ms less in host-bound idle, 1.44 ms less in launch gaps" in text


def test_h200_batch_64_against_256_per_sample():
    doc = json.loads((FIXTURES / "explain_resnet50_h200.json").read_text())["configs"]

    def config(label: str) -> compare.Config:
        d = doc[label]
        records = [kernel(cls, us, f"aten::{cls}") for cls, us in d["category_us"].items()
                   if cls in tuple(KernelClass) and us > 0]
        return compare.Config(label, step(records, Idle(**d["timeline"]["idle"])), d["batch_size"])

    c = compare.compare([config("channels_last_bs64"), config("channels_last")])
    pair = c.pairs[0]
    assert c.unit == "sample" and pair.base == "channels_last"
    assert pair.other_us == pytest.approx(38302.9 / 64, rel=1e-4) and pair.base_us == pytest.approx(53754.7 / 256,
                                                                                                    rel=1e-3)
    # Most of what a small batch loses per sample is the GPU waiting on the host.
    idle = changes(pair)["idle_host_bound"].delta_us + changes(pair)["idle_launch_gaps"].delta_us
    assert idle / pair.delta_us > 0.9
    assert pair.sentence().startswith("channels_last_bs64 is 389 µs slower per sample than channels_last "
                                      "(598 vs 210 µs per sample): 274 µs more in host-bound idle")


def test_h200_profiles_load_and_agree_with_the_fixture(tmp_path):
    for folder, profile in json.loads(gzip.decompress(PROFILES.read_bytes())).items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "explain.json").write_text(json.dumps(profile))
    doc = json.loads((FIXTURES / "explain_resnet50_h200.json").read_text())
    loaded = {}
    for label, config in doc["configs"].items():
        e = compare.load_explanation(tmp_path / config["folder"])
        times = attribution.category_times(e.median.kernels, e.median.timeline)
        for category, us in config["category_us"].items():
            assert times[category] == pytest.approx(us, abs=0.01)
        assert sorted(r.op for r in e.median.self_check) == sorted(
            op for op, n in config["self_check_ops"].items() for _ in range(n))
        loaded[label] = compare.Config(label, e, config["batch_size"])
    c = compare.compare([loaded["nchw"], loaded["channels_last"]])
    assert c.pairs[0].sentence().startswith("nchw is 32.2 ms slower per step than channels_last")


# --------------------------------------------------------------------------- the command line


def test_cli_compare_config_on_user_code(tmp_path):
    from test_explain_cli import _machine_model_file

    user = tmp_path / "user_step.py"
    user.write_text(textwrap.dedent("""
        import torch

        def make_step(device, batch_size=4, width=32):
            width = int(width)
            model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU()).to(device)
            x = torch.randn(batch_size, width, device=device)

            def step():
                model(x).sum().backward()
            return step
    """))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.explain", f"{user}:make_step", "--device", "cpu",
                           "--machine-model", str(_machine_model_file(tmp_path)), "--steps", "1", "--out", str(out),
                           "--compare-config", "width=16,batch_size=64", "width=1024,batch_size=64"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "compare.json").read_text())
    assert sorted(doc["labels"]) == ["width=1024", "width=16"]  # the shared batch_size is left out of the labels
    assert (out / "width-16" / "explain.json").exists() and (out / "width-1024" / "findings.json").exists()
    assert "== comparison" in proc.stdout and "per step than" in proc.stdout


@pytest.mark.parametrize("args, words", [
    (["--compare-config", "memory_format=nchw"], "two or more knob sets"),
    (["--compare-config", "memory_format", "amp=bf16"], "NAME=VALUE"),
    (["--compare-config", "no_such_knob=1", "amp=bf16"], "no knob no_such_knob"),
    (["--batch-sweep", "32,x"], "integers"),
])
def test_cli_bad_flags_are_one_line_errors(args, words):
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.explain", "resnet18-train-small", "--device", "cpu",
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr[-2000:]
