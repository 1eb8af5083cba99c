"""What the benchmark scripts print and keep beside their figures: the machine, the date and the
command (every figure in the docs names all three), a table in markdown, and the raw rows as JSON
under `experiments/results/`.

JAX is imported only when asked for: a script may set `XLA_FLAGS` before its first JAX import.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from collections.abc import Iterable, Sequence
from datetime import date
from pathlib import Path
from typing import Any


def machine() -> str:
    """The CPU's architecture and cores, and the kind of JAX's first device."""
    import jax

    return f"{platform.machine()}, {os.cpu_count()} cores, {jax.devices()[0].device_kind}"


def command() -> str:
    """The command line that ran this script, as the docs quote it."""
    return " ".join(["python", *sys.argv])


def print_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A markdown table: `header` and each row's cells, already formatted."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |", flush=True)


def print_time_to_target(targets: list[dict], threshold: float) -> None:
    """The per-seed rows of `time_to_target` runs and their median (a seed that missed the
    threshold counts as slower than any: no median where half or more missed)."""
    def number(value: Any, form: str) -> str:
        return "missed" if value is None else format(value, form)

    print_table(["seed", f"time to {threshold:g} (s, from process start)", "env steps", "compile (s)"],
                ([t["seed"], number(t.get("time_to_target_s"), ".1f"), number(t.get("target_step"), ","),
                  number(t.get("compile_s"), ".1f")] for t in targets))
    times = [t["time_to_target_s"] if t.get("time_to_target_s") is not None else float("inf") for t in targets]
    median = statistics.median(times) if targets else float("inf")
    print(f"median time to {threshold:g}: " + (f"{median:.1f} s" if median != float("inf") else "-, half or more missed"))


def write_record(path: Path, record: dict) -> None:
    """`record` as JSON at `path`, after the machine, JAX's version, the date and the command."""
    import jax

    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"machine": machine(), "jax": jax.__version__, "date": str(date.today()), "command": command()}
    path.write_text(json.dumps(header | record, indent=2) + "\n")
