"""`python -m pygpuperf.fleet`: validate every GPU of a fleet (quick probes, health facts, links), say which pass.

One process per GPU under torchrun (``torchrun --nnodes N --nproc-per-node G -m pygpuperf.fleet``), or one
process for one device without it. Rank 0 writes fleet.json, fleet.csv and fleet.html and prints the
summary. Exit codes: 0 every GPU passes; 1 a GPU fails or has no verdict (too noisy, not measured), or a
link check fails; 2 bad input (one line naming the fix).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from pygpuperf.analyze import fleet as analysis
from pygpuperf.cli import common as cli
from pygpuperf.core import documents
from pygpuperf.core.errors import UsageError
from pygpuperf.core.stopping import exit_code_of, stop_signals
from pygpuperf.measure import collectives
from pygpuperf.measure import fleet as runner
from pygpuperf.report import fleet_report

VERDICT_SCHEMA = "pygpuperf-fleet-verdict/1"


def build_parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m pygpuperf.fleet", description=__doc__.splitlines()[0])
    p.add_argument("--device", help="cpu, or cuda (under torchrun each rank takes cuda:LOCAL_RANK); alone also "
                                    "cuda:N (default: the GPU, else the CPU)")
    p.add_argument("--serial", action="store_true",
                   help="measure the GPUs of a host one at a time, each with an equal share of --budget-s")
    p.add_argument("--budget-s", type=float, default=runner.DEFAULT_BUDGET_S,
                   help=f"seconds the probe suite may take per rank (default {runner.DEFAULT_BUDGET_S:g}); probes "
                        "that would start later are left out and said so")
    p.add_argument("--samples", type=int, default=runner.DEFAULT_SAMPLES,
                   help=f"timed samples per probe (default {runner.DEFAULT_SAMPLES})")
    p.add_argument("--probes", nargs="+", metavar="NAME", help="only these figures of the suite (names or "
                   "dotted prefixes, e.g. memory compute.tensor)")
    p.add_argument("--collective-sizes", default="8KiB,1MiB,64MiB",
                   help="message sizes of all_reduce, all_gather and reduce_scatter across every rank, or none")
    p.add_argument("--no-p2p", action="store_true", help="leave out the GPU-to-GPU copy matrix of each host")
    p.add_argument("--thresholds", type=Path, metavar="FILE",
                   help="pass/fail thresholds (JSON, pygpuperf-fleet-thresholds/1): minimums per card model and "
                        "figure, and tolerances; default: datasheet x achievable share")
    p.add_argument("--reanalyze", type=Path, metavar="FLEET_JSON",
                   help="judge the ranks of an earlier fleet.json again (with --thresholds, say) without measuring")
    p.add_argument("--show-thresholds", action="store_true",
                   help="print the default thresholds as a file --thresholds reads, and exit")
    cli.add_folder_flags(p, "output folder on rank 0 (default ./pygpuperf-results/fleet-<UTC time>-<run id>)")
    p.add_argument("--json", action="store_true", help="print the verdict document on stdout (the summary goes to "
                                                       "stderr)")
    return p


def _settings(args: argparse.Namespace) -> runner.FleetSettings:
    if not (args.budget_s > 0) or args.budget_s > 7 * 86400:
        raise UsageError(f"--budget-s {args.budget_s:g}: give a positive number of seconds, up to a week")
    if args.samples < 1:
        raise UsageError(f"--samples {args.samples}: needs at least 1")
    text = args.collective_sizes.strip()
    sizes: tuple[int, ...] = ()
    if text.lower() != "none":
        try:
            sizes = tuple(collectives.message_sizes(sizes=[collectives.parse_size(s) for s in text.split(",")]))
        except ValueError as exc:
            raise UsageError(f"--collective-sizes: {exc}; or none") from None
    return runner.FleetSettings(device=args.device, serial=args.serial, budget_s=args.budget_s,
                                samples=args.samples, probes=tuple(args.probes or ()), collective_sizes=sizes,
                                p2p=not args.no_p2p)


def load_thresholds(path: Path | None) -> analysis.Thresholds:
    """The --thresholds file, schema-validated (bounded, plain JSON), or the default set; UsageError otherwise."""
    if path is None:
        return analysis.Thresholds()
    try:
        doc = documents.load_document(path, "fleet_thresholds", "pygpuperf-fleet-thresholds/1 file")
        analysis.check_thresholds(doc, str(path))
    except ValueError as exc:  # ResultsFileError too
        raise UsageError(f"--thresholds: {str(exc)[:400]}; --show-thresholds prints a valid file to start from") \
            from None
    return analysis.Thresholds(doc, str(path))


def verdict_document(doc: dict) -> dict:
    """What --json prints: the fleet's verdict, each GPU's, and the findings."""
    return {"schema": VERDICT_SCHEMA, "verdict": doc["verdict"],
            "gpus": [{k: v[k] for k in ("rank", "host", "card", "device", "uuid", "pci_bus_id", "verdict", "reasons",
                                        "notes")} for v in doc["verdicts"]],
            "findings": doc["findings"]}


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.show_thresholds:
        sys.stdout.write(json.dumps(analysis.default_thresholds(), indent=1) + "\n")
        return cli.EXIT_OK
    settings = _settings(args)
    if args.reanalyze is not None:
        return _reanalyze(args, load_thresholds(args.thresholds))
    launch = runner.Launch.from_environment()
    device = runner.rank_device(settings, launch)
    runner.plan_suite(device, settings.probes)  # an unknown --probes name stops every rank before any waits
    with stop_signals() as signals, runner.joined(settings, launch, device):
        code = _measure(args, settings, launch, device, signals)
    stop = runner.STOPS[0] if runner.STOPS else signals.stopped
    return exit_code_of(stop) if stop is not None else code


def _measure(args: argparse.Namespace, settings: runner.FleetSettings, launch: runner.Launch, device,
             signals) -> int:
    """Rank 0 checks what only it reads or writes (the thresholds file, the output folder) and tells every
    rank whether to go on; every rank measures; rank 0 judges and writes; all end with its exit code."""
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
    problem: UsageError | None = None
    folder = thresholds = None
    if launch.rank == 0:
        try:
            thresholds = load_thresholds(args.thresholds)
            folder = cli.claim_output(args.out, "fleet", fleet_report.DOCUMENT, overwrite=args.overwrite)
        except UsageError as exc:
            problem = exc
    if runner.agree(cli.EXIT_USAGE if problem else cli.EXIT_OK, device) != cli.EXIT_OK:
        if problem is not None:
            raise problem
        return cli.EXIT_USAGE
    if launch.rank != 0:
        runner.run_rank(settings, launch, device)
        return runner.agree(cli.EXIT_OK, device)
    with folder:
        gathered = runner.run_rank(settings, launch, device, progress=lambda text: err.print(text, highlight=False))
        assert gathered is not None  # rank 0 gathers
        code = cli.EXIT_FAILED
        signals.hold()  # a later signal waits until what was measured is written
        try:
            doc = analysis.fleet_document(gathered.hosts, gathered.collectives, gathered.meta, thresholds)
            written = fleet_report.write_fleet_reports(doc, folder.path)
            code = _report(args, doc, written, err)
        finally:
            code = runner.agree(code, device)  # after an error here too: no rank is left waiting
    return code


def _reanalyze(args: argparse.Namespace, thresholds: analysis.Thresholds) -> int:
    try:
        earlier = documents.load_document(args.reanalyze, "fleet", fleet_report.KIND)
    except documents.ResultsFileError as exc:
        raise UsageError(f"--reanalyze: {exc}") from None
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
    with cli.claim_output(args.out, "fleet", fleet_report.DOCUMENT, overwrite=args.overwrite) as folder:
        meta = {**earlier["meta"], "reanalyzed_from": str(args.reanalyze)}
        doc = analysis.fleet_document(analysis.hosts_from_document(earlier), earlier["collectives"], meta,
                                      thresholds)
        written = fleet_report.write_fleet_reports(doc, folder.path)
    return _report(args, doc, written, err)


def _report(args: argparse.Namespace, doc: dict, written: list[Path], err: Console) -> int:
    console = err if args.json else Console(width=None if sys.stdout.isatty() else 150)
    fleet_report.print_fleet_summary(doc, console)
    if args.json:
        sys.stdout.write(json.dumps(verdict_document(doc), indent=1, allow_nan=False) + "\n")
    err.print("wrote " + ", ".join(str(p) for p in written), highlight=False)
    return int(doc["verdict"]["exit_code"])


def _run_until_stopped(argv: list[str] | None) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt as exc:  # stopped before any figure was measured: nothing to keep
        print(f"pygpuperf: {exc or 'interrupted'}", file=sys.stderr)
        return exit_code_of(exc)


def main(argv: list[str] | None = None) -> None:
    """Bad input: one line from rank 0 (every rank would say it) and exit code 2."""
    cli.main_of(_run_until_stopped, argv, quiet=os.environ.get("RANK", "0").strip() not in ("", "0"))


if __name__ == "__main__":
    main()
