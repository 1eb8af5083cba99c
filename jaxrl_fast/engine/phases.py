"""The names a profiler trace is read by: one place, shared by the code that marks phases and the
code that summarises a trace (`profiling/summarize_trace.py`). No JAX here, so the summariser
stays light.

* Inside jitted programs, `jax.named_scope(ENV)`, `(INFERENCE)`, `(UPDATE)` put the phase into
  each HLO instruction's `op_name` metadata (`jit(run)/while/body/env/ffi_call`). XLA's CPU trace
  events do not carry that metadata (only `hlo_module` and `hlo_op`), so `--profile` writes the
  instruction-to-phase map of every live program beside the trace (`HLO_PHASES_FILE`).
* On the host, `jax.profiler.TraceAnnotation(TRANSFER)` and `(WAIT)` mark copies between devices
  and waits for another thread; `CALL_ANNOTATION` marks each traced training call.
"""

from __future__ import annotations

ENV = "env"  # EnvPool's send/recv and the episode bookkeeping around them
INFERENCE = "inference"  # the policy's forward pass while acting
UPDATE = "update"  # learner: sampling, losses, gradients, optimizer
TRANSFER = "transfer"  # host: device_put between devices
WAIT = "wait"  # host: a thread waiting for another (queues, an async actor waiting for its version)
PHASES = (ENV, INFERENCE, UPDATE, TRANSFER, WAIT)
SCOPED_PHASES = (ENV, INFERENCE, UPDATE)  # named scopes inside jitted code

CALL_ANNOTATION = "train_call"  # one `driver.run(n)` of the training loop (a log interval)
HLO_PHASES_FILE = "hlo_phases.json"  # {hlo_module: {hlo_op: phase}}, written beside the trace


def phase_of_op_name(op_name: str) -> str | None:
    """The outermost phase named by a component of an HLO `op_name` path, or None.

    `jit(run)/while/body/closed_call/env/ffi_call` -> "env". The outermost wins: a forward pass
    inside the learner's update is update work. Autodiff wraps the names of the scopes it
    differentiates (`jvp(update)`, `transpose(jvp(update))`), so a component counts when it is a
    phase inside such wrappers; `jit(update)` is a program's name, not a scope.
    """
    for component in op_name.split("/"):
        name = component
        while name.endswith(")") and "(" in name:  # jvp(update) -> update; jit(update) is a program
            head, name = name.split("(", 1)
            if head in ("jit", "pjit"):
                break
            name = name[:-1]
        else:
            if name in SCOPED_PHASES:
                return name
    return None
