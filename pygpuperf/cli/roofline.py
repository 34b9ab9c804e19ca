"""`python -m pygpuperf.roofline`: characterize a device, run a model, place it on the roofline.

results.json is written after every probe, so any stop keeps what was measured. Exit codes:
0 done and every result verified; 1 a verification failed or an error finding was raised
(results written); 2 bad input (one line naming the fix); 130, 143, 129 stopped by SIGINT,
SIGTERM, SIGHUP (results written). ``--resume DIR`` continues a stopped run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pygpuperf import diagnose
from pygpuperf.analyze import conclude
from pygpuperf.cli import common as cli
from pygpuperf.analyze import hierarchy
from pygpuperf.core import documents
from pygpuperf.facts import links
from pygpuperf.facts import host
from pygpuperf.measure import meta
from pygpuperf.core import stopping
from pygpuperf.measure import suite
from pygpuperf.measure.probe import RunSettings
from pygpuperf.facts.device import device_slug, resolve_device
from pygpuperf.core.errors import UsageError
from pygpuperf.report.chart import draw_roofline_charts
from pygpuperf.report.datasheet_chart import draw_datasheet_chart
from pygpuperf.report.html import write_html_report
from pygpuperf.report.sweep_chart import draw_sweep_chart
from pygpuperf.report.table import print_summary
from pygpuperf.core.results import Finding, Measurement, Results
from pygpuperf.report import explained

DOCUMENT = "results.json"
# The default suite: a sweep point (one of a curve's many) takes 10 samples, and a probe run from Python (the
# native kernels time their own samples) whose run takes over 50 ms only the samples that fit 1 s; --full,
# --quick and --samples take theirs for every probe.
DEFAULT_SWEEP_SAMPLES = 10
DEFAULT_SAMPLE_BUDGET_S = 1.0
_IMPORTED = time.monotonic()  # the setup phase runs from here (imports before it: torch's own)


def build_parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m pygpuperf.roofline", description=__doc__.splitlines()[0])
    p.add_argument("--device", help="cpu, cuda, cuda:N, xpu, mps (default: first GPU, else CPU)")
    p.add_argument("--quick", action="store_true", help="fewer samples and smaller buffers")
    p.add_argument("--full", action="store_true",
                   help="try every variant of every search (the default tries the ones that win on this architecture)")
    cli.add_folder_flags(p, "output folder (default ./pygpuperf-results/<device>-<id>-<UTC time>-<run id>)",
                         resume=True)
    p.add_argument("--list", action="store_true", help="list probes for the device and exit (with --json: as JSON)")
    p.add_argument("--probes", nargs="+", metavar="NAME", help="probe names or dotted prefixes (e.g. memory)")
    p.add_argument("--backend", default="all", choices=suite.BACKEND_CHOICES,
                   help="all: native and torch figures side by side; auto: native where it has the probe, "
                        "torch for the rest")
    p.add_argument("--model", help="workload to place on the roofline, or 'none'")
    p.add_argument("--batch-size", type=int, help="model batch size")
    p.add_argument("--predict", nargs="+", metavar="CARD",
                   help="datasheet cards to predict the explained model on (e.g. a100-sxm4-80gb rtx3090), "
                        "into explain/ and report.html")
    p.add_argument("--samples", type=int, help="timed samples per probe (default 20; the default suite gives sweep "
                                                "points 10, and torch probes whose run takes over 50 ms the "
                                                "samples that fit 1 s)")
    p.add_argument("--json", action="store_true", help="print results JSON to stdout (summary goes to stderr)")
    return p


def _settings(args: argparse.Namespace) -> RunSettings:
    samples = (5 if args.quick else 20) if args.samples is None else args.samples
    if samples < 1:
        raise UsageError(f"--samples {samples}: needs at least 1")
    limited = not (args.full or args.quick or args.samples is not None)  # the default answers fast
    return RunSettings(warmup=1 if args.quick else 3, samples=samples, size_bytes=0, quick=args.quick,
                       sweep_samples=DEFAULT_SWEEP_SAMPLES if limited else 0,
                       sample_budget_s=DEFAULT_SAMPLE_BUDGET_S if limited else 0.0)


@dataclass
class ModelChoice:
    name: str | None
    findings: list[Finding] = field(default_factory=list)  # why the default was replaced, if it was


def _model_choice(args: argparse.Namespace, device_type: str) -> ModelChoice:
    """The workload to run. A named one that cannot run here is bad input; the default that cannot
    (no torchvision) is replaced by one of plain torch, with a finding that says so."""
    from pygpuperf.workloads import WORKLOADS, default_workload_name, fallback_workload_name

    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size}: needs at least 1")
    if args.model is not None:
        if args.model == "none":
            return ModelChoice(None)
        if args.model not in WORKLOADS:
            raise UsageError(f"--model {args.model!r}: unknown; choose one of {', '.join(sorted(WORKLOADS))} or none")
        missing = WORKLOADS[args.model].unavailable()
        if missing:
            raise UsageError(f"--model {args.model}: {missing}")
        return ModelChoice(args.model)
    name = default_workload_name(device_type)
    missing = WORKLOADS[name].unavailable()
    if not missing:
        return ModelChoice(name)
    fallback = fallback_workload_name(device_type)
    return ModelChoice(fallback, [Finding(
        "warning", f"The default model {name} could not run here, so {fallback} ran in its place.",
        {"default_model": name, "ran": fallback, "reason": missing},
        missing.split("fix: ", 1)[-1].rstrip(".") + f" to run {name}; --model picks any other.")])


def _list(device, console: Console, as_json: bool) -> None:
    entries: dict[tuple[str, str], dict] = {}
    for planned in suite.plan(device, "all", everything=True):
        backend = planned.backend.backend_name(device)
        key = (planned.name, backend)
        if key not in entries:
            reason = planned.backend.waiver(planned.name, device)
            entries[key] = {"name": planned.name, "backend": backend, "variants": 0, "waived": reason,
                            "description": "" if reason else planned.backend.describe(planned.name, device)}
        entries[key]["variants"] += 1
    for derived, source in hierarchy.derived_sources(device.type).items():
        entries[(derived, "")] = {"name": derived, "backend": "", "variants": 0, "waived": None,
                                  "description": f"read off the {source} plateaus (--probes {derived} runs {source})"}
    if as_json:
        sys.stdout.write(json.dumps(list(entries.values()), indent=1) + "\n")
        return
    for e in entries.values():
        status = f"waived: {e['waived']}" if e["waived"] else e["description"]
        count = f"{e['variants']} variants" if e["variants"] > 1 else ""
        console.print(f"{e['name']:32s} {e['backend']:12s} {count:12s} {escape(status)}", soft_wrap=True,
                      highlight=False)


def _selection(selection: list[str] | None, device_type: str) -> list[str] | None:
    """The probe patterns to plan: a figure read off a sweep (memory.l3.read, latency.l1) selects its sweep."""
    if not selection:
        return None
    return list(dict.fromkeys(hierarchy.source_probe(pattern, device_type) for pattern in selection))


# --------------------------------------------------------------------------- resuming


def _key(m: Measurement) -> tuple[str, str, str]:
    return m.name, m.backend, m.params.get("variant", "")


def _resumed(folder: Path, device) -> list[Measurement]:
    """What the run in `folder` measured and verified on this device (figures derived from sweeps are
    derived again); UsageError for an unreadable file or another device's run."""
    if not (folder / DOCUMENT).is_file():
        raise UsageError(f"--resume {folder}: there is no {DOCUMENT} to resume from; run without --resume")
    try:
        earlier = documents.load_results(folder / DOCUMENT)
    except documents.ResultsFileError as exc:
        raise UsageError(f"--resume: {exc}") from None
    now = host.device_facts(device)
    then = earlier.meta.get("device", {})
    for fact in ("type", "name", "uuid"):
        if then.get(fact) and now.get(fact) and then.get(fact) != now.get(fact):
            raise UsageError(f"--resume {folder}: that run measured {then.get(fact)!r} ({fact}), this one would "
                             f"measure {now.get(fact)!r}; resume it on the same device")
    return [m for m in earlier.measurements if m.usable and hierarchy.DERIVED_FROM not in m.params]


# --------------------------------------------------------------------------- measuring


def _measure(probes, device, settings, results: Results, checkpoint, console: Console) -> None:
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("probes", total=len(probes))

        def done(m: Measurement) -> None:
            checkpoint()
            progress.advance(task)

        suite.run(probes, device, settings, results.measurements,
                  on_start=lambda p: progress.update(task, description=escape(p.label(device))), on_done=done)


def _run_model(name: str, args: argparse.Namespace, device, results: Results, out: Path, console: Console,
               err: Console) -> tuple[list[Path], dict]:
    """Time the model without the profiler, place it on the measured roofline, then profile its steps and
    attribute them (explain/ beside results.json), all on one build. Its findings join the run's.
    Returns the files written and the documents report.html renders its sections from."""
    from pygpuperf.explain import explainer
    from pygpuperf.explain.model import Throughput
    from pygpuperf.workloads import get_workload, time_built

    workload = get_workload(name)
    err.print(f"running {name} on {device} ...")
    phases = results.meta.setdefault("phase_seconds", {})
    started = time.monotonic()
    with workload.build(device, args.batch_size) as built:
        timed = time_built(workload, built, device, **({"warmup": 1, "steps": 3} if args.quick else {}))
        results.workloads.append(timed)
        phases["model_timed"] = round(time.monotonic() - started, 2)
        started = time.monotonic()
        err.print(f"explaining {name}: profiling {1 if args.quick else 3} step(s) ...")
        throughput = Throughput(timed.step_time.scaled(1e6), built.samples_per_step,
                                timed.peak_memory_bytes, timed.resident_memory_bytes)
        try:
            diagnosed = diagnose.explain_built(built, results.machine_model, device,
                                               steps=1 if args.quick else 3, throughput=throughput)
        except BaseException:
            conclude.conclude_workload(results, timed)  # placed by its counted intensity, whatever stopped it
            raise
        explanation, diagnosis = diagnosed.explanation, diagnosed.diagnosis
        # Placed by the same kernel-time model that bounds its kernels.
        conclude.conclude_workload(results, timed, sum(k.bound_us or 0.0 for k in explanation.median.kernels))
    phases["model_explained"] = round(time.monotonic() - started, 2)
    started = time.monotonic()
    folder = out / "explain"
    console.print(f"explained step of {escape(name)}:", highlight=False)
    written, explain_charts = explained.write_explained(
        explanation, diagnosis, results, folder, echo=lambda text: console.print(text, highlight=False, markup=False),
        echo_findings=False)  # the run's summary lists them with the rest
    phases["explain_written"] = round(time.monotonic() - started, 2)
    results.findings += diagnosis.findings
    timed.explanation = explainer.explanation_summary(explanation, "explain/explain.json")
    # report.html's sections
    reported: dict = {"explanation": explanation, "diagnosis": diagnosis, "explain_charts": explain_charts}
    if args.predict:
        paths, reported["predictions"], reported["prediction_svg"] = _predict_model(
            explanation, results, args.predict, folder, console)
        written += paths
    return written, reported


def _predict_model(explanation, results: Results, cards: list[str], folder: Path,
                   console: Console) -> tuple[list[Path], list[dict], str]:
    """The explained step re-priced on datasheet cards: prediction.json/png/html beside explain.json."""
    from pygpuperf import predict
    from pygpuperf.analyze.machine_model import DATASHEET_PREFIX, load_model
    from pygpuperf.report.predict_report import write_prediction_report

    source = results.device_name() or "this device"
    predictions = sorted((predict.predict(explanation, results.machine_model, predict.target_model(card.name),
                                          source_name=source, target_name=card.name)
                          for card in (load_model(DATASHEET_PREFIX + c) for c in cards)),
                         key=lambda p: -p.throughput)
    for p in predictions:
        low, high = p.interval_per_s
        console.print(f"predicted on {escape(p.target)}: {p.throughput:,.0f} samples/s ({p.ratio_to_source:.2f}x; "
                      f"80 % interval {low:,.0f}-{high:,.0f})" + (" host-bound" if p.host_bound else ""),
                      highlight=False)
    return write_prediction_report(predictions, {}, folder)


def _failure(what: str, exc: BaseException, fix: str) -> Finding:
    """An error after the probes, as a finding: the run's figures are written all the same."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    return Finding("error", f"{what} failed, so the run is incomplete: {text}", {"error": text}, fix)


def _model_fix(args: argparse.Namespace, exc: BaseException) -> str:
    text = str(exc).lower()
    if any(word in text for word in ("out of memory", "can't allocate", "cannot allocate", "not enough memory")):
        return ("The model did not fit in memory at this batch size: run it again with a smaller --batch-size "
                "(--resume keeps the probes already measured).")
    return ("The probes are kept in results.json; run the model alone with python -m pygpuperf.explain "
            f"{args.model or 'MODEL'} to see the error in full.")


def _write_reports(results: Results, out: Path, reported: dict) -> list[Path]:
    """results.json/csv, then each chart and report.html; a chart that fails leaves a finding, not a traceback.
    Each chart is drawn once: report.html inlines the drawing its files were written from."""
    written = list(documents.write_results(results, out).values())
    charts: dict[str, str | None] = {}
    for name, label, draw in (("roofline", "the roofline chart", lambda: draw_roofline_charts(results, out)),
                              ("sweep", "the sweep chart", lambda: draw_sweep_chart(results, out / "sweep.png")),
                              ("datasheet", "the datasheet chart",
                               lambda: draw_datasheet_chart(results, out / "datasheet.png"))):
        drawn = _kept_on_failure(results, out, label, draw)
        if drawn is not None:
            written += drawn[0]
            charts[name] = drawn[1]
    page = _kept_on_failure(results, out, "report.html",
                            lambda: write_html_report(results, out / "report.html", charts=charts, **reported))
    return written + ([page] if page is not None else [])


def _kept_on_failure(results: Results, out: Path, label: str, write: Callable[[], Any]) -> Any:
    """What `write` returns; None when it fails, with a finding saying so in results.json (the figures are
    safe there already)."""
    try:
        return write()
    except Exception as exc:
        results.findings.append(_failure(f"Writing {label}", exc, "results.json holds every figure; "
                                         "report the error with that file."))
        documents.write_results(results, out)
        return None


def exit_code(results: Results, stopped: KeyboardInterrupt | None) -> int:
    """The documented exit code of a finished run (see the module docstring)."""
    if stopped is not None:
        return stopping.exit_code_of(stopped)
    failed = any(m.status == "ok" and not m.verified for m in results.measurements)
    return cli.EXIT_FAILED if failed or any(f.severity == "error" for f in results.findings) else cli.EXIT_OK


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    # Logs and pipes get a fixed wide layout; a terminal keeps its own width.
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
    out_console = err if args.json else Console(width=None if sys.stdout.isatty() else 150)
    device = resolve_device(args.device)
    if args.list:
        _list(device, out_console, args.json)
        return 0
    if args.resume is not None and args.out is not None:
        raise UsageError("--resume DIR writes into DIR: leave out --out")
    settings = _settings(args)
    planned = suite.plan(device, args.backend, _selection(args.probes, device.type), quick=args.quick, full=args.full)
    choice = _model_choice(args, device.type)
    if args.predict:
        from pygpuperf.analyze import machine_model

        unknown = [c for c in args.predict if c not in machine_model.card_keys()]
        if unknown or not choice.name:
            raise UsageError(f"--predict {' '.join(unknown)}: unknown card; choose from {', '.join(machine_model.card_keys())}"
                             if unknown else "--predict needs a model to explain; drop --model none")
    kept = _resumed(args.resume, device) if args.resume is not None else []
    facts = host.device_facts(device)
    stem = "-".join(filter(None, (device_slug(device), host.device_identity(facts))))
    with cli.claim_output(args.resume or args.out, stem, DOCUMENT, overwrite=args.overwrite,
                          resume=args.resume is not None) as folder, stopping.stop_signals() as signals:
        return _run_in(folder.path, args, argv, device, settings, planned, choice, kept, signals, err,
                       out_console)


def _run_in(out: Path, args, argv, device, settings: RunSettings, planned, choice: ModelChoice,
            kept: list[Measurement], signals, err: Console, out_console: Console) -> int:
    results = Results(meta=meta.collect(device, ["pygpuperf.roofline", *argv]), measurements=list(kept))
    if device.type == "cuda":
        results.meta["links"] = links.link_facts()
    done = {_key(m) for m in kept}
    probes = [p for p in planned if (p.name, p.backend.backend_name(device), p.variant) not in done]
    if kept:
        results.meta["resumed"] = {"kept_measurements": len(kept), "skipped_probes": len(planned) - len(probes)}
        err.print(f"resuming: {len(kept)} verified measurement(s) kept, {len(probes)} probe run(s) to go")

    def checkpoint() -> None:
        documents.write_checkpoint(results, out)

    stopped: KeyboardInterrupt | None = None
    checkpoint()
    started = time.monotonic()
    results.meta["phase_seconds"] = {"setup": round(started - _IMPORTED, 2)}
    measured = documents.Checkpoint(out)
    try:
        _measure(probes, device, settings, results, lambda: measured.write(results), err)
    except KeyboardInterrupt as exc:
        stopped = exc
    finally:
        results.meta["suite_seconds"] = round(time.monotonic() - started, 2)
    written_explain: list[Path] = []
    reported: dict = {}  # the explained step's documents, for report.html
    try:
        conclude.conclude(results, str(device))
        results.findings = choice.findings + results.findings
        checkpoint()
        if choice.name and stopped is None:
            try:
                written_explain, reported = _run_model(choice.name, args, device, results, out, out_console, err)
            except KeyboardInterrupt as exc:
                stopped = exc
            except Exception as exc:  # the probes stay measured: a finding says what failed and how to fix it
                results.findings.append(_failure(f"Running the model {choice.name}", exc, _model_fix(args, exc)))
    except KeyboardInterrupt as exc:
        stopped = exc
    except Exception as exc:
        results.findings.append(_failure("Concluding from the measurements", exc,
                                         "results.json keeps the raw measurements; report the error with it."))
    signals.hold()  # what follows is writing: a second signal must not cut it short
    stopped = stopped or signals.stopped
    if stopped is not None:
        results.meta["interrupted"] = True
        err.print(f"[yellow]{escape(str(stopped) or 'interrupted')}: writing what was measured[/yellow]")
    written_at = time.monotonic()
    results.meta.setdefault("phase_seconds", {})["before_reports"] = round(written_at - started, 2)
    written = _write_reports(results, out, reported) + written_explain
    err.print(f"reports written in {time.monotonic() - written_at:.1f} s")
    print_summary(results, out_console)
    if args.json:
        sys.stdout.write(documents.to_json(results) + "\n")
    err.print("wrote " + ", ".join(escape(str(p)) for p in written))
    return exit_code(results, stopped or signals.stopped)


def main(argv: list[str] | None = None) -> None:
    cli.main_of(run, argv)


if __name__ == "__main__":
    main()
