"""Summarise a `--profile` trace into time per phase: env, inference, update, transfer, wait, other, idle.

    python profiling/summarize_trace.py RUN_DIR            # the newest trace under RUN_DIR
    python profiling/summarize_trace.py path/to/perfetto_trace.json.gz   # or a *.xplane.pb

Importable: `summarize(trace_path) -> {phase: seconds}` over the traced calls, and
`summarize_calls(trace_path)` per call.

Given a directory, it reads the newest profiling session's `*.xplane.pb` (through JAX's
`jax.profiler.ProfileData`): the `*.trace.json.gz` files beside it are an export that stops at
1,000,000 events, which a few PPO iterations or a few thousand SAC updates exceed. A JSON trace at
that limit is read with a warning that the calls it cuts short are incomplete.

Which events count (see `jaxrl_fast.engine.phases`):
* XLA op events (with `hlo_module` and `hlo_op`), on whatever thread ran them: their phase is
  looked up in `hlo_phases.json`, which `--profile` writes beside the trace from the `op_name`
  metadata that `jax.named_scope` leaves in each optimised program. An op without a phase takes
  the phase of the op it runs inside (a loop's body, a called computation), else it is `other`;
  so is XLA's CPU runtime between ops (`ThunkExecutor::Execute`).
* Host annotations named after a phase (`transfer`, `wait`, from `jax.profiler.TraceAnnotation`).
* Nothing else: JAX's own host events (dispatch, argument handling) and Python work between
  programs are not a phase; they show as `idle`.

The rule for overlap. On each thread, every instant belongs to the innermost counted event
running there. A phase's time is the wall time during which it ran on at least one thread (the
union over threads, so two threads doing `update` at once count once). Different phases can run
at the same moment (acting beside learning, XLA's intra-op threads), so phase times can add up to
more than the wall time: the excess is overlap. `idle` is the wall time in which no counted
event ran on any thread. The wall time is the sum of the traced calls (`train_call` annotations),
and only what falls inside them is counted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator, NamedTuple

from jaxrl_fast.engine.phases import CALL_ANNOTATION, HLO_PHASES_FILE, PHASES
from jaxrl_fast.engine.timing import union

OTHER, IDLE = "other", "idle"
REPORTED = (*PHASES, OTHER, IDLE)
XLA_EXECUTOR = "ThunkExecutor::Execute"  # XLA CPU: runs a program's (or a loop body's) ops
JSON_EVENT_LIMIT = 1_000_000  # XProf's trace-viewer export keeps at most this many events


class Event(NamedTuple):
    thread: Any
    start_us: float
    end_us: float
    name: str
    module: str | None  # hlo_module of an XLA op
    op: str | None  # hlo_op of an XLA op
    steps: tuple[int, int | None, int | None] | None  # a call annotation's (index, first_step, last_step)


class CallSummary(NamedTuple):
    index: int  # the training call's index in the run (0 is the first call after compilation)
    first_step: int | None
    last_step: int | None
    wall_s: float
    phases: dict[str, float]  # seconds per phase, REPORTED order


def find_trace(path: str | Path) -> Path:
    """A trace file as given; for a directory, the newest profiling session under it, its
    `*.xplane.pb` (complete) or else its `*.trace.json.gz`."""
    path = Path(path)
    if path.is_file():
        return path
    files = [p for pattern in ("*.xplane.pb", "*.trace.json.gz") for p in path.rglob(pattern)]
    if not files:
        raise FileNotFoundError(f"no *.xplane.pb or *.trace.json.gz under {path} (was the run started with --profile?)")
    newest = max(files, key=lambda p: p.stat().st_mtime).parent
    return min((p for p in files if p.parent == newest), key=lambda p: not p.name.endswith(".xplane.pb"))


def find_phase_map(trace: Path) -> dict[str, dict[str, str]]:
    """`hlo_phases.json` from the nearest directory above the trace (RUN_DIR/profile/); {} if none."""
    for directory in list(trace.parents)[:4]:
        candidate = directory / HLO_PHASES_FILE
        if candidate.exists():
            return json.loads(candidate.read_text())
    return {}


def _call_steps(name: str, args: dict[str, Any]) -> tuple[int, int | None, int | None] | None:
    if name != CALL_ANNOTATION:
        return None
    step = lambda key: int(args[key]) if key in args else None  # noqa: E731
    return step("step_num") or 0, step("first_step"), step("last_step")


def _event(thread: Any, start_us: float, end_us: float, name: str, args: dict[str, Any]) -> Event:
    return Event(thread, start_us, end_us, name, args.get("hlo_module"), args.get("hlo_op"), _call_steps(name, args))


def json_events(trace: Path) -> Iterator[Event]:
    """Complete events ("X") of a Chrome/Perfetto JSON trace; timestamps in microseconds."""
    with gzip.open(trace, "rt") as stream:
        data = json.load(stream)
    raw = data["traceEvents"] if isinstance(data, dict) else data
    for e in raw:
        if e.get("ph") == "X" and "dur" in e:
            yield _event((e.get("pid"), e.get("tid")), e["ts"], e["ts"] + e["dur"], e["name"], e.get("args") or {})


def xplane_events(trace: Path) -> Iterator[Event]:
    """Events of an XSpace (`*.xplane.pb`), read with `jax.profiler.ProfileData`."""
    from jax.profiler import ProfileData

    for plane in ProfileData.from_file(str(trace)).planes:
        for index, line in enumerate(plane.lines):
            for e in line.events:
                yield _event((plane.name, index), e.start_ns / 1e3, e.end_ns / 1e3, e.name, dict(e.stats))


def load_events(trace: Path) -> Iterator[Event]:
    return xplane_events(trace) if trace.name.endswith(".xplane.pb") else json_events(trace)


def own_phase(event: Event, op_phases: dict[str, dict[str, str]]) -> str | None | bool:
    """The phase an event names; None for a counted event without one; False for an event that
    does not count."""
    if event.op is not None and event.module is not None:
        return op_phases.get(event.module, {}).get(event.op)
    if event.name == XLA_EXECUTOR:  # XLA's CPU runtime between ops: a program is running
        return None
    if event.name in PHASES:
        return event.name
    return False


def thread_segments(events: list[tuple[float, float, str | None]]) -> list[tuple[float, float, str]]:
    """(start, end, phase) pieces of one thread's time, each owned by the innermost counted event.

    `events` are (start, end, own phase or None) of one thread; events nest (a child inside its
    parent); one that overruns its parent is clipped to it. A child without a phase takes its
    parent's, and an outermost one without a phase is `other`."""
    segments: list[tuple[float, float, str]] = []
    stack: list[tuple[float, str]] = []  # (end, phase) of the open events, innermost last
    cursor = 0.0

    def close_until(t: float) -> None:
        nonlocal cursor
        while stack and stack[-1][0] <= t:
            end, phase = stack.pop()
            if end > cursor:
                segments.append((cursor, end, phase))
            cursor = max(cursor, end)

    for start, end, phase in sorted(events, key=lambda e: (e[0], -e[1])):
        close_until(start)
        if stack:
            if start > cursor:
                segments.append((cursor, start, stack[-1][1]))
            end = min(end, stack[-1][0])
            phase = phase or stack[-1][1]
        cursor = start
        stack.append((end, phase or OTHER))
    close_until(math.inf)
    return segments


def union_within(intervals: Iterable[tuple[float, float]], span: tuple[float, float]) -> float:
    """Length of the union of `intervals` clipped to `span`."""
    lo, hi = span
    return sum(b - a for a, b in union([(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]))


def summarize_events(events: Iterable[Event], op_phases: dict[str, dict[str, str]]) -> list[CallSummary]:
    """Per traced call (`train_call` annotations; without them, one span over all events)."""
    by_thread: dict[Any, list[tuple[float, float, str | None]]] = defaultdict(list)
    spans: list[tuple[int, int | None, int | None, float, float]] = []  # (index, first_step, last_step, start, end)
    first, last = math.inf, -math.inf
    for e in events:
        first, last = min(first, e.start_us), max(last, e.end_us)
        if e.steps is not None:
            spans.append((*e.steps, e.start_us, e.end_us))
        phase = own_phase(e, op_phases)
        if phase is not False:
            by_thread[e.thread].append((e.start_us, e.end_us, phase))
    if not spans and first < last:  # a trace taken elsewhere
        spans = [(0, None, None, first, last)]
    by_phase: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for thread_events in by_thread.values():
        for start, end, phase in thread_segments(thread_events):
            by_phase[phase].append((start, end))
    busy = [interval for intervals in by_phase.values() for interval in intervals]
    out = []
    for index, first_step, last_step, start, end in sorted(spans, key=lambda s: s[3]):
        span = (start, end)
        seconds = {phase: union_within(by_phase.get(phase, []), span) / 1e6 for phase in (*PHASES, OTHER)}
        wall = (end - start) / 1e6
        seconds[IDLE] = wall - union_within(busy, span) / 1e6
        out.append(CallSummary(index, first_step, last_step, wall, seconds))
    return out


def summarize_calls(trace_path: str | Path) -> list[CallSummary]:
    """Seconds per phase for each traced call of a trace file (or the newest under a directory)."""
    trace = find_trace(trace_path)
    return summarize_events(load_events(trace), find_phase_map(trace))


def summarize(trace_path: str | Path) -> dict[str, float]:
    """Seconds per phase (env, inference, update, transfer, wait, other, idle) over all traced calls."""
    calls = summarize_calls(trace_path)
    return {phase: sum(c.phases[phase] for c in calls) for phase in REPORTED}


def format_table(calls: list[CallSummary]) -> str:
    wall = sum(c.wall_s for c in calls)
    header = ["phase", "seconds", "share"] + [f"call {c.index}" for c in calls]
    rows = []
    for phase in REPORTED:
        total = sum(c.phases[phase] for c in calls)
        rows.append([phase, f"{total:.3f}", f"{total / wall:.1%}" if wall else "-"]
                    + [f"{c.phases[phase]:.3f}" for c in calls])
    rows.append(["wall", f"{wall:.3f}", "100.0%"] + [f"{c.wall_s:.3f}" for c in calls])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    line = lambda row: "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))  # noqa: E731
    return "\n".join([line(header), *(line(row) for row in rows)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="a run directory (its newest trace), a *.xplane.pb or a *.trace.json.gz file")
    args = parser.parse_args(argv)
    trace = find_trace(args.path)
    op_phases = find_phase_map(trace)
    read = 0

    def counting(events: Iterable[Event]) -> Iterator[Event]:
        nonlocal read
        for read, event in enumerate(events, 1):
            yield event

    calls = summarize_events(counting(load_events(trace)), op_phases)
    print(f"trace: {trace}")
    if not op_phases:
        print(f"no {HLO_PHASES_FILE} beside it: XLA ops cannot be told apart and count as other")
    if trace.name.endswith(".json.gz") and read >= JSON_EVENT_LIMIT:
        print(f"warning: the JSON export holds {read:,d} events, its limit: later events are missing, "
              "so the last calls are incomplete; read the *.xplane.pb beside it instead")
    steps = [c for c in calls if c.first_step is not None]
    print(f"{len(calls)} traced call(s)" + (f", env steps {steps[0].first_step:,d} to {steps[-1].last_step:,d}" if steps else ""))
    print(format_table(calls))
    overlap = sum(sum(c.phases.values()) for c in calls) - sum(c.wall_s for c in calls)
    print(f"phases ran at the same time for {overlap:.3f} s in all (their sum exceeds the wall time by that much)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
