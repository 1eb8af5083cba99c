"""The `concurrent` schedule for on-policy algorithms (HTS-RL): act for iteration k+1 while
learning on the data of iteration k.

Two jitted programs per iteration, dispatched together:
    rollout R_{k+1} = collect(policy theta_k)        on the acting device (where EnvPool steps)
    theta_{k+1}     = update(theta_k, R_k)           on the learner device
The behaviour policy is always exactly one version behind the policy being learned, and PPO's
importance ratio is taken against that behaviour policy (its log-probabilities travel with the
rollout), which is the correction the lag needs. Both programs are pure functions of their
inputs, so a run is bit-for-bit deterministic for a seed whatever the timing.

With two or more devices (two XLA CPU devices included) the learner gets its own device and the
two programs run at the same time; `timing/overlap_s` in the metrics measures how long they did.

The programs (the agent's and the env carry's init, the rollout and the update) go through the
program store (`engine.program_store`): a second run of the same configuration loads them whole.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl_fast.engine import phases
from jaxrl_fast.engine.acting import EnvCarry, EvalPayload, eval_payload, init_env_carry, make_rollout
from jaxrl_fast.engine.placement import transfer
from jaxrl_fast.engine.program_store import ProgramStore
from jaxrl_fast.engine.run_once import jit_once
from jaxrl_fast.engine.schedules.base import (
    CallResult,
    Context,
    EvalRequests,
    ScheduleBase,
    Snapshot,
    mean_metrics,
    total_episodes,
)
from jaxrl_fast.engine.timing import PhaseClock
from jaxrl_fast.env.episodes import EpisodeStats
from jaxrl_fast.types import Rollout


class ConcurrentState(NamedTuple):
    algo: Any  # theta_k, on the learner device
    env: EnvCarry  # on the acting device
    pending: Rollout  # R_k: collected with theta_{k-1}, not yet learned from
    key: jax.Array
    iteration: int  # host counter


class OnPolicyConcurrent(ScheduleBase):
    """On-policy `concurrent`: the learner program on `placement.learner`, the rollout program on
    `placement.acting`, dispatched together every iteration."""

    def __init__(self, ctx: Context):
        self.ctx, algo, options = ctx, ctx.algo, ctx.options
        self.acting, self.learner = ctx.placement.acting, ctx.placement.learner
        self.clock = PhaseClock()
        self.requests = EvalRequests(ctx.on_eval, ctx.plan.eval_every_iterations)
        self._rollout = rollout = make_rollout(ctx.env, options, algo.act, algo.rollout_length)
        self.programs = ProgramStore.for_run(ctx.config, ctx.env, ctx.plan, ctx.placement)
        self._collect = self.programs.lazy("concurrent-collect", jax.jit(rollout, donate_argnums=0))
        self._update = self.programs.lazy("concurrent-update", jax.jit(jax.named_scope(phases.UPDATE)(algo.update)))

    def init(self, key: jax.Array, resuming: bool = False) -> ConcurrentState:
        """theta_0 and R_0 acted with it; `resuming`: zeros in R_0's place, which the checkpoint's
        pending rollout replaces (a rollout of theta_0 would leave its part-played episodes in the
        envs, and their returns in the resumed run's first finished episodes)."""
        algo, env, options = self.ctx.algo, self.ctx.env, self.ctx.options
        # every key committed to the acting device: a compiled program refuses a committed argument
        # on another device (an uncommitted one it copies, which would differ from a later call's)
        algo_key, loop_key, first_key = jax.device_put(jax.random.split(key, 3), self.acting)

        def env_init(handle: Any, first_obs: jax.Array) -> EnvCarry:
            return init_env_carry(env, options, handle, first_obs)

        algo_state = self.programs.compile("concurrent-init", jit_once(algo.init), (algo_key,))(algo_key)
        args = jax.device_put((env.handle, env.reset()), self.acting)
        env_carry = self.programs.compile("concurrent-env-init", jit_once(env_init), args)(*args)
        if resuming:
            shapes = jax.eval_shape(self._rollout, env_carry, algo_state, first_key)[1]
            rollout = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        else:
            env_carry, rollout, _ = self._collect(env_carry, algo_state, first_key)  # R_0 with theta_0
        return ConcurrentState(jax.device_put(algo_state, self.learner), env_carry,
                               jax.device_put(rollout, self.learner), loop_key, 0)

    def start(self, restored: Any | None) -> float:
        begin = time.perf_counter()
        self.state = self.init(jax.random.key(self.ctx.config.seed), resuming=restored is not None)
        if restored is not None:
            saved = restored.into(self.snapshot().state)
            env_carry = self.state.env._replace(obs_moments=saved["obs_moments"], reward_scale=saved["reward_scale"])
            self.state = self.state._replace(algo=saved["algo"], pending=saved["pending"], key=saved["key"],
                                             env=env_carry, iteration=restored.meta["schedule"]["iteration"])
        self.run(1)  # compiles both programs; counts as an iteration (plan.warm_iterations)
        return time.perf_counter() - begin

    def iterate(self, state: ConcurrentState) -> tuple[ConcurrentState, dict, EpisodeStats]:
        """One iteration: learn on R_k on the learner device while R_{k+1} is collected with theta_k."""
        key, collect_key, update_key = jax.random.split(state.key, 3)  # on the acting device
        behaviour = transfer(state.algo, self.acting)  # theta_k acts for R_{k+1}
        # The learner program is dispatched first: it returns at once and runs on its device while
        # the EnvPool program (synchronous on the CPU) steps the environments.
        dispatched = time.perf_counter()
        algo_state, metrics = self._update(state.algo, state.pending, transfer(update_key, self.learner))  # on R_k
        self.clock.watch("update", dispatched, metrics)
        env_carry, rollout, finished = self.clock.timed("env", self._collect, state.env, behaviour, collect_key)
        state = ConcurrentState(algo_state, env_carry, transfer(rollout, self.learner), key, state.iteration + 1)
        return state, metrics, finished

    def run(self, n: int) -> CallResult:
        collected, finished = [], []
        for _ in range(n):
            self.state, metrics, episodes = self.iterate(self.state)
            collected.append(metrics)
            finished.append(episodes)
            self.requests.from_host(self.state.iteration, self.eval_payload)
        metrics = mean_metrics(collected)
        metrics.update(self.clock.summary())
        return CallResult(metrics, total_episodes(finished))

    def snapshot(self) -> Snapshot:
        state = self.state
        return Snapshot({"algo": state.algo, "pending": state.pending, "key": state.key,
                         "obs_moments": state.env.obs_moments, "reward_scale": state.env.reward_scale},
                        {"iteration": state.iteration})

    def eval_payload(self) -> EvalPayload:
        return eval_payload(self.ctx.algo.policy_params(self.state.algo), self.state.env)
