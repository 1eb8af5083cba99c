"""TD3: twin critics, target policy smoothing, delayed actor and target updates.

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

from jaxrl_fast.algos.sac import action_scale, uniform_random_act
from jaxrl_fast.config import TD3Config
from jaxrl_fast.data import Act, OffPolicyAlgorithm
from jaxrl_fast.env import EnvSpec
from jaxrl_fast.networks import make_deterministic_policy, make_q_network
from jaxrl_fast.ops.losses import polyak, weighted_mean
from jaxrl_fast.replay import Batch


class TD3ActorState(NamedTuple):
    policy: Any
    target_policy: Any
    policy_opt: Any


class TD3CriticState(NamedTuple):
    q: Any
    target_q: Any
    q_opt: Any
    updates: jax.Array  # int32 []: critic updates so far (targets move every policy_delay)


def make_td3(config: TD3Config, spec: EnvSpec) -> OffPolicyAlgorithm:
    if spec.discrete:
        raise ValueError(f"--algo td3: {spec.env_id} has discrete actions; TD3 is for continuous actions (use dqn or ppo)")
    policy_net = make_deterministic_policy(spec, config.hidden_sizes, config.activation)
    q_net = make_q_network(spec, config.hidden_sizes, config.activation, num_critics=2)
    scale = action_scale(spec)
    low, high = scale.to_env(-1.0), scale.to_env(1.0)
    policy_opt, q_opt = optax.adam(config.actor_lr), optax.adam(config.critic_lr)

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
        next_q = q_net.apply(state.target_q, batch.next_obs, next_action).min(axis=0)
        target = jax.lax.stop_gradient(batch.reward + batch.discount * next_q)

        def loss_fn(q_params):
            q = q_net.apply(q_params, batch.obs, batch.action)
            return sum(weighted_mean((qi - target) ** 2, batch.weight) for qi in q), q.mean()

        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.q)
        updates, q_opt_state = q_opt.update(grads, state.q_opt, state.q)
        q = optax.apply_updates(state.q, updates)
        count = state.updates + 1
        move = (count % config.policy_delay) == 0
        target_q = jax.tree.map(lambda new, old: jnp.where(move, new, old), polyak(state.target_q, q, config.tau), state.target_q)
        return TD3CriticState(q, target_q, q_opt_state, count), {"train/critic_loss": loss, "train/q_mean": q_mean}

    def update_actor(state: TD3ActorState, q_params: Any, obs: jax.Array, weight: jax.Array, key: jax.Array):
        def loss_fn(policy):
            q1 = jax.tree.map(lambda x: x[:1], q_params)  # the actor follows the first critic
            return -weighted_mean(q_net.apply(q1, obs, act_deterministic(policy, obs))[0], weight)

        loss, grads = jax.value_and_grad(loss_fn)(state.policy)
        updates, opt_state = policy_opt.update(grads, state.policy_opt, state.policy)
        policy = optax.apply_updates(state.policy, updates)
        return TD3ActorState(policy, polyak(state.target_policy, policy, config.tau), opt_state), {"train/actor_loss": loss}

    return OffPolicyAlgorithm(
        init=init,
        acting_params=lambda actor, critic: actor.policy,
        act=act,
        random_act=uniform_random_act(spec),
        act_deterministic=act_deterministic,
        actor_exchange=lambda actor: actor.target_policy,
        critic_exchange=lambda critic: critic.q,
        update_critic=update_critic,
        update_actor=update_actor,
        actor_update_period=config.policy_delay,
    )
