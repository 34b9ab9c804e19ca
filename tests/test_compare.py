"""`python -m pygpuperf.compare`: a measured H200 against datasheet cards, and its answers to bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pygpuperf.core import documents
from pygpuperf.compare import compare, comparison_dict, load_entry
from pygpuperf.core.errors import UsageError
from pygpuperf.core.results import COUNTING_CONVENTION, Measurement, Results
from pygpuperf.analyze.machine_model import build_machine_model

H200_RESULTS = (Path(__file__).resolve().parent.parent
                / "benchmarks/reference/machines/nvidia-h200_2026-11-30_compute-transfers_results.json")


def _cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "pygpuperf.compare", *args], capture_output=True, text=True,
                          timeout=120, **kwargs)


def _assert_usage_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    assert lines[0].startswith("pygpuperf: error:")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _m(name, value):
    seconds = 1e-3
    work = value * (1e12 if name.startswith("compute.") else 1e9) * seconds
    memory = not name.startswith("compute.")
    return Measurement.from_samples(name, sample_seconds=[seconds] * 3, bytes_read=work if memory else 0.0,
                                    bytes_written=0.0, flops=0.0 if memory else work, backend="native-cuda",
                                    device="cuda:0", verified=True)


def _synthetic_h200(out: Path) -> Path:
    """An H200 results file written by this version of pygpuperf (figures from the committed run)."""
    measurements = [_m("memory.hbm.write", 4698.5), _m("compute.tensor.fp16.acc16", 938.1),
                    _m("compute.tensor.fp16.acc32", 875.0), _m("compute.tensor.bf16.acc32", 943.1),
                    _m("compute.tensor.fp8.acc32", 1893.9), _m("compute.tensor.int8.acc32", 1918.1),
                    _m("transfer.h2d.pinned", 55.5)]
    meta = {"versions": {"pygpuperf": "test", "torch": "test", "python": "test"}, "host": {},
            "device": {"type": "cuda", "name": "NVIDIA H200"}, "time_utc": "2026-11-30T00:00:00+00:00",
            "counting": COUNTING_CONVENTION}
    results = Results(meta=meta, measurements=measurements,
                      machine_model=build_machine_model("cuda:0", measurements))
    return documents.write_results(results, out)["json"]  # validates what it writes


@pytest.fixture
def h200(tmp_path) -> Path:
    """The committed H200 run, or a synthetic one where the schema has moved on since it was written."""
    try:
        documents.load_results(H200_RESULTS)
        return H200_RESULTS
    except documents.ResultsFileError:
        return _synthetic_h200(tmp_path)


@pytest.fixture
def valid_doc(tmp_path) -> dict:
    return json.loads(_synthetic_h200(tmp_path).read_text())


@pytest.mark.parametrize("run", ["committed", "synthetic"])
def test_h200_against_datasheet_cards(run, h200, tmp_path):
    path = h200 if run == "committed" else _synthetic_h200(tmp_path / "synthetic")
    entries = [load_entry(str(path)), load_entry("datasheet:rtx3090"), load_entry("datasheet:v100-sxm2"),
               load_entry("datasheet:a100-sxm4-80gb")]
    c = compare(entries)
    h200_label = entries[0].label
    assert h200_label == "NVIDIA H200 (measured)" and entries[0].origin == "measured"
    text = "\n".join(c.statements)
    assert ("rtx3090's FP16 tensor rate with FP32 accumulate is half its FP16-accumulate rate; AMP training there "
            "gets 71 of the 142 TFLOP/s headline.") in c.statements
    for card, rate in (("a100-sxm4-80gb", 312), ("v100-sxm2", 125)):
        assert (f"{card} runs FP16 tensor math with FP32 accumulate at its full rate ({rate} TFLOP/s), so AMP "
                "training gets the headline figure.") in c.statements
        assert f"{card}'s FP16 tensor rate with FP32 accumulate is" not in text
    hbm = entries[0].model.memory["hbm"].value
    ratio = 936 / hbm
    assert (f"rtx3090 has {ratio:.2g}x the memory bandwidth of {h200_label} (936 vs {hbm:,.0f} GB/s): "
            f"memory-bound steps take up to {1 / ratio:.2g}x as long.") in c.statements
    assert f"a100-sxm4-80gb has {2039 / hbm:.2g}x the HBM bandwidth of {h200_label}" in text
    assert f"v100-sxm2 has {900 / hbm:.2g}x the HBM bandwidth of {h200_label}" in text
    (row,) = [r for r in c.rows if (r.family, r.key) == ("memory", "hbm")]
    assert row.ratios == pytest.approx([1.0, 936 / hbm, 900 / hbm, 2039 / hbm])
    verdicts = {v.use: v for v in c.verdicts}
    assert verdicts["amp_training"].winner == h200_label and verdicts["amp_training"].runner_up == "a100-sxm4-80gb"
    assert verdicts["memory_bound"].winner == h200_label
    assert "v100-sxm2 has no FP8 or INT8 tensor rate here" in text
    assert "Measured ceilings are what a card sustains" in text


def test_datasheet_cards_against_each_other():
    c = compare([load_entry("datasheet:a100-sxm4-80gb"), load_entry("datasheet:h100-sxm"),
                 load_entry("datasheet:a100-pcie-80gb"), load_entry("datasheet:rtx4090")])
    assert ("h100-sxm has 1.6x the HBM bandwidth of a100-sxm4-80gb (3,350 vs 2,039 GB/s): memory-bound steps run "
            "up to 1.6x faster.") in c.statements
    assert "a100-pcie-80gb and a100-sxm4-80gb have about the same HBM bandwidth (1,935 vs 2,039 GB/s)." in c.statements
    assert any(s.startswith("rtx4090 has 0.49x the memory bandwidth") for s in c.statements)
    assert "rtx4090 has no NVLink or other GPU-to-GPU link: multi-GPU training exchanges gradients over PCIe." in c.statements
    assert any(s.startswith("h100-sxm copies from pinned host memory at 2x the rate of a100-sxm4-80gb") and
               "PCIe Gen5 x16 vs PCIe Gen4 x16" in s for s in c.statements)
    assert ("For AMP training (FP16 or BF16 with FP32 accumulate) h100-sxm wins: 990 TFLOP/s (tensor.fp16.acc32), "
            "3.2x a100-sxm4-80gb.") in c.statements
    inference = [s for s in c.statements if s.startswith("For FP8/INT8 inference")]
    assert inference == ["For FP8/INT8 inference h100-sxm wins: 1,979 TFLOP/s (tensor.fp8.acc32), 3x rtx4090."]
    assert not any("Measured ceilings" in s for s in c.statements)  # no measured entry


def test_level_cards_are_called_level():
    c = compare([load_entry("datasheet:a100-sxm4-80gb"), load_entry("datasheet:a100-pcie-80gb")])
    assert ("For AMP training (FP16 or BF16 with FP32 accumulate) a100-sxm4-80gb and a100-pcie-80gb are level "
            "(312 TFLOP/s, tensor.fp16.acc32).") in c.statements


def test_the_same_card_twice_gets_distinct_labels():
    c = compare([load_entry("datasheet:l40s"), load_entry("datasheet:l40s")])
    assert [e.label for e in c.entries] == ["l40s", "l40s #2"]


def test_json_output(h200):
    proc = _cli(str(h200), "datasheet:rtx3090", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [e["label"] for e in doc["entries"]] == ["NVIDIA H200 (measured)", "rtx3090"]
    assert [e["origin"] for e in doc["entries"]] == ["measured", "datasheet"]
    assert doc["entries"][0]["datasheet"] == "h200-sxm" and doc["entries"][1]["facts"]["memory_type"] == "GDDR6X"
    (hbm,) = [r for r in doc["families"]["memory"] if r["key"] == "hbm"]
    assert hbm["values"][1] == 936 and hbm["ratios"][0] == 1.0
    assert {v["use"]: v["winner"] for v in doc["verdicts"]}["amp_training"] == "NVIDIA H200 (measured)"
    assert any("half its FP16-accumulate rate" in s for s in doc["statements"])
    assert "What differs" in proc.stderr  # the tables go to stderr with --json


def test_table_output_and_card_list():
    proc = _cli("datasheet:rtx3090", "datasheet:a100-sxm4-80gb")
    assert proc.returncode == 0, proc.stderr
    assert "tensor.fp16.acc32" in proc.stdout and "What differs" in proc.stdout and "GDDR6X" in proc.stdout
    listed = _cli("--list")
    assert listed.returncode == 0 and "datasheet:mi300x" in listed.stdout and "datasheet:titan-rtx" in listed.stdout


def test_results_folder_is_accepted(h200, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.json").write_text(Path(h200).read_text())
    assert load_entry(str(folder)).origin == "measured"


def test_bad_arguments():
    _assert_usage_error(_cli("datasheet:rtx9090", "datasheet:a40"), "datasheet:rtx9090", "datasheet:rtx3090")
    _assert_usage_error(_cli("missing.json", "datasheet:a40"), "missing.json", "pygpuperf.roofline", "datasheet:<card>")
    _assert_usage_error(_cli("datasheet:a40"), "two or more")
    _assert_usage_error(_cli("--nonsense", "datasheet:a40"), "--nonsense")


def _write(tmp_path, name, content) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_malformed_and_hostile_results_files(tmp_path, valid_doc):
    def variant(mutate) -> str:
        doc = json.loads(json.dumps(valid_doc))
        mutate(doc)
        return json.dumps(doc)

    cases = {
        "not JSON": ("this is not { json", "not valid JSON"),
        "empty": ("", "not valid JSON"),
        "NaN constant": (json.dumps(valid_doc).replace('"value": 4698.5', '"value": NaN', 1), "NaN"),
        "wrong type": (variant(lambda d: d.update(measurements="all of them")), "not a valid pygpuperf/1 results file"),
        "ceiling of the wrong type": (variant(lambda d: d["machine_model"]["memory"]["hbm"].update(value="fast")),
                                      "machine_model/memory/hbm/value"),
        "class key in a ceiling": (variant(lambda d: d["machine_model"]["memory"]["hbm"].update(__class__="os.system")),
                                   "__class__"),
        "class key as a ceiling name": (variant(lambda d: d["machine_model"]["compute"].update(
            __class__=d["machine_model"]["memory"]["hbm"])), "not a measurement name"),
        "overflowing float": (json.dumps(valid_doc).replace(
            json.dumps(valid_doc["machine_model"]["memory"]["hbm"]["value"]), "1e999"), "out of range"),
        "integer beyond any float": (variant(lambda d: d["machine_model"]["memory"]["hbm"].update(value=10 ** 400)),
                                     "out of range"),
        "forged unit": (variant(lambda d: d["machine_model"]["memory"]["hbm"].update(unit="\x1b[2J[blink]GB/s")),
                        "not GB/s"),
        "negative ceiling": (variant(lambda d: d["machine_model"]["memory"]["hbm"].update(value=-5)),
                             "not a plausible figure"),
        "deep nesting": ('{"meta": ' + "[" * 100000 + "]" * 100000 + "}", "not valid JSON"),
        "schema of something else": ({"schema": "other/9", "cards": []}, "not a valid pygpuperf/1 results file"),
    }
    for label, (content, fragment) in cases.items():
        path = _write(tmp_path, f"{label.replace(' ', '_')}.json", content)
        with pytest.raises(UsageError) as err:
            load_entry(path)
        message = str(err.value)
        assert fragment in message and "\n" not in message, (label, message)
        assert message.startswith(path), (label, message)
    # and through the command line: one line, exit code 2
    _assert_usage_error(_cli(str(tmp_path / "not_JSON.json"), "datasheet:a40"), "not valid JSON",
                        "pygpuperf.roofline")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    _assert_usage_error(_cli(str(binary), "datasheet:a40"), "binary.json")


def test_a_hostile_device_name_is_printed_as_text(tmp_path, valid_doc):
    valid_doc["meta"]["device"]["name"] = "\x1b[31m[bold red]EVIL[/bold red]\nsecond line"
    path = _write(tmp_path, "evil.json", valid_doc)
    proc = _cli(path, "datasheet:a40")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert "[bold red]EVIL[/bold red] second line (measured)" in proc.stdout


def test_comparison_dict_is_strict_json(h200):
    doc = comparison_dict(compare([load_entry(str(h200)), load_entry("datasheet:mi300x")]))
    json.dumps(doc, allow_nan=False)
    assert doc["ratios_against"] == "NVIDIA H200 (measured)"
    assert set(doc["families"]) == {"compute", "memory", "links", "latency", "communication"}


def _noisy_run(out: Path, value: float, spread: float) -> Path:
    """A run whose samples spread by `spread` around `value`: the same card measured on a busy host."""
    measurements = []
    for name, figure in (("memory.hbm.write", value), ("compute.tensor.fp16.acc32", value / 5)):
        seconds = [1e-3 * (1 + spread * k) for k in (-1.0, -0.5, 0.0, 0.5, 1.0)]
        work = figure * (1e12 if name.startswith("compute.") else 1e9) * 1e-3
        memory = name.startswith("memory.")
        measurements.append(Measurement.from_samples(name, sample_seconds=seconds, bytes_read=work if memory else 0.0,
                                                     bytes_written=0.0, flops=0.0 if memory else work,
                                                     backend="native-cuda", device="cuda:0", verified=True))
    meta = {"versions": {"pygpuperf": "test", "torch": "test", "python": "test"}, "host": {},
            "device": {"type": "cuda", "name": "NVIDIA H200"}, "time_utc": "2026-11-30T00:00:00+00:00",
            "counting": COUNTING_CONVENTION}
    results = Results(meta=meta, measurements=measurements,
                      machine_model=build_machine_model("cuda:0", measurements))
    out.mkdir(parents=True)
    return documents.write_results(results, out)["json"]


def test_one_card_measured_twice_in_noise_is_the_same_not_a_winner(tmp_path):
    # A quiet run and a run on a busy host, 0.8x apart with a 40 % spread: the difference is noise.
    quiet, busy = _noisy_run(tmp_path / "a", 4700.0, 0.01), _noisy_run(tmp_path / "b", 3760.0, 0.6)
    c = compare([load_entry(str(quiet)), load_entry(str(busy))])
    assert all(v.within_noise for v in c.verdicts if v.runner_up)
    text = " ".join(c.statements)
    assert " wins:" not in text and "no winner" in text
    assert "the same HBM bandwidth within their measured spread" in text
    # Two quiet runs the same 0.8x apart: a real difference, and it is named.
    steady = compare([load_entry(str(quiet)), load_entry(str(_noisy_run(tmp_path / "c", 3760.0, 0.01)))])
    assert any(" wins:" in s for s in steady.statements)
