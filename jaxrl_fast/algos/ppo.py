"""PPO: clipped surrogate objective, value loss, entropy bonus, minibatch epochs.

Pure functions over explicit state. The policy (actor) and the value function (critic) are
separate networks with one optimizer each, so that placement can treat them as roles.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxrl_fast.algos.base import AlgorithmSpec, rollout_iterations, shard_mean, validate_rollout
from jaxrl_fast.types import Act, Algorithm, Rollout
from jaxrl_fast.types import EnvSpec
from jaxrl_fast.networks.heads import Network, make_policy_network, make_value_network
from jaxrl_fast.networks.config import NetworkConfig
from jaxrl_fast.ops import distributions as dist
from jaxrl_fast.ops.losses import global_norm, weighted_mean
from jaxrl_fast.ops.minibatches import minibatch_epochs
from jaxrl_fast.ops.returns import generalized_advantage_estimation


@dataclasses.dataclass(frozen=True)
class PPOConfig(NetworkConfig):
    """Proximal Policy Optimization (Schulman et al. 2017) with the usual implementation details."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy and value MLPs."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "tanh"
    """Hidden-layer activation."""
    learning_rate: float = 3e-4
    """Adam step size (per role: the policy and the value function have one optimizer each)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    num_steps: int = 128
    """Rollout length per environment per iteration; a batch is num_envs x num_steps samples."""
    num_minibatches: int = 4
    """Minibatches per epoch; must divide num_envs x num_steps."""
    update_epochs: int = 4
    """Passes over each batch."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE's lambda: 0 is one-step TD, 1 is Monte Carlo."""
    clip_coef: float = 0.2
    """Policy ratio clipping."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Gradient-norm clipping, applied to each role's gradient."""
    normalize_advantages: bool = True
    """Standardise advantages per minibatch."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""
    use_sde: bool = False
    """gSDE exploration, one matrix per env per rollout (docs/algorithms.md)."""


METRICS = ("train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl", "train/clip_fraction",
           "train/grad_norm", "train/explained_variance")


class ActorCriticParams(NamedTuple):
    actor: Any
    critic: Any


class ActorCriticOptStates(NamedTuple):
    actor: Any
    critic: Any


class PPOState(NamedTuple):
    params: ActorCriticParams
    opt_states: ActorCriticOptStates
    sde_matrix: Any = ()  # use_sde: standard normal [num_envs, F, A], each env's exploration matrix for the next rollout


class PPOExtras(NamedTuple):
    log_prob: jax.Array  # [B] log pi(a|s) of the behaviour policy (V(s) is computed by the update, in one batch)


class Batch(NamedTuple):
    """Flattened samples `[N, ...]` that the minibatch loop slices."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    advantage: jax.Array
    target: jax.Array  # value target: advantage + V(s)
    weight: jax.Array  # 1.0 for transitions, 0.0 for EnvPool's reset steps


def validate(config: PPOConfig, train: Any) -> list[str]:
    errors = validate_rollout("ppo", config, train)
    if not 0.0 <= config.gae_lambda <= 1.0:
        errors.append(f"--ppo.gae-lambda must be in [0, 1], got {config.gae_lambda}")
    return errors


def gaussian_params(policy_net: Network, config: PPOConfig, actor_params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The policy's Gaussian `(mean, log_std)` `[..., A]`; with gSDE, the log std of its noise at these states."""
    if not config.use_sde:
        return policy_net.apply(actor_params, obs)
    mean, features, log_std = policy_net.apply(actor_params, obs)
    return mean, dist.sde_log_std(features, log_std)


def make_loss(config: PPOConfig, spec: EnvSpec, policy_net: Network, value_net: Network):
    """`loss(params, minibatch) -> (loss, metrics)`: clipped surrogate, value loss, entropy bonus."""

    def log_prob_and_entropy(actor_params: Any, obs: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        if spec.discrete:
            logits = policy_net.apply(actor_params, obs)
            return dist.categorical_log_prob(logits, action), dist.categorical_entropy(logits)
        mean, log_std = gaussian_params(policy_net, config, actor_params, obs)
        return dist.gaussian_log_prob(mean, log_std, action), dist.gaussian_entropy(log_std)

    def loss_fn(params: ActorCriticParams, mb: Batch) -> tuple[jax.Array, dict[str, jax.Array]]:
        log_prob, entropy = log_prob_and_entropy(params.actor, mb.obs, mb.action)
        log_ratio = log_prob - mb.log_prob
        ratio = jnp.exp(log_ratio)
        advantage = mb.advantage
        if config.normalize_advantages:
            mean = weighted_mean(advantage, mb.weight)
            std = jnp.sqrt(weighted_mean((advantage - mean) ** 2, mb.weight))
            advantage = (advantage - mean) / (std + 1e-8)
        surrogate = jnp.minimum(ratio * advantage, jnp.clip(ratio, 1 - config.clip_coef, 1 + config.clip_coef) * advantage)
        policy_loss = -weighted_mean(surrogate, mb.weight)
        value_loss = 0.5 * weighted_mean((value_net.apply(params.critic, mb.obs) - mb.target) ** 2, mb.weight)
        entropy = weighted_mean(entropy, mb.weight)
        loss = policy_loss - config.ent_coef * entropy + config.vf_coef * value_loss
        metrics = {
            "train/policy_loss": policy_loss,
            "train/value_loss": value_loss,
            "train/entropy": entropy,
            "train/approx_kl": weighted_mean((ratio - 1) - log_ratio, mb.weight),
            "train/clip_fraction": weighted_mean((jnp.abs(ratio - 1) > config.clip_coef).astype(jnp.float32), mb.weight),
        }
        return loss, metrics

    return loss_fn


def make_update(config: PPOConfig, optimizer: optax.GradientTransformation, loss_fn: Any, value_net: Network,
                batch_size: int, axis_name: str | None = None, draw_sde_matrix: Any = None):
    """`update(state, rollout, key) -> (state, metrics)`: GAE over the rollout, then
    `update_epochs` passes of `num_minibatches` minibatch steps, each role with its optimizer
    (data-parallel over `axis_name`: both roles' gradients averaged over the shards in one all-reduce);
    with gSDE, `draw_sde_matrix(key)` then draws the exploration matrices of the next rollout."""
    def minibatch_step(state: PPOState, mb: Batch) -> tuple[PPOState, dict[str, jax.Array]]:
        grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params, mb)
        grads = shard_mean(grads, axis_name)
        actor_updates, actor_opt = optimizer.update(grads.actor, state.opt_states.actor, state.params.actor)
        critic_updates, critic_opt = optimizer.update(grads.critic, state.opt_states.critic, state.params.critic)
        params = ActorCriticParams(
            optax.apply_updates(state.params.actor, actor_updates),
            optax.apply_updates(state.params.critic, critic_updates),
        )
        metrics["train/grad_norm"] = global_norm(grads)
        return state._replace(params=params, opt_states=ActorCriticOptStates(actor_opt, critic_opt)), metrics

    def update(state: PPOState, rollout: Rollout, key: jax.Array) -> tuple[PPOState, dict[str, jax.Array]]:
        tr = rollout.transitions  # [T, B, ...]
        # V(s) of every step in one batched call, not one small MLP per env step in the rollout
        values = value_net.apply(state.params.critic, jnp.concatenate([tr.obs, rollout.last_obs[None]], axis=0))
        value, next_value = values[:-1], values[1:]
        gae = jax.vmap(generalized_advantage_estimation, in_axes=(1, 1, 1, 1, 1, None, None), out_axes=1)
        advantage = gae(tr.reward, value, next_value, tr.terminated, tr.truncated, config.gamma, config.gae_lambda)
        flat = lambda x: x.reshape((batch_size, *x.shape[2:]))  # noqa: E731
        batch = Batch(
            obs=flat(tr.obs),
            action=flat(tr.action),
            log_prob=flat(tr.extras.log_prob),
            advantage=flat(advantage),
            target=flat(advantage + value),
            weight=flat(tr.valid.astype(jnp.float32)),
        )

        if config.use_sde:  # the split only with gSDE: other runs keep their minibatch order
            key, sde_key = jax.random.split(key)
            state = state._replace(sde_matrix=draw_sde_matrix(sde_key))
        state, metrics = minibatch_epochs(minibatch_step, state, batch, key, config.update_epochs, config.num_minibatches)
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics["train/explained_variance"] = 1.0 - weighted_mean(
            (batch.target - flat(value)) ** 2, batch.weight
        ) / jnp.maximum(weighted_mean((batch.target - weighted_mean(batch.target, batch.weight)) ** 2, batch.weight), 1e-8)
        return state, metrics

    return update


def make_ppo(config: PPOConfig, spec: EnvSpec, total_steps: int, axis_name: str | None = None) -> Algorithm:
    if config.use_sde and spec.discrete:
        raise ValueError(f"--ppo.use-sde needs continuous actions; {spec.env_id} has discrete actions")
    policy_net = make_policy_network(spec, config, log_std_init=config.log_std_init, sde=config.use_sde)
    value_net = make_value_network(spec, config)
    batch_size = spec.num_envs * config.num_steps
    if batch_size % config.num_minibatches:
        raise ValueError(
            f"--ppo.num-minibatches {config.num_minibatches} must divide the batch "
            f"num_envs x num_steps = {spec.num_envs} x {config.num_steps} = {batch_size}"
        )
    updates_per_role = rollout_iterations(total_steps, spec.num_envs, config.num_steps) * config.update_epochs * config.num_minibatches
    learning_rate = (
        optax.linear_schedule(config.learning_rate, 0.0, updates_per_role) if config.anneal_lr else config.learning_rate
    )
    optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    low, high = jnp.asarray(spec.action_low, jnp.float32), jnp.asarray(spec.action_high, jnp.float32)

    def draw_sde_matrix(key: jax.Array) -> jax.Array:
        example = jnp.zeros((1, *spec.obs_shape), spec.obs_dtype)
        log_std = jax.eval_shape(lambda k: policy_net.apply(policy_net.init(k), example)[2], key)  # [F, A]
        return jax.random.normal(key, (spec.num_envs, *log_std.shape))

    def init(key: jax.Array) -> PPOState:
        actor_key, critic_key = jax.random.split(key)
        params = ActorCriticParams(policy_net.init(actor_key), value_net.init(critic_key))
        sde_matrix = draw_sde_matrix(jax.random.fold_in(key, 1)) if config.use_sde else ()
        return PPOState(params, ActorCriticOptStates(optimizer.init(params.actor), optimizer.init(params.critic)), sde_matrix)

    def act(state: PPOState, obs: jax.Array, key: jax.Array) -> Act:
        if spec.discrete:
            logits = policy_net.apply(state.params.actor, obs)
            action = dist.categorical_sample(key, logits)
            return Act(action, action, PPOExtras(dist.categorical_log_prob(logits, action)))
        if config.use_sde:  # the rollout's matrix per env: each env explores one smooth direction
            mean, features, sde_log_std = policy_net.apply(state.params.actor, obs)
            action = mean + dist.sde_noise(features, state.sde_matrix, sde_log_std)
            log_std = dist.sde_log_std(features, sde_log_std)
        else:
            mean, log_std = policy_net.apply(state.params.actor, obs)
            action = dist.gaussian_sample(key, mean, log_std)
        extras = PPOExtras(dist.gaussian_log_prob(mean, log_std, action))
        return Act(action, jnp.clip(action, low, high), extras)

    def act_deterministic(actor_params: Any, obs: jax.Array) -> jax.Array:
        if spec.discrete:
            return dist.categorical_mode(policy_net.apply(actor_params, obs))
        return jnp.clip(policy_net.apply(actor_params, obs)[0], low, high)

    loss_fn = make_loss(config, spec, policy_net, value_net)

    update = make_update(config, optimizer, loss_fn, value_net, batch_size, axis_name, draw_sde_matrix)

    return Algorithm(
        init=init,
        act=act,
        policy_params=lambda state: state.params.actor,
        act_deterministic=act_deterministic,
        update=update,
        rollout_length=config.num_steps,
        update_frames_per_iteration=config.update_epochs * batch_size,
    )


ALGORITHM = AlgorithmSpec(name="ppo", family="on_policy", config=PPOConfig, make=make_ppo, actions="any",
                          metrics=METRICS, validate=validate)
