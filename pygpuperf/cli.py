"""What every command line shares: a writable output folder, and one-line usage errors."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Callable

from pygpuperf.device import UsageError


def output_dir(out: Path | None, default_stem: str) -> Path:
    """`out`, or ./pygpuperf-results/<default_stem>-<UTC time>; checked writable before any work."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = out or Path("pygpuperf-results") / f"{default_stem}-{stamp}"
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe_file = out / ".write-test"
        probe_file.write_text("")
        probe_file.unlink()
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write there ({exc.strerror or exc}); choose a writable folder") from None
    return out


def main_of(run: Callable[[list[str] | None], int], argv: list[str] | None = None) -> None:
    """Run a command; bad input ends as one line naming the fix and exit code 2."""
    try:
        code = run(argv)
    except UsageError as exc:
        print(f"pygpuperf: error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)
