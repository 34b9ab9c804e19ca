"""Every documented table, generated again from benchmarks/reference/ by the current code.

    python benchmarks/tables.py [--check] [--only NAME [NAME ...]] [--docs FILE.md [FILE.md ...]]

Reads benchmarks/reference/ only (index.json gives each file's card, the date it was recorded and the commit),
writes each table to benchmarks/reference/tables/NAME.json and rewrites the Markdown between

    <!-- table: NAME -->
    <!-- /table -->

in README.md and docs/*.md, or the --docs given (a table whose marker no document has is still computed and
written). --check writes nothing, computes only the tables the documents mark, and exits 1 where a marked block
differs from what it would generate or names no table.

The tables (NAME): h200-suite, the default suite's ceilings on the reference H200; fix-table, every fix
--try-fixes measured, re-predicted by the current kernel model; cause-coverage, each step's time held by
named causes; cross-card, each configuration profiled on two cards predicted from one to the other;
published-figures, throughput ratios between cards against published figures; plain-loop, the tool's step
time against a plain loop's; batch-prediction, a step predicted at other batch sizes on its card;
kernel-counters, the kernel model's bytes against Nsight Compute's counters.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

import reference
from reference import BATCH, FIXES, PUBLISHED, REFERENCE, ROOT, read_json

COMMAND = "python benchmarks/tables.py"
TABLES_DIR = REFERENCE / "tables"
MARKER = re.compile(r"<!-- table: ([A-Za-z0-9_-]+) -->\n(.*?)<!-- /table -->", re.S)
SUITE_WORKLOAD_KEYS = ("batch_size", "image_size", "precision", "memory_format")


@dataclass
class Generated:
    name: str
    rows: list[dict]  # tables/NAME.json
    body: list[str]  # the Markdown between the sources line and the command
    sources: list[dict] = field(default_factory=list)  # the index entries it read


# --------------------------------------------------------------------------- formatting


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> list[str]:
    """A GitHub Markdown table; the columns numbered in `right` are right-aligned."""
    rule = ["---:" if n in right else "---" for n in range(len(header))]
    return ["| " + " | ".join(_cell(h) for h in header) + " |", "| " + " | ".join(rule) + " |"] + [
        "| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def pct(share: float | None, digits: int = 1, sign: bool = False) -> str:
    if share is None or not math.isfinite(share):
        return "-"
    return f"{100 * share:{'+' if sign else ''}.{digits}f} %"


def _rounded(value: Any) -> Any:
    """Floats to 6 significant digits (the tables' files change only where a figure does)."""
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def sources_line(entries: Sequence[dict]) -> str:
    """One line naming the files a table read, the dates they were recorded and the commits."""
    by_folder: dict[str, list[str]] = {}
    for e in entries:
        folder, _, name = e["file"].rpartition("/")
        by_folder.setdefault(folder, []).append(name)
    files = []
    for folder, names in sorted(by_folder.items()):
        prefix = f"benchmarks/reference/{folder}/" if folder else "benchmarks/reference/"
        files.append(f"`{prefix}{names[0]}`" if len(names) == 1 else f"`{prefix}` ({len(names)} files)")
    dates = sorted({e["recorded"][:10] for e in entries})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    commits = list(dict.fromkeys(c for e in sorted(entries, key=lambda e: e["recorded"])
                                 for c in e.get("commit", "").split(",") if c))
    which = ", ".join(commits) if len(commits) <= 3 else f"{commits[0]} to {commits[-1]} ({len(commits)} commits)"
    return f"_From {', '.join(files)}, recorded {when}, added in commit{'s' if len(commits) > 1 else ''} {which}._"


def render(g: Generated) -> str:
    return "\n".join([sources_line(g.sources), "", *g.body, "", f"_Regenerate: `{COMMAND}`_"]) + "\n"


# --------------------------------------------------------------------------- shared loading


class Reference:
    """The index and what the tables share: machine models, loaded once."""

    def __init__(self) -> None:
        self.index = reference.load_index()
        self._models: dict[str, Any] = {}

    def path(self, entry: dict) -> Path:
        return REFERENCE / entry["file"]

    def machine(self, card: str) -> dict | None:
        return reference.machine_model_entry(self.index, card)

    def loaded_model(self, card: str):
        """The card's measured machine model, else its datasheet's (pygpuperf's LoadedModel); None for neither."""
        from pygpuperf.analyze.machine_model import load_model
        from pygpuperf.facts import datasheets

        if card not in self._models:
            entry = self.machine(card)
            if entry is not None:
                self._models[card] = load_model(str(self.path(entry)))
            else:
                device = next((e["device"] for e in self.index["profiles"] if e["card"] == card), card)
                sheet = datasheets.datasheet_for(device)
                self._models[card] = load_model("datasheet:" + sheet["key"]) if sheet else None
        return self._models[card]

    def fix_cards(self) -> list[str]:
        """Cards with --try-fixes profiles and a measured machine model to explain them on."""
        return [c for c in reference.cards(self.index) if self.machine(c) and reference.profiles_of(self.index, FIXES, c)]


# --------------------------------------------------------------------------- h200-suite


def suite_table(ref: Reference) -> Generated:
    from pygpuperf.core import documents
    from pygpuperf.core.units import format_number
    from pygpuperf.report.table import summary_rows

    suites = [e for e in ref.index["machines"] if e["card"] == reference.H200 and e.get("role") == "default-suite"]
    entry = max(suites, key=lambda e: e["recorded"])
    results = documents.load_results(ref.path(entry))
    rows = summary_rows(results)
    body = [f"{entry['device']}, torch {entry.get('torch') or '-'}, driver {entry.get('driver') or '-'}: the best "
            "variant of each probe on each backend (median of its samples, p5-p95 and CV over them).", ""]
    body += markdown_table(
        ["probe", "backend", "median", "unit", "p5-p95", "CV", "datasheet", "% of datasheet", "check"],
        [[r.name, r.backend, format_number(r.value), r.unit,
          f"{format_number(r.p5)}-{format_number(r.p95)}" if r.p5 is not None else "-",
          pct(r.cv), format_number(r.datasheet), format_number(r.percent, 0),
          r.check + (f" ({r.flag})" if r.flag else "") + (f"; {r.note}" if r.note else "")] for r in rows],
        right=(2, 4, 5, 6, 7))
    for w in results.workloads:
        params = ", ".join(f"{k}={w.params[k]}" for k in SUITE_WORKLOAD_KEYS if k in w.params)
        body += ["", f"{w.name} ({params}): {format_number(w.samples_per_second)} samples/s, step "
                     f"{1e3 * w.step_time.median:.2f} ms (CV {pct(w.step_time.cv)})."]
    out = [{"probe": r.name, "backend": r.backend, "median": r.value, "unit": r.unit, "p5": r.p5, "p95": r.p95,
            "cv": r.cv, "datasheet": r.datasheet, "percent_of_datasheet": r.percent, "flag": r.flag,
            "check": r.check, "note": r.note} for r in rows]
    return Generated("h200-suite", out, body, [entry])


# --------------------------------------------------------------------------- fix-table and cause-coverage


def _profile_work(task: tuple[str, str, str, bool, bool]) -> tuple[list[dict], dict | None]:
    """One profile's fix rows and, for a configuration's latest profile, its cause coverage (in a worker)."""
    import cause_coverage
    import fix_table
    from pygpuperf.core import documents

    path, model_path, configuration, fixes_wanted, coverage_wanted = task
    model = _worker_models.get(model_path)
    if model is None:
        model = _worker_models[model_path] = documents.load_results(model_path).machine_model
    rows = fix_table.rows(Path(path), model, configuration) if fixes_wanted else []
    coverage = cause_coverage.row(Path(path), model, configuration) if coverage_wanted else None
    return rows, coverage


_worker_models: dict[str, Any] = {}


def _workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def explained_again(ref: Reference) -> dict[str, tuple[list[tuple[dict, list[dict]]], list[tuple[dict, dict]]]]:
    """Per card with a machine model: each --try-fixes profile with its fix rows, and each configuration's
    latest profile with its cause coverage, all explained again by the current code (in parallel)."""
    tasks, keys = [], []
    for card in ref.fix_cards():
        model_path = str(ref.path(ref.machine(card)))
        latest = {e["file"] for e in reference.latest_profiles(ref.index, card).values()}
        for entry in reference.profiles_of(ref.index, FIXES, card):
            tasks.append((str(ref.path(entry)), model_path, entry["configuration"], True, entry["file"] in latest))
            keys.append((card, entry))
    # Largest first: the pool then ends together.
    order = sorted(range(len(tasks)), key=lambda n: -os.path.getsize(tasks[n][0]))
    results: dict[int, tuple[list[dict], dict | None]] = {}
    with concurrent.futures.ProcessPoolExecutor(_workers()) as pool:
        for n, result in zip(order, pool.map(_profile_work, [tasks[n] for n in order])):
            results[n] = result
    out: dict[str, tuple[list, list]] = {}
    for n, (card, entry) in enumerate(keys):
        rows, coverage = results[n]
        fixes_of, coverage_of = out.setdefault(card, ([], []))
        fixes_of.append((entry, rows))
        if coverage is not None:
            coverage_of.append((entry, coverage))
    return out


def fix_table_of(ref: Reference, again) -> Generated:
    import fix_table

    rows_out, body, sources = [], [], []
    for card, (profiles, _) in again.items():
        computed = {str(ref.path(entry)): rows for entry, rows in profiles}
        steps = [fix_table.Step(ref.path(e), e["configuration"], e["run"]) for e, _ in profiles]
        table, _ = fix_table.fix_table(steps, rows_of=lambda step, done=computed: done[str(step.path)])
        sources += [e for e, _ in profiles] + [ref.machine(card)]
        table = sorted((r for r in table if "measured_ms" in r), key=lambda r: r["workload"])
        if len(again) > 1:
            body += [f"**{card}**", ""]
        cells = []
        for r in table:
            predicted = fix_table.predicted_change_ms(r)
            if predicted is None:
                error, within = "no prediction", "-"
            elif r["measurable"]:
                error, within = pct(r["error_share_of_change"], 0), "yes" if r["right"] else "no"
            else:
                error = "no measurable change"
                within = "yes (within the noise)" if r["right"] else "no (beyond the noise)"
            cells.append([r["workload"], r["fix"], f"{r['baseline_ms']:,.2f} → {r['measured_ms']:,.2f}",
                          f"{-r['measured_change_ms']:+,.2f} ± {r['noise_ms']:,.2f}",
                          "-" if predicted is None else f"{-predicted:+,.2f}", error, within])
            rows_out.append(dict(r, card=card, predicted_change_ms=predicted))
        body += markdown_table(["configuration", "fix", "step (ms), given → fixed", "measured change (ms) ± noise",
                                "predicted change (ms)", "error (share of the change)", "within 25 %"], cells,
                               right=(2, 3, 4, 5))
        s = fix_table.summary(table)
        body += ["", f"{s['clear']} fixes changed the step by at least {fix_table.CLEAR_CHANGE:g} times its noise; "
                     f"the prediction came within 10 % of the measured change for {s['clear_within_10']} of them and "
                     f"within 25 % for {s['clear_within_25']}. Beyond the noise at all: {s['measurable']} fixes, "
                     f"{s['measurable_within_25']} within 25 %. A change is fixed minus given, per step at the given "
                     "step's batch; its noise is the larger of twice the step's CV and twice the standard error of "
                     "the fix's window pairs' savings (for fixes timed one after another, the given step's drift over "
                     "the run). Where the change is within the noise, a prediction counts as within when it is as "
                     "close to the measurement as the noise."]
    return Generated("fix-table", rows_out, body, sources)


def cause_coverage_of(ref: Reference, again) -> Generated:
    import cause_coverage

    rows_out, body, sources = [], [], []
    for card, (_, covered) in again.items():
        covered = sorted(covered, key=lambda c: c[0]["configuration"])
        sources += [e for e, _ in covered] + [ref.machine(card)]
        if len(again) > 1:
            body += [f"**{card}**", ""]
        cells = []
        for entry, r in covered:
            step = (read_json(ref.path(entry)).get("throughput") or {}).get("step_us") or {}
            cells.append([entry["configuration"],
                          f"{step['median'] / 1e3:,.2f} (CV {pct(step.get('cv'))})" if step.get("median") else "-",
                          pct(r["named_share"]), pct(r["no_rule_share"], 2), len(r["foreign_mechanisms"])])
            rows_out.append(dict(r, card=card, configuration=entry["configuration"]))
        body += markdown_table(["configuration", "step (ms)", "named causes", "kernels no rule bounds",
                                "advice naming a mechanism the step lacks"], cells, right=(1, 2, 3, 4))
        s = cause_coverage.summary([r for _, r in covered])
        body += ["", f"{s['steps']} steps: named causes hold {pct(s['named_min'])} to {pct(s['named_max'])} of each "
                     f"step's time (goal 95 %), kernels no rule bounds at most {pct(s['no_rule_max'], 2)} (goal under "
                     f"2 %), and {s['foreign']} findings or causes advise a mechanism the step does not use (goal 0)."]
    return Generated("cause-coverage", rows_out, body, sources)


# --------------------------------------------------------------------------- cross-card, published-figures


_harness_rows: list | None = None


def harness_rows() -> list:
    """The prediction harness's rows in predict's default mode (benchmarks/validate_predictions.py), made once."""
    global _harness_rows
    if _harness_rows is None:
        import validate_predictions

        _harness_rows = validate_predictions.run(*_default_mode())
    return _harness_rows


def _default_mode() -> tuple[str, str]:
    from pygpuperf.predict import DEFAULT_CEILINGS, DEFAULT_RESIDUAL

    return DEFAULT_CEILINGS, DEFAULT_RESIDUAL


def cross_card(ref: Reference) -> Generated:
    import validate_predictions as harness

    rows = [r for r in harness_rows() if r.set == "pairs"]
    cells = [[r.what, f"{r.source} → {r.target}", f"{r.measured:,.2f}", f"{r.predicted:,.2f} ({pct(r.error, 1, True)})",
              f"{r.interval[0]:,.2f}-{r.interval[1]:,.2f}" if r.interval else "-",
              "yes" if r.covered else "no", "yes" if r.device_bound else "no"] for r in rows]
    body = markdown_table(["configuration", "predicted from → to", "measured on the target (ms)",
                           "predicted (ms, error)", "80 % interval (ms)", "covered", "device-bound"], cells,
                          right=(2, 3, 4))
    s = harness.summary(rows)["pairs"]
    covered = [r.covered for r in rows]
    ceilings, residual = _default_mode()
    body += ["", f"Predicted with predict's defaults (`--ceilings {ceilings} --residual {residual}`), each card's "
                 f"measured machine model. {s['device_bound']} device-bound predictions: mean absolute error "
                 f"{pct(s['mae_device_bound'])}, worst {pct(s['max_device_bound'])}; all {s['rows']}: "
                 f"{pct(s['mae_all'])}. The 80 % intervals cover {sum(covered)} of {len(covered)}. A step is "
                 f"device-bound where its host's own time per step is under "
                 f"{100 * harness.DEVICE_BOUND_HOST_SHARE:.0f} % of its step time wherever --try-fixes timed it, and "
                 f"the device waits for the host under {100 * harness.IDLE_SHARE:.0f} % of each profiled step."]
    body += ["", "Error per kernel class (device-bound pairs, the class's predicted time against the target's own "
                 "profile):", ""]
    body += markdown_table(["kernel class", "mean absolute error", "bias", "pairs"],
                           [[c, pct(e["mae"]), pct(e["bias"], 1, True), e["n"]] for c, e in s["per_class"].items()],
                           right=(1, 2, 3))
    sources = [e for c in reference.cards(ref.index) for e in reference.latest_profiles(ref.index, c).values()]
    sources += [ref.machine(c) for c in reference.cards(ref.index) if ref.machine(c)]
    out = [dict(vars(r), covered=r.covered) for r in rows]
    return Generated("cross-card", _rounded(out), body, _unique(sources))


def _unique(entries: Sequence[dict]) -> list[dict]:
    return list({e["file"]: e for e in entries}.values())


def published_figures(ref: Reference) -> Generated:
    import validate_predictions as harness

    rows = [r for r in harness_rows() if r.set != "pairs"]
    s = harness.summary(rows)
    cells, out = [], []
    for name, e in s.items():
        if name == "coverage":
            continue
        these = [r for r in rows if r.set == name]
        covered = [r.covered for r in these if r.covered is not None]
        cells.append([name, pct(e["ratio_mae"]), e["ratios"], pct(e["absolute_mae"]), e["figures"],
                      pct(e["absolute_mae_device_bound"]), e["figures_device_bound"],
                      f"{sum(covered)} of {len(covered)}"])
        out.append(dict(e, file=name, ratio_intervals_covered=sum(covered), ratio_intervals=len(covered)))
    body = markdown_table(["published figures", "ratio error (mean absolute)", "ratios", "throughput error (mean "
                           "absolute)", "figures", "the same, where the host does not bind", "figures",
                           "ratio intervals covering"], cells, right=(1, 2, 3, 4, 5, 6, 7))
    body += ["", "Bias of the predicted throughput per card family (mean of predicted / published - 1), figures the "
                 "host does not bind:", ""]
    fams: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r.absolute_error is not None and r.host_share < harness.intervals.HOST_SHARE:
            fams.setdefault(r.family, {}).setdefault(r.set, []).append(r.absolute_error)
    names = sorted({r.set for r in rows})
    body += markdown_table(["card family", *names],
                           [[f, *(f"{pct(statistics.fmean(v[n]), 1, True)} ({len(v[n])})" if n in v else "-"
                                  for n in names)] for f, v in sorted(fams.items())], right=tuple(range(1, len(names) + 1)))
    entries = reference.profiles_of(ref.index, PUBLISHED)
    ceilings, residual = _default_mode()
    body += ["", f"Predicted from {len(entries)} profiles on {entries[0]['device']} (each figure from the profile "
                 "of its workload, precision and configuration) with predict's defaults (`--ceilings "
                 f"{ceilings} --residual {residual}`), each card priced leave-one-card-out: its achievable ceilings "
                 "from its datasheet times its architecture family's published fraction, learned without it. A ratio "
                 "is a card's throughput over its table's reference card, published against predicted."]
    names = {f"published/{p}" for p in names}
    sources = entries + [ref.machine(entries[0]["card"])] + [e for e in ref.index["extracts"] if e["file"] in names]
    return Generated("published-figures", _rounded(out), body, sources)


def prediction_harness(ref: Reference) -> Generated:
    import validate_predictions as harness

    rows = harness_rows()
    s = harness.summary(rows)
    ceilings, residual = _default_mode()
    body = [f"`python benchmarks/validate_predictions.py` with predict's defaults (`--ceilings {ceilings} "
            f"--residual {residual}`):", "", "```", *harness.report(rows, s), "```"]
    sources = [e for c in reference.cards(ref.index) for e in reference.latest_profiles(ref.index, c).values()]
    sources += [ref.machine(c) for c in reference.cards(ref.index) if ref.machine(c)]
    sources += reference.profiles_of(ref.index, PUBLISHED)
    sources += [e for e in ref.index["extracts"] if e["file"].startswith("published/")]
    return Generated("prediction-harness", _rounded(s), body, _unique(sources))


# --------------------------------------------------------------------------- plain-loop


def plain_loop_table(ref: Reference) -> Generated:
    import plain_loop

    entry = next(e for e in ref.index["extracts"] if e["file"].endswith("plain-loop.json"))
    rows = [plain_loop.summarize(r) for r in read_json(ref.path(entry))]
    cells = [[r.get("device", r["card"]), r["workload"], f"{r['ratio_tool_to_loop']:.3f}",
              "{:.3f}-{:.3f}".format(*r["ratio_interval_90"]), f"{r['repeats']} x {r['steps_per_timing']}",
              pct(r.get("loop_cv"))] for r in rows]
    body = markdown_table(["device", "workload", "tool / plain loop (median)", "90 % interval", "repeats x steps",
                           "plain loop's CV"], cells, right=(2, 3, 5))
    within = sum(abs(r["ratio_tool_to_loop"] - 1) <= plain_loop.GOAL for r in rows)
    body += ["", f"{within} of {len(rows)} workloads within {100 * plain_loop.GOAL:.0f} % (median of the paired "
                 "repeats' ratios, bootstrap interval of the median)."]
    out = [{k: v for k, v in r.items() if not k.endswith("repeats_s")} for r in rows]
    return Generated("plain-loop", out, body, [entry])


# --------------------------------------------------------------------------- batch-prediction, kernel-counters


def batch_prediction(ref: Reference) -> Generated:
    import kernel_model_checks

    entries = reference.profiles_of(ref.index, BATCH)
    runs_entry = next(e for e in ref.index["extracts"] if e["file"].endswith("batch-steps.json"))
    runs = read_json(ref.path(runs_entry))
    rows_out, cells, sources = [], [], [runs_entry]
    for e in entries:
        model = ref.loaded_model(e["card"]).model
        doc = read_json(ref.path(e))
        workload, batch = e["configuration"].split()[0], doc["throughput"]["samples_per_step"]
        rows = kernel_model_checks.batch_rows(model, ref.path(e), [r for r in runs if r["name"] == workload], batch)
        sources += [e, ref.machine(e["card"])]
        for r in rows:
            rows_out.append(dict(r, workload=workload, source_batch=batch))
            cells.append([workload, batch, r["batch"], f"{r['measured_ms']:,.2f} (CV {pct(r['measured_cv'])})",
                          f"{r['predicted_ms']:,.2f}", pct(r["error"], 1, True)])
    body = markdown_table(["workload", "profiled at batch", "predicted at batch", "measured (ms)", "predicted (ms)",
                           "error"], cells, right=(1, 2, 3, 4, 5))
    body += ["", "The profiled step resized to each batch by the kernel model on the card's measured model, the "
                 "step at batch 1 as the host's own time, against the same runs' unprofiled steps."]
    return Generated("batch-prediction", rows_out, body, _unique(sources))


def kernel_counters(ref: Reference) -> Generated:
    import kernel_model_checks

    rows_out, cells, sources = [], [], []
    for e in reference.profiles_of(ref.index, BATCH):
        counted = next((x for x in ref.index["extracts"] if x["file"].endswith(f"ncu_{reference.slug(e['configuration'])}"
                                                                                  ".csv.gz")), None)
        if counted is None:
            continue
        model = ref.loaded_model(e["card"]).model
        r = kernel_model_checks.counters_of(model, ref.path(e), kernel_model_checks.read_counters(ref.path(counted)))
        r.pop("largest", None)
        sources += [e, counted, ref.machine(e["card"])]
        rows_out.append(dict(r, configuration=e["configuration"]))
        cells.append([e["configuration"], f"{r['matched']} of {r['kernels_profiled']}", r["top_kernels"],
                      pct(r["dram_bytes_error_time_weighted"]), pct(r["l2_bytes_error_time_weighted"]),
                      f"{r['step_dram_gb']['model']:.1f} / {r['step_dram_gb']['ncu']:.1f}",
                      f"{r['bound_over_measured_time_weighted']:.2f}" if r["bound_over_measured_time_weighted"] else "-"])
    body = markdown_table(["step", "kernels matched", "kernels in 90 % of the time", "DRAM bytes off (time-weighted)",
                           "L2 bytes off (time-weighted)", "step's DRAM GB, model / counters", "bound / measured time"],
                          cells, right=(2, 3, 4, 5, 6))
    body += ["", "The kernel model's DRAM and L2 bytes per kernel against Nsight Compute's dram__bytes and "
                 "lts__t_bytes of the same step, kernels matched by name in launch order; errors weighted by "
                 "kernel time over the kernels that make up 90 % of it."]
    return Generated("kernel-counters", rows_out, body, _unique(sources))


# --------------------------------------------------------------------------- the documents


def documents_with_markers() -> list[Path]:
    return [p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if p.is_file()]


def rewrite(text: str, blocks: dict[str, str], unknown: list[str]) -> str:
    """`text` with each marked block replaced by its table; the names no table has go to `unknown`."""
    def one(m: re.Match) -> str:
        name = m.group(1)
        if name not in blocks:
            unknown.append(name)
            return m.group(0)
        return f"<!-- table: {name} -->\n{blocks[name]}<!-- /table -->"

    return MARKER.sub(one, text)


def wanted_names(paths: Sequence[Path]) -> set[str]:
    return {m.group(1) for p in paths for m in MARKER.finditer(p.read_text(encoding="utf-8"))}


def generate(names: Sequence[str]) -> dict[str, Generated]:
    ref = Reference()
    out: dict[str, Generated] = {}
    again = None
    for name in names:
        started = time.perf_counter()
        if name in ("fix-table", "cause-coverage"):
            again = again if again is not None else explained_again(ref)
            out[name] = (fix_table_of if name == "fix-table" else cause_coverage_of)(ref, again)
        else:
            out[name] = TABLES[name](ref)
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return out


TABLES: dict[str, Callable[[Reference], Generated] | None] = {
    "h200-suite": suite_table, "fix-table": None, "cause-coverage": None, "cross-card": cross_card,
    "published-figures": published_figures, "prediction-harness": prediction_harness, "plain-loop": plain_loop_table,
    "batch-prediction": batch_prediction,
    "kernel-counters": kernel_counters}


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 where a marked block differs from what it would generate")
    parser.add_argument("--only", nargs="+", choices=sorted(TABLES), metavar="NAME",
                        help=f"these tables only ({', '.join(TABLES)})")
    parser.add_argument("--docs", nargs="+", type=Path, metavar="FILE.md",
                        help="the documents to rewrite or check (default: README.md and docs/*.md)")
    args = parser.parse_args(argv)
    docs = [p.resolve() for p in args.docs] if args.docs else documents_with_markers()
    names = args.only or (sorted(wanted_names(docs) & set(TABLES)) if args.check else list(TABLES))
    generated = generate(names)
    blocks = {name: render(g) for name, g in generated.items()}
    problems = 0
    for path in docs:
        text = path.read_text(encoding="utf-8")
        unknown: list[str] = []
        new = rewrite(text, blocks, unknown)
        for name in unknown:
            if args.only is None:
                print(f"{_shown(path)}: no table named {name!r} (tables: {', '.join(TABLES)})",
                      file=sys.stderr)
                problems += 1
        if new != text:
            if args.check:
                now = dict(m.groups() for m in MARKER.finditer(text))
                for name in sorted(n for n in now if n in blocks and now[n] != blocks[n]):
                    print(f"{_shown(path)}: table {name} differs from what {COMMAND} generates", file=sys.stderr)
                    problems += 1
            else:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {_shown(path)}")
    if not args.check:
        TABLES_DIR.mkdir(parents=True, exist_ok=True)
        for name, g in generated.items():
            reference.write_json(TABLES_DIR / f"{name}.json", _rounded(g.rows))
        print(f"wrote {len(generated)} tables to {TABLES_DIR.relative_to(ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
