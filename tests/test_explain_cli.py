"""`python -m pygpuperf.explain` on user code, on a CPU."""

import json
import subprocess
import sys
import textwrap

from pygpuperf.core import documents
from pygpuperf.core.results import Ceiling, MachineModel, Results


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "pygpuperf.explain", *args], capture_output=True, text=True,
                          timeout=300)


def _machine_model_file(tmp_path):
    model = MachineModel(device="cpu")
    model.compute["library.fp32"] = Ceiling(1.0, "TFLOP/s", "compute.library.fp32", "torch-cpu")
    model.memory["dram"] = Ceiling(20.0, "GB/s", "memory.dram.copy", "native-cpu")
    r = Results(meta={"versions": {"pygpuperf": "0", "torch": "2", "python": "3"}, "device": {"type": "cpu"},
                      "host": {}, "time_utc": "2026-01-01T00:00:00+00:00", "counting": "1 GB = 1e9 B"},
                machine_model=model)
    return documents.write_results(r, tmp_path / "model")["json"]


def test_user_step_is_explained(tmp_path):
    user = tmp_path / "user_step.py"
    user.write_text(textwrap.dedent("""
        import torch

        def make_step(device, batch_size=4):
            model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            x = torch.randn(batch_size, 32, device=device)

            def step():
                opt.zero_grad()
                model(x).sum().backward()
                opt.step()
            return step
    """))
    out = tmp_path / "out"
    proc = _cli(f"{user}:make_step", "--device", "cpu", "--machine-model", str(_machine_model_file(tmp_path)),
                "--steps", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "explain.json").read_text())
    w = doc["waterfall"]
    assert w["ideal_us"] + sum(w["parts"].values()) + w["unexplained_us"] == pytest_approx(w["measured_us"])
    assert "= measured" in proc.stdout and (out / "kernels.csv").exists()


def pytest_approx(x):
    import pytest

    return pytest.approx(x, rel=1e-6, abs=1e-6)


def test_bad_target_and_bad_model_file_are_one_line_errors(tmp_path):
    for args in (["no-such-workload", "--device", "cpu"],
                 [f"{tmp_path / 'missing.py'}:make_step", "--device", "cpu", "--machine-model",
                  str(_machine_model_file(tmp_path))],
                 ["resnet18-train-small", "--device", "cpu", "--machine-model", str(tmp_path / "nope.json")]):
        proc = _cli(*args, "--out", str(tmp_path / "o"))
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pygpuperf: error:"), proc.stderr
