"""Predicted against measured for every fix --try-fixes measured, from explain.json files.

    python benchmarks/fix_table.py OUT.json EXPLAIN.json [...] [--machine-model RESULTS.json]

EXPLAIN.json files (plain or compressed: .json.xz, .json.gz) are taken in the order given: a fix a later run measured on the
same configuration replaces an earlier run's row for it; where one run measured it more than once, the worse
row stands. A fix measured in more than one run is listed with each run's change and error, one line counts
the fixes within 25 % in every run that timed them in window pairs, and one the paired measurements within 25 %.

A fix's error is |predicted - measured| step time as a share of the measured change (baseline -
measured); the goal is at most 25 %. Fixes measured at another batch are compared per sample. A fix timed
in windows alternating with the step as given takes that step's median as its baseline, and its noise is
the larger of twice the baseline's CV and twice the standard error of its window pairs' savings. Otherwise,
where the step as given was timed again after the fixes, each fix's baseline is interpolated between the two
timings in the order the fixes ran, and the noise is the larger of twice the baseline's CV and the
baseline's own move (the card's drift). A prediction moves with the baseline (times the fix's baseline over
the explained one), and a paired fix's prediction with the clock its fixed windows ran at (the share of the
step at the clock's pace moved by the two sides' clock ratio); where the host's pace was timed beside a fix's
windows, its prediction is the one at that pace; where reduce-overhead ran without CUDA graphs, the compiled
step's alone. A change within the noise is "no measurable change": a prediction then counts as right when it
is as close to the measurement as the noise. With --machine-model the predictions are made again from each
recorded profile by the current kernel model (the measurements are as recorded). The last line also counts the
fixes whose change is at least three times its noise, and those of them within 10 % and 25 %.
benchmarks/tables.py builds the documented table with :func:`fix_table` and :func:`summary`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

from pygpuperf import diagnose
from pygpuperf.core import documents
from pygpuperf.trials import fixes
from pygpuperf.workloads import WORKLOADS

from reference import configuration_of, indexed, load_explained_profile, read_json

AtClock = Callable[[float, float, float], float]  # (prediction, given MHz, fixed MHz) -> the prediction moved
# A fix counts as clearly measured where its change is at least this many times its noise.
CLEAR_CHANGE = 3.0


class Step(NamedTuple):
    """One explained step of a fix table: its profile, its configuration's name and the run it came from."""

    path: Path
    configuration: str
    run: str


def _repredicted(path: Path, model) -> tuple[dict[str, float | None], AtClock]:
    """Each fix's prediction by the current kernel model (at the host's pace beside its windows, where that was
    timed), and the function moving a prediction from the given windows' clock to the fixed windows' on this
    profile (:func:`fixes.at_clock`)."""
    e, trials = load_explained_profile(path)
    found = diagnose.explain_again(e, model).causes  # the causes give their fixes' predictions
    samples = e.throughput.samples_per_step if e.throughput else None
    built_in = e.settings.get("workload") in WORKLOADS  # its own graph build fuses the optimizer
    predictions = {}
    for f in trials.fixes:
        host = fixes.windows_host(f)
        ran = "compile" if f.predicted_without_graphs_us is not None else f.name  # reduce-overhead without graphs
        paced = fixes.host_paced_at(trials, host) if host else trials
        predictions[f.name] = fixes.predicted_step(e, model, ran, f.knobs, samples, graph_fuses_optimizer=built_in,
                                                   found=found, timings=paced)
    return predictions, lambda predicted, given, fixed: fixes.at_clock(e, model, predicted, given, fixed, trials)


def _at_fixed_clock(fix: dict, predicted: float, at_clock: AtClock | None) -> float:
    """A paired fix's prediction at its fixed windows' clock, where both sides' clocks were recorded: moved by
    the current kernel model when it re-predicts (`at_clock`), else by the run's own record of it."""
    given, fixed = fix.get("given_windows_mhz"), fix.get("fixed_windows_mhz")
    if not given or not fixed:
        return predicted
    if at_clock is not None:
        return at_clock(predicted, statistics.median(given), statistics.median(fixed))
    recorded, at = fix.get("predicted_step_us"), fix.get("predicted_at_fixed_clock_us")
    return predicted * at / recorded if at and recorded else predicted


def rows(path: Path, model=None, configuration: str | None = None) -> list[dict]:
    """One row per fix of one explain.json (or .json.xz); `configuration` names the step (default: from its
    folder, which the explain command named by its arguments)."""
    doc = read_json(path)
    workload = configuration or _step_of(path, doc)[0]
    explained_step = (doc.get("throughput") or {}).get("step_us") or {}
    cv, explained = explained_step.get("cv") or 0.0, explained_step.get("median")
    again, at_clock = _repredicted(path, model) if model is not None else ({}, None)
    out = []
    trials = doc.get("fixes") or []
    measured_count, position = sum(f["status"] == "measured" for f in trials), 0
    for fix in trials:
        paired = fix.get("paired_savings_us") or []
        row = {"workload": workload, "fix": fix["name"], "status": fix["status"], "reason": fix.get("reason", ""),
               "paired": bool(paired)}
        base, measured = fix.get("baseline_step_us"), fix.get("measured_step_us")
        after, drift, moved = fix.get("baseline_after_step_us"), 0.0, 1.0
        position += fix["status"] == "measured"  # its place among the measured fixes, in the order they ran
        if paired and base and explained:
            moved = base / explained
            if len(paired) > 1:
                drift = fixes.NOISE_SPREADS * statistics.stdev(paired) / math.sqrt(len(paired))
        elif base and after and fix["status"] == "measured":
            drift = abs(after - base)
            interpolated = base + (after - base) * position / (measured_count + 1)
            base, moved = interpolated, interpolated / base
        recorded = (fix.get("predicted_without_graphs_us") or fix.get("predicted_at_windows_host_us")
                    or fix.get("predicted_step_us"))
        predicted = again.get(fix["name"], recorded) if model is not None else recorded
        predicted = predicted * moved if predicted is not None else None  # the prediction moves with the card
        if predicted is not None and paired:  # and with the clock its fixed windows ran at
            predicted = _at_fixed_clock(fix, predicted, at_clock)
        for side in ("given", "fixed"):  # the clock each side's windows ran at, where the device reported it
            if fix.get(f"{side}_windows_mhz"):
                row[f"{side}_mhz"] = statistics.median(fix[f"{side}_windows_mhz"])
        if fix["status"] == "measured" and base and measured:
            scale = (fix.get("baseline_samples_per_step") or 1) / (fix.get("samples_per_step") or 1)
            measured, predicted = measured * scale, (predicted * scale if predicted is not None else None)
            change, noise = base - measured, max(fixes.NOISE_SPREADS * cv * base, drift)
            row.update(baseline_ms=base / 1e3, measured_ms=measured / 1e3, predicted_ms=None if predicted is None
                       else predicted / 1e3, measured_change_ms=change / 1e3, noise_ms=noise / 1e3,
                       measurable=abs(change) > noise)
            if predicted is not None:
                miss = abs(predicted - measured)
                row["error_share_of_change"] = miss / abs(change) if change else None
                row["right"] = miss <= (0.25 * abs(change) if abs(change) > noise else noise)
        out.append(row)
    return out


def _share(row: dict) -> str:
    """A repeated measurement's error, as a share of its change where the change was beyond the noise."""
    if row.get("error_share_of_change") is None or not row.get("measurable"):
        return ""
    return f" ({100 * row['error_share_of_change']:.0f}%)"


def _worse(row: dict, than: dict) -> bool:
    """Whether `row` is the worse of two measurements of one fix in one run: wrong where the other is right,
    else the larger share of its change missed."""
    if "right" not in row or "right" not in than:
        return "right" in row
    if row["right"] != than["right"]:
        return not row["right"]
    return (row.get("error_share_of_change") or 0.0) > (than.get("error_share_of_change") or 0.0)


def _run_of(path: Path) -> str:
    """The run an explain.json came from: its nearest folder named like a device run (fixes13), else its
    configuration's folder."""
    return next((p.name for p in path.parents if re.fullmatch(r"fixes\d+", p.name)), path.parent.name)


def _step_of(path: Path, doc: dict) -> tuple[str, str]:
    """(configuration, run) of an explain.json: as benchmarks/reference/index.json records a reference profile,
    else from the folders the explain command and the run wrote it in."""
    entry = indexed(path)
    if entry is not None:
        return entry["configuration"], entry.get("run", entry["recorded"])
    return configuration_of(path.parent.name, doc.get("settings")), _run_of(path)


def fix_table(steps: Sequence[Step], model=None, rows_of: Callable[[Step], list[dict]] | None = None
              ) -> tuple[list[dict], dict[tuple[str, str], list[tuple[str, dict]]]]:
    """The table's rows, and every measurement of each (configuration, fix) with its run. `steps` in the order
    they ran: a fix measured again on the same configuration in a later run replaces the earlier row, in its
    place; measured twice in one run, the worse of the two stands. `rows_of` gives a step's rows (default
    :func:`rows` with `model`; the caller's may have computed them elsewhere)."""
    latest: dict[tuple[str, str], tuple[str, dict]] = {}
    repeats: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    for step in steps:
        for r in (rows_of(step) if rows_of else rows(step.path, model, step.configuration)):
            key = (r["workload"], r["fix"])
            if key not in latest or latest[key][0] != step.run or _worse(r, latest[key][1]):
                latest[key] = (step.run, r)
            if "measured_change_ms" in r:
                repeats.setdefault(key, []).append((step.run, r))
    return [r for _, r in latest.values()], repeats


def predicted_change_ms(row: dict) -> float | None:
    return row["baseline_ms"] - row["predicted_ms"] if row.get("predicted_ms") is not None else None


def summary(table: Sequence[dict]) -> dict:
    """Counts over the fixes with a prediction: beyond the noise and within 25 % of their change, and those
    whose change is at least CLEAR_CHANGE times its noise, within 10 % and 25 %."""
    scored = [r for r in table if r.get("predicted_ms") is not None and "right" in r]
    measurable = [r for r in scored if r["measurable"]]
    clear = [r for r in scored if r["measured_change_ms"] and abs(r["measured_change_ms"]) >= CLEAR_CHANGE * r["noise_ms"]]
    return {"predicted": len(scored), "right": sum(r["right"] for r in scored),
            "measurable": len(measurable), "measurable_within_25": sum(r["right"] for r in measurable),
            "clear": len(clear),
            "clear_within_10": sum(r["error_share_of_change"] <= 0.10 for r in clear),
            "clear_within_25": sum(r["error_share_of_change"] <= 0.25 for r in clear),
            "by_fix": {fix: (sum(r["right"] for r in measurable if r["fix"] == fix),
                             sum(r["fix"] == fix for r in measurable))
                       for fix in sorted({r["fix"] for r in measurable})}}


def print_table(table: Sequence[dict], repeats: dict[tuple[str, str], list[tuple[str, dict]]]) -> None:
    for r in table:
        if "measured_ms" in r:
            verdict = ("no prediction" if r["predicted_ms"] is None else
                       f"{r['predicted_ms']:9.2f} predicted, {'right' if r['right'] else 'wrong'}"
                       + (f" ({100 * r['error_share_of_change']:.0f}% of the change)" if r["measurable"] else
                          " (no measurable change)"))
            clocks = r.get("given_mhz"), r.get("fixed_mhz")
            if all(clocks) and abs(clocks[1] / clocks[0] - 1.0) >= fixes.CLOCK_MOVE:
                verdict += f", clock {clocks[0]:,.0f} -> {clocks[1]:,.0f} MHz"
            print(f"{r['workload']:40s} {r['fix']:18s} {r['baseline_ms']:8.2f} -> {r['measured_ms']:8.2f} ms measured, "
                  + verdict)
        else:
            print(f"{r['workload']:40s} {r['fix']:18s} {r['status']}: {r['reason'][:90]}")
    counts = summary(table)
    for fix, (right, of) in counts["by_fix"].items():
        print(f"  {fix}: {right} of {of} measurable changes within 25 %")
    again = {key: runs for key, runs in repeats.items() if len(runs) > 1}
    if again:
        print("measured in more than one run (ms saved per step, at the baseline's batch):")
        for (workload, fix), runs in again.items():
            print(f"  {workload:40s} {fix:18s} " + ", ".join(f"{run} {r['measured_change_ms']:+.2f}" + _share(r)
                                                          for run, r in runs))
    # Each fix measured beyond the noise, with a prediction, in more than one run timed in window pairs: is it
    # within 25 % in every one of them, or only in the run the table keeps?
    in_pairs = {key: [r for _, r in runs if r["paired"] and r.get("measurable") and "right" in r]
                for key, runs in repeats.items()}
    in_pairs = {key: rs for key, rs in in_pairs.items() if len(rs) > 1}
    steady = [key for key, rs in in_pairs.items() if all(r["right"] for r in rs)]
    if in_pairs:
        unsteady = "; ".join(f"{w} {f} {sum(r['right'] for r in rs)} of {len(rs)}"
                             for (w, f), rs in in_pairs.items() if (w, f) not in steady)
        print(f"measured beyond the noise in more than one paired run: {len(in_pairs)} fixes, {len(steady)} "
              f"within 25 % in every one; not: {unsteady or 'none'}")
    # Every measurement pooled, not one a fix: how often one run of --try-fixes lands within 25 %.
    pooled = [(run, r) for runs in repeats.values() for run, r in runs
              if r["paired"] and r.get("measurable") and "right" in r]
    if pooled:
        print(f"every paired measurement beyond the noise: {sum(r['right'] for _, r in pooled)} of {len(pooled)} "
              f"within 25 % ({len({run for run, _ in pooled})} runs)")
    print(f"{counts['predicted']} fix x workload pairs with a prediction, {counts['right']} right; "
          f"{counts['measurable']} with a change beyond the noise, {counts['measurable_within_25']} of those within "
          f"25 % of the measured change; {counts['clear']} with a change at least {CLEAR_CHANGE:g} times its noise, "
          f"{counts['clear_within_10']} within 10 % and {counts['clear_within_25']} within 25 %")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("explains", type=Path, nargs="+")
    parser.add_argument("--machine-model", type=Path)
    args = parser.parse_args()
    model = documents.load_results(args.machine_model).machine_model if args.machine_model else None
    steps = [Step(p, *_step_of(p, read_json(p))) for p in args.explains]
    table, repeats = fix_table(steps, model)
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print_table(table, repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
