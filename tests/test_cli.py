"""The main command, end to end on the CPU, and its answers to bad input."""

import json
import re
import subprocess
import sys
import time

import pytest
import torch

from pygpuperf.core import documents


def _cli(*args, timeout=600, **kwargs):
    return subprocess.run([sys.executable, "-m", "pygpuperf.roofline", *args], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def _assert_usage_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    assert lines[0].startswith("pygpuperf: error:")
    for fragment in fragments:
        assert fragment in lines[0]


def test_unknown_device_name():
    _assert_usage_error(_cli("--device", "foo", "--list"), "'foo'", "use cpu")


@pytest.mark.skipif(torch.cuda.device_count() >= 8, reason="cuda:7 exists here")
def test_missing_gpu_index():
    _assert_usage_error(_cli("--device", "cuda:7", "--list"), "cuda:7")


def test_unknown_probe():
    _assert_usage_error(_cli("--device", "cpu", "--probes", "memory.dram.nonsense", "--model", "none"),
                        "memory.dram.nonsense", "--list")


def test_unknown_model():
    _assert_usage_error(_cli("--device", "cpu", "--model", "alexnet-9000"), "alexnet-9000", "resnet18-train-small")


def test_unwritable_out(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where a folder must go: not writable as a folder, even for root
    _assert_usage_error(_cli("--device", "cpu", "--model", "none", "--out", str(blocker / "sub")), "--out", "writable")


def test_list_names_every_backend_and_waivers():
    proc = _cli("--device", "cpu", "--list")
    assert proc.returncode == 0, proc.stderr
    assert "memory.dram.copy" in proc.stdout and "native-cpu" in proc.stdout and "torch-cpu" in proc.stdout
    assert "waived" in proc.stdout  # e.g. transfers on a CPU


def test_quick_probe_subset_writes_valid_results(tmp_path):
    out = tmp_path / "r"
    proc = _cli("--device", "cpu", "--quick", "--probes", "memory.dram.copy", "compute.simd.fp32", "--backend", "all",
                "--model", "none", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    results = documents.load_results(out / "results.json")
    assert printed["schema"] == "pygpuperf/1"
    names = {(m.name, m.backend) for m in results.measurements}
    assert ("memory.dram.copy", "native-cpu") in names and ("memory.dram.copy", "torch-cpu") in names
    assert all(m.verified for m in results.measurements if m.status == "ok")
    assert results.machine_model.memory["dram"].value > 0
    assert (out / "results.csv").read_text().count("\n") == len(results.measurements) + 1
    assert (out / "roofline.png").stat().st_size > 1000


@pytest.mark.slow
def test_default_cpu_run_is_complete_and_under_three_minutes(tmp_path):
    out = tmp_path / "default"
    start = time.monotonic()
    proc = _cli("--device", "cpu", "--out", str(out), timeout=400)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert elapsed < 180, f"default CPU run took {elapsed:.0f} s"
    results = documents.load_results(out / "results.json")
    assert {"memory.dram.read", "memory.dram.write", "memory.dram.copy", "memory.dram.triad",
            "compute.simd.fp32", "compute.simd.fp64"} <= {m.name for m in results.measurements if m.usable}
    assert len(results.workloads) == 1
    w = results.workloads[0]
    assert w.achieved_tflops > 0 and w.flops_per_step > 1e9
    # Above 1 is possible on a CPU: the small model runs from cache while the memory roof is DRAM's
    # (bytes are counted without reuse). Far above it would mean a wrong ceiling or wrong counting.
    assert w.attainable_tflops is not None and 0 < w.fraction_of_attainable <= 3
    assert (out / "roofline.png").exists()
    assert "Findings" in proc.stdout or "ridge point" in proc.stdout
    # The model's step is explained after the probes: its ops carry the step, and report.html shows it.
    explained = json.loads((out / "explain" / "explain.json").read_text())
    assert explained["waterfall"]["coverage"] >= 0.9 and explained["kernels"]
    assert explained["throughput"]["samples_per_step"] == int(w.params["batch_size"])
    assert explained["settings"]["batch_size"] == w.params["batch_size"] and isinstance(explained["findings"], list)
    assert w.explanation["explain_json"] == "explain/explain.json"
    assert w.explanation["coverage"] == pytest.approx(explained["waterfall"]["coverage"])
    assert 'id="explain"' in (out / "report.html").read_text()
    # The embedded default speaks of the CPU: no error the user cannot act on, no GPU word or GPU advice.
    assert not [f.title for f in results.findings if f.severity == "error"]
    said = (proc.stdout + proc.stderr).lower().split("wrote ")[0]  # not the file names it wrote
    said = re.sub(r"\b[a-z0-9_]+(\.[a-z0-9_]+)+\b", "", said)  # nor probe names (latency.kernel.single)
    words = json.dumps({"findings": [[f["title"], f["suggestion"]] for f in explained["findings"]],
                        "parts": list(explained["waterfall"]["parts"]),
                        "classes": sorted({k["kernel_class"] for k in explained["kernels"]})}).lower()
    for word in ("cuda", "cudnn", "gpu", "tensor core", "tensor-core", "launch", "hbm", "tf32", "kernel"):
        pattern = re.compile(rf"\b{word}")  # "pygpuperf" is no GPU word
        assert not pattern.search(said), f"{word!r} in the CPU run's output"
        assert not pattern.search(words), f"{word!r} in the CPU explanation"


def test_predict_needs_known_cards_and_a_model():
    _assert_usage_error(_cli("--device", "cpu", "--predict", "rtx9999"), "rtx9999", "rtx3090")
    _assert_usage_error(_cli("--device", "cpu", "--model", "none", "--predict", "rtx3090"), "--predict", "--model none")
