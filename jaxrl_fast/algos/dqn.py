"""DQN with double-DQN targets, a hard-copied target network and a linear epsilon schedule.

DQN has no separate policy network: the critic role holds the online and target Q-networks and
the behaviour policy is epsilon-greedy in the online Q (`acting_params`). The actor role is empty.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_fast.algos.base import AlgorithmSpec, ReplayConfig, mean_over_shards, random_act, validate_replay
from jaxrl_fast.types import Act, OffPolicyAlgorithm
from jaxrl_fast.types import EnvSpec
from jaxrl_fast.networks.heads import make_discrete_q_network
from jaxrl_fast.ops.exploration import epsilon_errors, epsilon_greedy, linear_epsilon
from jaxrl_fast.ops.losses import weighted_mean
from jaxrl_fast.types import Batch


@dataclasses.dataclass(frozen=True)
class DQNConfig(ReplayConfig):
    """DQN (Mnih et al. 2015) with double-DQN targets (van Hasselt et al. 2016)."""

    hidden_sizes: tuple[int, ...] = (120, 84)
    """Hidden layer widths of the Q-network."""
    buffer_size: int = 100_000
    """Replay capacity in transitions."""
    batch_size: int = 128
    """Transitions per gradient update."""
    learning_starts: int = 1_000
    """Environment steps of uniform random actions before the first update."""
    utd_ratio: float = 0.25
    """Gradient updates per environment step (fractions allowed: 0.25 is one update per 4 steps)."""
    learning_rate: float = 2.5e-4
    """Adam step size."""
    target_update_interval: int = 500
    """Gradient updates between hard target-network copies."""
    start_epsilon: float = 1.0
    """Exploration rate at the start."""
    end_epsilon: float = 0.05
    """Exploration rate after the decay."""
    exploration_fraction: float = 0.5
    """Fraction of the run over which epsilon decays linearly."""
    max_grad_norm: float = 10.0
    """Gradient-norm clipping."""


METRICS = ("train/q_loss", "train/q_mean", "train/actor_updates")


def validate(config: DQNConfig, train: Any) -> list[str]:
    checks = [
        (config.learning_rate > 0, f"--dqn.learning-rate must be positive, got {config.learning_rate}"),
        (config.target_update_interval >= 1,
         f"--dqn.target-update-interval must be at least 1, got {config.target_update_interval}"),
    ]
    return (validate_replay("dqn", config, train) + [message for ok, message in checks if not ok]
            + epsilon_errors("--dqn", config.start_epsilon, config.end_epsilon))


class DQNCriticState(NamedTuple):
    q: Any
    target_q: Any
    opt: Any
    updates: jax.Array  # int32 []


def epsilon_at(config: DQNConfig, env_step: jax.Array, total_steps: int) -> jax.Array:
    """Linear decay from start to end over `exploration_fraction` of the run, then constant."""
    return linear_epsilon(config.start_epsilon, config.end_epsilon, config.exploration_fraction, env_step, total_steps)


def make_dqn(config: DQNConfig, spec: EnvSpec, total_steps: int, axis_name: str | None = None) -> OffPolicyAlgorithm:
    q_net = make_discrete_q_network(spec, config)
    optimizer = mean_over_shards(
        optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(config.learning_rate)), axis_name)

    def init(key: jax.Array) -> tuple[tuple, DQNCriticState]:
        q = q_net.init(key)
        return (), DQNCriticState(q, q, optimizer.init(q), jnp.zeros((), jnp.int32))

    def act_deterministic(q: Any, obs: jax.Array) -> jax.Array:
        return jnp.argmax(q_net.apply(q, obs), axis=-1).astype(jnp.int32)

    uniform = random_act(spec)

    def act(q: Any, obs: jax.Array, key: jax.Array, env_step: jax.Array) -> Act:
        action = epsilon_greedy(spec, key, act_deterministic(q, obs), epsilon_at(config, env_step, total_steps))
        return Act(action, action, ())

    def update_critic(state: DQNCriticState, actor: Any, batch: Batch, key: jax.Array):
        next_action = jnp.argmax(q_net.apply(state.q, batch.next_obs), axis=-1)  # double DQN: online picks
        next_q = jnp.take_along_axis(q_net.apply(state.target_q, batch.next_obs), next_action[:, None], axis=-1)[:, 0]
        target = jax.lax.stop_gradient(batch.reward + batch.discount * next_q)

        def loss_fn(q_params):
            q = jnp.take_along_axis(q_net.apply(q_params, batch.obs), batch.action[:, None].astype(jnp.int32), axis=-1)[:, 0]
            return weighted_mean(optax.huber_loss(q, target), batch.weight), q.mean()

        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.q)
        updates, opt_state = optimizer.update(grads, state.opt, state.q)
        q = optax.apply_updates(state.q, updates)
        count = state.updates + 1
        copy = (count % config.target_update_interval) == 0
        target_q = jax.tree.map(lambda new, old: jnp.where(copy, new, old), q, state.target_q)
        return DQNCriticState(q, target_q, opt_state, count), {"train/q_loss": loss, "train/q_mean": q_mean}

    def no_actor_update(state: Any, q_params: Any, obs: jax.Array, weight: jax.Array, key: jax.Array):
        return state, {}

    return OffPolicyAlgorithm(
        init=init,
        acting_params=lambda actor, critic: critic.q,
        act=act,
        random_act=uniform,
        act_deterministic=act_deterministic,
        actor_exchange=lambda actor: (),
        critic_exchange=lambda critic: (),
        update_critic=update_critic,
        update_actor=no_actor_update,
        actor_update_period=0,
    )


ALGORITHM = AlgorithmSpec(name="dqn", family="off_policy", config=DQNConfig, make=make_dqn, actions="discrete",
                          metrics=METRICS, validate=validate)
