"""SIGINT and SIGTERM during a run: the first asks it to stop, a second SIGINT stops it at once.

Light on purpose (no JAX): the CLI installs it before its heavy imports, so that a Ctrl-C in the
first second (imports, compilation) is a stop request like any other, never lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Literal

FIRST_SIGNAL = "{name}: stopping after the training call in flight, if one runs (Ctrl-C again to stop at once)\n"
SECOND_SIGINT = b"second SIGINT: stopped at once, without a final checkpoint; --resume continues from the newest one\n"


class StopRequest:
    """SIGINT/SIGTERM: the first asks the loop to stop after the training call in flight (and write
    a final checkpoint); a second SIGINT stops at once.

    `second="exit"` (the CLI) ends the process with status 130 on the second SIGINT, from the
    handler. The call in flight may run for minutes inside XLA, where no Python exception reaches
    it, and the state it was given is donated, so there is nothing left to save; metrics.jsonl is
    flushed line by line and checkpoints are atomic, so leaving at once loses nothing that was
    recorded. `second="raise"` (a notebook, which must not lose its kernel) raises
    KeyboardInterrupt instead and marks the request `forced`.

    Python runs handlers in the main thread only, between bytecodes, so the trainer runs its
    calls on a worker thread (`call_in_worker`) and the main thread stays free to react."""

    def __init__(self, second: Literal["exit", "raise"] = "raise") -> None:
        self.signal: int | None = None
        self.forced = False
        self.second = second
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            if self.second == "exit":
                with contextlib.suppress(Exception):  # a flush the handler interrupted may refuse a second one
                    sys.stdout.flush()
                    sys.stderr.flush()
                os.write(2, SECOND_SIGINT)
                os._exit(130)
            self.forced = True
            raise KeyboardInterrupt
        first, self.signal = self.signal is None, signum  # set before writing: a second signal can land mid-write
        if first:
            os.write(2, FIRST_SIGNAL.format(name=signal.Signals(signum).name).encode())

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal else "SIGINT"

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread() and not self._previous:  # handlers live there
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
