"""Stop signals: SIGINT, SIGTERM and SIGHUP all end a run the same way, keeping what it measured.

Inside :func:`stop_signals` the first of them raises :class:`Stopped` in the main thread (a
KeyboardInterrupt, so code that already keeps its results on Ctrl-C does the same on a batch
scheduler's TERM). Later signals are remembered, not raised, so the writing that follows is
not cut short. The exit code is 128 + the signal number: 130, 143, 129.
A signal the process was started ignoring (nohup, a script's background job) stays ignored.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; `exit_code` is what the command should end with."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code_of(interrupt: KeyboardInterrupt) -> int:
    """130 for a plain Ctrl-C, 128 + the signal for a :class:`Stopped`."""
    return interrupt.exit_code if isinstance(interrupt, Stopped) else 128 + signal.SIGINT


class _Handler:
    """Raises :class:`Stopped` for the first signal unless held; remembers every one."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.held = False

    def __call__(self, signum: int, frame: object) -> None:
        self.received.append(signum)
        if len(self.received) == 1 and not self.held:
            raise Stopped(signum)

    def hold(self) -> None:
        """From now on signals are only remembered: what is being written is not cut short."""
        self.held = True

    @property
    def stopped(self) -> Stopped | None:
        """The first signal that arrived, as the exception it stands for (None: none arrived)."""
        return Stopped(self.received[0]) if self.received else None


@contextmanager
def stop_signals() -> Iterator[_Handler]:
    """Turn the stop signals into :class:`Stopped` for the duration; the previous handlers come back after.

    Off the main thread (where Python cannot install handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield _Handler()
        return
    handler = _Handler()
    previous = {}
    for signum in STOP_SIGNALS:
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN:
            continue
        previous[signum] = current
        signal.signal(signum, handler)
    try:
        yield handler
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
