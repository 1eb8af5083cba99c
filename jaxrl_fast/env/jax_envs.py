"""The JAX-native backend: gymnax's environments, stepped inside the jitted loop.

An id of the form `gymnax:<name>` (`gymnax:CartPole-v1`, `gymnax:Breakout-MinAtar`) takes this
backend; it needs the `jax-envs` extra (`pip install -e ".[jax-envs]"`). Each env is a pure
function of its state and a key, vmapped over the batch, so a run's whole loop, envs included, is
one XLA program on whichever device acts. The "handle" an `XlaEnv` threads through its steps is here
the envs' state itself (`EnvBatch`), and `--num-seeds` agents each step their own slice of it.

The step keeps EnvPool's convention (see `jaxrl_fast.env.envpool`): the step that ends an episode
returns its final observation (for bootstrapping at a time limit), and the env's next step is a
reset step (its action ignored, reward 0, no transition) that returns the new episode's first
observation. gymnax's own auto-reset, which returns the next episode's observation in place of the
final one, is not used. Env i is seeded `seed + i` (its key is `jax.random.key(seed + i)`), as
EnvPool seeds its envs, so `--num-seeds` agents step exactly the envs of their single runs.

Observations are float32 vectors (MinAtar's `[10, 10, C]` grids flattened, as PureJaxRL and rejax
feed them to an MLP); actions are a gymnax `Discrete` or `Box`. `--env-kwargs` sets fields of the
env's parameters (`max_steps_in_episode=1000`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.env.ids import JAX_ENV_PREFIX as PREFIX
from jaxrl_fast.env.ids import EnvError
from jaxrl_fast.types import EnvSpec, Step

FAMILY = "gymnax"


class JaxEnvError(EnvError):
    pass


def gymnax_module() -> Any:
    try:
        import gymnax
    except ImportError as error:
        raise JaxEnvError(f"--env gymnax:<id> needs gymnax, which the jax-envs extra installs: "
                          f"pip install -e \".[jax-envs]\" ({error})") from error
    return gymnax


def check_name(env_id: str) -> str:
    """The gymnax name of an id of this backend, or a JaxEnvError with the close matches."""
    name = env_id[len(PREFIX):]
    known = list(gymnax_module().registered_envs)
    if name not in known:
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
        hint = f" Did you mean: {', '.join(PREFIX + c for c in close)}?" if close else ""
        raise JaxEnvError(f"--env: {name!r} is not one of gymnax's environments.{hint} (gymnax.registered_envs lists "
                          f"all {len(known)})")
    return name


@functools.lru_cache(maxsize=None)
def make_gymnax(env_id: str, options: tuple[tuple[str, Any], ...] = ()) -> tuple[Any, Any]:
    """gymnax's env object and its parameters with `options` set."""
    env, params = gymnax_module().make(check_name(env_id))
    fields = [f.name for f in dataclasses.fields(params)]
    for key, value in options:
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise JaxEnvError(f"--env-kwargs: {env_id} has no parameter {key!r}.{hint} It has: {', '.join(fields)}")
    return env, params.replace(**dict(options))


def spec_of(env_id: str, num_envs: int, options: dict[str, Any] | None = None) -> EnvSpec:
    env, params = make_gymnax(env_id, option_items(options))
    obs = env.observation_space(params)
    action = env.action_space(params)
    discrete = hasattr(action, "n")
    if not discrete and not hasattr(action, "low"):
        raise JaxEnvError(f"--env: {env_id} acts in {type(action).__name__}; this backend takes a Discrete or a Box")
    shape = () if discrete else tuple(action.shape)
    bound = lambda x: tuple(float(v) for v in np.broadcast_to(np.asarray(x, np.float64), shape).reshape(-1))  # noqa: E731
    return EnvSpec(
        env_id=env_id, family=FAMILY, num_envs=num_envs, obs_shape=(int(np.prod(obs.shape)),),
        discrete=discrete, num_actions=int(action.n) if discrete else 0, action_shape=shape,
        action_low=() if discrete else bound(action.low), action_high=() if discrete else bound(action.high),
        max_episode_steps=int(params.max_steps_in_episode))


class EnvBatch(NamedTuple):
    """A batch of gymnax envs, `[num_envs, ...]` each: what the jitted loop threads as the handle."""

    state: Any  # gymnax's env states
    key: jax.Array  # uint32 key data, one key per env
    reset_step: jax.Array  # bool: the env's next step is a reset step
    elapsed: jax.Array  # int32: steps of the running episode


def env_functions(env_id: str, options: dict[str, Any] | None = None,
                  skip_resets: bool = True) -> tuple[Callable, Callable]:
    """`reset(keys [N]) -> (obs, EnvBatch)` (the envs' start keys, `start_keys`) and
    `step(EnvBatch, action) -> (EnvBatch, Step)`, both pure and jittable, vmapped over the envs.
    `skip_resets=False` computes gymnax's reset at every step (the same results, slower)."""
    env, params = make_gymnax(env_id, option_items(options))

    def observe(obs: jax.Array) -> jax.Array:
        return jnp.reshape(obs, (-1,)).astype(jnp.float32)

    def reset_one(start: jax.Array) -> tuple[jax.Array, EnvBatch]:
        key, reset_key = jax.random.split(jax.random.wrap_key_data(start))
        obs, state = env.reset_env(reset_key, params)
        return observe(obs), EnvBatch(state, jax.random.key_data(key), jnp.zeros((), bool), jnp.zeros((), jnp.int32))

    def step_one(batch: EnvBatch, action: jax.Array, resets: bool) -> tuple[EnvBatch, Step]:
        key, step_key, reset_key = jax.random.split(jax.random.wrap_key_data(batch.key), 3)
        stepped_obs, stepped, reward, terminated, _ = env.step_env(step_key, batch.state, action, params)
        truncated = env.is_truncated(stepped, params) & ~terminated
        obs, state, fresh = observe(stepped_obs), stepped, batch.reset_step
        if resets:
            reset_obs, reset = env.reset_env(reset_key, params)
            state = jax.tree.map(lambda r, s: jnp.where(fresh, r, s), reset, stepped)
            obs = jnp.where(fresh, observe(reset_obs), obs)
        terminated, truncated = ~fresh & terminated, ~fresh & truncated
        elapsed = jnp.where(fresh, 0, batch.elapsed + 1)
        reward = jnp.where(fresh, 0.0, jnp.reshape(reward, ()).astype(jnp.float32))
        step = Step(obs=obs, reward=reward, terminated=terminated, truncated=truncated, elapsed_step=elapsed,
                    score=reward, game_over=terminated | truncated)
        return EnvBatch(state, jax.random.key_data(key), terminated | truncated, elapsed), step

    with_resets = jax.vmap(functools.partial(step_one, resets=True))
    without_resets = jax.vmap(functools.partial(step_one, resets=False))

    def step(batch: EnvBatch, action: jax.Array) -> tuple[EnvBatch, Step]:
        # A gymnax reset costs as much as a step or more (MinAtar: 2x), and most steps reset no env:
        # those skip it. Both branches draw the same keys, so which one runs changes no result.
        return jax.lax.cond(batch.reset_step.any(), with_resets, without_resets, batch, action)

    return jax.vmap(reset_one), step if skip_resets else with_resets


def env_seeds(seed: int | Sequence[int], num_envs: int) -> np.ndarray:
    """Env i's seed: `seed + i`, or `seed[i]` for a sequence (one per env), as EnvPool's."""
    seeds = [int(s) for s in seed] if isinstance(seed, (Sequence, np.ndarray)) else [seed + i for i in range(num_envs)]
    return np.asarray(seeds, np.uint32)


def option_items(options: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """`--env-kwargs` as a hashable key (the caches of `make_gymnax` and the evaluation programs)."""
    return tuple(sorted((options or {}).items()))


def start_keys(seeds: np.ndarray, round: int = 0) -> jax.Array:
    """The envs' key data at their `round`-th reset: `jax.random.key(seed)` first, then that key
    folded with the round, so that a pool reset again starts new episodes, as EnvPool's does."""
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
    if round:
        keys = jax.vmap(jax.random.fold_in, (0, None))(keys, round)
    return jax.random.key_data(keys)


@functools.lru_cache(maxsize=None)
def episodes_program(env_id: str, options: tuple[tuple[str, Any], ...], policy: Callable) -> Callable:
    """`(payload, start keys [N]) -> (returns, lengths)`: one episode per env from its reset, acted by
    `policy(payload, obs)`, in one jitted program; one per env, options and policy, so the
    evaluators of `--num-seeds` agents share it."""
    reset, step = env_functions(env_id, dict(options))
    max_steps = make_gymnax(env_id, options)[1].max_steps_in_episode

    def episodes(payload: Any, keys: jax.Array) -> tuple[jax.Array, jax.Array]:
        obs, batch = reset(keys)
        n = keys.shape[0]

        def body(carry):
            t, obs, batch, returns, lengths, running = carry
            batch, out = step(batch, policy(payload, obs))
            returns = returns + jnp.where(running, out.reward, 0.0)
            lengths = lengths + running.astype(jnp.int32)
            return t + 1, out.obs, batch, returns, lengths, running & ~(out.terminated | out.truncated)

        def more(carry):  # the host loop's bound (`evaluation.run_episodes`): max_steps + 1 steps
            return (carry[0] <= max_steps) & carry[-1].any()

        start = (jnp.int32(0), obs, batch, jnp.zeros(n, jnp.float32), jnp.zeros(n, jnp.int32), jnp.ones(n, bool))
        _, _, _, returns, lengths, _ = jax.lax.while_loop(more, body, start)
        return returns, lengths

    return jax.jit(episodes)


class GymnaxPool:
    """`num_envs` gymnax envs stepped from the host, with the surface the engine uses of an EnvPool
    pool (`reset()`, `step(actions)`, `config`): the probe's envs, and the evaluator's, which also
    play whole episodes inside one program (`play`)."""

    def __init__(self, env_id: str, num_envs: int, seed: int | Sequence[int], **options: Any):
        self.env_id, self.options = env_id, option_items(options)
        self.spec = spec_of(env_id, num_envs, options)
        self.num_envs, self.seeds = num_envs, env_seeds(seed, num_envs)
        self.reset_fn, self.step_fn = env_functions(env_id, options)
        self._reset, self._step = jax.jit(self.reset_fn), jax.jit(self.step_fn)
        self.config = {"num_envs": num_envs, "num_threads": 1, "max_episode_steps": self.spec.max_episode_steps}
        self.batch: EnvBatch | None = None
        self.resets = 0  # resets so far, episodes played included: each starts new episodes

    def reset(self) -> tuple[np.ndarray, dict]:
        obs, self.batch = self._reset(start_keys(self.seeds, self.resets))
        self.resets += 1
        return np.asarray(obs), {}

    def step(self, action: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        self.batch, out = self._step(self.batch, jnp.asarray(action))
        out = jax.device_get(out)
        return out.obs, out.reward, out.terminated, out.truncated, {"elapsed_step": out.elapsed_step}

    def play(self, policy: Callable[[Any, jax.Array], jax.Array], payload: Any,
             count: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """One episode in each env from a reset, acted by `policy(payload, obs) -> actions`, in one
        jitted program (`episodes_program`): what `evaluation.run_episodes` does step by step from
        the host, at the cost of one call. Returns (returns, lengths) per env. `count=False` plays
        without counting a reset (the evaluator's compile-ahead call)."""
        program = episodes_program(self.env_id, self.options, policy)
        returns, lengths = jax.device_get(program(payload, start_keys(self.seeds, self.resets)))
        self.resets += count
        return np.asarray(returns, np.float64), np.asarray(lengths, np.int64)

    def close(self) -> None:
        self.batch = None


@dataclasses.dataclass
class JaxXlaEnv:
    """gymnax envs as an `XlaEnv`: `handle` is their `EnvBatch` after reset, `step` is pure JAX."""

    spec: EnvSpec
    pool: GymnaxPool  # the same envs from the host (reset, config); the loop steps `handle`
    handle: EnvBatch
    step: Callable[[EnvBatch, jax.Array], tuple[EnvBatch, Step]]
    first_obs: np.ndarray
    has_gpu_step: bool = True  # the step is XLA's: it runs on any device
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def reset(self) -> np.ndarray:
        return self.first_obs


def make_jax_xla_env(env_id: str, num_envs: int, seed: int | Sequence[int], **options: Any) -> JaxXlaEnv:
    pool = GymnaxPool(env_id, num_envs, seed, **options)
    obs, _ = pool.reset()
    return JaxXlaEnv(pool.spec, pool, jax.device_get(pool.batch), pool.step_fn, obs, options=dict(options))
