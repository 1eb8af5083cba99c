"""DQN's learner: double-DQN targets, a hard-copied target network and a linear epsilon schedule.

DQN has no separate policy network: the critic role holds the online and target Q-networks and
the behaviour policy is epsilon-greedy in the online Q (`acting_params`). The actor role is empty.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_fast.algos.common import mean_over_shards, random_act
from jaxrl_fast.algos.dqn.config import DQNConfig
from jaxrl_fast.algos.dqn.losses import double_q_target, huber_q_loss
from jaxrl_fast.networks.heads import make_discrete_q_network
from jaxrl_fast.ops.exploration import epsilon_greedy, linear_epsilon
from jaxrl_fast.types import Act, Batch, EnvSpec, OffPolicyAlgorithm


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

    def act(q: Any, obs: jax.Array, key: jax.Array, env_step: jax.Array) -> Act:
        action = epsilon_greedy(spec, key, act_deterministic(q, obs), epsilon_at(config, env_step, total_steps))
        return Act(action, action, ())

    def update_critic(state: DQNCriticState, actor: Any, batch: Batch, key: jax.Array):
        target = double_q_target(batch.reward, batch.discount, q_net.apply(state.q, batch.next_obs),
                                 q_net.apply(state.target_q, batch.next_obs))

        def loss_fn(q_params):
            return huber_q_loss(q_net.apply(q_params, batch.obs), batch.action, target, batch.weight)

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
        random_act=random_act(spec),
        act_deterministic=act_deterministic,
        actor_exchange=lambda actor: (),
        critic_exchange=lambda critic: (),
        update_critic=update_critic,
        update_actor=no_actor_update,
        actor_update_period=0,
    )
