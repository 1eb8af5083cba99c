"""PPO's learner: the policy (actor) and the value function (critic) as separate networks with one
optimizer each, so that placement can treat them as roles; GAE over the rollout, then minibatch
epochs of `losses.ppo_loss`."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl_fast.algos.base import rollout_sizes
from jaxrl_fast.algos.common import shard_mean
from jaxrl_fast.algos.ppo.config import PPOConfig
from jaxrl_fast.algos.ppo.losses import explained_variance, ppo_loss
from jaxrl_fast.networks.heads import Network, make_policy_network, make_value_network
from jaxrl_fast.ops import distributions as dist
from jaxrl_fast.ops.losses import global_norm
from jaxrl_fast.ops.minibatches import minibatch_epochs
from jaxrl_fast.ops.returns import generalized_advantage_estimation
from jaxrl_fast.types import Act, Algorithm, EnvSpec, Rollout


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
    value: Any = ()  # [N] V(s) before the update's epochs, only with clip_value_loss (no array otherwise)


def gaussian_params(policy_net: Network, config: PPOConfig, actor_params: Any, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The policy's Gaussian `(mean, log_std)` `[..., A]`; with gSDE, the log std of its noise at these states."""
    if not config.use_sde:
        return policy_net.apply(actor_params, obs)
    mean, features, log_std = policy_net.apply(actor_params, obs)
    return mean, dist.sde_log_std(features, log_std)


def make_loss(config: PPOConfig, spec: EnvSpec, policy_net: Network, value_net: Network):
    """`loss(params, minibatch) -> (loss, metrics)`: the networks' outputs on the minibatch into `ppo_loss`."""

    def log_prob_and_entropy(actor_params: Any, obs: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
        if spec.discrete:
            logits = policy_net.apply(actor_params, obs)
            return dist.categorical_log_prob(logits, action), dist.categorical_entropy(logits)
        mean, log_std = gaussian_params(policy_net, config, actor_params, obs)
        return dist.gaussian_log_prob(mean, log_std, action), dist.gaussian_entropy(log_std)

    def loss_fn(params: ActorCriticParams, mb: Batch) -> tuple[jax.Array, dict[str, jax.Array]]:
        log_prob, entropy = log_prob_and_entropy(params.actor, mb.obs, mb.action)
        value = value_net.apply(params.critic, mb.obs)
        return ppo_loss(log_prob, mb.log_prob, mb.advantage, entropy, value, mb.target, mb.weight, config.clip_coef,
                        config.vf_coef, config.ent_coef, config.normalize_advantages,
                        old_value=mb.value if config.clip_value_loss else None)

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
            value=flat(value) if config.clip_value_loss else (),
            weight=flat(tr.valid.astype(jnp.float32)),
        )

        if config.use_sde:  # the split only with gSDE: other runs keep their minibatch order
            key, sde_key = jax.random.split(key)
            state = state._replace(sde_matrix=draw_sde_matrix(sde_key))
        state, metrics = minibatch_epochs(minibatch_step, state, batch, key, config.update_epochs, config.num_minibatches)
        metrics = jax.tree.map(jnp.mean, metrics)
        metrics["train/explained_variance"] = explained_variance(flat(value), batch.target, batch.weight)
        return state, metrics

    return update


def make_ppo(config: PPOConfig, spec: EnvSpec, total_steps: int, axis_name: str | None = None) -> Algorithm:
    if config.use_sde and spec.discrete:
        raise ValueError(f"--ppo.use-sde needs continuous actions; {spec.env_id} has discrete actions")
    policy_net = make_policy_network(spec, config, log_std_init=config.log_std_init, sde=config.use_sde)
    value_net = make_value_network(spec, config)
    batch_size, updates_per_role = rollout_sizes("ppo", config, spec.num_envs, total_steps)
    learning_rate = (
        optax.linear_schedule(config.learning_rate, 0.0, updates_per_role) if config.anneal_lr else config.learning_rate
    )
    optimizer = optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(learning_rate, eps=1e-5))
    low, high = np.asarray(spec.action_low, np.float32), np.asarray(spec.action_high, np.float32)  # no program at build

    def draw_sde_matrix(key: jax.Array) -> jax.Array:
        example = jnp.zeros((1, *spec.obs_shape), spec.obs_dtype)
        log_std = jax.eval_shape(lambda k: policy_net.apply(policy_net.init(k), example)[2], key)  # [F, A]
        return jax.random.normal(key, (spec.num_envs, *log_std.shape))

    def init(key: jax.Array) -> PPOState:
        actor_key, critic_key = jax.random.split(key)
        params = ActorCriticParams(policy_net.init(actor_key), value_net.init(critic_key))
        sde_key = jax.random.fold_in(key, 1)
        if config.use_sde and axis_name is not None:  # a shard's envs explore apart (later rollouts: its update key)
            sde_key = jax.random.fold_in(sde_key, jax.lax.axis_index(axis_name))
        sde_matrix = draw_sde_matrix(sde_key) if config.use_sde else ()
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

    def act_sampled(actor_params: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
        """An action drawn from the policy's distribution at `obs` (gSDE's: the Gaussian its noise
        has at that state, drawn afresh each step)."""
        if spec.discrete:
            return dist.categorical_sample(key, policy_net.apply(actor_params, obs))
        mean, log_std = gaussian_params(policy_net, config, actor_params, obs)
        return jnp.clip(dist.gaussian_sample(key, mean, log_std), low, high)

    update = make_update(config, optimizer, make_loss(config, spec, policy_net, value_net), value_net, batch_size, axis_name,
                         draw_sde_matrix)

    return Algorithm(
        init=init,
        act=act,
        policy_params=lambda state: state.params.actor,
        act_deterministic=act_deterministic,
        act_sampled=act_sampled,
        update=update,
        rollout_length=config.num_steps,
    )
