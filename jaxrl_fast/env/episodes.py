"""Episode bookkeeping inside the jitted loop (and on the host for EnvPool's async mode)."""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.types import Step


class EpisodeState(NamedTuple):
    """Per-env running statistics carried through the jitted loop, `[num_envs]` each.

    The running return and length are the game's (`Step.score` over every life). `reset_step` is
    True where the next step is EnvPool's reset step (the previous step ended the learner's
    episode): that step's action is ignored and it is no transition.
    """

    episode_return: jax.Array  # float32: undiscounted score of the running game
    episode_length: jax.Array  # int32: its steps, reset steps not counted
    reset_step: jax.Array  # bool


class EpisodeStats(NamedTuple):
    """Completed games, summed so they can be reduced inside jit and fetched rarely."""

    count: jax.Array  # int32 []
    return_sum: jax.Array  # float32 []
    length_sum: jax.Array  # int32 []


def init_episode_state(num_envs: int) -> EpisodeState:
    return EpisodeState(
        episode_return=jnp.zeros((num_envs,), jnp.float32),
        episode_length=jnp.zeros((num_envs,), jnp.int32),
        reset_step=jnp.zeros((num_envs,), bool),
    )


def init_episode_stats() -> EpisodeStats:
    return EpisodeStats(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))


def track_episodes(state: EpisodeState, step: Step) -> tuple[EpisodeState, EpisodeStats]:
    """Advance the running statistics by one step and report the games that just ended.

    Reset steps contribute nothing: their reward is not part of any episode (and is 0).
    """
    valid = ~state.reset_step
    ret = state.episode_return + jnp.where(valid, step.score, 0.0)
    length = state.episode_length + valid.astype(jnp.int32)
    ended = valid & step.game_over
    stats = EpisodeStats(
        count=ended.sum(dtype=jnp.int32),
        return_sum=jnp.where(ended, ret, 0.0).sum(),
        length_sum=jnp.where(ended, length, 0).sum(dtype=jnp.int32),
    )
    new_state = EpisodeState(
        episode_return=jnp.where(ended, 0.0, ret),
        episode_length=jnp.where(ended, 0, length),
        reset_step=valid & (step.terminated | step.truncated),
    )
    return new_state, stats


def track_rollout_episodes(
    state: EpisodeState, score: jax.Array, game_over: jax.Array, valid: jax.Array, reset_step: jax.Array
) -> tuple[EpisodeState, EpisodeStats]:
    """`track_episodes` over a whole rollout at once: `[T, B]` scores and game ends, `valid[t]`
    False on reset steps (`valid[0] == ~state.reset_step`), and `reset_step` `[B]` after the last
    step. Same state and totals as scanning `track_episodes` step by step, in a few batched ops
    after the loop instead of ops in every step.

    The games that end within the rollout partition each env's valid steps up to its last end:
    their scores sum to the running score carried in plus every valid score up to that end.
    """
    ended = valid & game_over
    t = jnp.arange(score.shape[0], dtype=jnp.int32)[:, None]
    last_end = jnp.max(jnp.where(ended, t, -1), axis=0)  # [B]; -1 where no game ended
    any_end = last_end >= 0
    closed = t <= last_end  # [T, B]: steps of games that ended in this rollout
    score = jnp.where(valid, score, 0.0)
    steps = valid.astype(jnp.int32)
    stats = EpisodeStats(
        count=ended.sum(dtype=jnp.int32),
        return_sum=jnp.where(closed, score, 0.0).sum() + jnp.where(any_end, state.episode_return, 0.0).sum(),
        length_sum=(jnp.where(closed, steps, 0).sum() + jnp.where(any_end, state.episode_length, 0).sum()).astype(jnp.int32),
    )
    new_state = EpisodeState(
        episode_return=jnp.where(any_end, 0.0, state.episode_return) + jnp.where(closed, 0.0, score).sum(0),
        episode_length=jnp.where(any_end, 0, state.episode_length) + jnp.where(closed, 0, steps).sum(0, dtype=jnp.int32),
        reset_step=reset_step,
    )
    return new_state, stats


def add_stats(a: EpisodeStats, b: EpisodeStats) -> EpisodeStats:
    return EpisodeStats(*(x + y for x, y in zip(a, b)))


# An evaluation's bound on an episode where the id registers no time limit (EnvPool's BabyAI ids:
# max_episode_steps 0, each task ending its episodes itself at its own limit, a few hundred steps).
UNREGISTERED_LIMIT_BOUND = 100_000


def episode_bound(max_episode_steps: int) -> int:
    """The steps an evaluation plays an episode for at most: the env's time limit, or, where it
    registers none (0), `UNREGISTERED_LIMIT_BOUND`."""
    return max_episode_steps if max_episode_steps > 0 else UNREGISTERED_LIMIT_BOUND


def step_seed(stream: jax.Array, t: jax.Array) -> jax.Array:
    """The uint32 seed of step `t` of an evaluation whose stream is `stream` (`jax.random.key` of
    its one seed): what a sampling policy draws from, in one program or from the host (`step_seeds`)."""
    return jax.random.bits(jax.random.fold_in(stream, t), (), jnp.uint32)


@functools.partial(jax.jit, static_argnums=1)
def step_seeds(seed: jax.Array, count: int) -> jax.Array:
    """`step_seed` of steps 0 .. count - 1 of the stream of `seed`, in one call: the host loop's
    (`evaluation.run_episodes`), so that it acts as `play_episodes` does."""
    stream = jax.random.key(seed)
    return jax.vmap(lambda t: step_seed(stream, t))(jnp.arange(count))


def play_episodes(step: Callable[[Any, jax.Array], tuple[Any, Step]], state: Any, obs: jax.Array,
                  policy: Callable[[Any, jax.Array, jax.Array], jax.Array], payload: Any, seed: jax.Array,
                  max_steps: int) -> tuple[jax.Array, jax.Array]:
    """One episode in each env, acted by `policy(payload, obs, step seed)` from its first
    observations `obs` `[N, ...]` and the envs' `state` (a JAX-native batch, or EnvPool's handle),
    traced as one `while_loop`: an evaluation's whole episodes in one program, where the host loop
    (`evaluation.run_episodes`) makes a call per step. It ends when every env's episode has, or
    after `max_steps + 1` steps (the host loop's bound); an env's steps after its end are not
    counted, whatever the env does then (an auto-reset, or nothing). Each step's uint32 seed is
    drawn from `seed` (a sampling policy's; a deterministic one ignores it). Returns
    (returns float32 `[N]`, lengths int32 `[N]`)."""
    n = obs.shape[0]
    stream = jax.random.key(seed)

    def body(carry):
        t, state, obs, returns, lengths, running = carry
        state, out = step(state, policy(payload, obs, step_seed(stream, t)))
        returns = returns + jnp.where(running, out.reward, 0.0)
        lengths = lengths + running.astype(jnp.int32)
        return t + 1, state, out.obs, returns, lengths, running & ~(out.terminated | out.truncated)

    def more(carry):
        return (carry[0] <= max_steps) & carry[-1].any()

    start = (jnp.int32(0), state, obs, jnp.zeros(n, jnp.float32), jnp.zeros(n, jnp.int32), jnp.ones(n, bool))
    _, _, _, returns, lengths, _ = jax.lax.while_loop(more, body, start)
    return returns, lengths


class HostEpisodes:
    """`track_episodes` on the host, for envs whose steps arrive a few at a time and out of order
    (EnvPool's async mode): the same rules, per env id, in numpy. Each ended episode is reported
    with the step that ended it, so a caller that stages steps ahead counts it with that step."""

    def __init__(self, num_envs: int):
        self.episode_return = np.zeros(num_envs, np.float64)
        self.episode_length = np.zeros(num_envs, np.int64)
        self.reset_step = np.zeros(num_envs, bool)  # the env's next step is EnvPool's reset step

    def track(self, ids: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
              truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advance envs `ids` by one step each.

        Returns which steps were transitions (not reset steps), and per step the return and length
        of the episode it ended (0 where it ended none).
        """
        valid = ~self.reset_step[ids]
        episode_return = np.where(valid, self.episode_return[ids] + reward, 0.0)
        episode_length = np.where(valid, self.episode_length[ids] + 1, 0)
        ended = valid & (terminated | truncated)
        self.episode_return[ids] = np.where(ended, 0.0, episode_return)
        self.episode_length[ids] = np.where(ended, 0, episode_length)
        self.reset_step[ids] = ended
        return valid, np.where(ended, episode_return, 0.0), np.where(ended, episode_length, 0)
