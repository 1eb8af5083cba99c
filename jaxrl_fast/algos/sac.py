"""SAC: twin critics, tanh-squashed Gaussian policy, automatic entropy tuning.

Roles: the actor state holds the policy, the temperature and their optimizers; the critic state
holds the twin Q-functions, their targets and optimizer. The critic update needs the policy and
the temperature (`actor_exchange`); the actor update needs the online critics (`critic_exchange`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_fast.algos.base import AlgorithmSpec, ReplayConfig, mean_over_shards, random_act, shard_mean, validate_replay
from jaxrl_fast.types import Act, OffPolicyAlgorithm
from jaxrl_fast.types import EnvSpec
from jaxrl_fast.networks.heads import Network, make_q_network, make_squashed_gaussian_policy
from jaxrl_fast.ops import distributions as dist
from jaxrl_fast.ops.losses import polyak, weighted_mean
from jaxrl_fast.types import Batch


@dataclasses.dataclass(frozen=True)
class SACConfig(ReplayConfig):
    """Soft Actor-Critic (Haarnoja et al. 2018): twin critics, automatic entropy tuning."""

    tau: float = 0.005
    """Polyak rate of the target critics."""
    actor_lr: float = 3e-4
    """Adam step size of the policy."""
    critic_lr: float = 1e-3
    """Adam step size of the twin critics."""
    alpha_lr: float = 1e-3
    """Adam step size of the entropy temperature."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    autotune: bool = True
    """Tune the entropy temperature towards -action_dim."""
    use_sde: bool = False
    """gSDE exploration (docs/algorithms.md)."""
    sde_sample_freq: int = 32
    """use_sde: env steps per env per exploration matrix."""
    log_std_init: float = -3.0
    """use_sde: initial log std of the matrix's entries."""


METRICS = ("train/critic_loss", "train/q_mean", "train/actor_loss", "train/alpha", "train/entropy", "train/actor_updates")


def validate(config: SACConfig, train: Any) -> list[str]:
    rates = [(name, getattr(config, name)) for name in ("actor_lr", "critic_lr", "alpha_lr")]
    return validate_replay("sac", config, train) + [
        f"--sac.{name.replace('_', '-')} must be positive, got {value}" for name, value in rates if not value > 0
    ] + ([f"--sac.tau must be in (0, 1], got {config.tau}"] if not 0.0 < config.tau <= 1.0 else []) + (
        [f"--sac.init-alpha must be positive, got {config.init_alpha}"] if not config.init_alpha > 0 else []) + (
        [f"--sac.sde-sample-freq must be positive, got {config.sde_sample_freq}"] if config.sde_sample_freq < 1 else []) + (
        [f"--sac.use-sde holds a matrix per env, but --env-batch-size {train.env_batch_size} acts on other envs each "
         "step: leave --env-batch-size at 0"] if config.use_sde and train.env_batch_size not in (0, train.num_envs) else [])


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


class ActionScale(NamedTuple):
    center: jax.Array
    half_width: jax.Array

    def to_env(self, unit_action: jax.Array) -> jax.Array:
        return self.center + self.half_width * unit_action

    @property
    def log_det(self) -> jax.Array:
        return jnp.log(self.half_width).sum()


def action_scale(spec: EnvSpec) -> ActionScale:
    low, high = jnp.asarray(spec.action_low, jnp.float32), jnp.asarray(spec.action_high, jnp.float32)
    return ActionScale((high + low) / 2, (high - low) / 2)


def make_actor_update(config: SACConfig, policy_opt: optax.GradientTransformation, alpha_opt: optax.GradientTransformation,
                      sample: Callable, q_net: Network, target_entropy: float, axis_name: str | None = None):
    """`update_actor(actor, q_params, obs [N, ...], weight [N], key)`: the policy towards the soft Q,
    then the temperature towards the target entropy (data-parallel over `axis_name`: both
    gradients averaged over the shards in one all-reduce)."""

    def update_actor(state: SACActorState, q_params: Any, obs: jax.Array, weight: jax.Array, key: jax.Array):
        alpha = jnp.exp(state.log_alpha)

        def policy_loss_fn(policy):
            action, log_prob = sample(policy, obs, key)
            q = q_net.apply(q_params, obs, action).min(axis=0)
            return weighted_mean(alpha * log_prob - q, weight), log_prob

        (policy_loss, log_prob), grads = jax.value_and_grad(policy_loss_fn, has_aux=True)(state.policy)
        entropy_gap = jax.lax.stop_gradient(log_prob + target_entropy)
        alpha_grad = jax.grad(lambda la: weighted_mean(-la * entropy_gap, weight))(state.log_alpha) if config.autotune else None
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
    target_entropy = -float(math.prod(spec.action_shape))
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
            matrices = jax.random.normal(jax.random.fold_in(jax.random.wrap_key_data(params.sde_key), draw),
                                         (obs.shape[0], *log_std.shape))
            action = scale.to_env(jnp.tanh(mean + dist.sde_noise(features, matrices, log_std)))
        else:
            action, _ = sample(params, obs, key)
        return Act(action, action, ())

    def act_deterministic(params: Any, obs: jax.Array) -> jax.Array:
        mean = policy_net.apply(params.policy if config.use_sde else params, obs)[0]
        return scale.to_env(jnp.tanh(mean))

    def update_critic(state: SACCriticState, actor: PolicyAndAlpha, batch: Batch, key: jax.Array):
        next_action, next_log_prob = sample(actor.policy, batch.next_obs, key)
        next_q = q_net.apply(state.target_q, batch.next_obs, next_action).min(axis=0)
        alpha = jnp.exp(actor.log_alpha)
        target = jax.lax.stop_gradient(batch.reward + batch.discount * (next_q - alpha * next_log_prob))

        def loss_fn(q_params):
            q = q_net.apply(q_params, batch.obs, batch.action)  # [2, N]
            return sum(weighted_mean((qi - target) ** 2, batch.weight) for qi in q), q.mean()

        (loss, q_mean), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.q)
        updates, q_opt_state = q_opt.update(grads, state.q_opt, state.q)
        q = optax.apply_updates(state.q, updates)
        new = SACCriticState(q, polyak(state.target_q, q, config.tau), q_opt_state)
        return new, {"train/critic_loss": loss, "train/q_mean": q_mean}

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
    )


ALGORITHM = AlgorithmSpec(name="sac", family="off_policy", config=SACConfig, make=make_sac, actions="continuous",
                          metrics=METRICS, validate=validate)
