"""Placement: the only module that decides on which device state and computation live.

`resolve(config, env_steps_on_gpu)` computes one `Placement` per run, from the config and the
devices (`jax.devices()`, and `jax.local_devices()` for this process's own), and everything that places work (the schedules, calibration, the memory check)
reads it:

* `acting`: where EnvPool's XLA step and the behaviour policy run: the host CPU unless EnvPool
  has a GPU target; the off-policy `concurrent` schedule acts on the CPU beside an accelerator,
  so that acting and learning overlap on different devices;
* `actor` and `critic`: the devices of the two learner roles. `single` gives both the same
  devices; `split` gives them disjoint halves, so their updates run as separate programs that
  overlap. A role with several devices updates data-parallel over them (batch sharded,
  parameters replicated); the replay buffer lives with the critic;
* `learner`: where a learner that runs beside acting updates (on-policy `concurrent`: a device
  of its own when there is one; off-policy: the critic's first device);
* `host`: where a policy acts on observations that arrive on the host (EnvPool's async mode,
  one batch per `recv`): the CPU, which has them already.

`--data-parallel` (and every run of several processes, `jaxrl_fast.engine.cluster`) is the mode `data`:
`actor` and `critic` are then every acting-platform device of every process, the mesh the `sync`
program is replicated over (`schedules.data_parallel`), and `acting` is this process's first.
Devices this process chooses for itself come from `jax.local_devices()`: `jax.devices()` lists
every process's, and an array put on another process's device fails only when it is read.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_fast.engine import phases
from jaxrl_fast.types import ConfigError


class PlacementError(ConfigError):
    pass


@dataclasses.dataclass(frozen=True)
class Placement:
    mode: str  # "single", "split" or "data"
    acting: jax.Device
    actor: tuple[jax.Device, ...]
    critic: tuple[jax.Device, ...]
    learner: jax.Device
    host: jax.Device

    @property
    def fused(self) -> bool:
        """Acting and both updates can share one program: everything is on the acting device."""
        return self.actor == self.critic == (self.acting,)

    def replicated(self, role: str) -> NamedSharding:
        """A role's parameters: one copy on each of its devices."""
        return NamedSharding(self._mesh(role), PartitionSpec())

    def data_parallel(self, role: str) -> NamedSharding:
        """A role's batches: split over its devices along the leading axis."""
        return NamedSharding(self._mesh(role), PartitionSpec("data"))

    def _mesh(self, role: str) -> Mesh:
        return Mesh(np.asarray(getattr(self, role)), ("data",))

    def mesh(self) -> Mesh:
        """Mode `data`'s mesh: every shard's device along the axis `data`."""
        return self._mesh("actor")

    @property
    def shards(self) -> int:
        """Data-parallel shards: the devices of the mesh mode `data` runs over (1 otherwise)."""
        return len(self.actor) if self.mode == "data" else 1

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "acting": describe(self.acting),
            "actor": ",".join(describe(d) for d in self.actor),
            "critic": ",".join(describe(d) for d in self.critic),
            "learner": describe(self.learner),
            "fused": self.fused,
        }


def describe(device: jax.Device) -> str:
    return f"{device.platform}:{device.id}"


def describe_devices(kinds: bool = False) -> list[str]:
    """Every device the run sees (of all its processes), for the run's metadata; with `kinds`, each
    one's model too (`cpu:0:cpu`, `gpu:0:NVIDIA H100 80GB HBM3`)."""
    return [f"{describe(d)}:{d.device_kind}" if kinds else describe(d) for d in jax.devices()]


def transfer(tree: Any, where: Any, **options: Any) -> Any:
    """`jax.device_put` of a pytree a schedule moves every iteration, marked as a transfer in
    profiler traces. It marks the host's part (issuing the copy; on CPU devices the copy itself)."""
    with jax.profiler.TraceAnnotation(phases.TRANSFER):
        return jax.device_put(tree, where, **options)


def host_device() -> jax.Device:
    return jax.local_devices(backend="cpu")[0]


def fused_loop_device(env_steps_on_gpu: bool = False) -> jax.Device:
    """Where EnvPool's XLA step can run: wheels built without CUDA register it for the CPU only."""
    default = jax.local_devices()[0]
    return default if default.platform == "cpu" or env_steps_on_gpu else host_device()


def resolve(config: Any, env_steps_on_gpu: bool = False, devices: list[jax.Device] | None = None) -> Placement:
    """The run's placement (`config` is a `TrainConfig`; `env_steps_on_gpu`: EnvPool's XLA step
    has a GPU target). Raises `PlacementError` for a placement these devices cannot give."""
    from jaxrl_fast.config.run import family

    devices = list(jax.devices()) if devices is None else devices
    acting = fused_loop_device(env_steps_on_gpu)
    if is_data_parallel(config):
        return data_placement(acting)
    if family(config) == "on_policy":
        learner = acting
        if config.schedule == "concurrent":  # a device of its own for the learner when there is one
            others = [d for d in devices if d != acting]
            learner = others[-1] if others else acting
        return Placement("single", acting, (acting,), (acting,), learner, host_device())
    if config.num_seeds > 1:  # every agent in the one fused program on the acting device
        return Placement("single", acting, (acting,), (acting,), acting, host_device())
    requested = "single" if config.schedule == "async" and config.placement == "auto" else config.placement
    roles = resolve_roles(requested, acting, devices)
    if config.schedule == "concurrent" and devices[0].platform != "cpu":
        roles = dataclasses.replace(roles, acting=host_device())  # acting beside the accelerator, overlapping
    return roles


def is_data_parallel(config: Any) -> bool:
    """`--data-parallel`, or a run of several processes (which is data-parallel or nothing)."""
    return config.data_parallel or jax.process_count() > 1


def data_placement(acting: jax.Device) -> Placement:
    """Mode `data`: every device of the acting platform, of every process, holds a shard."""
    mesh = tuple(jax.devices(acting.platform))
    return Placement("data", acting, mesh, mesh, acting, host_device())


def resolve_roles(requested: str, acting: jax.Device, devices: list[jax.Device]) -> Placement:
    """The off-policy roles' devices for `--placement` auto, single or split."""
    if requested == "auto":  # fake CPU devices share the same cores: splitting them only adds copies
        requested = "split" if len(devices) >= 2 and devices[0].platform != "cpu" else "single"
    if requested == "single":
        roles = (acting,) if devices[0].platform == acting.platform else tuple(devices)
        return Placement("single", acting, roles, roles, roles[0], host_device())
    if requested == "split":
        if len(devices) < 2:
            raise PlacementError(
                f"--placement split needs two or more devices, found {len(devices)} "
                f"({', '.join(describe(d) for d in devices)}); on a CPU, "
                "XLA_FLAGS=--xla_force_host_platform_device_count=2 makes two"
            )
        half = len(devices) // 2
        return Placement("split", acting, tuple(devices[:half]), tuple(devices[half:]), devices[half], host_device())
    raise PlacementError(f"--placement: unknown placement {requested!r}; choose auto, single or split")


def resolve_placement(requested: str, env: Any = None, devices: list[jax.Device] | None = None) -> Placement:
    """`resolve_roles` for a bare `--placement` value (tests and benchmarks that place roles by hand)."""
    devices = list(jax.devices()) if devices is None else devices
    acting = fused_loop_device(getattr(env, "has_gpu_step", False)) if env is not None else devices[0]
    return resolve_roles(requested, acting, devices)
