"""Collectives through torch.distributed: Gloo on the CPU (two ranks), NCCL where two GPUs are visible.

Small messages and few samples keep the file fast on two cores.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys

import pytest
import torch

from pygpuperf.core import documents
from pygpuperf.measure.probe import RunSettings
from pygpuperf.cli.collectives import main
from pygpuperf.measure.collectives import (OPS, QUICK_SIZES, SIZES, bandwidths, bus_factor, message_bytes, message_sizes, parse_size, run_collectives)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SMALL = [8 * KiB, 64 * KiB]
FEW = RunSettings(warmup=1, samples=5)


@pytest.fixture(scope="module")
def gloo():
    return run_collectives("cpu", 2, OPS, SMALL, settings=FEW)


def test_gloo_measures_every_op_and_size_verified(gloo):
    assert [(m.name, m.quantities.size_bytes) for m in gloo] == [
        (f"collective.{op}", size) for op in OPS for size in SMALL]
    for m in gloo:
        assert m.status == "ok" and m.verified and m.usable, m.verify_detail
        assert "all 2 ranks match" in m.verify_detail
        assert m.backend == "torch-cpu" and m.device == "cpu x2" and m.unit == "GB/s"
        assert m.stats.n == len(m.sample_seconds) == FEW.samples
        assert all(s > 0 for s in m.sample_seconds)
        p, q = m.params, m.quantities
        assert (q.world_size, q.hosts, p["communication_backend"], p["dtype"]) == (2, 1, "gloo", "fp32")
        assert p["counting"] == "nccl-tests: algbw = S / t, busbw = algbw x factor"


def test_gloo_figures_follow_nccl_tests_counting(gloo):
    for m in gloo:
        op = m.name.split(".")[1]
        size, factor = m.quantities.size_bytes, bus_factor(op, 2)
        assert m.bus_factor == factor
        # The bytes are the message size S; busbw is S / t times the bus factor; nothing is written.
        assert m.bytes_read == size and m.bytes_written == 0 and m.flops == 0
        assert m.value == pytest.approx(statistics.median(size * factor / s / 1e9 for s in m.sample_seconds))
        assert m.value == pytest.approx(m.quantities.algbw_gbs * factor, rel=1e-5)  # busbw = algbw x factor
        assert m.quantities.time_s == pytest.approx(statistics.median(m.sample_seconds), rel=1e-5)


@pytest.mark.parametrize("n, all_reduce, gather", [(2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875)])
def test_bus_factors_and_bandwidths(n, all_reduce, gather):
    assert bus_factor("all_reduce", n) == all_reduce  # 2(n-1)/n
    assert bus_factor("all_gather", n) == bus_factor("reduce_scatter", n) == gather  # (n-1)/n
    assert bus_factor("broadcast", n) == 1.0
    # 1 GB in 0.5 s: algbw 2 GB/s whatever the op; busbw scales it by the op's factor.
    for op, factor in (("all_reduce", all_reduce), ("all_gather", gather), ("broadcast", 1.0)):
        assert bandwidths(op, 1e9, 0.5, n) == pytest.approx((2.0, 2.0 * factor))
    with pytest.raises(ValueError, match="all_to_all"):
        bus_factor("all_to_all", n)


def test_message_bytes_hold_whole_elements_per_rank():
    assert message_bytes("all_reduce", 8 * KiB, 3) == message_bytes("broadcast", 8 * KiB, 3) == 8 * KiB
    assert message_bytes("all_gather", 8 * KiB, 3) == message_bytes("reduce_scatter", 8 * KiB, 3) == 8184
    assert message_bytes("all_gather", 8 * KiB, 8) == 8 * KiB
    assert message_bytes("reduce_scatter", 8, 4) == 0


def test_message_sizes_and_size_parsing():
    assert SIZES[0] == 8 * KiB and SIZES[-1] == GiB and len(SIZES) == 18
    assert all(b == 2 * a for a, b in zip(SIZES, SIZES[1:]))
    assert message_sizes() == list(SIZES)
    assert message_sizes(quick=True) == list(QUICK_SIZES) == [8 * KiB, MiB, 64 * MiB]
    assert message_sizes(max_size=64 * KiB) == [8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB]
    assert message_sizes(quick=True, max_size=MiB) == [8 * KiB, MiB]
    assert message_sizes(sizes=[MiB, 4096, MiB]) == [4096, MiB]
    with pytest.raises(ValueError, match="smallest is 8 KiB"):
        message_sizes(max_size=4 * KiB)
    assert [parse_size(s) for s in ("8KiB", "64 kib", "1MiB", "1G", "1GiB", "4096")] == [
        8 * KiB, 64 * KiB, MiB, GiB, GiB, 4096]
    for bad in ("1.5MiB", "64KB", "", "0", "MiB"):
        with pytest.raises(ValueError, match="KiB, MiB or GiB"):
            parse_size(bad)


def test_poisoned_outputs_fail_verification():
    ms = run_collectives("cpu", 2, OPS, [8 * KiB], settings=RunSettings(warmup=0, samples=2, poison_after_runs=True))
    assert len(ms) == len(OPS)
    for m in ms:
        assert m.status == "ok" and not m.verified and not m.usable, m.name
        assert "elements wrong" in m.verify_detail


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="two GPUs are visible here")
def test_cuda_with_fewer_than_two_gpus_is_waived():
    ms = run_collectives("cuda", ops=["all_reduce", "broadcast"], quick=True)
    assert [m.name for m in ms] == ["collective.all_reduce", "collective.broadcast"]
    for m in ms:
        assert m.status == "waived" and not m.usable and math.isnan(m.value)
        assert "needs two or more CUDA GPUs" in m.reason


def test_bad_arguments_to_run_collectives():
    with pytest.raises(ValueError, match="all_to_all"):
        run_collectives("cpu", 2, ["all_to_all"], SMALL)
    with pytest.raises(ValueError, match="at least two ranks"):
        run_collectives("cpu", 1, OPS, SMALL)
    with pytest.raises(ValueError, match="'cuda' \\(NCCL\\) or 'cpu'"):
        run_collectives("xpu")


def _check_results_file(path, expected, world_size, launch):
    """`expected`: (op, S) of each measurement in order."""
    results = documents.load_results(path)  # validated against the schema
    assert [(m.name, m.quantities.size_bytes) for m in results.measurements] == [
        (f"collective.{op}", size) for op, size in expected]
    ops = {op for op, _ in expected}
    for m in results.measurements:
        assert m.verified and m.device == f"cpu x{world_size}", m.verify_detail
        assert m.bus_factor == bus_factor(m.name.split(".")[1], world_size)
    facts = results.meta["collectives"]
    assert (facts["world_size"], facts["launch"], facts["communication_backend"]) == (world_size, launch, "gloo")
    assert set(results.machine_model.communication) == set(ops)
    assert not results.findings


def test_torchrun_launch_writes_valid_results(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
         "pygpuperf.collectives", "--device", "cpu", "--max-size", "64KiB", "--samples", "3", "--warmup", "1",
         "--out", str(tmp_path / "tr")], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "busbw" in proc.stdout and proc.stdout.count("verified") == 16  # one table, from rank 0 only
    expected = [(op, size) for op in OPS for size in (8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB)]
    _check_results_file(tmp_path / "tr" / "collectives.json", expected, 2, "torchrun")


def test_spawning_command_with_three_ranks_writes_valid_results(tmp_path, capsys):
    """Without torchrun the command spawns the ranks itself; three ranks round all_gather's 8 KiB to 8184 B."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--world-size", "3", "--ops", "broadcast,all_gather", "--sizes", "8KiB",
              "--samples", "2", "--warmup", "0", "--out", str(tmp_path / "sp")])
    assert exit_info.value.code == 0, capsys.readouterr().err
    path = tmp_path / "sp" / "collectives.json"
    _check_results_file(path, [("broadcast", 8 * KiB), ("all_gather", 8184)], 3, "spawn")
    assert "busbw" in capsys.readouterr().out


def _assert_usage_error(code, stderr: str, *fragments: str) -> None:
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pygpuperf: error:"), stderr  # one line, no traceback
    for fragment in fragments:
        assert fragment in lines[0]


def test_unknown_op_exits_2_with_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.collectives", "--device", "cpu", "--ops",
                           "all_reduce,all_to_all", "--out", str(tmp_path / "never")],
                          capture_output=True, text=True, timeout=300)
    _assert_usage_error(proc.returncode, proc.stderr, "--ops", "all_to_all",
                        "all_reduce, all_gather, reduce_scatter, broadcast")
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("args, fragments", [
    (("--max-size", "4KiB"), ("--max-size", "8 KiB")),
    (("--sizes", "1.5MiB"), ("--sizes", "KiB, MiB or GiB")),
    (("--world-size", "1"), ("--world-size 1", "two or more")),
    (("--samples", "0"), ("--samples 0", "at least 1")),
    (("--device", "tpu"), ("--device", "'tpu'")),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, fragments):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", *args, "--out", str(tmp_path / "never")])
    _assert_usage_error(exit_info.value.code, capsys.readouterr().err, *fragments)
    assert not (tmp_path / "never").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible here")
def test_cuda_command_without_gpu_names_the_fix(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cuda"])
    _assert_usage_error(exit_info.value.code, capsys.readouterr().err, "--device cpu")


@pytest.mark.multigpu
def test_nccl_on_two_gpus():
    ms = run_collectives("cuda", 2, OPS, [8 * KiB, 64 * MiB], settings=RunSettings(warmup=2, samples=10))
    assert len(ms) == 2 * len(OPS)
    for m in ms:
        assert m.verified, m.verify_detail
        assert m.backend == "torch-cuda" and m.device == "cuda x2"
        assert m.params["communication_backend"] == "nccl"
        assert m.value == pytest.approx(m.quantities.algbw_gbs * m.bus_factor, rel=1e-5)
    large = [m for m in ms if m.quantities.size_bytes == 64 * MiB]
    assert all(m.value > 1.0 for m in large), [(m.name, m.value) for m in large]  # GB/s: any GPU link does this
    poisoned = run_collectives("cuda", 2, OPS, [MiB], settings=RunSettings(warmup=0, samples=2, poison_after_runs=True))
    assert not any(m.verified for m in poisoned)
