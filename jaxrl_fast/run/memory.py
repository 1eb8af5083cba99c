"""The memory a run will take, estimated before anything is allocated or compiled, and the check
that refuses a run that cannot fit.

What is counted (bytes, times `--num-seeds` where each agent has its own):

* `runtime`: the process before its arrays: Python, JAX and the compiled programs, EnvPool's pools
  (the evaluator's too). Measured per EnvPool family on a 2-core CPU, JAX 0.10.2, EnvPool 1.2.5
  (`/usr/bin/time -v python -m jaxrl_fast.train ...` with a small replay; docs/memory.md);
* `replay`: the buffer (`engine.replay.replay_nbytes`: stacked frames stored once);
* `parameters`: parameters and optimizer states, three times: the live state, the checkpoint's host
  copy and the evaluator's; traced with `jax.eval_shape` (nothing compiled) only when the rest comes
  within half of the memory available, since they are small beside it otherwise;
* `rollout`: on-policy, a rollout's observations, actions and per-step values;
* `batches`: off-policy, a sampled batch's observations (and next observations), per update;
* `checkpoint`: the chunk a checkpoint streams its large arrays through (`outputs.streamed`).

Where a run's state lives on an accelerator, `runtime` and `checkpoint` are the host's and the rest
is the device's; on the CPU all of it is the host's. The host has what the kernel reports available
(`MemAvailable`, within the cgroup's limit when there is one); a device has its limit less what is
in use. A run past either is refused (exit 2) with the estimate, its parts and the flags that shrink
it; a run past `WARN_SHARE` of either is warned about.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from jaxrl_fast.config.run import OFF_POLICY, TrainConfig, algo_config
from jaxrl_fast.types import ConfigError, EnvSpec

GiB = 2**30
WARN_SHARE = 0.8

# The process's resident set before its replay, rollout and parameters, by EnvPool family: the peak
# of a run with a replay of a few MB, rounded up (docs/memory.md has the runs).
RUNTIME_BYTES = {"classic_control": int(0.65 * GiB), "toy_text": int(0.65 * GiB), "box2d": int(0.7 * GiB),
                 "mujoco": int(0.9 * GiB), "atari": int(1.0 * GiB), "gymnax": int(0.8 * GiB), "procgen": int(2.1 * GiB),
                 "brax": int(1.9 * GiB)}
RUNTIME_DEFAULT = int(1.0 * GiB)


class MemoryCheckError(ConfigError):
    """A run that will not fit in the memory it would run in."""


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    host: dict[str, int]  # what the host's memory holds, by part
    device: dict[str, int]  # what the device's holds (empty when the run's state lives on the host)

    @property
    def total(self) -> int:
        return sum(self.host.values()) + sum(self.device.values())


def observation_bytes(spec: EnvSpec) -> int:
    return int(np.prod(spec.obs_shape)) * np.dtype(spec.obs_dtype).itemsize


def action_bytes(spec: EnvSpec) -> int:
    return 4 if spec.discrete else int(np.prod(spec.action_shape)) * 4


def parameter_bytes(config: TrainConfig, spec: EnvSpec) -> int:
    """Parameters and optimizer states of one agent, from their shapes (traced, not compiled)."""
    import jax

    from jaxrl_fast.algos import make_algorithm

    shapes = jax.eval_shape(make_algorithm(config, spec).init, jax.random.key(0))
    return sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(shapes))


def estimate(config: TrainConfig, spec: EnvSpec, family: str, on_device: bool, parameters: int | None = None,
             share: float = 1.0) -> MemoryEstimate:
    """The run's memory by part (see the module's docstring); `parameters`: one agent's bytes of
    parameters and optimizer states, left out when None; `share`: the part of the run's arrays this
    process holds (a data-parallel process holds its own shards')."""
    from jaxrl_fast.engine.replay import replay_nbytes
    from jaxrl_fast.outputs.streamed import CHUNK_BYTES

    seeds, hyper = config.num_seeds, algo_config(config)
    arrays: dict[str, int] = {}
    if config.algo in OFF_POLICY:
        arrays["replay"] = seeds * replay_nbytes(hyper.buffer_size, config.num_envs, spec.obs_shape, spec.obs_dtype,
                                                 spec.action_shape, "int32" if spec.discrete else "float32",
                                                 spec.frame_stack)
        arrays["batches"] = seeds * hyper.batch_size * (2 * observation_bytes(spec) + action_bytes(spec) + 16)
    else:
        per_step = observation_bytes(spec) + action_bytes(spec) + 6 * 4  # reward, flags, value, log-prob, advantage
        arrays["rollout"] = seeds * config.num_envs * hyper.num_steps * per_step
    if parameters is not None:
        arrays["parameters"] = 3 * seeds * parameters
    arrays = {name: int(nbytes * share) for name, nbytes in arrays.items()}
    host = {"runtime": RUNTIME_BYTES.get(family, RUNTIME_DEFAULT)}
    if config.checkpoint_interval or config.keep_checkpoints:
        host["checkpoint"] = CHUNK_BYTES
    return MemoryEstimate(host, arrays) if on_device else MemoryEstimate(host | arrays, {})


def host_available() -> int:
    """Bytes this process can still take: the kernel's `MemAvailable`, within the cgroup's limit."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except OSError:
        pass
    if available is None:
        import os

        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    try:  # a container's limit (cgroup v2)
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available


def device_available(device: Any) -> int | None:
    """An accelerator's free bytes, or None for the CPU (whose memory is the host's)."""
    stats = getattr(device, "memory_stats", lambda: None)()
    if device.platform == "cpu" or not stats or "bytes_limit" not in stats:
        return None
    return stats["bytes_limit"] - stats.get("bytes_in_use", 0)


def shrinking_flags(config: TrainConfig) -> str:
    flags = [f"--{config.algo}.buffer-size" if config.algo in OFF_POLICY else f"--num-envs or --{config.algo}.num-steps"]
    if config.num_seeds > 1:
        flags.append("--num-seeds")
    return " or ".join(flags)


def describe(parts: dict[str, int]) -> str:
    """`replay 7.10 GiB, runtime 1.00 GiB, ...`, the largest first."""
    return ", ".join(f"{name} {nbytes / GiB:.2f} GiB" for name, nbytes in sorted(parts.items(), key=lambda kv: -kv[1]))


def check_memory(config: TrainConfig, spec: EnvSpec, family: str, device: Any, share: float = 1.0) -> str | None:
    """Refuse (MemoryCheckError) a run whose estimate exceeds the memory available to it; a warning
    line for one past `WARN_SHARE` of it, else None. `device`: where the run's state lives; `share`:
    the part of the run's arrays this process holds."""
    device_free = device_available(device)
    places = {"host": ("this machine", host_available())}
    if device_free is not None:
        places["device"] = (str(device), device_free)
    run = estimate(config, spec, family, device_free is not None, share=share)
    if any(sum(getattr(run, where).values()) > free / 2 for where, (_, free) in places.items()):
        # parameters are small beside half of what is free; near it, they are traced and counted
        run = estimate(config, spec, family, device_free is not None, parameter_bytes(config, spec), share)
    warning = None
    for where, (name, free) in places.items():
        parts = getattr(run, where)
        need = sum(parts.values())
        line = (f"the run needs about {need / GiB:.2f} GiB of memory on {name} ({describe(parts)}) and {name} has "
                f"{free / GiB:.2f} GiB available")
        if need > free:
            raise MemoryCheckError(f"{line}: lower {shrinking_flags(config)}")
        if need > WARN_SHARE * free and warning is None:
            warning = f"warning: {line}, close to the limit: lower {shrinking_flags(config)} to leave room"
    return warning
