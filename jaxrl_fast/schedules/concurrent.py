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
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import jax

from jaxrl_fast import phases
from jaxrl_fast.data import Algorithm, Rollout
from jaxrl_fast.env import XlaEnv, add_stats
from jaxrl_fast.placement import transfer
from jaxrl_fast.schedules.acting import EnvCarry, EnvOptions, EvalPayload, init_env_carry, make_collect, observe
from jaxrl_fast.schedules.offpolicy import mean_metrics
from jaxrl_fast.schedules.timing import PhaseClock


class ConcurrentState(NamedTuple):
    algo: Any  # theta_k, on the learner device
    env: EnvCarry  # on the acting device
    pending: Rollout  # R_k: collected with theta_{k-1}, not yet learned from
    key: jax.Array
    iteration: int  # host counter


def learner_device(acting: jax.Device) -> jax.Device:
    """A device of its own for the learner when there is one, else the acting device."""
    others = [d for d in jax.devices() if d != acting]
    return others[-1] if others else acting


class ConcurrentLoop:
    def __init__(self, algo: Algorithm, env: XlaEnv, options: EnvOptions, acting: jax.Device, clock: PhaseClock | None,
                 on_eval=None, eval_every_iterations: int = 0):
        self.algo, self.env, self.options = algo, env, options
        self.acting, self.learner = acting, learner_device(acting)
        self.clock, self.on_eval, self.eval_every = clock, on_eval, eval_every_iterations
        collect = make_collect(env, options, algo.rollout_length)

        def collect_program(env_carry: EnvCarry, algo_state: Any, key: jax.Array):
            env_carry, transitions, finished = collect(env_carry, lambda obs, k: algo.act(algo_state, obs, k), key)
            return env_carry, Rollout(transitions, observe(options, env_carry.obs_moments, env_carry.obs)), finished

        self._collect = jax.jit(collect_program, donate_argnums=0)
        self._update = jax.jit(jax.named_scope(phases.UPDATE)(algo.update))
        self.steps_per_iteration = env.spec.num_envs * algo.rollout_length

    def init(self, key: jax.Array, handle: Any, first_obs: Any) -> ConcurrentState:
        algo_key, loop_key, first_key = jax.random.split(key, 3)
        with jax.default_device(self.acting):
            algo_state = jax.jit(self.algo.init)(algo_key)
            env_carry = jax.jit(lambda h, o: init_env_carry(self.env, self.options, h, o))(handle, first_obs)
        env_carry, rollout, _ = self._collect(env_carry, algo_state, first_key)  # R_0 with theta_0
        return ConcurrentState(jax.device_put(algo_state, self.learner), env_carry,
                               jax.device_put(rollout, self.learner), loop_key, 0)

    def run(self, state: ConcurrentState, n: int):
        collected, total = [], None
        for _ in range(n):
            key, collect_key, update_key = jax.random.split(state.key, 3)
            behaviour = transfer(state.algo, self.acting)  # theta_k acts for R_{k+1}
            # The learner program is dispatched first: it returns at once and runs on its device while
            # the EnvPool program (synchronous on the CPU) steps the environments.
            dispatched = time.perf_counter()
            algo_state, metrics = self._update(state.algo, state.pending, update_key)  # learns on R_k
            if self.clock is not None:
                self.clock.watch("update", dispatched, metrics)
            start = time.perf_counter()
            env_carry, rollout, finished = self._collect(state.env, behaviour, collect_key)
            if self.clock is not None:
                jax.block_until_ready(rollout)
                self.clock.interval("env", start, time.perf_counter())
            state = ConcurrentState(algo_state, env_carry, transfer(rollout, self.learner), key, state.iteration + 1)
            collected.append(metrics)
            total = finished if total is None else add_stats(total, finished)
            if self.on_eval is not None and self.eval_every and state.iteration % self.eval_every == 0:
                self.on_eval(self.eval_payload(state), state.iteration)
        metrics = mean_metrics(collected)
        if self.clock is not None:
            metrics.update(self.clock.summary())
        return state, metrics, jax.device_get(total)

    def eval_payload(self, state: ConcurrentState) -> EvalPayload:
        return jax.device_get(EvalPayload(self.algo.policy_params(state.algo), state.env.obs_moments))
