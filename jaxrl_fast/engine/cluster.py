"""The processes of a run: `jax.distributed`, started before anything touches a backend.

A run is one process, or N processes (one per host under SLURM or by hand, or N on one host
through `python -m jaxrl_fast.launch`) that train one data-parallel program over the devices of
all of them (`schedules.data_parallel`). Process 0 owns the run directory; every process runs the
same training calls, checkpoints and stops in the same order, since each is a collective.

Faults: XLA's CPU collectives (gloo) and the coordination service have no timeout a program can
catch everywhere, so a process that fails must leave at once (`os._exit`, skipping the shutdown
barrier that would hold its peers for `--distributed-timeout-s`). Its peers then fail in their
next collective, or are stopped by the coordination service within the heartbeat timeout; the
launcher (or SLURM's `--kill-on-bad-exit`) stops whatever is left.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, NoReturn, Sequence

from jaxrl_fast.types import ConfigError

DEFAULT_TIMEOUT_S = 60
HOST_PROCESSES_ENV = "JAXRL_FAST_HOST_PROCESSES"  # processes on this host, set by the launcher (EnvPool threads)


class ClusterError(ConfigError):
    pass


@dataclasses.dataclass(frozen=True)
class Cluster:
    """How this process joins its run: alone (`num_processes` 1), by explicit flags or JAX_*
    variables, or by what JAX's cluster detection reads (a SLURM job step, Open MPI: `auto`)."""

    num_processes: int = 1
    process_id: int = 0
    coordinator: str | None = None
    timeout_s: int = DEFAULT_TIMEOUT_S
    auto: bool = False

    @property
    def distributed(self) -> bool:
        return self.num_processes > 1 or self.auto


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator-address", help="host:port of process 0 (jax.distributed)")
    parser.add_argument("--num-processes", type=int, help="processes of the run (all hosts)")
    parser.add_argument("--process-id", type=int, help="this process's index, 0 .. num_processes - 1")
    parser.add_argument("--distributed-timeout-s", type=int, default=DEFAULT_TIMEOUT_S,
                        help="seconds to join the run, and after which a silent process counts as lost")


def split_flags(argv: Sequence[str]) -> tuple[Cluster, list[str]]:
    """The cluster flags of a command line (`add_flags`), and the rest of it, which is the run's.
    Without them: `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`, or a SLURM
    job step (`srun`) or an Open MPI job of several tasks, detected by JAX."""
    parser = argparse.ArgumentParser(add_help=False)
    add_flags(parser)
    known, rest = parser.parse_known_args(list(argv))
    return cluster_of(known, os.environ), rest


def cluster_of(known: argparse.Namespace, environ: Any) -> Cluster:
    explicit = (known.coordinator_address, known.num_processes, known.process_id)
    if all(value is None for value in explicit) and "JAX_COORDINATOR_ADDRESS" in environ:
        try:
            explicit = (environ["JAX_COORDINATOR_ADDRESS"], int(environ["JAX_NUM_PROCESSES"]), int(environ["JAX_PROCESS_ID"]))
        except (KeyError, ValueError):
            raise ClusterError("JAX_COORDINATOR_ADDRESS needs JAX_NUM_PROCESSES and JAX_PROCESS_ID (whole numbers) "
                               "beside it") from None
        known = argparse.Namespace(**vars(known))
        known.coordinator_address, known.num_processes, known.process_id = explicit
    if known.distributed_timeout_s <= 0:
        raise ClusterError(f"--distributed-timeout-s must be positive, got {known.distributed_timeout_s}")
    if any(value is not None for value in explicit):
        if None in explicit:
            raise ClusterError("--coordinator-address, --num-processes and --process-id go together "
                               "(or none of them: SLURM and JAX_COORDINATOR_ADDRESS are detected)")
        if known.num_processes < 1 or not 0 <= known.process_id < known.num_processes:
            raise ClusterError(f"--process-id must be in 0 .. {known.num_processes - 1} and --num-processes at "
                               f"least 1; got {known.process_id} of {known.num_processes}")
        if ":" not in known.coordinator_address:
            raise ClusterError(f"--coordinator-address must be host:port, got {known.coordinator_address!r}")
        return Cluster(known.num_processes, known.process_id, known.coordinator_address, known.distributed_timeout_s)
    # a job step's task count (`srun`): SLURM_NTASKS is also set in a batch script's own shell;
    # Open MPI as JAX detects it (the variable Open MPI 4 sets; Open MPI 5 has none JAX reads)
    slurm = int(environ.get("SLURM_STEP_NUM_TASKS", "1")) > 1
    ompi = int(environ.get("OMPI_COMM_WORLD_SIZE", "1")) > 1 and "OMPI_MCA_orte_hnp_uri" in environ
    return Cluster(timeout_s=known.distributed_timeout_s, auto=slurm or ompi)


_INDEX: int | None = None  # this process's index, once it has joined (read without touching JAX again)


def initialize(cluster: Cluster) -> None:
    """Join the run's processes (nothing to do alone). Must come before anything touches a JAX
    backend: JAX would otherwise start as a single process without a word (jax#12258)."""
    global _INDEX
    if not cluster.distributed:
        return
    import jax

    timeouts = dict(initialization_timeout=cluster.timeout_s, heartbeat_timeout_seconds=cluster.timeout_s,
                    shutdown_timeout_seconds=cluster.timeout_s)
    if cluster.auto:
        jax.distributed.initialize(**timeouts)
    else:
        jax.distributed.initialize(cluster.coordinator, cluster.num_processes, cluster.process_id,
                                   cluster_detection_method="deactivate", **timeouts)
    _INDEX = jax.process_index()


def process_index() -> int:
    import jax

    return jax.process_index()


def name(cluster: Cluster) -> str:
    """`process I` for messages: the index it joined with, or the one it was given."""
    return f"process {_INDEX if _INDEX is not None else cluster.process_id}"


def is_primary() -> bool:
    """Process 0: the one that writes the run directory and evaluates."""
    return process_index() == 0


def describe(cluster: Cluster) -> dict[str, Any]:
    """config.json's `distributed` record."""
    import jax

    from jaxrl_fast.engine.placement import describe_devices

    return {"num_processes": jax.process_count(), "coordinator": cluster.coordinator or "detected",
            "devices": describe_devices()}


def from_primary(value: int) -> int:
    """Process 0's `value` in every process (a collective): a choice they must all make alike, from
    files each reads on its own host (a stale directory listing on one would part them)."""
    import jax
    import numpy as np

    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.int64(value)))


def any_process(*flags: bool) -> tuple[bool, ...]:
    """Each flag, true if it is true in any process (a collective: all processes call it in step)."""
    import jax
    import numpy as np

    if jax.process_count() == 1:
        return flags
    from jax.experimental import multihost_utils

    gathered = multihost_utils.process_allgather(np.asarray(flags, np.int32))
    return tuple(bool(value) for value in np.asarray(gathered).reshape(-1, len(flags)).max(axis=0))


def differing(values: dict[str, Any]) -> list[str]:
    """The names whose values are not the same in every process (a collective: all processes call
    it in step, with the same names): each value's digest is gathered, not the value."""
    import hashlib
    import json

    import jax
    import numpy as np

    if jax.process_count() == 1:
        return []
    from jax.experimental import multihost_utils

    names = sorted(values)
    digests = np.asarray([int.from_bytes(hashlib.sha256(json.dumps(values[n], sort_keys=True, default=str).encode())
                                         .digest()[:4], "little") for n in names], np.int64)
    gathered = np.asarray(multihost_utils.process_allgather(digests)).reshape(-1, len(names))
    return [n for n, column in zip(names, gathered.T) if len(set(column.tolist())) > 1]


def host_processes() -> int:
    """Processes sharing this host's cores (the launcher says; 1 otherwise)."""
    return max(1, int(os.environ.get(HOST_PROCESSES_ENV, "1")))


PEER_LOST = ("Gloo", "Connection closed by peer", "heartbeat", "DEADLINE_EXCEEDED", "UNAVAILABLE")


def failure_text(error: BaseException) -> str:
    """One line for an error that ends a process of a distributed run."""
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    if any(marker in text for marker in PEER_LOST):
        return f"another process of the run stopped or became unreachable ({text[:200]})"
    return text


def leave(code: int, message: str | None = None) -> NoReturn:
    """End this process of a distributed run now: print `message`, flush, and `os._exit`, skipping
    the atexit shutdown barrier, which would hold every peer for the timeout."""
    if message:
        print(message, file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


AGREED_ENDS = (0, 2, 130)  # done, refused (agreed after joining), stopped by a signal (at one call)


def finish(code: int) -> NoReturn:
    """The end of a distributed run in every process. After an end every process reaches alike
    (`AGREED_ENDS`), wait for all (process 0 evaluates and writes the summary after the last call,
    which may take longer than the shutdown timeout), shut down together, and leave. After an
    error, leave at once: the others may be waiting in a collective this process will never join,
    and its going makes theirs fail now rather than never."""
    if code in AGREED_ENDS:
        try:
            any_process(code != 0)
            import jax

            jax.distributed.shutdown()
        except Exception as failure:  # noqa: BLE001  a peer that is gone: this process's status stands
            print(f"warning: {failure_text(failure)}", file=sys.stderr)
    leave(code)
