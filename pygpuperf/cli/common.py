"""What every command line shares: its parser, an output folder it owns alone, and exit codes.

Exit codes, the same for every command: 0 done and every result verified; 1 a verification
failed or an error finding was raised (the results are written all the same); 2 bad input
(one line naming the fix); 130, 143, 129 stopped by SIGINT, SIGTERM, SIGHUP (what was
measured is written first).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import filelock

import pygpuperf
from pygpuperf.core.errors import UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
LOCK_NAME = ".pygpuperf.lock"
RESULTS_ROOT = Path("pygpuperf-results")


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2 through :func:`main_of`) and --version."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version", version=f"pygpuperf {pygpuperf.__version__}")

    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        raise UsageError(f"{message}; see --help")


def folder_argument(text: str) -> Path:
    """An --out/--resume value: a non-empty path (an empty one would mean the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a folder name, not an empty string")
    return Path(text)


def run_id() -> str:
    """A UTC time stamp and 8 random hex digits: two runs started in the same second still differ."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:8]}"


@dataclass
class OutputFolder:
    """A folder this process writes alone: its lock is held until :meth:`release` (or process exit)."""

    path: Path
    lock: filelock.BaseFileLock
    resumed: bool = False

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> "OutputFolder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _writable(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{uuid.uuid4().hex[:8]}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write there ({exc.strerror or exc}); choose a writable folder") from None


def claim_output(out: Path | None, default_stem: str, document: str, *, overwrite: bool = False,
                 resume: bool = False) -> OutputFolder:
    """The output folder of one run, locked against every other pygpuperf process.

    `out` None: ./pygpuperf-results/<default_stem>-<run id>, new. A given folder that already holds
    `document` (an earlier run's results.json, say) needs `resume` or `overwrite`; `resume` needs it.
    A folder another process holds is refused. Every refusal is a UsageError (exit 2)."""
    if out is None:
        while True:
            path = RESULTS_ROOT / f"{default_stem}-{run_id()}"
            _writable(path.parent)
            try:
                path.mkdir()
                break
            except FileExistsError:  # the same id twice: draw another
                continue
    else:
        path = out
        _writable(path)
    lock = filelock.FileLock(str(path / LOCK_NAME), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise UsageError(f"--out {path}: another pygpuperf run is writing there (it holds {LOCK_NAME}); "
                         "wait for it to end or choose another folder") from None
    held = (path / document).exists()
    if resume and not held:
        lock.release()
        raise UsageError(f"--resume {path}: there is no {document} to resume from; run without --resume")
    if held and not (resume or overwrite):
        lock.release()
        raise UsageError(f"--out {path}: the folder already holds {document} from an earlier run; add --resume "
                         "to continue that run, --overwrite to replace it, or choose another folder")
    return OutputFolder(path, lock, resumed=resume)


def add_folder_flags(p: argparse.ArgumentParser, default_help: str, resume: bool = False) -> None:
    """--out and --overwrite (and --resume where a command can continue a run)."""
    p.add_argument("--out", type=folder_argument, help=default_help)
    p.add_argument("--overwrite", action="store_true", help="write into an --out folder that holds an earlier run")
    if resume:
        p.add_argument("--resume", type=folder_argument, metavar="DIR",
                       help="continue the interrupted run in DIR: what it measured and verified is kept, the rest runs")


def main_of(run: Callable[[list[str] | None], int], argv: list[str] | None = None, *, quiet: bool = False) -> None:
    """Run a command; bad input ends as one line naming the fix (unless `quiet`: one process of several
    that would all say it) and exit code 2."""
    try:
        code = run(argv)
    except UsageError as exc:
        if not quiet:
            print(f"pygpuperf: error: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    sys.exit(code)
