"""`python -m pygpuperf.roofline`: characterize a device, run a model, place it on the roofline.

Exit codes: 0 done, 2 bad input (one line naming the fix), 130 interrupted (what was
measured is still written to results.json).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pygpuperf import analysis, cli, collectives, io, links, meta, suite
from pygpuperf.backends.base import RunSettings
from pygpuperf.device import UsageError, device_slug, resolve_device
from pygpuperf.report.chart import roofline_charts
from pygpuperf.report.datasheet_chart import datasheet_chart
from pygpuperf.report.html import write_html_report
from pygpuperf.report.sweep_chart import sweep_chart
from pygpuperf.report.table import print_summary
from pygpuperf.results import Measurement, Results

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        raise UsageError(f"{message}; see --help")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m pygpuperf.roofline", description=__doc__.splitlines()[0])
    p.add_argument("--device", help="cpu, cuda, cuda:N, xpu, mps (default: first GPU, else CPU)")
    p.add_argument("--quick", action="store_true", help="fewer samples and smaller buffers")
    p.add_argument("--out", type=Path, help="output folder (default ./pygpuperf-results/<device>-<UTC time>)")
    p.add_argument("--list", action="store_true", help="list probes for the device and exit")
    p.add_argument("--probes", nargs="+", metavar="NAME", help="probe names or dotted prefixes (e.g. memory)")
    p.add_argument("--backend", default="all", choices=suite.BACKEND_CHOICES,
                   help="all: native and torch figures side by side; auto: native where it has the probe, "
                        "torch for the rest")
    p.add_argument("--model", help="workload to place on the roofline, or 'none'")
    p.add_argument("--batch-size", type=int, help="model batch size")
    p.add_argument("--predict", nargs="+", metavar="CARD",
                   help="datasheet cards to predict the explained model on (e.g. a100-sxm4-80gb rtx3090), "
                        "into explain/ and report.html")
    p.add_argument("--samples", type=int, help="timed samples per probe")
    p.add_argument("--json", action="store_true", help="print results JSON to stdout (summary goes to stderr)")
    return p


def _settings(args: argparse.Namespace) -> RunSettings:
    samples = args.samples or (5 if args.quick else 20)
    if samples < 1:
        raise UsageError(f"--samples {samples}: needs at least 1")
    return RunSettings(warmup=1 if args.quick else 3, samples=samples, size_bytes=0, quick=args.quick)


def _model_name(args: argparse.Namespace, device_type: str) -> str | None:
    from pygpuperf.workloads import WORKLOADS, default_workload_name

    name = args.model or default_workload_name(device_type)
    if name == "none":
        return None
    if name not in WORKLOADS:
        raise UsageError(f"--model {name}: unknown; choose one of {', '.join(sorted(WORKLOADS))} or none")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch-size {args.batch_size}: needs at least 1")
    return name


def _out_dir(args: argparse.Namespace, device) -> Path:
    return cli.output_dir(args.out, device_slug(device))


def _list(device, console: Console) -> None:
    variants: dict[tuple[str, str], int] = {}
    firsts = []
    for planned in suite.plan(device, "all"):
        key = (planned.name, planned.backend.backend_name(device))
        if key not in variants:
            firsts.append(planned)
        variants[key] = variants.get(key, 0) + 1
    for planned in firsts:
        backend = planned.backend.backend_name(device)
        reason = planned.backend.waiver(planned.name, device)
        status = f"waived: {reason}" if reason else planned.backend.describe(planned.name, device)
        count = variants[(planned.name, backend)]
        console.print(f"{planned.name:32s} {backend:12s} {f'{count} variants' if count > 1 else '':12s} {status}")
    for op in collectives.OPS:
        where = "several GPUs" if device.type == "cuda" else "2 processes, only with --probes collective"
        console.print(f"{'collective.' + op:32s} {collectives.backend_name(device.type):12s} {'':12s} "
                      f"{op} through torch.distributed, 8 KiB-1 GiB, nccl-tests busbw ({where})")


def _split_selection(selection: list[str] | None) -> tuple[list[str] | None, list[str] | None]:
    """(probe patterns, collective ops): 'collective' or 'collective.<op>' select collectives."""
    if not selection:
        return None, None
    ops: list[str] = []
    rest: list[str] = []
    for pattern in selection:
        if pattern == "collective":
            ops += [op for op in collectives.OPS if op not in ops]
        elif pattern.startswith("collective."):
            op = pattern.split(".", 1)[1]
            if op not in collectives.OPS:
                raise UsageError(f"unknown probe {pattern!r}; collectives are {', '.join(collectives.OPS)}")
            ops.append(op)
        else:
            rest.append(pattern)
    return rest or None, ops or None


def _collective_ops(device, selection: list[str] | None, ops: list[str] | None) -> list[str]:
    """Collectives run when asked for, or by default on a CUDA host with several GPUs."""
    if ops:
        return ops
    if selection is None and device.type == "cuda" and torch.cuda.device_count() >= 2:
        return list(collectives.OPS)
    return []


def _measure_collectives(device, ops: list[str], quick: bool, measurements: list, console: Console) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the ranks allocate their own buffers on every GPU
    console.print(f"running collectives ({', '.join(ops)}) ...")
    try:
        measurements += collectives.run_collectives(device.type, ops=ops, quick=quick)
    except Exception as exc:  # a rank that failed: keep the rest of the run
        reason = " ".join(str(exc).split())[:500]
        measurements += [Measurement.not_run(f"collective.{op}", backend=collectives.backend_name(device.type),
                                             device=device.type, status="error", reason=reason) for op in ops]


def _measure(probes, device, settings, measurements, console: Console) -> None:
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("probes", total=len(probes))
        suite.run(probes, device, settings, measurements,
                  on_start=lambda p: progress.update(task, description=p.label(device)),
                  on_done=lambda m: progress.advance(task))


def _run_model(name: str, args: argparse.Namespace, device, results: Results, out: Path, console: Console,
               err: Console) -> tuple[list[Path], list[str]]:
    """Time the model without the profiler, place it on the measured roofline, then profile its steps and
    attribute them (explain/ beside results.json), all on one build. Its findings join the run's.
    Returns the files written and the report.html sections."""
    from pygpuperf.explain import explainer
    from pygpuperf.report.explain_html import explain_section_html
    from pygpuperf.workloads import get_workload, time_built

    workload = get_workload(name)
    err.print(f"running {name} on {device} ...")
    with workload.build(device, args.batch_size) as built:
        timed = time_built(workload, built, device, **({"warmup": 1, "steps": 3} if args.quick else {}))
        results.workloads.append(timed)
        analysis.conclude_workload(results, timed)
        err.print(f"explaining {name}: profiling {1 if args.quick else 3} step(s) ...")
        throughput = explainer.Throughput(timed.step_time.scaled(1e6), built.samples_per_step,
                                          timed.peak_memory_bytes, timed.resident_memory_bytes)
        explanation = explainer.explain_built(built, results.machine_model, device, steps=1 if args.quick else 3,
                                              throughput=throughput)
        settings = dict(built.params)
    folder = out / "explain"
    console.print(f"explained step of {name}:", highlight=False)
    written = explainer.write_explained(explanation, settings, results, folder,
                                        echo=lambda text: console.print(text, highlight=False, markup=False),
                                        echo_findings=False)  # the run's summary lists them with the rest
    results.findings += explanation.findings
    timed.explanation = explainer.explanation_summary(explanation, "explain/explain.json")
    sections = [explain_section_html(explanation, results)]
    if args.predict:
        paths, section = _predict_model(explanation, results, args.predict, folder, console)
        written += paths
        sections.append(section)
    return written, sections


def _predict_model(explanation, results: Results, cards: list[str], folder: Path,
                   console: Console) -> tuple[list[Path], str]:
    """The explained step re-priced on datasheet cards: prediction.json/png/html beside explain.json."""
    from pygpuperf import predict
    from pygpuperf.report.predict_report import write_prediction_report

    source = str(results.meta.get("device", {}).get("name", "this device"))
    predictions = sorted((predict.predict(explanation, results.machine_model, card.model, source_name=source,
                                          target_name=card.name)
                          for card in (predict.load_card(predict.DATASHEET_PREFIX + c) for c in cards)),
                         key=lambda p: -p.throughput)
    for p in predictions:
        console.print(f"predicted on {p.target}: {p.throughput:,.0f} samples/s ({p.ratio_to_source:.2f}x)",
                      highlight=False)
    return write_prediction_report(predictions, {}, folder)


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    # Logs and pipes get a fixed wide layout; a terminal keeps its own width.
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
    out_console = err if args.json else Console(width=None if sys.stdout.isatty() else 150)
    device = resolve_device(args.device)
    if args.list:
        _list(device, out_console)
        return 0
    settings = _settings(args)
    selection, asked_ops = _split_selection(args.probes)
    probes = suite.plan(device, args.backend, selection, quick=args.quick) if selection or not asked_ops else []
    ops = _collective_ops(device, selection, asked_ops)
    model_name = _model_name(args, device.type)
    if args.predict:
        from pygpuperf import datasheets

        unknown = [c for c in args.predict if c not in datasheets.card_keys()]
        if unknown or not model_name:
            raise UsageError(f"--predict {' '.join(unknown)}: unknown card; choose from {', '.join(datasheets.card_keys())}"
                             if unknown else "--predict needs a model to explain; drop --model none")
    out = _out_dir(args, device)

    results = Results(meta=meta.collect(device, ["pygpuperf.roofline", *argv]))
    if device.type == "cuda":
        results.meta["links"] = links.link_facts()
    interrupted = False
    try:
        started = time.monotonic()
        try:
            _measure(probes, device, settings, results.measurements, err)
            if ops:
                _measure_collectives(device, ops, args.quick, results.measurements, err)
        finally:
            results.meta["suite_seconds"] = round(time.monotonic() - started, 2)
    except KeyboardInterrupt:
        interrupted = True
        results.meta["interrupted"] = True
        err.print("[yellow]interrupted: writing what was measured[/yellow]")
    analysis.conclude(results, str(device))
    written_explain: list[Path] = []
    sections: list[str] = []
    if model_name and not interrupted:
        try:
            written_explain, sections = _run_model(model_name, args, device, results, out, out_console, err)
        except KeyboardInterrupt:
            interrupted = True
            results.meta["interrupted"] = True
            err.print("[yellow]interrupted while running the model: writing what was measured[/yellow]")

    paths = io.write_results(results, out)
    charts = roofline_charts(results, out)  # roofline.png and roofline.svg
    sweeps = sweep_chart(results, out / "sweep.png")
    sheet = datasheet_chart(results, out / "datasheet.png")
    report = write_html_report(results, out / "report.html", sections=sections)
    print_summary(results, out_console)
    if args.json:
        sys.stdout.write(io.to_json(results) + "\n")
    written = [paths["json"], paths["csv"], *charts] + [p for p in (sweeps, sheet, report) if p] + written_explain
    err.print("wrote " + ", ".join(str(p) for p in written))
    return 130 if interrupted else 0


def main(argv: list[str] | None = None) -> None:
    cli.main_of(run, argv)


if __name__ == "__main__":
    main()
