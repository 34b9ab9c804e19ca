"""How well pygpuperf predicts a step on another card, from benchmarks/reference/ alone, on a CPU.

    python benchmarks/validate_predictions.py [--modes] [--json FILE]

Two sets:
- real pairs: each configuration profiled on two cards under the same torch, predicted from each card's
  profile to the other and held to the step measured there (and, per kernel class, to the other card's
  profile);
- published figures (published/*.json): throughput from public benchmark tables, each figure's card priced
  from the reference profile of its workload and precision, its ratio to the table's reference card and its
  absolute throughput held to the published one. Each card is priced leave-one-card-out: what the model
  learns from published figures (the achievable fraction of its architecture family) excludes it.

It prints the mean absolute error of the ratios and of the throughput, the error per kernel class and per card
family, how often the 80 % intervals cover the outcome, and the ten worst rows with their named reason.
--modes prints the same summary for every mode of predict (ceilings x residual rule): the default is the mode
that wins here.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference  # noqa: E402
from pygpuperf.predict import interval as intervals  # noqa: E402
from reference import PUBLISHED, REFERENCE, read_json  # noqa: E402

# A step whose host's own time per step (timed without the profiler, each step after a drain) is below this
# share of its step time on both cards is device-bound: the cards' kernels, not the host, set its pace.
DEVICE_BOUND_HOST_SHARE = 0.5
IDLE_SHARE = 0.1
WORST = 10
SPREAD_FILE = reference.ROOT / "pygpuperf" / "data" / "prediction_spread.json"


@dataclass
class Row:
    set: str  # "pairs" or a published file's name
    what: str  # configuration, or "group: card [precision]"
    source: str
    target: str
    family: str  # the target's architecture family and segment
    predicted: float  # throughput ratio (published) or step ms (pairs)
    measured: float
    error: float  # predicted / measured - 1 (pairs: step time; published: ratio to the reference card)
    absolute_error: float | None = None  # published: predicted / published throughput - 1
    device_bound: bool = True
    interval: tuple[float, float] | None = None  # 80 % interval of `predicted`
    reason: str = ""
    classes: dict[str, float] = field(default_factory=dict)  # pairs: per kernel class, predicted / measured - 1
    host_share: float = 0.0  # the host's time per step over the predicted step

    @property
    def covered(self) -> bool | None:
        if self.interval is None:
            return None
        return self.interval[0] <= self.measured <= self.interval[1]


class Models:
    """Each card's machine model, as a mode prices it: measured where the reference has one, else from the
    datasheet table (achievable ceilings from published figures, or peaks)."""

    def __init__(self, index: dict) -> None:
        self.index = index
        self._cache: dict[tuple, Any] = {}

    def of(self, card: str, ceilings: str, held_out: bool = False):
        from pygpuperf.analyze import machine_model
        from pygpuperf.facts import datasheets

        key = (card, ceilings, held_out)
        if key not in self._cache:
            entry = reference.machine_model_entry(self.index, card)
            if entry is not None:
                loaded = machine_model.load_model(str(REFERENCE / entry["file"]))
                self._cache[key] = (loaded.model, "measured")
            else:
                device = next((e["device"] for e in self.index["profiles"] if e["card"] == card), card)
                sheet = datasheets.datasheet_for(device)
                slug = sheet["key"] if sheet else card
                self._cache[key] = _sheet_model(slug, ceilings, held_out)
        return self._cache[key]


def _sheet_model(slug: str, ceilings: str, held_out: bool):
    from pygpuperf.analyze import machine_model

    if ceilings == "achievable":
        return machine_model.achievable_model(slug, held_out=held_out), f"achievable:{slug}"
    return machine_model.machine_model(slug), f"datasheet:{slug}"


def _host_share(doc: dict) -> float | None:
    """The host's own time per step (timed by --try-fixes after a drain) over the step's time, where timed."""
    host = doc.get("host_step_us") or doc.get("batch_one_step_us")
    step = ((doc.get("throughput") or {}).get("step_us") or {}).get("median")
    return host / step if host and step else None


def _idle_share(doc: dict) -> float:
    """The share of the profiled step the device sat idle waiting for the host (host-bound and launch gaps)."""
    idle, wall = doc["timeline"]["idle"], doc["timeline"]["wall_us"]
    return (idle["host_bound_us"] + idle["launch_gap_us"]) / wall if wall > 0 else 0.0


def device_bound(docs: Sequence[dict]) -> bool:
    """Whether the cards' kernels set the step's pace on both cards: the host's own time per step under
    DEVICE_BOUND_HOST_SHARE of the step wherever it was timed, and the device idle for the host under
    IDLE_SHARE of every profile."""
    shares = [s for s in (_host_share(d) for d in docs) if s is not None]
    return all(s < DEVICE_BOUND_HOST_SHARE for s in shares) and all(_idle_share(d) < IDLE_SHARE for d in docs)


def _family(device_or_key: str) -> str:
    from pygpuperf.analyze import machine_model
    from pygpuperf.facts import datasheets

    sheet = datasheets.datasheet_for(device_or_key)
    key = sheet["key"] if sheet else device_or_key
    try:
        segment = machine_model.facts(key).get("segment", "")
        return f"{machine_model.family(key)} {segment}".strip()
    except machine_model.UnknownCardError:
        return "unknown"


def _kernel_time_by_class(profile) -> dict[str, float]:
    from pygpuperf.explain import attribution

    out: dict[str, float] = {}
    records = profile.median.kernels
    for record, us in zip(records, attribution.exclusive_times(records)):
        out[record.kernel_class] = out.get(record.kernel_class, 0.0) + us
    return out


def _reason(prediction, row: Row) -> str:
    """What most likely moved this row: the host where it sets the pace, else the kernel class whose
    predicted time is furthest from the target's own profile, else the prediction's dominant assumption."""
    if not row.device_bound:
        return "host-bound step: the target's host sets its pace, and the prediction keeps the source host's"
    if row.classes:
        worst = max(row.classes, key=lambda c: abs(row.classes[c]))
        return f"{worst} time off by {100 * row.classes[worst]:+.0f} % against the target's own profile"
    return prediction.confidence.split(";")[0]


def pairs(index: dict, models: Models, ceilings: str, residual: str) -> list[Row]:
    from pygpuperf.predict import predict

    cards = [c for c in reference.cards(index) if reference.latest_profiles(index, c)]
    rows = []
    for n, a in enumerate(cards):
        for b in cards[n + 1:]:
            la, lb = reference.latest_profiles(index, a), reference.latest_profiles(index, b)
            for configuration in sorted(set(la) & set(lb)):
                entries = {a: la[configuration], b: lb[configuration]}
                docs = {c: read_json(REFERENCE / e["file"]) for c, e in entries.items()}
                bound = device_bound(list(docs.values()))
                for source, target in ((a, b), (b, a)):
                    (src, _), (tgt, _) = models.of(source, ceilings), models.of(target, ceilings)
                    profile = reference.load_profile(REFERENCE / entries[source]["file"])
                    own = reference.load_profile(REFERENCE / entries[target]["file"])
                    measured = docs[target]["throughput"]["step_us"]["median"]
                    batch = docs[target]["throughput"].get("samples_per_step")
                    p = predict(profile, src, tgt, residual=residual, ceilings=ceilings)
                    step = p.step_us * (batch / p.samples_per_step if batch else 1.0)
                    # The target's own profile, its kernels' time by class, for the error per class.
                    predicted_by = {c.category: c.target_us for c in p.waterfall}
                    measured_by = _kernel_time_by_class(own)
                    classes = {c: predicted_by.get(c, 0.0) / us - 1 for c, us in measured_by.items()
                               if us > 0.03 * sum(measured_by.values()) and c in predicted_by}
                    row = Row("pairs", configuration, _short(entries[source]["device"]),
                              _short(entries[target]["device"]), _family(entries[target]["device"]), step / 1e3,
                              measured / 1e3, step / measured - 1, device_bound=bound, classes=classes)
                    row.interval = intervals.bounds(step / 1e3, p.sigma_log)
                    row.host_share = p.host_share
                    row.reason = _reason(p, row)
                    rows.append(row)
    return rows


def _short(device: str) -> str:
    return device.removeprefix("NVIDIA ")


def published(index: dict, models: Models, ceilings: str, residual: str) -> list[Row]:
    from pygpuperf.core import documents
    from pygpuperf.predict import validate

    entries = reference.profiles_of(index, PUBLISHED)
    card = entries[0]["card"]
    source, _ = models.of(card, "peak" if ceilings == "peak" else ceilings)
    profiles = [reference.load_profile(REFERENCE / e["file"]) for e in entries]
    rows = []
    for path in sorted(p for p in (REFERENCE / "published").iterdir() if p.name.endswith((".json", ".json.xz"))):
        with reference.plain(path) as unpacked:
            doc = documents.load_document(unpacked, "prediction_validation", "published-figures file")
        for g in validate(profiles, source, doc, residual=residual, ceilings=ceilings, held_out=True):
            ref_abs = g.reference_predicted / g.reference_published - 1
            rows.append(Row(path.name, f"{g.name}: {g.reference} (reference)", _short(entries[0]["device"]),
                            g.reference, _family(g.reference), g.reference_predicted, g.reference_published,
                            math.nan, ref_abs, reason="reference card of its group",
                            host_share=g.reference_host_share))
            for r in g.rows:
                row = Row(path.name, f"{g.name}: {r.card}", _short(entries[0]["device"]), r.card,
                          _family(r.priced_as or r.card), r.predicted_ratio, r.published_ratio, r.error,
                          r.predicted / r.published - 1, host_share=r.host_share)
                row.interval = intervals.bounds(r.predicted_ratio, math.hypot(r.sigma_log, g.reference_sigma_log))
                row.reason = "; ".join(r.doubts) or "-"
                rows.append(row)
    return rows


def _mae(values: Sequence[float]) -> float | None:
    values = [abs(v) for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(values) if values else None


def _pct(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else f"{100 * value:{'+' if sign else ''}.1f} %"


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    pair_rows = [r for r in rows if r.set == "pairs"]
    pub = [r for r in rows if r.set != "pairs"]
    out: dict[str, Any] = {}
    if pair_rows:
        bound = [r for r in pair_rows if r.device_bound]
        out["pairs"] = {"rows": len(pair_rows), "device_bound": len(bound),
                        "mae_device_bound": _mae([r.error for r in bound]), "mae_all": _mae([r.error for r in pair_rows]),
                        "max_device_bound": max((abs(r.error) for r in bound), default=None)}
        classes: dict[str, list[float]] = {}
        for r in bound:
            for c, e in r.classes.items():
                classes.setdefault(c, []).append(e)
        out["pairs"]["per_class"] = {c: {"mae": _mae(e), "bias": statistics.fmean(e), "n": len(e)}
                                     for c, e in sorted(classes.items())}
    for name in sorted({r.set for r in pub}):
        these = [r for r in pub if r.set == name]
        ratios = [r.error for r in these if math.isfinite(r.error)]
        families: dict[str, list[float]] = {}
        for r in these:
            if r.absolute_error is not None:
                families.setdefault(r.family, []).append(r.absolute_error)
        device = [r for r in these if r.host_share < intervals.HOST_SHARE]
        out[name] = {"ratio_mae": _mae(ratios), "ratios": len(ratios),
                     "absolute_mae": _mae([r.absolute_error for r in these]), "figures": len(these),
                     "absolute_mae_device_bound": _mae([r.absolute_error for r in device]),
                     "figures_device_bound": len(device),
                     "per_family": {f: {"bias": statistics.fmean(e), "mae": _mae(e), "n": len(e)}
                                    for f, e in sorted(families.items())}}
    covered = [r.covered for r in rows if r.covered is not None]
    out["coverage"] = {"rows": len(covered), "covered": sum(covered) / len(covered) if covered else None}
    return out


def report(rows: Sequence[Row], s: dict[str, Any]) -> list[str]:
    lines = []
    if "pairs" in s:
        p = s["pairs"]
        lines.append(f"real pairs: {p['rows']} predictions, {p['device_bound']} device-bound: MAE "
                     f"{_pct(p['mae_device_bound'])} (worst {_pct(p['max_device_bound'])}); all: {_pct(p['mae_all'])}")
        for c, e in p["per_class"].items():
            lines.append(f"  {c:14s} MAE {_pct(e['mae']):>8s}  bias {_pct(e['bias'], True):>8s}  ({e['n']} pairs)")
    for name, e in s.items():
        if name in ("pairs", "coverage"):
            continue
        lines.append(f"{name}: ratio MAE {_pct(e['ratio_mae'])} over {e['ratios']} ratios; absolute MAE "
                     f"{_pct(e['absolute_mae'])} over {e['figures']} figures, {_pct(e['absolute_mae_device_bound'])} "
                     f"over the {e['figures_device_bound']} the host does not bind")
        for f, v in e["per_family"].items():
            lines.append(f"  {f:28s} absolute bias {_pct(v['bias'], True):>8s}  MAE {_pct(v['mae']):>8s}  ({v['n']})")
    c = s["coverage"]
    lines.append(f"80 % intervals: {c['rows']} rows, covered {_pct(c['covered'])}")
    worst = sorted((r for r in rows if math.isfinite(r.error)), key=lambda r: -abs(r.error))[:WORST]
    lines.append("worst rows:")
    for r in worst:
        lines.append(f"  {_pct(r.error, True):>9s}  {r.set}: {r.what} ({r.source} -> {r.target}): {r.reason}")
    return lines


def _rms_log(errors: Sequence[float]) -> float | None:
    logs = [math.log1p(e) for e in errors if e is not None and math.isfinite(e) and e > -1]
    return math.sqrt(statistics.fmean([x * x for x in logs])) if logs else None


def _spread_80(errors: Sequence[float]) -> float | None:
    """The sigma whose 80 % interval holds 80 % of these errors: their 80th percentile of |log(1 + error)| over
    the normal's 1.2816 (the errors' own tails, not a normal's, set the width)."""
    logs = sorted(abs(math.log1p(e)) for e in errors if e is not None and math.isfinite(e) and e > -1)
    if not logs:
        return None
    return statistics.quantiles(logs, n=10, method="inclusive")[7] / intervals.Z80 if len(logs) > 1 else logs[0]


def fitted_spread(rows: Sequence[Row]) -> "intervals.Spread":
    """The spreads the intervals take, from validation rows (see pygpuperf.predict.interval): per kernel class
    over the device-bound real pairs, the host's over the pairs that are not, per unit of host share, and the
    other family's from the published figures' throughput, less what the classes already carry."""
    pair_rows = [r for r in rows if r.set == "pairs"]
    bound = [r for r in pair_rows if r.device_bound]
    classes = sorted({c for r in bound for c in r.classes})
    per_class = {c: _rms_log([r.classes[c] for r in bound if c in r.classes]) for c in classes}
    per_class = {c: v for c, v in per_class.items() if v is not None}
    default = max(per_class.values(), default=0.1)
    hosted = [r for r in pair_rows if not r.device_bound]
    host_rms = _spread_80([r.error for r in hosted]) or 0.0
    share = statistics.fmean([max(r.host_share, intervals.HOST_SHARE) for r in hosted]) if hosted else 1.0
    published_rows = [r for r in rows if r.set != "pairs" and r.absolute_error is not None and r.host_share < intervals.HOST_SHARE]
    other = _spread_80([r.absolute_error for r in published_rows]) or 0.0
    within = _rms_log([r.error for r in bound]) or 0.0
    return intervals.Spread(per_class, math.sqrt(max(other ** 2 - within ** 2, 0.0)), host_rms / share, default)


def run(ceilings: str, residual: str, published_too: bool = True) -> list[Row]:
    index = reference.load_index()
    models = Models(index)
    rows = pairs(index, models, ceilings, residual)
    if published_too:
        rows += published(index, models, ceilings, residual)
    return rows


def main(argv: list[str] | None = None) -> int:
    from pygpuperf.explain.pricing import RESIDUALS
    from pygpuperf.predict import CEILINGS, DEFAULT_CEILINGS, DEFAULT_RESIDUAL

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", action="store_true", help="every mode of predict, one summary each")
    parser.add_argument("--json", type=Path, help="write the rows and the summary here")
    parser.add_argument("--write-spread", action="store_true",
                        help="fit the intervals' spreads to the default mode's rows and write "
                             "pygpuperf/data/prediction_spread.json")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    modes = [(c, r) for c in CEILINGS for r in RESIDUALS] if args.modes else [(DEFAULT_CEILINGS, DEFAULT_RESIDUAL)]
    out = {}
    for ceilings, residual in modes:
        rows = run(ceilings, residual)
        s = summary(rows)
        print(f"== ceilings {ceilings}, residual {residual}")
        print("\n".join(report(rows, s)))
        out[f"{ceilings}/{residual}"] = {"summary": s, "rows": [asdict(r) for r in rows]}
        if args.write_spread and (ceilings, residual) == (DEFAULT_CEILINGS, DEFAULT_RESIDUAL):
            spread = fitted_spread(rows)
            SPREAD_FILE.write_text(json.dumps(spread.to_dict(), indent=1) + "\n", encoding="utf-8")
            print(f"wrote {SPREAD_FILE.relative_to(reference.ROOT)}: run again to see the intervals it gives")
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
