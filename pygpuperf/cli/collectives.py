"""`python -m pygpuperf.collectives`: all_reduce, all_gather, reduce_scatter and broadcast bandwidth
through torch.distributed (NCCL on CUDA GPUs, Gloo on the CPU), spawned here or under torchrun.

The measuring is pygpuperf.measure.collectives'; this is its command line. Exit codes: 0 done;
1 a result was wrong; 2 bad input (one line naming the fix); 130/143/129 stopped (what rank 0
had measured is written).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

import torch

from pygpuperf.analyze.conclude import collective_findings
from pygpuperf.analyze.machine_model import build_machine_model
from pygpuperf.cli import common as cli
from pygpuperf.core import stopping
from pygpuperf.core.errors import UsageError
from pygpuperf.core.results import Measurement, Results
from pygpuperf.measure.probe import RunSettings
from pygpuperf.measure.collectives import (COUNTING, OPS, QUICK_SETTINGS, SETTINGS, default_world_size, device_label,
                                           launched_by_torchrun, message_sizes, parse_size, run_collectives,
                                           run_launched)
from pygpuperf.report.table import collectives_table


def build_parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m pygpuperf.collectives",
                description="Collective bandwidth (time, algbw, busbw as nccl-tests counts them) through "
                            "torch.distributed; run it plainly or under torchrun.")
    p.add_argument("--device", choices=("cuda", "cpu"), help="cuda: NCCL over the GPUs; cpu: Gloo "
                   "(default: cuda when a GPU is visible)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)} (default: all)")
    p.add_argument("--quick", action="store_true", help="8KiB, 1MiB and 64MiB, fewer samples")
    p.add_argument("--sizes", help="comma-separated message sizes, e.g. 8KiB,1MiB,1GiB (default 8KiB..1GiB)")
    p.add_argument("--max-size", help="leave out message sizes above this, e.g. 64MiB")
    p.add_argument("--world-size", type=int, help="processes to spawn without torchrun (default: every GPU; "
                   "2 on the CPU)")
    p.add_argument("--samples", type=int, help="timed samples per size (default 20, quick 10)")
    p.add_argument("--warmup", type=int, help="untimed runs first (default 5, quick 2)")
    cli.add_folder_flags(p, "output folder (default ./pygpuperf-results/collectives-<UTC time>-<run id>)")
    p.add_argument("--json", action="store_true", help="print the results JSON on stdout (the table goes to stderr)")
    return p


def _parse_ops(text: str) -> list[str]:
    ops = [o.strip() for o in text.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS]
    if unknown or not ops:
        raise UsageError(f"--ops {text}: unknown {', '.join(unknown) or '(empty)'}; choose from {', '.join(OPS)}")
    return list(dict.fromkeys(ops))


def _parse_sizes(args: argparse.Namespace) -> list[int]:
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes is not None else None
    except ValueError as exc:
        raise UsageError(f"--sizes: {exc}") from None
    try:
        max_size = parse_size(args.max_size) if args.max_size is not None else None
        return message_sizes(args.quick, max_size, sizes)
    except ValueError as exc:
        raise UsageError(f"--max-size {args.max_size}: {exc}") from None


def _settings(args: argparse.Namespace) -> RunSettings:
    base = QUICK_SETTINGS if args.quick else SETTINGS
    samples = base.samples if args.samples is None else args.samples
    warmup = base.warmup if args.warmup is None else args.warmup
    if samples < 1:
        raise UsageError(f"--samples {samples}: needs at least 1")
    if warmup < 0:
        raise UsageError(f"--warmup {warmup}: needs 0 or more")
    return RunSettings(warmup=warmup, samples=samples, quick=args.quick)


def _device_type(args: argparse.Namespace) -> str:
    device_type = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is visible to torch here; use --device cpu")
    return device_type


def _check_launch(args: argparse.Namespace, device_type: str) -> None:
    if launched_by_torchrun():
        if args.world_size is not None:
            raise UsageError("--world-size: torchrun sets the ranks; leave it out or run without torchrun")
        world = int(os.environ["WORLD_SIZE"])
        if world < 2:
            raise UsageError(f"WORLD_SIZE={world}: a collective needs two or more ranks; "
                             "launch with torchrun --nproc-per-node 2 or more")
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device_type == "cuda" and local_rank >= torch.cuda.device_count():
            raise UsageError(f"LOCAL_RANK {local_rank}: only {torch.cuda.device_count()} GPUs visible on this host; "
                             "launch at most that many processes per node")
    elif args.world_size is not None and args.world_size < 2:
        raise UsageError(f"--world-size {args.world_size}: a collective needs two or more ranks")


def _results(measurements: list[Measurement], device_type: str, facts: dict[str, object], launch: str,
             argv: list[str]) -> Results:
    from pygpuperf.measure import meta

    first = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    doc_meta = meta.collect(first, ["pygpuperf.collectives", *argv])
    doc_meta["collectives"] = {**facts, "launch": launch, "counting": COUNTING}
    results = Results(meta=doc_meta, measurements=measurements)
    label = measurements[0].device if measurements else device_label(device_type, 0)
    results.machine_model = build_machine_model(label, measurements)
    results.findings = collective_findings(measurements)
    return results


def _write(results: Results, out: Path) -> Path:
    from pygpuperf.core import documents

    path = out / "collectives.json"
    documents.atomic_write(path, documents.to_json(results))  # to_json validates against the schema
    return path


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    ops = _parse_ops(args.ops)
    sizes = _parse_sizes(args)
    settings = _settings(args)
    device_type = _device_type(args)
    _check_launch(args, device_type)
    is_rank0 = int(os.environ.get("RANK", "0")) == 0 if launched_by_torchrun() else True
    if not is_rank0:  # under torchrun every rank measures; rank 0 alone writes
        run_launched(device_type, ops, sizes, settings)
        return 0
    with cli.claim_output(args.out, "collectives", "collectives.json", overwrite=args.overwrite) as folder, \
            stopping.stop_signals() as signals:
        return _run_rank0(folder.path, args, argv, device_type, ops, sizes, settings, signals)


def _run_rank0(out: Path, args: argparse.Namespace, argv: list[str], device_type: str, ops: list[str],
               sizes: list[int], settings: RunSettings, signals) -> int:
    from rich.console import Console

    started = time.monotonic()
    measurements: list[Measurement] = []
    stopped: KeyboardInterrupt | None = None
    launch = "torchrun" if launched_by_torchrun() else "spawn"
    world = int(os.environ["WORLD_SIZE"]) if launch == "torchrun" else args.world_size or default_world_size(device_type)
    facts: dict[str, object] = {"world_size": world, "hostnames": [socket.gethostname()],
                                "communication_backend": "nccl" if device_type == "cuda" else "gloo",
                                "device_type": device_type}
    try:
        if launch == "torchrun":
            launched, facts = run_launched(device_type, ops, sizes, settings, progress=sys.stderr.isatty())
            measurements += launched
        else:
            run_collectives(device_type, world, ops, sizes, settings=settings, progress=sys.stderr.isatty(),
                            into=measurements)
    except KeyboardInterrupt as exc:
        stopped = exc
    signals.hold()
    stopped = stopped or signals.stopped
    results = _results(measurements, device_type, facts, launch, argv)
    results.meta["suite_seconds"] = round(time.monotonic() - started, 2)
    results.meta["interrupted"] = stopped is not None
    console = Console(stderr=args.json, width=None if sys.stdout.isatty() else 150)
    hosts = facts.get("hostnames") or []
    console.print(collectives_table(measurements, f"collectives over {measurements[0].device if measurements else ''}"
                                    f" ({facts.get('communication_backend')}, {len(hosts)} host(s)); {COUNTING}"))
    path = _write(results, out)
    if args.json:
        from pygpuperf.core import documents

        sys.stdout.write(documents.to_json(results) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    if stopped is not None:
        return stopping.exit_code_of(stopped)
    wrong = any(m.status == "ok" and not m.verified for m in measurements)
    return cli.EXIT_FAILED if wrong else cli.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    try:
        code = run(argv)
    except UsageError as exc:
        if int(os.environ.get("RANK", "0") or 0) == 0:  # under torchrun every rank would say it
            print(f"pygpuperf: error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)
