"""Per-phase wall-clock timing of jitted programs, taken on the host.

On the CPU a program that calls EnvPool (a side-effecting custom call) runs synchronously when it
is dispatched, while a pure learner program is dispatched asynchronously and runs in the
background on its device. So an environment phase is timed around its call (`interval`), and a
learner phase from the moment its device could start it (its dispatch, or the end of the previous
program of that phase, since a device runs its programs in order) to the moment its outputs are
ready, seen by a watcher thread (`watch`). `summary()` gives busy time per phase and how long the
environment and update phases ran at the same time, which is how the concurrent schedule shows
that environment stepping overlaps the update.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from typing import Any

import jax


class PhaseClock:
    WATCHER_IDLE_S = 1.0  # a phase's watcher thread ends after this long without a watch

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self._last_end: dict[str, float] = {}
        self._watched: dict[str, queue.Queue] = {}  # per phase: outputs to wait for, in dispatch order

    def interval(self, name: str, start: float, end: float) -> None:
        with self._lock:
            self._intervals[name].append((start, end))
            self._last_end[name] = end

    def timed(self, name: str, program: Any, *args: Any) -> Any:
        """Call `program(*args)`, wait for its outputs and record the interval: a phase that runs
        when it is called (EnvPool's program on the CPU), timed on the caller's thread."""
        begin = time.perf_counter()
        outputs = jax.block_until_ready(program(*args))
        self.interval(name, begin, time.perf_counter())
        return outputs

    def watch(self, name: str, dispatched: float, outputs: Any) -> None:
        """Record when `outputs` are ready, without blocking the caller. One thread per phase waits
        for them in dispatch order (its device runs programs in order, so each started when the one
        before ended): a watch costs the caller a queue put, not a thread's start."""
        with self._lock:  # under the lock, so a watcher that found its queue empty cannot miss this
            pending = self._watched.get(name)
            if pending is None:
                pending = self._watched[name] = queue.Queue()
                threading.Thread(target=self._wait_in_order, args=(name, pending), name=f"phase-clock-{name}",
                                 daemon=True).start()
            pending.put((dispatched, outputs))

    def _wait_in_order(self, name: str, pending: queue.Queue) -> None:
        while True:
            try:
                dispatched, outputs = pending.get(timeout=self.WATCHER_IDLE_S)
            except queue.Empty:
                with self._lock:
                    if pending.empty():  # idle: the next watch of this phase starts a new thread
                        del self._watched[name]
                        return
                continue
            try:
                start = max(dispatched, self._last_end.get(name, 0.0))
                jax.block_until_ready(outputs)
                self.interval(name, start, time.perf_counter())
            except Exception:  # a failed program: its caller sees the error when it reads the outputs
                pass
            finally:
                del outputs
                pending.task_done()

    def summary(self, overlap: tuple[str, str] = ("env", "update")) -> dict[str, float]:
        """`timing/<phase>_s` busy seconds per phase and `timing/overlap_s` since the last summary."""
        with self._lock:
            watched = list(self._watched.values())
        for pending in watched:
            pending.join()  # every watch made so far is recorded
        with self._lock:
            intervals, self._intervals = self._intervals, defaultdict(list)
        out = {f"timing/{name}_s": sum(e - b for b, e in spans) for name, spans in intervals.items()}
        a, b = (union(intervals.get(name, [])) for name in overlap)
        out["timing/overlap_s"] = intersection_length(a, b)
        return out


def union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same time (several actors can be in one phase at once)."""
    merged: list[tuple[float, float]] = []
    for begin, end in sorted(spans):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def intersection_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Seconds covered by both of two sorted, disjoint interval lists (one linear sweep)."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total
