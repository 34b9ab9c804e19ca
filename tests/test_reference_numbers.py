"""Restructuring changes no number a user sees: on recorded reference profiles, the explained step (waterfall,
bounds), its diagnosis (causes, findings), each fix's prediction and the cross-card and batch predictions are
those recorded in tests/fixtures/reference_numbers.json.

A change that means to move a number (a new cost rule, another residual) regenerates the record with
``PYGPUPERF_RECORD_NUMBERS=1 python -m pytest tests/test_reference_numbers.py`` and says in its commit which
numbers moved and why; any other change must leave it as it is.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from pygpuperf import diagnose
from pygpuperf.analyze.machine_model import load_model
from pygpuperf.explain.pricing import RESIDUALS
from pygpuperf.predict import predict, predict_batch

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "reference"
RECORD = Path(__file__).parent / "fixtures" / "reference_numbers.json"
H200_MODEL = REFERENCE / "machines" / "nvidia-h200_2026-12-01_machine-model_results.json"
# A CNN in fp32 with a batch fix, a transformer with an AMP fix, a host-bound GAN, a UNet, and an H100 profile.
PROFILES = ("nvidia-h200/resnet50-train", "nvidia-h200/gpt-100m-train", "nvidia-h200/dcgan-train",
            "nvidia-h200/unet-train", "nvidia-h100-80gb-hbm3/earlier/resnet50-train-tf32_2026-12-07")
TARGETS = ("h100-sxm", "rtx3090")

sys.path.insert(0, str(ROOT / "benchmarks"))


def _numbers(profile: str) -> dict:
    import fix_table
    import reference

    path = REFERENCE / "profiles" / f"{profile}.json.xz"
    model = load_model(str(H200_MODEL)).model
    e = reference.load_profile(path)
    d = diagnose.explain_again(e, model)
    rows = fix_table.rows(path, model, configuration=profile)
    w = e.median.waterfall
    out = {
        "waterfall": {"ideal_us": w.ideal_us, "unexplained_us": w.unexplained_us, **dict(w.parts)},
        "bounds_us": sum(k.bound_us or 0.0 for k in e.median.kernels),
        "causes": sorted([c.id, c.us, c.fix.predicted_step_us if c.fix else None] for c in d.causes.items),
        "findings": sorted(f.title for f in d.findings),
        "fixes": {r["fix"]: r.get("predicted_ms") for r in rows},
    }
    for name in TARGETS:
        target = load_model(f"datasheet:{name}").model
        for residual in RESIDUALS:
            p = predict(reference.load_profile(path), model, target, residual=residual)
            out[f"{name}/{residual}"] = [p.step_us, p.samples_per_step, p.carried_us]
    again = reference.load_profile(path)
    batch = 2 * (again.throughput.samples_per_step if again.throughput else 1)
    p = predict_batch(again, model, batch)
    out["batch_x2"] = [p.step_us, p.samples_per_step, p.carried_us]
    return out


def _same(recorded, now, where: str) -> list[str]:
    if isinstance(recorded, dict) and isinstance(now, dict):
        if recorded.keys() != now.keys():
            return [f"{where}: keys {sorted(recorded)} -> {sorted(now)}"]
        return [d for k in recorded for d in _same(recorded[k], now[k], f"{where}/{k}")]
    if isinstance(recorded, (list, tuple)) and isinstance(now, (list, tuple)):
        if len(recorded) != len(now):
            return [f"{where}: {len(recorded)} items -> {len(now)}"]
        return [d for i, (a, b) in enumerate(zip(recorded, now)) for d in _same(a, b, f"{where}[{i}]")]
    if isinstance(recorded, float) or isinstance(now, float):
        if recorded is None or now is None or not math.isclose(recorded, now, rel_tol=1e-9, abs_tol=1e-6):
            return [f"{where}: {recorded} -> {now}"]
        return []
    return [] if recorded == now else [f"{where}: {recorded!r} -> {now!r}"]


@pytest.fixture(scope="module")
def numbers() -> dict:
    if not H200_MODEL.is_file():
        pytest.skip("benchmarks/reference/ is not in this checkout")
    return json.loads(json.dumps({p: _numbers(p) for p in PROFILES}))


def test_the_reference_profiles_give_the_recorded_numbers(numbers):
    if os.environ.get("PYGPUPERF_RECORD_NUMBERS"):
        RECORD.write_text(json.dumps(numbers, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    recorded = json.loads(RECORD.read_text(encoding="utf-8"))
    moved = _same(recorded, numbers, "")
    assert not moved, f"{len(moved)} numbers moved: " + "; ".join(moved[:12])


def test_the_record_covers_what_users_see(numbers):
    # A record of nothing would hold nothing: each profile has a waterfall, causes, findings and fixes.
    for profile, got in numbers.items():
        assert got["bounds_us"] > 0 and got["causes"] and got["findings"], profile
        assert any(v is not None for v in got["fixes"].values()), profile
