"""Documents that pass their schema but hold values no run produces: every reader refuses them in one line."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from pygpuperf.analyze import machine_model
from pygpuperf.explain.model import ExplainedStep, Explanation, Throughput
from pygpuperf.explain.model import Idle, KernelRecord, Timeline, Waterfall
from pygpuperf.core.vocabulary import KernelClass
from pygpuperf.core.results import Results, Stats

HBM = 4000.0


def _results_doc(name: str = "NVIDIA H200", device: str = "cuda:0") -> dict:
    model = machine_model.machine_model("h200-sxm")
    model = dataclasses.replace(model, device=device, origin="measured")
    meta = {"versions": {"pygpuperf": "0", "torch": "0", "python": "3"}, "device": {"type": device.split(":")[0],
            "name": name}, "host": {}, "time_utc": "2026-12-01T00:00:00+00:00", "counting": "x"}
    doc = Results(meta=meta, machine_model=model).to_dict()
    doc["machine_model"]["memory"]["hbm"]["value"] = HBM
    return doc


def _profile_doc(device: str = "cuda:0", wall_us: float = 1000.0, step_us: float = 1000.0) -> dict:
    kernel = KernelRecord("add", start_us=0.0, duration_us=800.0, kernel_class=KernelClass.MEMORY_BOUND, precision="fp16",
                          bytes=1e9)
    line = Timeline(wall_us=wall_us, busy_us=800.0, idle=Idle(host_bound_us=200.0))
    step = ExplainedStep(0, [kernel], line, Waterfall(0.0, {}, wall_us, 0.0, 1.0), [])
    throughput = Throughput(Stats(1000.0, 1000.0, 1000.0, 1000.0, 0.0, 10), 64)
    doc = Explanation(device, [step], step, throughput=throughput).to_dict()
    doc["throughput"]["step_us"]["median"] = step_us  # as a forged file would hold it
    return doc


def _write(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return str(path)


def _hbm(value) -> str:
    """A results.json whose HBM ceiling is `value`, written as that text (1e400 is no Python float)."""
    return json.dumps(_results_doc()).replace(f'"value": {json.dumps(HBM)}', f'"value": {value}', 1)


HOSTILE_MODELS = {
    "zero ceiling": (_hbm("0"), "not a plausible figure"),
    "negative ceiling": (_hbm("-4000"), "not a plausible figure"),
    "ceiling past any device": (_hbm("1e308"), "not a plausible figure"),
    "ceiling beyond a double": (_hbm("1e400"), "out of range"),
}


def _predict(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pygpuperf.predict", *args], capture_output=True, text=True,
                          timeout=120)


def _one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pygpuperf: error:") and fragment in lines[0], proc.stderr


@pytest.mark.parametrize("case", sorted(HOSTILE_MODELS))
def test_predict_refuses_a_hostile_source_or_target_model(tmp_path, case):
    text, fragment = HOSTILE_MODELS[case]
    model = _write(tmp_path, "results.json", text)
    profile = _write(tmp_path, "explain.json", _profile_doc())
    _one_line_error(_predict("--profile", profile, "--source-model", model, "--target", "datasheet:rtx3090"), fragment)
    _one_line_error(_predict("--profile", profile, "--source-model", "datasheet:h200-sxm", "--target", model),
                    fragment)


@pytest.mark.parametrize("wall_us, step_us, fragment", [
    (0.0, 1000.0, "wall time"),
    (1000.0, 0.0, "unprofiled step time"),
])
def test_predict_refuses_a_profile_that_took_no_time(tmp_path, wall_us, step_us, fragment):
    profile = _write(tmp_path, "explain.json", _profile_doc(wall_us=wall_us, step_us=step_us))
    _one_line_error(_predict("--profile", profile, "--source-model", "datasheet:h200-sxm", "--target",
                             "datasheet:rtx3090"), fragment)


def test_a_device_name_with_markup_is_printed_as_it_is(tmp_path):
    model = _write(tmp_path, "results.json", _results_doc(name="[/][bold]card[/]"))
    profile = _write(tmp_path, "explain.json", _profile_doc())
    proc = _predict("--profile", profile, "--source-model", model, "--target", model, "--target", "datasheet:rtx3090")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[/][bold]card[/]" in proc.stdout


def test_predict_refuses_a_cpu_profile_on_a_gpu_model_unless_asked(tmp_path):
    profile = _write(tmp_path, "explain.json", _profile_doc(device="cpu"))
    model = _write(tmp_path, "results.json", _results_doc())
    _one_line_error(_predict("--profile", profile, "--source-model", model, "--target", "datasheet:rtx3090"),
                    "--allow-cross-device")
    proc = _predict("--profile", profile, "--source-model", model, "--target", "datasheet:rtx3090",
                    "--allow-cross-device")
    assert proc.returncode == 0, proc.stderr[-2000:]


def _explain(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pygpuperf.explain", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("case", sorted(HOSTILE_MODELS))
def test_explain_refuses_a_hostile_machine_model(tmp_path, case):
    text, fragment = HOSTILE_MODELS[case]
    model = _write(tmp_path, "results.json", text.replace('"cuda:0"', '"cpu"'))
    _one_line_error(_explain("gpt-tiny-train", "--device", "cpu", "--machine-model", model,
                             "--out", str(tmp_path / "x")), fragment)


def test_explain_refuses_a_gpu_machine_model_for_a_cpu_step(tmp_path):
    model = _write(tmp_path, "results.json", _results_doc())
    _one_line_error(_explain("gpt-tiny-train", "--device", "cpu", "--machine-model", model,
                             "--out", str(tmp_path / "x")), "measured on cuda:0, but the step runs on cpu")
    assert not (tmp_path / "x" / "explain.json").exists()
