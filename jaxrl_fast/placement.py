"""Placement: the only module that decides on which device state and computation live.

Three places matter: where EnvPool's step and the behaviour policy run (`acting`, the host CPU
unless EnvPool has a GPU target), and the devices of the two learner roles, the actor (policy)
and the critic. `single` gives both roles the same devices; `split` gives them disjoint halves
of the devices, so their updates run as separate programs that overlap. A role with several
devices updates data-parallel over them (batch sharded, parameters replicated).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from jaxrl_fast import phases


class PlacementError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Placement:
    mode: str  # "single" or "split"
    acting: jax.Device
    actor: tuple[jax.Device, ...]
    critic: tuple[jax.Device, ...]

    @property
    def fused(self) -> bool:
        """Acting and both updates can share one program: everything is on the acting device."""
        return self.actor == self.critic == (self.acting,)

    def describe(self) -> dict:
        return {
            "mode": self.mode,
            "acting": describe(self.acting),
            "actor": ",".join(describe(d) for d in self.actor),
            "critic": ",".join(describe(d) for d in self.critic),
            "fused": self.fused,
        }


def describe(device: jax.Device) -> str:
    return f"{device.platform}:{device.id}"


def transfer(tree: Any, where: Any, **options: Any) -> Any:
    """`jax.device_put` of a pytree a schedule moves every iteration, marked as a transfer in
    profiler traces. It marks the host's part (issuing the copy; on CPU devices the copy itself)."""
    with jax.profiler.TraceAnnotation(phases.TRANSFER):
        return jax.device_put(tree, where, **options)


def fused_loop_device(env) -> jax.Device:
    """Where EnvPool's XLA step can run: wheels built without CUDA register it for the CPU only."""
    default = jax.devices()[0]
    if default.platform == "cpu" or getattr(env, "has_gpu_step", False):
        return default
    return jax.devices("cpu")[0]


def concurrent_acting_device(env) -> jax.Device:
    """Where the off-policy concurrent schedule acts: the host CPU whenever an accelerator exists,
    even one that can step EnvPool, so that acting and learning run on different devices and
    overlap. (Concurrent PPO acts on the fused-loop device: on one H100 it moved 12.8k steps/s
    acting on the GPU and 8.2k on the CPU, where per-iteration parameter and rollout copies cost more.)"""
    if jax.devices()[0].platform != "cpu":
        return jax.devices("cpu")[0]
    return fused_loop_device(env)


def host_acting_device() -> jax.Device:
    """Where a policy acts on observations that arrive on the host (EnvPool's async mode, one
    batch per `recv`): the CPU, which has them already; a copy to an accelerator and back per
    batch would cost more than a small policy's forward pass."""
    return jax.devices("cpu")[0]


def learner_devices() -> list[jax.Device]:
    """The devices learner roles may use: the accelerators, or else the (possibly fake) CPU devices."""
    return list(jax.devices())


def resolve_placement(requested: str, env=None, devices: list[jax.Device] | None = None) -> Placement:
    devices = learner_devices() if devices is None else devices
    acting = fused_loop_device(env) if env is not None else devices[0]
    if requested == "auto":  # fake CPU devices share the same cores: splitting them only adds copies
        requested = "split" if len(devices) >= 2 and devices[0].platform != "cpu" else "single"
    if requested == "single":
        roles = (acting,) if devices[0].platform == acting.platform else tuple(devices)
        return Placement("single", acting, roles, roles)
    if requested == "split":
        if len(devices) < 2:
            raise PlacementError(
                f"--placement split needs two or more devices, found {len(devices)} "
                f"({', '.join(describe(d) for d in devices)}); on a CPU, "
                "XLA_FLAGS=--xla_force_host_platform_device_count=2 makes two"
            )
        half = len(devices) // 2
        return Placement("split", acting, tuple(devices[:half]), tuple(devices[half:]))
    raise PlacementError(f"--placement: unknown placement {requested!r}; choose auto, single or split")
