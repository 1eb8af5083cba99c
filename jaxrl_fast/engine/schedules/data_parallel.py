"""Data parallelism: the `sync` program of one shard, run on every device of a mesh that may span
processes and hosts (`jax.distributed`, `jaxrl_fast.engine.cluster`).

A shard is one device with its own EnvPool (its slice of `--num-envs`, seeded as the one-pool run
seeds those envs), its own rollout or replay buffer, and a copy of the parameters. One
`shard_map` over the mesh axis `data` runs the fused loop of `sync.make_sync_loop` or
`offpolicy.fused_loop` built for a shard: gradients are averaged over the shards before every
optimizer step (`algos.base.shard_mean`), observation and reward statistics are reduced over
them (`EnvOptions.axis_name`), and a call returns the shards' mean metrics and summed episode
statistics. So the copies of the parameters stay equal, and the whole run is one program whatever
the processes: 2 processes of 1 device run exactly the program 1 process of 2 devices runs.

Every leaf of the run state carries a leading shard axis, sharded over `data` (the parameters'
copies are equal along it). A shard sees its own slice, squeezed. A checkpoint holds one copy of
what the shards share and every shard's part of what they do not (`SHARD_FIELDS`). In one process with several
devices, each shard steps its own pool through `lax.switch` on its index: EnvPool's XLA call
names its pool in the compiled program, so one call cannot step different pools on different
devices.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from jaxrl_fast.config.plan import run_off_policy_plan
from jaxrl_fast.config.run import family
from jaxrl_fast.engine.acting import EvalPayload
from jaxrl_fast.engine.offpolicy_steps import checkpointed_fields, resumed_fields
from jaxrl_fast.engine.run_once import jit_once
from jaxrl_fast.engine.schedules.base import CallResult, Context, EvalRequests, ScheduleBase, Snapshot
from jaxrl_fast.engine.schedules.offpolicy import fused_loop
from jaxrl_fast.engine.schedules.sync import checkpointed, make_sync_loop, with_checkpointed
from jaxrl_fast.engine.sharding import AXIS, global_array, is_key

__all__ = ["DataParallelSync"]


SHARD_FIELDS = ("replay", "reward_scale")  # what differs between shards: their buffers, their envs' returns


def first_copy(tree: Any) -> Any:
    """This process's first shard's copy of state the shards share, without the shard axis."""
    return jax.tree.map(lambda x: x.addressable_data(0)[0], tree)


def copies(tree: Any, shards: int) -> Any:
    """One copy per shard of a restored value the shards share (numpy, or a PRNG key)."""

    def leaf(x: Any) -> Any:
        if is_key(x):
            data = np.asarray(jax.random.key_data(x))
            return jax.random.wrap_key_data(np.broadcast_to(data, (shards, *data.shape)), impl=jax.random.key_impl(x))
        return np.broadcast_to(np.asarray(x), (shards, *np.shape(x)))

    return jax.tree.map(leaf, tree)


def own(tree: Any) -> Any:
    """A shard's slice of the state, without the shard axis."""
    return jax.tree.map(lambda x: x[0], tree)


def stacked(tree: Any) -> Any:
    """A shard's state with the shard axis put back."""
    return jax.tree.map(lambda x: x[None], tree)


class ShardProgram(NamedTuple):
    """The shard loop's functions as jitted programs over the mesh (global arrays in and out)."""

    init: Callable  # (seed, handle [S, ...], first obs [S, E, ...]) -> state [S, ...]
    warmup: Callable | None  # off-policy: state -> (state, episode statistics)
    run: Callable  # (state, iterations) -> (state, *what the loop's call returns)


class DataParallelSync(ScheduleBase):
    """The `sync` schedule over the mesh mode `data` places: PPO and PQN's fused loop, or the
    off-policy family's, one shard per device."""

    def __init__(self, ctx: Context):
        self.ctx, config, placement = ctx, ctx.config, ctx.placement
        if config.schedule != "sync" or config.num_seeds != 1:
            raise ValueError("data parallelism (--data-parallel, or several processes) runs the sync schedule "
                             f"with one seed; got --schedule {config.schedule}, --num-seeds {config.num_seeds}")
        self.mesh = placement.mesh()
        self.sharded = NamedSharding(self.mesh, PartitionSpec(AXIS))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.on_policy = family(config) == "on_policy"
        options = ctx.options._replace(axis_name=AXIS)
        plan = ctx.plan
        if self.on_policy:
            loop = make_sync_loop(ctx.algo, ctx.env, options, plan.iterations_per_call, plan.eval_every_iterations,
                                  ctx.on_eval, axis_name=AXIS)
            self.program = self.shard_program(loop.init, None, loop.run, 1)
        else:
            shard_plan = run_off_policy_plan(config)
            shard_plan = shard_plan._replace(batch_size=shard_plan.batch_size // placement.shards)
            requests = EvalRequests(ctx.on_eval, plan.eval_every_iterations, AXIS)
            loop = fused_loop(ctx.algo, ctx.env, options, shard_plan, placement, plan.iterations_per_call, requests,
                              axis_name=AXIS)
            self.fields = checkpointed_fields(config)
            self.program = self.shard_program(loop.init, loop.warmup, loop.run, 2)
        self.loop = loop

    def shard_program(self, init: Callable, warmup: Callable | None, run: Callable, run_outputs: int) -> ShardProgram:
        """`shard_map`s of the shard loop's functions: state in and out with the shard axis, keys and
        counts replicated, what a call reduces over the shards replicated."""
        over = lambda f, ins, outs: jax.shard_map(f, mesh=self.mesh, in_specs=ins, out_specs=outs,  # noqa: E731
                                                  check_vma=False)
        shard, same = PartitionSpec(AXIS), PartitionSpec()

        def init_shard(seed, handle, obs):
            return stacked(init(jax.random.key(seed), own(handle), own(obs)))

        def warmup_shard(state):
            state, stats = warmup(own(state))
            return stacked(state), stats

        def run_shard(state, n):
            state, *reduced = run(own(state), n)
            return (stacked(state), *reduced)

        return ShardProgram(
            init=jit_once(over(init_shard, (same, shard, shard), shard)),
            warmup=jax.jit(over(warmup_shard, (shard,), (shard, same)), donate_argnums=0) if warmup else None,
            run=jax.jit(over(run_shard, (shard, same), (shard, *(same,) * run_outputs)), donate_argnums=0),
        )

    def start(self, restored: Any | None) -> float:
        config, env = self.ctx.config, self.ctx.env
        begin = time.perf_counter()
        self.state = self.program.init(global_array(np.int32(config.seed), self.replicated), env.handle(), env.reset())
        if restored is not None:
            saved = self.restored_state(restored)
            self.state = with_checkpointed(self.state, saved) if self.on_policy else self.state._replace(**saved)
        if not self.on_policy and (restored is None or not config.checkpoint_replay):
            self.state, _ = self.program.warmup(self.state)  # an empty buffer: random actions fill it
        self.state, *_ = self.program.run(self.state, self.count(0))  # compiles the training program
        jax.block_until_ready(self.state)
        return time.perf_counter() - begin

    def restored_state(self, restored: Any) -> dict[str, Any]:
        """A checkpoint's fields as the state's global arrays, with the shard axis."""
        # arrays spread over processes are shape templates only: a checkpoint's values are numpy
        template = jax.tree.map(lambda x: x if x.is_fully_addressable else np.zeros(x.shape, x.dtype), self.snapshot().state)
        values = restored.into(template)
        if not self.on_policy:
            values = resumed_fields(values, stacked=True)
        return {name: global_array(value if name in SHARD_FIELDS else copies(value, self.mesh.size), self.sharded)
                for name, value in values.items()}

    def count(self, n: int) -> jax.Array:
        return global_array(np.int32(n), self.replicated)

    def run(self, n: int) -> CallResult:
        if self.on_policy:
            self.state, metrics = self.program.run(self.state, self.count(n))
            metrics, episodes = metrics.train, metrics.episodes
        else:
            self.state, metrics, episodes = self.program.run(self.state, self.count(n))
        return CallResult(*jax.device_get((metrics, episodes)))

    def snapshot(self) -> Snapshot:
        """One copy of what the shards share; `SHARD_FIELDS` with the shard axis, as arrays that may
        span processes (`checkpoint.host_copy` gathers them when a checkpoint is written)."""
        fields = (checkpointed(self.state) if self.on_policy else
                  {name: getattr(self.state, name) for name in self.fields})
        return Snapshot({name: value if name in SHARD_FIELDS else first_copy(value) for name, value in fields.items()},
                        {"shards": self.mesh.size})

    def eval_payload(self) -> EvalPayload:
        """The first local shard's policy (every shard's copy is the same), on the host."""
        state = self.state
        policy = self.ctx.algo.policy_params(state.algo) if self.on_policy else self.loop.acting_params(state)
        return jax.device_get(EvalPayload(first_copy(policy), first_copy(state.env.obs_moments)))

    def describe(self) -> dict[str, Any]:
        return self.ctx.placement.describe() | {"shards": self.mesh.size, "processes": jax.process_count()}
