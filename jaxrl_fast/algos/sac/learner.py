"""SAC's learner: twin critics, tanh-squashed Gaussian policy, automatic entropy tuning.

Roles: the actor state holds the policy, the temperature and their optimizers; the critic state
holds the twin Q-functions, their targets and optimizer. The critic update needs the policy and
the temperature (`actor_exchange`); the actor update needs the online critics (`critic_exchange`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_fast.algos.common import action_scale, mean_over_shards, random_act, shard_mean
from jaxrl_fast.algos.sac.config import SACConfig
from jaxrl_fast.algos.sac.losses import sac_policy_loss, temperature_loss
from jaxrl_fast.algos.twin_critic import clipped_double_q_target, twin_critic_step
from jaxrl_fast.networks.heads import Network, make_q_network, make_squashed_gaussian_policy
from jaxrl_fast.ops import distributions as dist
from jaxrl_fast.ops.losses import polyak, weighted_mean
from jaxrl_fast.types import Act, Batch, EnvSpec, OffPolicyAlgorithm


class SACActorState(NamedTuple):
    policy: Any
    log_alpha: jax.Array  # float32 []
    policy_opt: Any
    alpha_opt: Any
    sde_key: Any = ()  # use_sde: uint32 key data the exploration matrices are drawn from


class SDEActing(NamedTuple):
    """What gSDE's acting needs: the policy, and the key of its exploration matrices."""

    policy: Any
    sde_key: jax.Array  # uint32 key data


class SACCriticState(NamedTuple):
    q: Any  # twin critics, stacked on a leading axis of 2
    target_q: Any
    q_opt: Any


class PolicyAndAlpha(NamedTuple):
    policy: Any
    log_alpha: jax.Array


def make_actor_update(config: SACConfig, policy_opt: optax.GradientTransformation, alpha_opt: optax.GradientTransformation,
                      sample: Callable, q_net: Network, target_entropy: float, axis_name: str | None = None):
    """`update_actor(actor, q_params, obs [N, ...], weight [N], key)`: the policy towards the soft Q,
    then the temperature towards the target entropy (data-parallel over `axis_name`: both
    gradients averaged over the shards in one all-reduce)."""

    def update_actor(state: SACActorState, q_params: Any, obs: jax.Array, weight: jax.Array, key: jax.Array):
        alpha = jnp.exp(state.log_alpha)

        def policy_loss_fn(policy):
            action, log_prob = sample(policy, obs, key)
            return sac_policy_loss(log_prob, q_net.apply(q_params, obs, action), alpha, weight), log_prob

        (policy_loss, log_prob), grads = jax.value_and_grad(policy_loss_fn, has_aux=True)(state.policy)
        alpha_grad = jax.grad(temperature_loss)(state.log_alpha, log_prob, target_entropy, weight) if config.autotune else None
        grads, alpha_grad = shard_mean((grads, alpha_grad), axis_name)
        updates, policy_opt_state = policy_opt.update(grads, state.policy_opt, state.policy)
        policy = optax.apply_updates(state.policy, updates)
        log_alpha, alpha_opt_state = state.log_alpha, state.alpha_opt
        if config.autotune:
            alpha_updates, alpha_opt_state = alpha_opt.update(alpha_grad, state.alpha_opt, state.log_alpha)
            log_alpha = optax.apply_updates(state.log_alpha, alpha_updates)
        metrics = {
            "train/actor_loss": policy_loss,
            "train/alpha": jnp.exp(log_alpha),
            "train/entropy": -weighted_mean(log_prob, weight),
        }
        return state._replace(policy=policy, log_alpha=log_alpha, policy_opt=policy_opt_state, alpha_opt=alpha_opt_state), metrics

    return update_actor


def make_sac(config: SACConfig, spec: EnvSpec, total_steps: int = 0, axis_name: str | None = None) -> OffPolicyAlgorithm:
    policy_net = make_squashed_gaussian_policy(spec, config, config.log_std_init if config.use_sde else None)
    q_net = make_q_network(spec, config, num_critics=2)
    scale = action_scale(spec)
    target_entropy = config.target_entropy_per_action * float(math.prod(spec.action_shape))
    policy_opt, alpha_opt = optax.adam(config.actor_lr), optax.adam(config.alpha_lr)  # averaged by update_actor
    q_opt = mean_over_shards(optax.adam(config.critic_lr), axis_name)

    def init(key: jax.Array) -> tuple[SACActorState, SACCriticState]:
        policy_key, q_key = jax.random.split(key)
        policy = policy_net.init(policy_key)
        log_alpha = jnp.asarray(math.log(config.init_alpha), jnp.float32)
        q = q_net.init(q_key)
        sde_key = jax.random.key_data(jax.random.fold_in(key, 1)) if config.use_sde else ()
        actor = SACActorState(policy, log_alpha, policy_opt.init(policy), alpha_opt.init(log_alpha), sde_key)
        return actor, SACCriticState(q, q, q_opt.init(q))

    def sample(policy: Any, obs: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Env-scaled action and its log-probability (with the scaling's Jacobian); with gSDE, one
        exploration matrix for the whole batch, as SB3 draws per gradient step."""
        if config.use_sde:
            mean, features, log_std = policy_net.apply(policy, obs)
            u = mean + dist.sde_noise(features, jax.random.normal(key, log_std.shape), log_std)
            unit, log_prob = dist.tanh_squash(u, dist.gaussian_log_prob(mean, dist.sde_log_std(features, log_std), u))
        else:
            mean, log_std = policy_net.apply(policy, obs)
            unit, log_prob = dist.tanh_gaussian_sample_and_log_prob(key, mean, log_std)
        return scale.to_env(unit), log_prob - scale.log_det

    def act(params: Any, obs: jax.Array, key: jax.Array, env_step: jax.Array) -> Act:
        if config.use_sde:  # each env's matrix, held for sde_sample_freq of its steps: one smooth direction
            mean, features, log_std = policy_net.apply(params.policy, obs)
            draw = jnp.floor(env_step / (obs.shape[0] * config.sde_sample_freq)).astype(jnp.int32)
            stream = jax.random.wrap_key_data(params.sde_key)
            if axis_name is not None:  # a data-parallel shard's envs explore apart from the others' (the key is shared)
                stream = jax.random.fold_in(stream, jax.lax.axis_index(axis_name))
            matrices = jax.random.normal(jax.random.fold_in(stream, draw), (obs.shape[0], *log_std.shape))
            action = scale.to_env(jnp.tanh(mean + dist.sde_noise(features, matrices, log_std)))
        else:
            action, _ = sample(params, obs, key)
        return Act(action, action, ())

    def policy_of(params: Any) -> Any:
        """The policy network's parameters of `acting_params` (with gSDE they carry its key too)."""
        return params.policy if config.use_sde else params

    def act_deterministic(params: Any, obs: jax.Array) -> jax.Array:
        return scale.to_env(jnp.tanh(policy_net.apply(policy_of(params), obs)[0]))

    def act_sampled(params: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
        """An action per env drawn from the policy at its state; gSDE's noise as the Gaussian it
        has at that state, drawn afresh for each env (training's `sample` shares one matrix)."""
        if not config.use_sde:
            return sample(params, obs, key)[0]
        mean, features, log_std = policy_net.apply(params.policy, obs)
        return scale.to_env(jnp.tanh(dist.gaussian_sample(key, mean, dist.sde_log_std(features, log_std))))

    def update_critic(state: SACCriticState, actor: PolicyAndAlpha, batch: Batch, key: jax.Array):
        next_action, next_log_prob = sample(actor.policy, batch.next_obs, key)
        next_q = q_net.apply(state.target_q, batch.next_obs, next_action)
        target = clipped_double_q_target(batch.reward, batch.discount, next_q, next_log_prob, jnp.exp(actor.log_alpha))
        q, q_opt_state, metrics = twin_critic_step(q_net, q_opt, state.q, state.q_opt, batch, target)
        return SACCriticState(q, polyak(state.target_q, q, config.tau), q_opt_state), metrics

    update_actor = make_actor_update(config, policy_opt, alpha_opt, sample, q_net, target_entropy, axis_name)

    return OffPolicyAlgorithm(
        init=init,
        acting_params=lambda actor, critic: SDEActing(actor.policy, actor.sde_key) if config.use_sde else actor.policy,
        act=act,
        random_act=random_act(spec),
        act_deterministic=act_deterministic,
        actor_exchange=lambda actor: PolicyAndAlpha(actor.policy, actor.log_alpha),
        critic_exchange=lambda critic: critic.q,
        update_critic=update_critic,
        update_actor=update_actor,
        actor_update_period=1,
        act_sampled=act_sampled,
    )
