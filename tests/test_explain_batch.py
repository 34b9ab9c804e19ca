"""Batch-size behaviour: the t_fixed + bs x t_sample fit, saturation, and the out-of-memory search."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from pygpuperf.trials import batch


def line(t_fixed: float, t_sample: float, sizes) -> list[tuple[int, float]]:
    return [(bs, t_fixed + bs * t_sample) for bs in sizes]


# --------------------------------------------------------------------------- the fit


def test_fit_recovers_an_exact_line():
    fit = batch.fit_batch_times(line(5e-3, 1e-4, (16, 32, 64, 128)))
    assert fit.t_fixed_s == pytest.approx(5e-3) and fit.t_sample_s == pytest.approx(1e-4)
    assert fit.points == 4 and fit.rms_relative_error == pytest.approx(0.0, abs=1e-12)
    assert fit.asymptote == pytest.approx(1e4)
    assert fit.step_s(100) == pytest.approx(15e-3) and fit.throughput(100) == pytest.approx(100 / 15e-3)


def test_fit_is_least_squares_on_noisy_times():
    points = [(32, 0.0081), (64, 0.0118), (128, 0.0181), (256, 0.0329), (512, 0.0611)]
    fit = batch.fit_batch_times(points)
    slope, intercept = np.polyfit([p[0] for p in points], [p[1] for p in points], 1)
    assert fit.t_sample_s == pytest.approx(slope) and fit.t_fixed_s == pytest.approx(intercept)
    predicted = np.array([intercept + slope * b for b, _ in points])
    measured = np.array([t for _, t in points])
    assert fit.rms_relative_error == pytest.approx(np.sqrt(np.mean(((predicted - measured) / measured) ** 2)))
    assert 0 < fit.rms_relative_error < 0.1


def test_fit_needs_two_batch_sizes():
    with pytest.raises(ValueError, match="two or more"):
        batch.fit_batch_times([(64, 0.01), (64, 0.011)])


def test_saturation_where_the_fixed_cost_is_a_tenth_of_the_step():
    fit = batch.fit_batch_times(line(5e-3, 1e-4, (16, 64, 256)))
    # t_fixed <= 10 % of t(bs)  <=>  bs >= 9 t_fixed / t_sample = 450
    assert fit.saturation_batch == pytest.approx(450)
    assert fit.fixed_share(450) == pytest.approx(batch.SATURATION_FIXED_SHARE)
    assert fit.throughput(450) == pytest.approx(0.9 * fit.asymptote)
    # Within 5 % of the asymptote: bs = 19 t_fixed / t_sample.
    assert fit.batch_for(batch.NEAR_ASYMPTOTE) == pytest.approx(950)
    assert fit.throughput(950) == pytest.approx(0.95 * fit.asymptote)
    with pytest.raises(ValueError):
        fit.batch_for(1.0)


def test_degenerate_lines():
    no_fixed = batch.fit_batch_times(line(-1e-4, 1e-4, (16, 64)))
    assert no_fixed.saturation_batch == 0.0  # saturated at any batch
    flat = batch.fit_batch_times([(16, 0.02), (64, 0.019)])
    assert flat.asymptote is None and flat.saturation_batch is None
    assert batch.first_saturated([(16, 0.02), (64, 0.019)], flat) is None


def test_first_measured_batch_within_a_tenth_of_the_asymptote():
    points = line(5e-3, 1e-4, (64, 128, 256, 512, 1024))
    fit = batch.fit_batch_times(points)
    assert batch.first_saturated(points, fit) == 512  # 450 is the crossing
    assert batch.first_saturated(points, fit, fixed_share=0.05) == 1024  # 950 is the crossing
    assert batch.first_saturated(points[:3], fit) is None


# --------------------------------------------------------------------------- out-of-memory search

# The fakes run anywhere; "cpu" with a high cap stands in for a GPU (whose default cap is GPU_BATCH_CAP).
BIG = 10**6


class FakeBuilt:
    """A built workload whose step runs out of memory above `limit` (or whose build does, see fake_build)."""

    def __init__(self, size: int, limit: int, log: list, ran: int | None = None, error=torch.cuda.OutOfMemoryError):
        self.size, self.limit, self.log, self.error = size, limit, log, error
        self.params = {"batch_size": str(size if ran is None else ran)}
        self.samples_per_step = size
        self.closed = False

    def step(self) -> None:
        if self.size > self.limit:
            raise self.error(f"CUDA out of memory. Tried to allocate {self.size} MiB")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.closed = True
        self.log.append(("closed", self.size))


def fake_build(limit: int, log: list, where: str = "step", error=torch.cuda.OutOfMemoryError):
    def build(size: int) -> FakeBuilt:
        log.append(("build", size))
        if where == "build" and size > limit:
            raise error(f"CUDA out of memory. Tried to allocate {size} MiB")
        if where == "halve" and size > limit:
            return FakeBuilt(size, limit, log, ran=size // 2)  # a registered workload halving on its own
        return FakeBuilt(size, limit, log, error=error)
    return build


def test_search_doubles_then_narrows_the_bracket():
    log: list = []
    limit = batch.largest_fitting_batch(fake_build(300, log), 32, "cpu", cap=BIG, refine=3)
    assert [b for b, _ in limit.tried] == [32, 64, 128, 256, 512, 384, 320, 288]
    assert limit.largest_fit == 288 and limit.smallest_failure == 320 and not limit.capped
    # Every built workload was closed, also the ones whose step ran out of memory.
    assert [e for e in log if e[0] == "closed"] == [("closed", b) for b, _ in limit.tried]


@pytest.mark.parametrize("where", ["step", "build", "halve"])
def test_every_kind_of_running_out_counts(where):
    limit = batch.largest_fitting_batch(fake_build(100, [], where), 16, "cpu", cap=BIG, refine=0)
    assert (limit.largest_fit, limit.smallest_failure) == (64, 128)


def test_runtime_error_out_of_memory_counts_and_other_errors_pass():
    assert batch.is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert batch.is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"))
    assert not batch.is_out_of_memory(RuntimeError("shape mismatch"))
    limit = batch.largest_fitting_batch(fake_build(100, [], error=RuntimeError), 16, "cpu", cap=BIG, refine=0)
    assert limit.largest_fit == 64

    def broken(size: int):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
    with pytest.raises(RuntimeError, match="shapes"):
        batch.largest_fitting_batch(broken, 16, "cpu")


def test_search_goes_down_when_the_start_does_not_fit():
    limit = batch.largest_fitting_batch(fake_build(40, []), 256, "cpu", refine=2)
    assert [b for b, _ in limit.tried][:4] == [256, 128, 64, 32]
    assert limit.largest_fit == 40 and limit.smallest_failure == 48  # 32..64 narrowed on multiples of 8
    nothing = batch.largest_fitting_batch(fake_build(0, []), 4, "cpu")
    assert nothing.largest_fit is None and nothing.smallest_failure == 1


def test_cpu_search_stops_at_the_cap():
    limit = batch.largest_fitting_batch(fake_build(10**9, []), 32, "cpu")
    assert limit.cap == batch.CPU_BATCH_CAP and limit.largest_fit == batch.CPU_BATCH_CAP and limit.capped
    assert max(b for b, _ in limit.tried) == batch.CPU_BATCH_CAP
    assert batch.batch_cap("cuda:0") == batch.GPU_BATCH_CAP > batch.batch_cap("cpu")
    # A start above the cap (a batch already run) is not cut back.
    assert batch.largest_fitting_batch(fake_build(10**9, []), 512, "cpu").largest_fit == 512


# --------------------------------------------------------------------------- the sweep


def test_sweep_fits_measured_times_and_skips_what_does_not_fit(monkeypatch):
    t_fixed, t_sample = 4e-3, 1.5e-4

    def timed(step, device, warmup, steps):
        size = step.__self__.size
        step()  # runs out of memory above the limit, as a real step would
        return [t_fixed + size * t_sample * f for f in (0.99, 1.0, 1.01)]

    monkeypatch.setattr(batch, "time_steps", timed)
    sweep = batch.batch_sweep(fake_build(300, []), [32, 64, 128, 256, 512], "cpu", cap=BIG)
    assert [p.batch_size for p in sweep.points] == [32, 64, 128, 256]
    assert list(sweep.skipped) == [512] and "out of memory" in sweep.skipped[512]
    assert sweep.fit.t_fixed_s == pytest.approx(t_fixed) and sweep.fit.t_sample_s == pytest.approx(t_sample)
    assert sweep.points[0].samples_per_s == pytest.approx(32 / (t_fixed + 32 * t_sample))
    assert sweep.limit.largest_fit == 288 and sweep.limit.tried[0] == (256, True)
    text = "\n".join(sweep.summary_lines())
    assert "t(bs) = 4.00 ms + bs x 0.1500 ms" in text and "GPU saturated) at batch ~240" in text
    assert "largest batch that fits: 288 (320 ran out of memory" in text
    doc = json.loads(json.dumps(sweep.to_dict()))
    assert doc["fit"]["saturation_batch"] == pytest.approx(240) and doc["limit"]["largest_fit"] == 288


def test_sweep_without_a_fit():
    sweep = batch.batch_sweep(fake_build(10, []), [8], "cpu", warmup=0, steps=1, find_limit=False)
    assert len(sweep.points) == 1 and sweep.fit is None and sweep.limit is None
    assert "no fit" in "\n".join(sweep.summary_lines())


def test_cli_batch_sweep_on_user_code(tmp_path):
    user = tmp_path / "user_step.py"
    user.write_text(textwrap.dedent("""
        import torch

        def make_step(device, batch_size=4):
            model = torch.nn.Linear(16, 16).to(device)
            x = torch.randn(batch_size, 16, device=device)

            def step():
                model(x).sum().backward()
            return step
    """))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "pygpuperf.explain", f"{user}:make_step", "--device", "cpu",
                           "--out", str(out), "--batch-sweep", "4,8,16"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "batch_sweep.json").read_text())
    assert [p["batch_size"] for p in doc["points"]] == [4, 8, 16] and doc["fit"]["points"] == 3
    assert doc["limit"]["largest_fit"] == batch.CPU_BATCH_CAP and doc["limit"]["capped"]
    assert "t(bs) =" in proc.stdout
