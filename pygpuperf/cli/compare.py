"""`python -m pygpuperf.compare A B [...]`: ceilings of cards side by side, and what the differences mean.

Each argument is a results.json written by `python -m pygpuperf.roofline` (its measured machine
model; a folder holding one works too) or `datasheet:<card>` (a model from vendor figures;
`--list` names the cards). Ratios are against the first argument. `--json` prints a
machine-readable comparison.

Exit codes: 0 done, 2 bad input (one line naming the fix).
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.markup import escape

from pygpuperf.analyze import machine_model
from pygpuperf.cli import common as cli
from pygpuperf.analyze.machine_model import DATASHEET_PREFIX
from pygpuperf.compare import compare, comparison_dict, load_entry
from pygpuperf.core.errors import UsageError
from pygpuperf.report.compare_table import print_comparison


def _list_cards(console: Console) -> None:
    for key in machine_model.card_keys():
        card = machine_model.card(key)
        f = machine_model.facts(key)
        console.print(f"{DATASHEET_PREFIX + key:24s} {escape(card['name']):22s} {f['segment']:12s} "
                      f"{f['memory_type']} {f['memory_gb']:g} GB")


def build_parser() -> argparse.ArgumentParser:
    p = cli.Parser(prog="python -m pygpuperf.compare", description=__doc__.splitlines()[0])
    p.add_argument("entries", nargs="*", metavar="RESULTS_OR_CARD",
                   help="results.json (or its folder) from python -m pygpuperf.roofline, or datasheet:<card>")
    p.add_argument("--list", action="store_true", help="list the datasheet cards and exit")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON on stdout (tables go to stderr)")
    return p


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
    out = err if args.json else Console(width=None if sys.stdout.isatty() else 150)
    if args.list:
        _list_cards(out)
        return 0
    if len(args.entries) < 2:
        raise UsageError("give two or more results files or datasheet:<card> entries to compare, e.g. "
                         "results.json datasheet:h100-sxm (--list names the cards)")
    comparison = compare([load_entry(spec) for spec in args.entries])
    print_comparison(comparison, out)
    if args.json:
        sys.stdout.write(json.dumps(comparison_dict(comparison), indent=2, allow_nan=False) + "\n")
    return 0


def main(argv: list[str] | None = None) -> None:
    cli.main_of(run, argv)
