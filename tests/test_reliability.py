"""Nothing measured is lost: stop signals, timeouts, late errors, resumed runs, shared folders, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pygpuperf.cli import common as cli
from pygpuperf.core import documents
from pygpuperf.cli import roofline
from pygpuperf.core.errors import UsageError
from pygpuperf.core.results import Finding, Measurement, Results

# Enough probe runs on a CPU that a run is still measuring when the test stops it.
SLOW_PROBES = ("--device", "cpu", "--model", "none", "--backend", "all", "--samples", "50")


def _start(*args: str, cwd: Path | None = None, module: str = "pygpuperf.roofline") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd)


def _measured(path: Path) -> int:
    """Measurements in a results.json being written (0 while there is none)."""
    try:
        return len(json.loads(path.read_text())["measurements"])
    except (OSError, ValueError, KeyError):
        return 0


def _wait_for(predicate, timeout: float = 120.0, what: str = "the run") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _finish(proc: subprocess.Popen, timeout: float = 120.0) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        proc.kill()


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_stop_signal_during_the_probes_keeps_what_was_measured(tmp_path, signum, code):
    out = tmp_path / "run"
    proc = _start(*SLOW_PROBES, "--out", str(out))
    _wait_for(lambda: _measured(out / "results.json") >= 2, what="two finished probes")
    proc.send_signal(signum)
    _, stderr = _finish(proc)
    assert proc.returncode == code, stderr[-2000:]
    results = documents.load_results(out / "results.json")  # the final, validated document
    assert results.meta["interrupted"] is True and len(results.measurements) >= 2
    assert results.machine_model is not None  # what was measured is concluded, not just dumped
    assert (out / "results.csv").exists() and (out / "report.html").exists()


def test_timeout_keeps_what_was_measured(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(["timeout", "12", sys.executable, "-m", "pygpuperf.roofline", *SLOW_PROBES, "--out",
                           str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 124, proc.stderr[-2000:]  # timeout's own code for a command it had to stop
    results = documents.load_results(out / "results.json")
    assert results.meta["interrupted"] is True and results.measurements


def test_a_stop_during_the_model_keeps_the_probes(tmp_path):
    out = tmp_path / "run"
    proc = _start("--device", "cpu", "--probes", "memory.dram.copy", "--quick", "--model", "gpt-tiny-train",
                  "--batch-size", "64", "--out", str(out))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    _wait_for(lambda: any("running gpt-tiny-train" in line for line in lines), what="the model to start")
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert proc.returncode == 143, "".join(lines)[-2000:]
    results = documents.load_results(out / "results.json")
    assert results.meta["interrupted"] is True
    assert {m.name for m in results.measurements if m.usable} == {"memory.dram.copy"}


def test_an_error_after_the_probes_keeps_them_and_says_how_to_fix_it(tmp_path):
    out = tmp_path / "run"
    # 1e8 sequences of 257 tokens: some 200 GB the allocator refuses at once.
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", "--probes",
                           "memory.dram.copy", "--quick", "--model", "gpt-tiny-train", "--batch-size", "100000000",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    results = documents.load_results(out / "results.json")
    assert any(m.name == "memory.dram.copy" and m.usable for m in results.measurements)
    failure = next(f for f in results.findings if f.severity == "error")
    assert "gpt-tiny-train" in failure.title and "--batch-size" in failure.suggestion


def test_resume_keeps_verified_figures_and_runs_only_the_rest(tmp_path):
    out = tmp_path / "run"
    first = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", "--quick", "--model",
                            "none", "--probes", "memory.dram.copy", "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    before = {(m.name, m.backend): m.sample_seconds for m in documents.load_results(out / "results.json").measurements}
    second = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", "--quick", "--model",
                             "none", "--probes", "memory.dram.copy", "memory.dram.write", "--resume", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"resuming: {len(before)} verified measurement(s) kept" in second.stderr
    after = documents.load_results(out / "results.json")
    for m in after.measurements:
        if m.name == "memory.dram.copy":
            assert m.sample_seconds == before[(m.name, m.backend)]  # kept, not measured again
    assert {m.name for m in after.measurements} == {"memory.dram.copy", "memory.dram.write"}
    assert after.meta["resumed"]["kept_measurements"] == len(before)


def test_resume_needs_a_run_to_resume_and_refuses_out(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", "--model", "none",
                           "--resume", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no results.json to resume" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", "--resume", str(tmp_path),
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "leave out --out" in proc.stderr


def test_runs_started_in_the_same_second_get_distinct_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folders = [cli.claim_output(None, "nvidia-h200-3f2a1b9c", "results.json") for _ in range(20)]
    try:
        paths = {f.path for f in folders}
        assert len(paths) == 20
        assert all(p.parent == Path("pygpuperf-results") and p.name.startswith("nvidia-h200-3f2a1b9c-") for p in paths)
    finally:
        for f in folders:
            f.release()


def test_a_second_writer_of_one_folder_is_refused_with_exit_2(tmp_path):
    out = tmp_path / "shared"
    with cli.claim_output(out, "x", "results.json"):  # another run holds the folder
        proc = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", "--model", "none",
                               "--probes", "memory.dram.copy", "--out", str(out)], capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "another pygpuperf run is writing there" in lines[0]
    assert not (out / "results.json").exists()


def test_two_runs_into_one_folder_at_once_leave_one_complete_result(tmp_path):
    out = tmp_path / "shared"
    args = ("--device", "cpu", "--quick", "--model", "none", "--probes", "memory.dram.copy", "--out", str(out))
    procs = [_start(*args), _start(*args)]
    outcomes = [(p, *_finish(p, timeout=300)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in outcomes)
    assert codes == [0, 2], [e[-500:] for _, _, e in outcomes]  # one writes, the other is told why not
    assert documents.load_results(out / "results.json").measurements


def test_an_out_folder_with_results_needs_resume_or_overwrite(tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", "--quick", "--model", "none", "--probes",
            "memory.dram.copy", "--out", str(out)]
    assert subprocess.run(args, capture_output=True, text=True, timeout=300).returncode == 0
    again = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "--resume" in again.stderr and "--overwrite" in again.stderr
    replaced = subprocess.run([*args, "--overwrite"], capture_output=True, text=True, timeout=300)
    assert replaced.returncode == 0, replaced.stderr[-2000:]


def _child_pids(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_collective_ranks_end_with_an_interrupted_run_and_their_figures_are_kept(tmp_path):
    out = tmp_path / "coll"
    proc = _start("--device", "cpu", "--sizes", "8KiB,64KiB,1MiB,8MiB,64MiB", "--samples", "200", "--out", str(out),
                  module="pygpuperf.collectives")
    ranks: set[int] = set()

    def ranks_started() -> bool:
        # The spawn start method runs a resource tracker beside the two ranks.
        ranks.update(_child_pids(proc.pid))
        return len(ranks) >= 2

    _wait_for(ranks_started, what="the ranks")
    time.sleep(15)  # some sizes done: the small ones take well under a second each
    proc.send_signal(signal.SIGINT)
    _, stderr = _finish(proc, timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    _wait_for(lambda: not any(_alive(p) for p in ranks), timeout=15, what="the ranks to end")
    results = documents.load_results(out / "collectives.json")
    assert results.meta["interrupted"] is True
    assert results.measurements and all(m.verified for m in results.measurements if m.status == "ok")


@pytest.mark.parametrize("args, fragment", [
    (("--samples", "0"), "--samples 0"),
    (("--model", ""), "--model ''"),
    (("--out", ""), "--out"),
    (("--batch-size", "0"), "--batch-size 0"),
])
def test_silently_wrong_arguments_are_refused(args, fragment):
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.roofline", "--device", "cpu", *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], lines


def test_figures_read_off_a_sweep_select_their_sweep():
    probes = roofline._selection(["memory.l3.read", "latency.l1", "memory.dram.copy"], "cpu")
    assert probes == ["memory.sweep", "latency.sweep", "memory.dram.copy"]
    assert roofline._selection(["latency.l1"], "cuda") == ["latency.l1"]  # measured directly on a GPU


def _results(measurements=(), findings=()) -> Results:
    return Results(meta={}, measurements=list(measurements), findings=list(findings))


def _m(verified: bool) -> Measurement:
    return Measurement.from_samples("memory.dram.copy", sample_seconds=[1e-3], bytes_read=1e9, bytes_written=0,
                                    flops=0, backend="torch-cpu", device="cpu", verified=verified)


def test_exit_codes_tell_a_good_run_from_a_bad_one():
    from pygpuperf.core.stopping import Stopped

    assert roofline.exit_code(_results([_m(True)]), None) == 0
    assert roofline.exit_code(_results([_m(True), _m(False)]), None) == 1  # a verification failed
    assert roofline.exit_code(_results([_m(True)], [Finding("error", "x")]), None) == 1
    assert roofline.exit_code(_results([_m(True)], [Finding("warning", "x")]), None) == 0
    assert roofline.exit_code(_results([_m(False)]), Stopped(signal.SIGTERM)) == 143
    assert roofline.exit_code(_results(), KeyboardInterrupt()) == 130


def test_bad_input_is_exit_2_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError):
        roofline.run(["--device", "cpu", "--probes", "memory.dram.nonsense"])
    assert not os.path.exists("pygpuperf-results")
