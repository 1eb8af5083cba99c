"""`python -m jaxrl_fast.launch --num-processes N -- <train flags>`: one run of N processes on this
machine, joined over loopback through `jax.distributed` (XLA's gloo collectives on CPUs).

Each process is `python -m jaxrl_fast.train <train flags>` with the cluster flags added, on the
CPU with one device (a `--xla_force_host_platform_device_count` in XLA_FLAGS is dropped for them;
processes sharing one GPU would gain nothing), and its share of the envs. The launcher:

* gives every process the same `--run-dir` (a new one under runs/ when the flags name none), and
  binds the coordinator to loopback only;
* forwards SIGINT and SIGTERM to every process as SIGINT: the first asks them to stop together
  and write a final checkpoint, the second to stop at once; a third kills them;
* exits with the first failure: when a process exits with an error, or is killed, the others get
  `--distributed-timeout-s` to end by themselves (they fail in their next collective, and process
  0 writes the summary), then are killed: a live process can wait on a dead one for ever;
* kills processes still running `--distributed-timeout-s` after another one ended;
* takes its processes with it: they are killed if it is (Linux), so `--resume RUN_DIR` continues.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Sequence

from jaxrl_fast.engine.cluster import DEFAULT_TIMEOUT_S, HOST_PROCESSES_ENV

PROG = "python -m jaxrl_fast.launch"


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog=PROG, description="Train one run over N processes on this machine "
                                     "(jax.distributed over loopback). Flags after -- are python -m jaxrl_fast.train's.")
    parser.add_argument("--num-processes", type=int, required=True, help="processes to start (2 or more)")
    parser.add_argument("--port", type=int, default=0, help="the coordinator's port (0: a free one)")
    parser.add_argument("--distributed-timeout-s", type=int, default=DEFAULT_TIMEOUT_S,
                        help="joining, a silent process, and the wait for the rest after one has ended")
    known = parser.parse_args(argv[:split])
    if known.num_processes < 2:
        parser.error(f"--num-processes must be 2 or more, got {known.num_processes} (one process: python -m jaxrl_fast.train)")
    if known.distributed_timeout_s <= 0:
        parser.error(f"--distributed-timeout-s must be positive, got {known.distributed_timeout_s}")
    if known.port:  # the coordinator would fail to bind it, and process 0 die of it (a SIGSEGV in gRPC)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", known.port))
            except OSError as error:
                parser.error(f"--port {known.port} cannot be bound on 127.0.0.1 ({error.strerror}): give another, "
                             "or leave it out for a free one")
    train_flags = argv[split + 1:]
    for flag in ("--coordinator-address", "--num-processes", "--process-id", "--distributed-timeout-s"):
        if any(arg == flag or arg.startswith(flag + "=") for arg in train_flags):
            parser.error(f"{flag} is the launcher's to give; leave it out of the training flags")
    return known, train_flags


def with_run_dir(train_flags: list[str]) -> list[str]:
    """The flags with a --run-dir every process shares: the given one, or a new default."""
    if any(arg.split("=")[0] in ("--run-dir", "--resume") for arg in train_flags):
        return train_flags
    from jaxrl_fast.config.run import TrainConfig
    from jaxrl_fast.outputs.run_dir import default_run_dir

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--env", default=TrainConfig.env)
    pre.add_argument("--algo", default=TrainConfig.algo)
    pre.add_argument("--seed", type=int, default=TrainConfig.seed)
    known, _ = pre.parse_known_args(train_flags)
    return [*train_flags, "--run-dir", str(default_run_dir(known.env, known.algo, known.seed))]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def worker_environment(num_processes: int, address: str) -> dict[str, str]:
    """One CPU device per process (as on a host of its own), how many processes share the cores, and
    the coordinator bound to loopback (JAX binds it to every interface by default)."""
    env = dict(os.environ, JAX_COORDINATOR_BIND_ADDRESS=address)
    env.setdefault("JAX_PLATFORMS", "cpu")
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", env.get("XLA_FLAGS", "")).strip()
    if flags:
        env["XLA_FLAGS"] = flags
    else:
        env.pop("XLA_FLAGS", None)
    env[HOST_PROCESSES_ENV] = str(num_processes)
    return env


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the launcher dies (Linux's PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


def describe_exit(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"


class Launcher:
    def __init__(self, num_processes: int, port: int, timeout_s: int, train_flags: list[str]):
        self.num_processes, self.timeout_s = num_processes, timeout_s
        self.signals = 0
        self.children: list[subprocess.Popen] = []
        signal.signal(signal.SIGINT, self.forward)  # before the first child exists: none is missed
        signal.signal(signal.SIGTERM, self.forward)
        address = f"127.0.0.1:{port or free_port()}"
        env = worker_environment(num_processes, address)
        self.children = [
            subprocess.Popen([sys.executable, "-m", "jaxrl_fast.train", *train_flags, "--coordinator-address", address,
                              "--num-processes", str(num_processes), "--process-id", str(index),
                              "--distributed-timeout-s", str(timeout_s)],
                             env=env, start_new_session=True, preexec_fn=die_with_parent)  # signals come from here only
            for index in range(num_processes)
        ]
        for _ in range(self.signals):  # a signal that came while they were starting
            for child in self.children:
                child.send_signal(signal.SIGINT)

    def forward(self, signum: int, _frame: object) -> None:
        """The first signal asks every process to stop (they checkpoint); a second one, to stop at
        once (a training process's second SIGINT); a third kills them."""
        self.signals += 1
        for child in self.running():
            if self.signals < 3:
                child.send_signal(signal.SIGINT)
            else:
                child.kill()

    def running(self) -> list[subprocess.Popen]:
        return [child for child in self.children if child.poll() is None]

    def stop_all(self, grace_s: float) -> None:
        """The processes still running `grace_s` to end by themselves, then SIGKILL."""
        deadline = time.monotonic() + grace_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        for child in self.running():
            child.kill()
        for child in self.children:
            child.wait()

    def first_failure(self) -> tuple[int, int] | None:
        """(index, status) of the process that failed first, as far as can be told: one killed by a
        signal before one that exited with an error (a peer's death makes the others fail, often
        within the same poll), then by index."""
        failed = [(index, child.returncode) for index, child in enumerate(self.children)
                  if child.returncode not in (None, 0, 130)]
        return min(failed, key=lambda failure: (failure[1] >= 0, failure[0])) if failed else None

    def wait(self) -> int:
        """The run's status: every process's when they agree, else the first failure's."""
        first_end: float | None = None
        while self.running():
            failure = self.first_failure()
            if failure:
                index, code = failure
                print(f"launch: process {index} {describe_exit(code)}; stopping the others", file=sys.stderr, flush=True)
                self.stop_all(grace_s=self.timeout_s)
                return exit_status(code)
            if first_end is None and len(self.running()) < len(self.children):
                first_end = time.monotonic()
            if first_end is not None and time.monotonic() - first_end > self.timeout_s:
                late = [index for index, child in enumerate(self.children) if child.poll() is None]
                print(f"launch: process(es) {late} still running {self.timeout_s} s after another ended; stopping them",
                      file=sys.stderr, flush=True)
                self.stop_all(grace_s=0)
                return 1
            time.sleep(0.1)
        failure = self.first_failure()
        if failure:
            index, code = failure
            print(f"launch: process {index} {describe_exit(code)}", file=sys.stderr, flush=True)
            return exit_status(code)
        return 130 if any(child.returncode == 130 for child in self.children) else 0


def exit_status(code: int) -> int:
    """A child's status as a shell reports it: 128 + N for a child killed by signal N."""
    return code if code > 0 else 128 - code


def main(argv: Sequence[str] | None = None) -> int:
    known, train_flags = parse(sys.argv[1:] if argv is None else argv)
    return Launcher(known.num_processes, known.port, known.distributed_timeout_s, with_run_dir(train_flags)).wait()


if __name__ == "__main__":
    sys.exit(main())
