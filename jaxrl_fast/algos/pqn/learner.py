"""PQN's learner: parallel Q-learning without a replay buffer or a target network (Gallici et al.
2024, "Simplifying Deep Temporal Difference Learning").

Many envs act epsilon-greedily for a short rollout; the rollout becomes Q(lambda) targets from the
current network (`ops.returns.q_lambda_returns`) and is consumed by a few epochs of minibatch
regression (`losses.q_regression_loss`), then dropped. LayerNorm in the Q-network is what keeps
this stable without a target network. It is an on-policy-shaped algorithm: it runs in the
on-policy schedules like PPO.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_fast.algos.base import rollout_sizes
from jaxrl_fast.algos.common import mean_over_shards
from jaxrl_fast.algos.pqn.config import PQNConfig
from jaxrl_fast.algos.pqn.losses import q_regression_loss
from jaxrl_fast.networks.heads import make_discrete_q_network
from jaxrl_fast.ops.exploration import epsilon_greedy, linear_epsilon
from jaxrl_fast.ops.losses import global_norm
from jaxrl_fast.ops.minibatches import minibatch_epochs
from jaxrl_fast.ops.returns import q_lambda_returns
from jaxrl_fast.types import Act, Algorithm, EnvSpec, Rollout


class PQNState(NamedTuple):
    params: Any
    opt_state: Any
    iterations: jax.Array  # int32 []: rollouts learned from (epsilon's clock, with the batch size)


class Batch(NamedTuple):
    """Flattened samples `[N, ...]` that the minibatch loop slices."""

    obs: jax.Array
    action: jax.Array
    target: jax.Array  # Q(lambda) return
    weight: jax.Array  # 1.0 for transitions, 0.0 for EnvPool's reset steps


def epsilon_at(config: PQNConfig, env_steps: jax.Array, total_steps: int) -> jax.Array:
    """Linear decay from start to end over `exploration_fraction` of the run, then constant."""
    return linear_epsilon(config.start_epsilon, config.end_epsilon, config.exploration_fraction, env_steps, total_steps)


def make_pqn(config: PQNConfig, spec: EnvSpec, total_steps: int, axis_name: str | None = None) -> Algorithm:
    q_net = make_discrete_q_network(spec, config)
    batch_size, updates = rollout_sizes("pqn", config, spec.num_envs, total_steps)
    learning_rate = optax.linear_schedule(config.learning_rate, 0.0, updates) if config.anneal_lr else config.learning_rate
    optimizer = mean_over_shards(optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.radam(learning_rate)), axis_name)

    def init(key: jax.Array) -> PQNState:
        params = q_net.init(key)
        return PQNState(params, optimizer.init(params), jnp.zeros((), jnp.int32))

    def epsilon(state: PQNState) -> jax.Array:
        # env steps as a float: an int32 count of them would wrap after 2**31 steps
        return epsilon_at(config, state.iterations.astype(jnp.float32) * batch_size, total_steps)

    def act_deterministic(params: Any, obs: jax.Array) -> jax.Array:
        return jnp.argmax(q_net.apply(params, obs), axis=-1).astype(jnp.int32)

    def act(state: PQNState, obs: jax.Array, key: jax.Array) -> Act:
        rate = epsilon(state)
        action = epsilon_greedy(spec, key, act_deterministic(state.params, obs), rate)
        # the rate travels with the rollout: under `concurrent` it was acted by the version before the learner's
        return Act(action, action, {"epsilon": jnp.broadcast_to(rate, action.shape[:1])})

    def loss_fn(params: Any, mb: Batch) -> tuple[jax.Array, jax.Array]:
        return q_regression_loss(q_net.apply(params, mb.obs), mb.action, mb.target, mb.weight)

    def minibatch_step(state: PQNState, mb: Batch) -> tuple[PQNState, dict[str, jax.Array]]:
        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, mb)
        step, opt_state = optimizer.update(grads, state.opt_state, state.params)
        metrics = {"train/q_loss": loss, "train/q_mean": q_mean, "train/grad_norm": global_norm(grads)}
        return state._replace(params=optax.apply_updates(state.params, step), opt_state=opt_state), metrics

    def targets(params: Any, rollout: Rollout) -> jax.Array:
        """`[T, B]` Q(lambda) returns from the network before this iteration's updates."""
        tr = rollout.transitions
        next_obs = jnp.concatenate([tr.obs[1:], rollout.last_obs[None]], axis=0)
        next_max_q = jnp.max(q_net.apply(params, next_obs), axis=-1)
        returns = jax.vmap(q_lambda_returns, in_axes=(1, 1, 1, 1, None, None), out_axes=1)
        return returns(tr.reward * config.reward_scale, next_max_q, tr.terminated, tr.truncated, config.gamma,
                       config.q_lambda)

    def update(state: PQNState, rollout: Rollout, key: jax.Array) -> tuple[PQNState, dict[str, jax.Array]]:
        tr = rollout.transitions
        flat = lambda x: x.reshape((batch_size, *x.shape[2:]))  # noqa: E731
        batch = Batch(flat(tr.obs), flat(tr.action), flat(targets(state.params, rollout)),
                      flat(tr.valid.astype(jnp.float32)))

        state, metrics = minibatch_epochs(minibatch_step, state, batch, key, config.update_epochs, config.num_minibatches)
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics["train/epsilon"] = tr.extras["epsilon"][0, 0]  # the rate the rollout was acted with (one per rollout)
        return state._replace(iterations=state.iterations + 1), metrics

    return Algorithm(
        init=init,
        act=act,
        policy_params=lambda state: state.params,
        act_deterministic=act_deterministic,
        update=update,
        rollout_length=config.num_steps,
    )
