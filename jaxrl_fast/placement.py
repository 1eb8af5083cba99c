"""Placement: the only module that decides on which device state and computation live."""

from __future__ import annotations

from typing import Any

import jax


def fused_loop_device(env: Any) -> jax.Device:
    """Where the fused acting-and-learning program runs.

    EnvPool's XLA step is a host custom call; wheels built without CUDA register it for the CPU
    platform only, so with no GPU target the fused loop runs on the CPU device.
    """
    default = jax.devices()[0]
    if default.platform == "cpu" or getattr(env, "has_gpu_step", False):
        return default
    return jax.devices("cpu")[0]


def describe(device: jax.Device) -> str:
    return f"{device.platform}:{device.id}"
