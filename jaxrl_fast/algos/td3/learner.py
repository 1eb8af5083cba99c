"""TD3's learner: twin critics, target policy smoothing, delayed actor and target updates.

Roles: the actor state holds the policy, its target and optimizer; the critic state holds the twin
Q-functions, their targets, optimizer and an update counter. The critic update needs the target
policy (`actor_exchange`); the actor update needs the online critics (`critic_exchange`). The actor
is updated every `policy_delay` critic updates; the critic moves its targets on the same beat.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_fast.algos.common import action_scale, mean_over_shards, random_act
from jaxrl_fast.algos.td3.config import TD3Config
from jaxrl_fast.algos.td3.losses import deterministic_policy_loss
from jaxrl_fast.algos.twin_critic import clipped_double_q_target, twin_critic_step
from jaxrl_fast.networks.heads import make_deterministic_policy, make_q_network
from jaxrl_fast.ops.losses import polyak
from jaxrl_fast.types import Act, Batch, EnvSpec, OffPolicyAlgorithm


class TD3ActorState(NamedTuple):
    policy: Any
    target_policy: Any
    policy_opt: Any


class TD3CriticState(NamedTuple):
    q: Any
    target_q: Any
    q_opt: Any
    updates: jax.Array  # int32 []: critic updates so far (targets move every policy_delay)


def make_td3(config: TD3Config, spec: EnvSpec, total_steps: int = 0, axis_name: str | None = None) -> OffPolicyAlgorithm:
    policy_net = make_deterministic_policy(spec, config)
    q_net = make_q_network(spec, config, num_critics=2)
    scale = action_scale(spec)
    low, high = scale.to_env(-1.0), scale.to_env(1.0)
    policy_opt = mean_over_shards(optax.adam(config.actor_lr), axis_name)
    q_opt = mean_over_shards(optax.adam(config.critic_lr), axis_name)

    def init(key: jax.Array) -> tuple[TD3ActorState, TD3CriticState]:
        policy_key, q_key = jax.random.split(key)
        policy, q = policy_net.init(policy_key), q_net.init(q_key)
        return (
            TD3ActorState(policy, policy, policy_opt.init(policy)),
            TD3CriticState(q, q, q_opt.init(q), jnp.zeros((), jnp.int32)),
        )

    def act_deterministic(policy: Any, obs: jax.Array) -> jax.Array:
        return scale.to_env(policy_net.apply(policy, obs))

    def act(policy: Any, obs: jax.Array, key: jax.Array, env_step: jax.Array) -> Act:
        action = act_deterministic(policy, obs)
        noise = config.exploration_noise * scale.half_width * jax.random.normal(key, action.shape)
        action = jnp.clip(action + noise, low, high)
        return Act(action, action, ())

    def update_critic(state: TD3CriticState, target_policy: Any, batch: Batch, key: jax.Array):
        noise = jnp.clip(
            config.policy_noise * jax.random.normal(key, batch.action.shape), -config.noise_clip, config.noise_clip
        ) * scale.half_width
        next_action = jnp.clip(act_deterministic(target_policy, batch.next_obs) + noise, low, high)
        target = clipped_double_q_target(batch.reward, batch.discount, q_net.apply(state.target_q, batch.next_obs, next_action))
        q, q_opt_state, metrics = twin_critic_step(q_net, q_opt, state.q, state.q_opt, batch, target)
        count = state.updates + 1
        move = (count % config.policy_delay) == 0
        target_q = jax.tree.map(lambda new, old: jnp.where(move, new, old), polyak(state.target_q, q, config.tau), state.target_q)
        return TD3CriticState(q, target_q, q_opt_state, count), metrics

    def update_actor(state: TD3ActorState, q_params: Any, obs: jax.Array, weight: jax.Array, key: jax.Array):
        def loss_fn(policy):
            q1 = jax.tree.map(lambda x: x[:1], q_params)  # the actor follows the first critic
            return deterministic_policy_loss(q_net.apply(q1, obs, act_deterministic(policy, obs))[0], weight)

        loss, grads = jax.value_and_grad(loss_fn)(state.policy)
        updates, opt_state = policy_opt.update(grads, state.policy_opt, state.policy)
        policy = optax.apply_updates(state.policy, updates)
        return TD3ActorState(policy, polyak(state.target_policy, policy, config.tau), opt_state), {"train/actor_loss": loss}

    return OffPolicyAlgorithm(
        init=init,
        acting_params=lambda actor, critic: actor.policy,
        act=act,
        random_act=random_act(spec),
        act_deterministic=act_deterministic,
        actor_exchange=lambda actor: actor.target_policy,
        critic_exchange=lambda critic: critic.q,
        update_critic=update_critic,
        update_actor=update_actor,
        actor_update_period=config.policy_delay,
    )
