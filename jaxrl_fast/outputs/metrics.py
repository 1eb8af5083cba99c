"""A run's log as it is written: metrics lines, TensorBoard scalars, the clock they count in, the
progress display.

`metrics.jsonl` holds one JSON object per line. Every line has `step` (environment steps so far)
and `wall_s` (the run's seconds: `RunClock`); training lines add `sps` and the losses
(`train/...`), evaluation lines add `eval_return_mean`, `eval_return_std`, `eval_episodes`.
Lines are in step order and each is on disk as soon as it is logged, so a killed run keeps
everything it logged.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from jaxrl_fast.files import written_whole
from jaxrl_fast.outputs.run_dir import METRICS_FILE, TB_EVENTS


def process_start_time() -> float:
    """When this process was created (epoch seconds, to the kernel's clock tick), so that `wall_s`
    counts the interpreter's start and every import too: now less the process's age on the
    boot-time clock. (psutil's `create_time` adds the start tick to /proc/stat's `btime`, a whole
    second: early by up to a second, the same for every process of one boot.) Now, where /proc or
    the boot-time clock is missing."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


PROCESS_START = process_start_time()  # wall_s and time_to_target_s count from here


class RunClock:
    """A run's seconds: since this process was created (its imports included) and, for a resumed
    run, on from the `wall_s` the run had reached when the checkpoint it resumed from was saved,
    so that a curve against wall_s never steps back. The seconds between that save and the kill
    that ended the earlier process are not counted; the new process's start-up is."""

    def __init__(self, resumed_at_s: float = 0.0):
        self.resumed_at_s = resumed_at_s

    def now(self) -> float:
        return self.resumed_at_s + time.time() - PROCESS_START


def write_json(path: Path, data: Any) -> None:
    """Write atomically and durably: a reader never sees half a file, nor a crash an empty one."""
    with written_whole(path, durable=True) as partial:
        partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _json_value(value: Any) -> Any:
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def truncate_metrics(path: Path, last_step: int) -> int:
    """Keep the lines of `metrics.jsonl` up to `last_step` (a resumed run redoes what came after),
    dropping a line cut short by a kill; atomic. Returns the number of lines dropped."""
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if record.get("step", 0) <= last_step:
            kept.append(line)
        else:
            dropped += 1
    with written_whole(path, durable=True) as partial:
        partial.write_text("".join(line + "\n" for line in kept))
    return dropped


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The lines of `metrics.jsonl` (none when it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricsSink:
    """Thread-safe writer of `metrics.jsonl` and TensorBoard scalars (the trainer and the evaluator write).

    The file stays in step order: an evaluation ends in the evaluator's thread after training lines
    of later steps were written, so its line is put back in place, before them (the lines after it
    are written again in one `pwrite`; every line is on disk as soon as it is logged).

    `metrics.jsonl` is the record. Resuming (`rebuild_tensorboard`), the event files are written
    anew from it: a killed run loses the events its writer had not flushed yet (every 10 s), and
    TensorBoard's purge only hides later steps, so patching the old files cannot make them agree."""

    TAIL_LINES = 256  # lines kept in memory to place a late evaluation line among (an older one: all the file's)

    def __init__(self, run_dir: Path, tensorboard: bool = True, rebuild_tensorboard: bool = False,
                 clock: RunClock = RunClock()):
        self._lock = threading.Lock()
        self.clock = clock
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            old_events = list(run_dir.glob(TB_EVENTS)) if rebuild_tensorboard else []
            # a name of its own: the writer names its file by the second, which an old file of this run may share
            suffix = f".{uuid.uuid4().hex[:8]}" if rebuild_tensorboard else ""
            self._tb = SummaryWriter(str(run_dir), flush_secs=10, filename_suffix=suffix)
            if rebuild_tensorboard:
                for record in read_metrics(run_dir / METRICS_FILE):
                    self._add_scalars(record)
                self._tb.flush()  # the new file whole on disk before the old ones go (a kill here loses neither)
                for events in old_events:
                    events.unlink(missing_ok=True)
        self._fd = os.open(run_dir / METRICS_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        self._end = os.lseek(self._fd, 0, os.SEEK_END)
        self._tail: list[tuple[int, bytes]] = []  # (step, line) of the newest lines, in file order

    def _add_scalars(self, record: dict[str, Any]) -> None:
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self._tb.add_scalar(key if "/" in key else f"charts/{key}", value, int(record["step"]))

    def write(self, step: int, values: dict[str, Any]) -> dict[str, Any]:
        record = {"step": int(step), "wall_s": round(self.clock.now(), 3)}
        record.update({k: _json_value(v) for k, v in values.items()})
        with self._lock:
            if self._fd is None:  # closed: an evaluation that outlived the run's end (its fd may be another file's now)
                return record
            self._insert(int(step), (json.dumps(record) + "\n").encode())
            if self._tb is not None:
                self._add_scalars(record)
        return record

    def _insert(self, step: int, line: bytes) -> None:
        """Write `line` after the last line of a step <= `step` (the end, unless it comes late)."""
        later = self._place(step)
        if later == 0 and self._tail and sum(len(text) for _, text in self._tail) < self._end:
            self._tail = self._whole_file()  # later than the lines kept (rare): placed among all of them
            later = self._place(step)
        moved = b"".join(text for _, text in self._tail[later:])
        data, at = line + moved, self._end - len(moved)
        try:
            written = 0
            while written < len(data):  # a short write (a full disk, a file-size limit) writes the rest, or raises
                written += os.pwrite(self._fd, data[written:], at + written)
        except OSError:
            with contextlib.suppress(OSError):  # the lines it moved back where they were, and the file's old end
                os.pwrite(self._fd, moved, at)  # the same bytes over blocks the file has: no new space needed
                os.ftruncate(self._fd, self._end)
            raise
        self._end += len(line)
        self._tail.insert(later, (step, line))
        del self._tail[:-self.TAIL_LINES]

    def _place(self, step: int) -> int:
        """The index in the tail after the last line of a step <= `step`."""
        later = len(self._tail)
        while later and self._tail[later - 1][0] > step:
            later -= 1
        return later

    def _whole_file(self) -> list[tuple[int, bytes]]:
        """(step, line) of every line of the file, in file order (a line that does not read as a
        record, which no write of this sink makes, as of step -1: kept where it is)."""
        def step_of(line: bytes) -> int:
            try:
                return int(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):
                return -1

        return [(step_of(line), line) for line in os.pread(self._fd, self._end, 0).splitlines(keepends=True)]

    def sync(self) -> None:
        """The lines logged so far on the disk (before a checkpoint: a crash then loses no line the
        checkpoint's steps logged)."""
        with self._lock:
            if self._fd is not None:
                os.fdatasync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            os.close(self._fd)
            self._fd = None
            if self._tb is not None:
                self._tb.close()


class ProgressDisplay:
    """A live bar (steps, SPS, latest evaluation) on a terminal; plain lines otherwise."""

    def __init__(self, total_steps: int, mode: str = "auto", stream: Any = None):
        self._stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self._stream.isatty() else "plain"
        self.mode = mode
        self._total = total_steps
        self._eval = "-"
        self._bar = None
        if mode == "bar":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[sps]} sps"),
                TextColumn("eval {task.fields[eval]}"),
                TimeElapsedColumn(),
                console=Console(file=self._stream),
                transient=False,
            )
            self._task = self._bar.add_task("train", total=total_steps, sps="-", eval="-")
            self._bar.start()

    def update(self, step: int, sps: float) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=min(step, self._total), sps=f"{sps:,.0f}", eval=self._eval)
        elif self.mode == "plain":
            print(f"step {step:>10,d}/{self._total:,d}  sps {sps:>10,.0f}  eval {self._eval}", file=self._stream, flush=True)

    def set_eval(self, step: int, mean: float, std: float) -> None:
        self.set_eval_text(f"{mean:.1f}±{std:.1f}@{step:,d}")

    def set_eval_text(self, text: str) -> None:
        self._eval = text
        if self._bar is not None:
            self._bar.update(self._task, eval=self._eval)

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        elif self.mode != "off":
            print(text, file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
