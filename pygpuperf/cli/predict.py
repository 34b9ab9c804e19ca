"""`python -m pygpuperf.predict`: price an explained step on other cards or at another batch size (pygpuperf.predict).

Exit codes: 0 done; 2 bad input (one line naming the fix).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Sequence

from pygpuperf.cli import common as cli
from pygpuperf.core import validation
from pygpuperf.core.errors import UsageError
from pygpuperf.compare.explained import load_explanation
from pygpuperf.explain.model import Explanation
from pygpuperf.analyze.machine_model import LoadedModel, load_model
from pygpuperf.explain.pricing import RESIDUALS
from pygpuperf.predict import (CEILINGS, DEFAULT_CEILINGS, DEFAULT_RESIDUAL, Prediction, _unprofiled_step_us,
                               predict, prediction_documents, samples_per_eur, target_model, validate,
                               validation_table)


def build_parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m pygpuperf.predict", description=__doc__.splitlines()[0])
    p.add_argument("--profile", type=Path, required=True, action="append",
                   help="explain.json, or the folder holding it; with --validate, repeat it to give each published "
                        "figure the profile of its workload, precision and configuration")
    p.add_argument("--source-model", required=True, help="results.json of the profiled GPU, or datasheet:<card>")
    p.add_argument("--target", action="append", default=[],
                   help="datasheet:<card> or results.json (repeatable; default with --batch-size: the source card)")
    p.add_argument("--price", action="append", default=[], metavar="NAME=EUR_PER_HOUR",
                   help="hourly price of a target, by its card name (repeatable)")
    p.add_argument("--samples-per-step", type=int, help="samples per step of the profile (default: its batch)")
    p.add_argument("--batch-size", type=int,
                   help="predict the step at this batch (default: the profile's, or the largest that fits the target)")
    p.add_argument("--host-step-ms", type=float,
                   help="the host's own time per step (the step timed at batch 1): the step is then at least that")
    p.add_argument("--target-host-scale", type=float,
                   help="the target host's time per step over the source host's (1.5: a CPU a third slower); "
                        "without it the target's host is unknown and a host-bound step's interval widens")
    p.add_argument("--peak-memory-gb", type=float, help="memory the step needs (default: the profile's peak)")
    p.add_argument("--source-step-ms", type=float,
                   help="step time without the profiler, for profiles that do not record it")
    p.add_argument("--residual", choices=RESIDUALS, default=DEFAULT_RESIDUAL,
                   help="how each kernel's time beyond the kernel-time model reaches the target: sm (the same time "
                        "times the source's multiprocessors x clock over the target's, default), latency (the same "
                        "time x the clock ratio) or proportional (the same fraction of its bound)")
    p.add_argument("--ceilings", choices=CEILINGS, default=DEFAULT_CEILINGS,
                   help="what a kernel is priced against on both cards: achievable (the library's GEMM rate, stream "
                        "bandwidth; published figures for a datasheet card, default) or peak")
    p.add_argument("--validate", type=Path, help="published figures (JSON) to check predicted ratios against")
    p.add_argument("--out", type=cli.folder_argument,
                   help="folder for prediction.json, prediction.png/.svg and prediction.html (and the validation table)")
    p.add_argument("--overwrite", action="store_true", help="write into an --out folder that holds an earlier prediction")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--allow-cross-device", action="store_true",
                   help="price a profile against a source model of another device kind (a CPU profile on a GPU model)")
    return p


def _prices(specs: Sequence[str]) -> dict[str, float]:
    prices = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            prices[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or prices.get(name.strip(), 0) <= 0:
            raise UsageError(f"--price {spec!r}: use NAME=EUR_PER_HOUR with a positive price, e.g. rtx3090=0.4")
    return prices


def _print_table(predictions: Sequence[Prediction], prices: dict[str, float]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"predicted from {escape(predictions[0].source)} "
                        f"({predictions[0].source_throughput:,.0f} samples/s)")
    for column in ("target", "batch", "step ms", "samples/s", "80 % interval", "x source",
                   *(["samples per EUR"] if prices else []), "notes"):
        table.add_column(column, justify="left" if column in ("target", "notes") else "right")
    for p in predictions:
        per_eur = samples_per_eur(p, prices)
        low, high = p.interval_per_s
        table.add_row(escape(p.target), str(p.samples_per_step), f"{p.step_us / 1e3:.2f}", f"{p.throughput:,.0f}",
                      f"{low:,.0f}-{high:,.0f}", f"{p.ratio_to_source:.2f}", *([f"{per_eur:,.0f}" if per_eur else "-"] if prices else []),
                      escape("; ".join(p.notes[:3])))
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    for p in predictions:
        console.print(f"[bold]{escape(p.target)}[/bold]: {escape(p.confidence)}", highlight=False)
        if p.doubts:
            console.print(f"  interval widened: {escape('; '.join(p.doubts))}", highlight=False)


def _load_profile(path: Path) -> Explanation:
    if not path.exists():
        raise UsageError(f"--profile {path}: no such file or folder")
    try:
        profile = load_explanation(path)
        validation.check_explanation(profile, str(path))
    except (ValueError, KeyError, TypeError, OverflowError, OSError) as exc:
        raise UsageError(f"--profile {validation.one_line(path, 120)}: not a usable explain.json "
                         f"({validation.one_line(exc)})") from None
    return profile


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.target and not args.validate and args.batch_size is None:
        raise UsageError("give at least one --target (datasheet:<card> or results.json), --batch-size N or --validate FILE")
    if len(args.profile) > 1 and not args.validate:
        raise UsageError("give one --profile to price on targets; several only with --validate")
    profiles = [_load_profile(path) for path in args.profile]
    profile = profiles[0]
    for name, value in (("--samples-per-step", args.samples_per_step), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise UsageError(f"{name} {value}: needs at least 1")
    for name, value in (("--peak-memory-gb", args.peak_memory_gb), ("--source-step-ms", args.source_step_ms),
                        ("--host-step-ms", args.host_step_ms), ("--target-host-scale", args.target_host_scale)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{name} {value}: give a positive number")
    source = load_model(args.source_model)
    if not validation.same_kind(source.model, profile.device) and not args.allow_cross_device:
        raise UsageError(f"--source-model {validation.one_line(args.source_model, 80)} is a "
                         f"{validation.device_kind(source.model.device, source.model.origin)} model but the profile "
                         f"ran on {validation.one_line(profile.device, 40)}: give the results.json of the device that "
                         "ran the profile, or --allow-cross-device to price it anyway")
    step_us = args.source_step_ms * 1e3 if args.source_step_ms else _unprofiled_step_us(args.profile[0])
    prices = _prices(args.price)
    folder = cli.claim_output(args.out, "prediction", "prediction.json", overwrite=args.overwrite) if args.out else None
    try:
        return _predict_and_write(args, profiles, source, step_us, prices, folder.path if folder else None)
    finally:
        if folder is not None:
            folder.release()


def _predict_and_write(args: argparse.Namespace, profiles: list[Explanation], source: LoadedModel,
                       step_us: float | None, prices: dict[str, float], out: Path | None) -> int:
    profile = profiles[0]
    if args.validate:
        from pygpuperf.core import documents

        try:
            published = documents.load_document(args.validate, "prediction_validation", "published-figures file")
        except documents.ResultsFileError as exc:
            raise UsageError(f"--validate {exc}") from None
        text = validation_table(validate(profile if len(profiles) == 1 else profiles, source, published,
                                         source_step_us=step_us, residual=args.residual, ceilings=args.ceilings),
                                source.name)
        print(text)
        if out:
            (out / "prediction-validation.txt").write_text(text + "\n", encoding="utf-8")
        if not args.target and args.batch_size is None:
            return 0
    predictions = []
    targets = [load_model(spec) for spec in args.target] or [source]
    for target in targets:
        peak = args.peak_memory_gb * 1e9 if args.peak_memory_gb else None
        name = target.name if args.batch_size is None else f"{target.name} at batch {args.batch_size}"
        model = target_model(target.name, args.ceilings) if target.origin == "datasheet" else target.model
        predictions.append(predict(profile, source.model, model, samples_per_step=args.samples_per_step,
                                   peak_memory_bytes=peak, source_step_us=step_us, source_name=source.name,
                                   target_name=name, batch_size=args.batch_size,
                                   host_step_us=args.host_step_ms * 1e3 if args.host_step_ms else None,
                                   residual=args.residual, ceilings=args.ceilings,
                                   target_host_scale=args.target_host_scale))
    predictions.sort(key=lambda p: -p.throughput)
    if args.json:
        print(json.dumps(prediction_documents(predictions, prices), indent=1))
    else:
        _print_table(predictions, prices)
    if out:
        from pygpuperf.report.predict_report import write_prediction_report

        report = write_prediction_report(predictions, prices, out)
        print("wrote " + ", ".join(str(p) for p in report.paths), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> None:
    cli.main_of(run, argv)

