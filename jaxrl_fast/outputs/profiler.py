"""`--profile`: a `jax.profiler` trace of a window of training calls, in `RUN_DIR/profile/`.

One training call is one `driver.run(n)` of the trainer's loop: one log interval of iterations,
one line of `metrics.jsonl`. The window skips `--profile-start` calls (the first ones carry
one-off work such as the first evaluation's compilation) and traces the next `--profile-calls`.

What lands in `RUN_DIR/profile/`:
* `plugins/profile/<time>/<host>.xplane.pb`: TensorBoard's profile plugin (XProf) reads it;
* `plugins/profile/<time>/perfetto_trace.json.gz` (and `<host>.trace.json.gz`, the same events
  with metadata): https://ui.perfetto.dev opens it;
* `hlo_phases.json`: which phase each XLA instruction of each live program belongs to (from the
  `op_name` metadata that `jax.named_scope` leaves in the optimised HLO), because XLA's CPU trace
  events name only the module and the instruction (see `jaxrl_fast.engine.phases`).

A trace that cannot start or stop is logged and recorded; training goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

import jax

from jaxrl_fast.config.plan import ProfileWindow
from jaxrl_fast.engine.phases import CALL_ANNOTATION, HLO_PHASES_FILE, phase_of_op_name
from jaxrl_fast.files import written_whole

log = logging.getLogger(__name__)


# `%name = type op(...), ..., metadata={op_name="jit(run)/while/body/env/ffi_call" ...}`
_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%(\S+)\s*=.*?metadata=\{op_name="([^"]*)"', re.MULTILINE)


def instruction_phases(hlo_text: str) -> dict[str, str]:
    """{instruction name: phase} for the instructions of one optimised HLO module that carry a phase.

    A fusion carries the `op_name` of its root instruction, so a fusion that XLA built across a
    phase boundary counts, whole, as the phase of its root."""
    out = {}
    for name, op_name in _INSTRUCTION.findall(hlo_text):
        phase = phase_of_op_name(op_name)
        if phase is not None:
            out[name] = phase
    return out


def hlo_phase_map(modules: Iterable[tuple[str, str]]) -> dict[str, dict[str, str]]:
    """{module name: {instruction: phase}} from (module name, optimised HLO text) pairs.

    Trace events name a program only by its module name, which two programs can share; an
    instruction whose phase differs between same-named modules is left out (it counts as other)."""
    merged: dict[str, dict[str, str]] = {}
    conflicts: dict[str, set[str]] = {}
    for module, text in modules:
        ops = merged.setdefault(module, {})
        for name, phase in instruction_phases(text).items():
            if ops.get(name, phase) != phase:
                conflicts.setdefault(module, set()).add(name)
            ops[name] = phase
    for module, names in conflicts.items():
        for name in names:
            merged[module].pop(name, None)
    return {module: ops for module, ops in merged.items() if ops}


def live_hlo_modules() -> Iterator[tuple[str, str]]:
    """(module name, optimised HLO text) of every program the backend holds compiled."""
    from jax.extend.backend import get_backend

    for executable in get_backend().live_executables():
        for module in executable.hlo_modules():
            yield module.name, module.to_string()


def profile_options() -> Any:
    options = jax.profiler.ProfileOptions()
    # Python's tracer records every Python call: it slows the host loop it is meant to show and
    # floods the trace. Host phases are marked with TraceAnnotation instead.
    options.python_tracer_level = 0
    return options


class CallTracer:
    """Traces the training calls of a window; the trainer wraps each call in `call(...)`."""

    def __init__(self, directory: Path, window: ProfileWindow):
        self.directory, self.window = Path(directory), window
        self.running = False
        self.traced = 0
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.errors: list[str] = []

    @contextlib.contextmanager
    def call(self, index: int, first_step: int, last_step: int) -> Iterator[None]:
        """Run one training call (index counts from 0), traced when it falls in the window."""
        if index == self.window.first_call:
            self._start()
        if not self.running:
            yield
            return
        with jax.profiler.StepTraceAnnotation(CALL_ANNOTATION, step_num=index, first_step=first_step, last_step=last_step):
            yield
        self.traced += 1
        self.first_step = first_step if self.first_step is None else self.first_step
        self.last_step = last_step
        if index >= self.window.last_call:
            self._stop()

    def close(self) -> dict[str, Any]:
        """Stop a trace the run ended inside (early stop, interruption, error); the record for summary.json."""
        if self.running:
            self._stop()
        record: dict[str, Any] = {"dir": str(self.directory), "first_call": self.window.first_call,
                                  "calls": self.traced, "first_step": self.first_step, "last_step": self.last_step}
        traces = sorted(self.directory.glob("plugins/profile/*/perfetto_trace.json.gz"))
        if traces:
            record["trace"] = str(traces[-1])
        if self.traced == 0 and not self.errors:
            self.errors.append(f"the run ended before call {self.window.first_call}, the window's first")
        if self.errors:
            record["error"] = "; ".join(self.errors)
        return record

    def _start(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(str(self.directory), create_perfetto_trace=True, profiler_options=profile_options())
            self.running = True
        except Exception as error:  # e.g. another trace is running in this process: train on, untraced
            self._fail("the profiler trace could not start", error)

    def _stop(self) -> None:
        self.running = False
        try:
            jax.profiler.stop_trace()
        except Exception as error:
            self._fail("the profiler trace could not be written", error)
            return
        try:
            phases = hlo_phase_map(live_hlo_modules())
            with written_whole(self.directory / HLO_PHASES_FILE) as partial:
                partial.write_text(json.dumps(phases, indent=1, sort_keys=True) + "\n")
        except Exception as error:  # the trace is still good; the summary then attributes fewer ops
            self._fail(f"{HLO_PHASES_FILE} could not be written", error)

    def _fail(self, what: str, error: BaseException) -> None:
        message = f"{what}: {type(error).__name__}: {error}"
        log.error("%s; training goes on", message)
        self.errors.append(message)
