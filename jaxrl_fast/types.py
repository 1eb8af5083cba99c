"""The contracts between the engine's rooms: what an environment gives the learner (`EnvSpec`,
`Step`, and `BatchedEnv`, the protocol every backend's envs meet), what flows between acting and learning (`Act`, `Transition`, `Rollout`, `Batch`), and the
bundles of pure functions an algorithm hands the schedules (`Algorithm`, `OffPolicyAlgorithm`).

Nothing here imports JAX at run time (`jax.Array` is an annotation only), so the configuration side
can name these types without loading it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol

if TYPE_CHECKING:
    import jax


class ConfigError(ValueError):
    """Input a run cannot start with: its message is one line that names the flag (the CLI prints it
    and exits with status 2; `jaxrl_fast.train` raises it before anything is written)."""


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the learner needs to know about a batch of environments.

    Observations are `obs_dtype` `[num_envs, *obs_shape]`: float32, or uint8 for images (`pixels`:
    `[frames, height, width]` stacks, scaled to [0, 1] by the networks' encoders). Discrete actions are int32 `[num_envs]` in
    `[0, num_actions)`; continuous actions are float32 `[num_envs, *action_shape]` in
    `[action_low, action_high]`.
    """

    env_id: str
    family: str
    num_envs: int
    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int  # 0 for continuous actions
    action_shape: tuple[int, ...]
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    max_episode_steps: int
    obs_dtype: str = "float32"
    frame_stack: int = 1  # observations stack this many frames along their first axis, newest last (Atari)
    obs_keys: tuple[str, ...] = ()  # a dict observation's keys, flattened in this order into one vector (dm_control)
    # The observation as the env gives it, where the learner sees it flattened: a dict's (key, shape)
    # per key of `obs_keys`, or ("", shape) for a Box of several axes; () where it is `obs_shape` itself.
    obs_parts: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def pixels(self) -> bool:
        """Image observations (uint8 frames): they need a convolutional encoder."""
        return self.obs_dtype == "uint8"


class Step(NamedTuple):
    """One batched step as returned by `XlaEnv.step`; arrays are `[num_envs, ...]`."""

    obs: jax.Array  # spec.obs_dtype [B, *obs_shape]
    reward: jax.Array  # float32 [B]: what the learner learns from (clipped in Atari training)
    terminated: jax.Array  # bool [B]: the episode ended in a terminal state (no bootstrap)
    truncated: jax.Array  # bool [B]: the episode was cut by the time limit (bootstrap)
    elapsed_step: jax.Array  # int32 [B]: steps since the game began
    score: jax.Array  # float32 [B]: the game's own reward, what episode statistics sum
    game_over: jax.Array  # bool [B]: the game ended (all lives lost, or the time limit)


class BatchedEnv(Protocol):
    """A batch of environments as the loops drive it, whichever backend steps them: EnvPool's
    `XlaEnv` (C++ threads, reached through XLA's FFI), the Gymnasium backend's `GymXlaEnv` (Python,
    through `env.ffi_forward`'s host target, or an `io_callback` without it), the JAX-native `JaxXlaEnv` (gymnax's or Brax's pure functions, vmapped).

    `step(handle, action) -> (handle, Step)` is traceable inside `jit` and `lax.scan`; `handle` is
    whatever the backend threads through its steps (EnvPool's pool handle, or the envs' own state
    as a pytree). `reset()` runs on the host before the first jitted call and returns the first
    observations; `pool` is the same envs' host object (its `config` holds `num_threads`). Every
    backend keeps EnvPool's episode convention: the step that ends an episode returns its final
    observation, and that env's next step is a reset step (its action ignored, reward 0).
    """

    spec: EnvSpec
    pool: Any
    handle: Any
    has_gpu_step: bool  # the step can run on a GPU (EnvPool built with CUDA, or an XLA step)
    # What a program that steps these envs names of this process (the forwarder's slots): equal
    # keys, interchangeable programs. None where the step names an object no other process has
    # (EnvPool's pool address, an `io_callback`): JAX's persistent cache cannot keep such a
    # program, nor can `engine.program_store` store it.
    program_key: str | None
    options: dict[str, Any]  # the backend options it was made with (`--env-kwargs`)

    def step(self, handle: Any, action: jax.Array) -> tuple[Any, Step]: ...

    def reset(self) -> Any: ...


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


class Batch(NamedTuple):
    """Sampled n-step transitions, `[batch, ...]`."""

    obs: jax.Array
    action: jax.Array
    reward: jax.Array  # sum_k gamma^k r_{t+k} over the (possibly shortened) n steps
    discount: jax.Array  # gamma^m (1 - terminated): multiplies the bootstrap value
    next_obs: jax.Array  # the observation m steps later (a truncated episode's final one)
    # obs and next_obs keep the stored dtype: uint8 frames are scaled by the network's encoder
    weight: jax.Array  # 1 for transitions, 0 where the sample landed on a reset step


class Algorithm(NamedTuple):
    """The bundle of pure functions a schedule drives; built by `make_<algo>(config, spec, ...)`.

    init(key) -> state
    act(state, obs [B, ...], key) -> Act                 (behaviour policy, inside the jitted loop)
    policy_params(state) -> params                       (what evaluation needs)
    act_deterministic(params, obs [B, ...]) -> env action (evaluation)
    update(state, Rollout, key) -> (state, metrics dict)
    act_sampled(params, obs [B, ...], key) -> env action (evaluation with --eval-policy sampled;
                                                          None where the policy is not a distribution)
    """

    init: Callable[[jax.Array], Any]
    act: Callable[[Any, jax.Array, jax.Array], Act]
    policy_params: Callable[[Any], Any]
    act_deterministic: Callable[[Any, jax.Array], jax.Array]
    update: Callable[[Any, Rollout, jax.Array], tuple[Any, dict[str, jax.Array]]]
    rollout_length: int  # environment steps per env between updates
    act_sampled: Callable[[Any, jax.Array, jax.Array], jax.Array] | None = None


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
    act_sampled(params, obs, key) -> env action            evaluation with --eval-policy sampled (None: no distribution)
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
    act_sampled: Callable[[Any, jax.Array, jax.Array], jax.Array] | None = None
