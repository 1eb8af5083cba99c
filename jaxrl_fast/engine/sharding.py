"""Data parallelism's pieces outside the schedule: the mesh axis, the pools of this process's shards,
the sizes that must split over the shards, and global arrays built from values every process holds.

A shard is one device of the mesh `placement` gives mode `data` (every device of the acting
platform, of every process), with its own EnvPool of `--num-envs / shards` envs. The schedule that
runs the shards' program is `schedules.data_parallel`.
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_fast.config.run import TrainConfig, family
from jaxrl_fast.engine.cluster import host_processes
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.types import BatchedEnv, EnvSpec, Step

AXIS = "data"  # the mesh axis the shards are laid along

__all__ = ["AXIS", "ShardedEnv", "global_array", "is_key", "local_shards", "make_sharded_env", "shard_sizes_error",
           "shard_threads"]


class ShardedEnv(NamedTuple):
    """This process's pools, one per local shard, seen from inside the shard program as one `XlaEnv`
    of a shard's envs (`spec`, `step`); `handle()` and `reset()` give the global arrays."""

    spec: EnvSpec  # one shard's
    pools: tuple[BatchedEnv, ...]
    first_shard: int  # the mesh index of this process's first shard
    mesh: Mesh
    has_gpu_step: bool
    options: dict[str, Any]

    @property
    def program_key(self) -> str | None:
        keys = [pool.program_key for pool in self.pools]
        return None if None in keys else "+".join(keys)

    def step(self, handle: jax.Array, action: jax.Array) -> tuple[jax.Array, Step]:
        """This shard's pool steps (inside `shard_map`)."""
        if len(self.pools) == 1:
            return self.pools[0].step(handle, action)
        local = lax.axis_index(AXIS) - self.first_shard
        return lax.switch(local, [pool.step for pool in self.pools], handle, action)

    def from_local(self, local: list[np.ndarray]) -> jax.Array:
        """This process's shards' values, one per local shard, as the run's `[shards, ...]` array."""
        stacked = np.stack(local)
        return jax.make_array_from_process_local_data(NamedSharding(self.mesh, PartitionSpec(AXIS)), stacked,
                                                      (self.mesh.size, *stacked.shape[1:]))

    def handle(self) -> jax.Array:
        return self.from_local([np.asarray(pool.handle) for pool in self.pools])

    def reset(self) -> jax.Array:
        return self.from_local([pool.reset() for pool in self.pools])


def is_key(leaf: Any) -> bool:
    """A typed PRNG key array (its key data, not the key, is what crosses devices and files)."""
    return isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def local_shards(where: Any) -> int:
    """This process's shards of a data-parallel placement."""
    return sum(device.process_index == jax.process_index() for device in where.actor)


def make_sharded_env(env_id: str, num_envs: int, num_threads: int, seed: int, mesh: Mesh, **options: Any) -> ShardedEnv:
    """The pools of this process's shards of a mesh over which `num_envs` envs are split evenly:
    shard s steps envs `s E .. (s + 1) E - 1` (E = num_envs / shards), seeded `seed + s E + i` as one
    pool of all of them seeds them; `num_threads` EnvPool threads per pool."""
    devices = list(mesh.devices.flat)
    local = [index for index, device in enumerate(devices) if device.process_index == jax.process_index()]
    if local != list(range(local[0], local[0] + len(local))):
        raise ValueError(f"this process's devices are not contiguous in the mesh ({local})")
    per_shard = num_envs // len(devices)
    pools = tuple(make_xla_env(env_id, per_shard, num_threads, seed + shard * per_shard, **options) for shard in local)
    return ShardedEnv(pools[0].spec, pools, local[0], mesh, pools[0].has_gpu_step, pools[0].options)


def shard_sizes_error(config: Any, shards: int) -> str | None:
    """Why `config`'s sizes cannot be split over `shards` data-parallel shards, or None."""
    if config.num_envs % shards:
        return f"--num-envs {config.num_envs} does not split over {shards} data-parallel shards (devices of all processes)"
    hyper = getattr(config, config.algo)
    if family(config) == "on_policy":
        batch = config.num_envs // shards * hyper.num_steps
        if batch % hyper.num_minibatches:
            return (f"--{config.algo}.num-minibatches {hyper.num_minibatches} does not divide a shard's batch "
                    f"(--num-envs / {shards} shards x --{config.algo}.num-steps = {batch})")
    elif hyper.batch_size % shards:
        return f"--{config.algo}.batch-size {hyper.batch_size} does not split over {shards} data-parallel shards"
    return None


def global_array(tree: Any, sharding: NamedSharding) -> Any:
    """Values every process holds alike (numpy, or PRNG keys) as arrays of the run's mesh: each
    process places its devices' parts (`jax.device_put` places on this process's devices only)."""

    def leaf(x: Any) -> jax.Array:
        if is_key(x):
            data = global_array(np.asarray(jax.random.key_data(x)), sharding)
            wrap = functools.partial(jax.random.wrap_key_data, impl=jax.random.key_impl(x))
            return jax.jit(wrap, out_shardings=sharding)(data)
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(leaf, tree)


def shard_threads(config: TrainConfig, shards: int, local_shards: int) -> int:
    """EnvPool threads of each pool of a data-parallel run: --num-threads, or the cores this process
    may use (its CPU affinity, which SLURM sets per task) shared among its pools and the other
    processes the launcher started on this host."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return config.num_threads or max(1, min(config.num_envs // shards, cores // (local_shards * host_processes())))
