"""The data that flows between acting and learning, shared by every algorithm and schedule."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax


class Act(NamedTuple):
    """What a policy returns for a batch of observations."""

    action: jax.Array  # what the learner stores (e.g. an unclipped Gaussian sample)
    env_action: jax.Array  # what the environment receives (e.g. clipped to the action bounds)
    extras: Any  # algorithm-specific pytree kept with the transition (log-prob, value, ...)


class Transition(NamedTuple):
    """One batched environment step, `[num_envs, ...]`; stacked time-major `[T, num_envs, ...]`."""

    obs: jax.Array  # the observation the action was chosen for (normalized if enabled)
    action: jax.Array
    reward: jax.Array  # float32 (scaled if enabled)
    terminated: jax.Array  # bool
    truncated: jax.Array  # bool
    valid: jax.Array  # bool: False on EnvPool's reset steps, which are no transitions
    extras: Any


class Rollout(NamedTuple):
    transitions: Transition  # [T, B, ...]
    last_obs: jax.Array  # [B, *obs_shape]: the observation after the last step


class Algorithm(NamedTuple):
    """The bundle of pure functions a schedule drives; built by `make_<algo>(config, spec, ...)`.

    init(key) -> state
    act(state, obs [B, ...], key) -> Act                 (behaviour policy, inside the jitted loop)
    policy_params(state) -> params                       (what evaluation needs)
    act_deterministic(params, obs [B, ...]) -> env action (evaluation)
    update(state, Rollout, key) -> (state, metrics dict)
    """

    init: Callable[[jax.Array], Any]
    act: Callable[[Any, jax.Array, jax.Array], Act]
    policy_params: Callable[[Any], Any]
    act_deterministic: Callable[[Any, jax.Array], jax.Array]
    update: Callable[[Any, Rollout, jax.Array], tuple[Any, dict[str, jax.Array]]]
    rollout_length: int  # environment steps per env between updates
    update_frames_per_iteration: int  # samples consumed by gradient updates per update() call


class OffPolicyAlgorithm(NamedTuple):
    """The bundle an off-policy algorithm gives the schedules; its state is two roles.

    The actor (policy) state and the critic state are separate pytrees with separate optimizers,
    so placement can keep them on different devices; each update takes only the small part of
    the other role that it needs (`actor_exchange`, `critic_exchange`).

    init(key) -> (actor_state, critic_state)
    acting_params(actor_state, critic_state) -> params     what `act` needs (DQN: the online Q)
    act(params, obs [B, ...], key, env_step) -> Act        exploration policy
    random_act(obs [B, ...], key) -> Act                   before `learning_starts`
    act_deterministic(params, obs) -> env action           evaluation
    actor_exchange(actor_state) -> pytree                  what the critic update needs
    critic_exchange(critic_state) -> pytree                what the actor update needs
    update_critic(critic_state, actor_exchange, Batch, key) -> (critic_state, metrics)
    update_actor(actor_state, critic_exchange, obs [N, ...], weight [N], key) -> (actor_state, metrics)
    actor_update_period: 0 when there is no actor to train (DQN), else critic updates per actor update
    """

    init: Callable[[jax.Array], tuple[Any, Any]]
    acting_params: Callable[[Any, Any], Any]
    act: Callable[[Any, jax.Array, jax.Array, jax.Array], Act]
    random_act: Callable[[jax.Array, jax.Array], Act]
    act_deterministic: Callable[[Any, jax.Array], jax.Array]
    actor_exchange: Callable[[Any], Any]
    critic_exchange: Callable[[Any], Any]
    update_critic: Callable[..., tuple[Any, dict[str, jax.Array]]]
    update_actor: Callable[..., tuple[Any, dict[str, jax.Array]]]
    actor_update_period: int
