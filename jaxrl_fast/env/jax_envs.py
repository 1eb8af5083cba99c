"""The JAX-native backend: gymnax's and Brax's environments, stepped inside the jitted loop.

An id of the form `gymnax:<name>` (`gymnax:CartPole-v1`, `gymnax:Breakout-MinAtar`) or
`brax:<name>` (`brax:halfcheetah`, `brax:ant`) takes this backend; it needs the `jax-envs` extra
(`pip install -e ".[jax-envs]"`) for gymnax, the `brax` extra for Brax. Each env is a pure
function of its state (and, for gymnax, a key), vmapped over the batch, so a run's whole loop,
envs included, is one XLA program on whichever device acts. The "handle" an `XlaEnv` threads
through its steps is here the envs' state itself (`EnvBatch`), and `--num-seeds` agents each step
their own slice of it.

Each library comes in through one `FunctionalEnv` (`reset(key) -> (obs, state)`,
`step(key, state, action) -> (obs, state, reward, terminated)`, its spaces and its time limit);
everything else (keys, time limits, resets, evaluation) is this module's, the same for both.

The step keeps EnvPool's convention (see `jaxrl_fast.env.envpool`): the step that ends an episode
returns its final observation (for bootstrapping at a time limit), and the env's next step is a
reset step (its action ignored, reward 0, no transition) that returns the new episode's first
observation. The libraries' own auto-resets (gymnax's, Brax's `AutoResetWrapper`), which return
the next episode's observation in place of the final one, are not used. An episode is truncated
after the env's time limit of steps (gymnax's `max_steps_in_episode`, `episode_length` for
Brax, 1000 as in Brax's training). Env i is seeded `seed + i` (its key is
`jax.random.key(seed + i)`), as EnvPool seeds its envs, so `--num-seeds` agents step exactly the
envs of their single runs.

Observations are float32 vectors (MinAtar's `[10, 10, C]` grids flattened, as PureJaxRL and rejax
feed them to an MLP); actions are a gymnax `Discrete` or `Box`, Brax's a box of [-1, 1].
`--env-kwargs` sets fields of a gymnax env's parameters (`max_steps_in_episode=1000`), or a Brax
env's constructor arguments, its physics `backend` and its `episode_length`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib
import inspect
import io
import sys
import threading
import types
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.env.episodes import play_episodes
from jaxrl_fast.env.ids import EnvError, env_family
from jaxrl_fast.env.spaces import action_fields, seeds_of_envs
from jaxrl_fast.types import EnvSpec, Step


class JaxEnvError(EnvError):
    pass


def name_of(env_id: str) -> str:
    return env_id.split(":", 1)[1]


# gymnax's package imports all its environments, and some (Pong, Catch, FourRooms, ...) import
# these at their top for rendering: seaborn brings pandas and scipy.stats, about 0.7 s of a cold
# start's 0.85 s `import gymnax` (profiling.md "Cold-start options").
GYMNAX_RENDERING_MODULES = ("seaborn", "matplotlib.pyplot")


_STAND_INS = threading.Lock()  # two threads reading one stand-in first: one of them takes it out


class DeferredModule(types.ModuleType):
    """A module's stand-in that imports the module at its first attribute read and reads it there
    (introspection reads attributes too: `hasattr`, `copy`). It serves `import name (as x)` and
    `import pkg.name as x`; `from name import x` imports the module at once."""

    def __getattr__(self, attribute: str) -> Any:
        with _STAND_INS:
            if sys.modules.get(self.__name__) is self:
                del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), attribute)

    def __repr__(self) -> str:
        return f"<deferred module {self.__name__!r}>"


@contextlib.contextmanager
def imports_deferred(names: Sequence[str]):
    """Within the block, `import name` of a module not yet imported binds a `DeferredModule`; after
    it, `sys.modules` holds no stand-in, so later imports get the module itself."""
    stand_ins = {name: DeferredModule(name) for name in names if name not in sys.modules}
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        with _STAND_INS:
            for name, stand_in in stand_ins.items():
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]


def import_library(family: str) -> Any:
    extra = {"gymnax": "jax-envs", "brax": "brax"}[family]
    try:
        if family == "brax":
            # MJX prints a line to stdout when NVIDIA Warp is absent; Brax's MJX backend is JAX's, not Warp's
            with contextlib.redirect_stdout(io.StringIO()):
                import brax.envs as library
        else:
            first = "gymnax" not in sys.modules  # the stand-ins only while gymnax's modules run
            with imports_deferred(GYMNAX_RENDERING_MODULES) if first else contextlib.nullcontext():
                import gymnax as library
    except ImportError as error:
        raise JaxEnvError(f"--env {family}:<id> needs {family}, which the {extra} extra installs: "
                          f"pip install -e \".[{extra}]\" ({error})") from error
    return library


def known_names(family: str) -> list[str]:
    library = import_library(family)
    return sorted(library._envs) if family == "brax" else list(library.registered_envs)


def check_name(env_id: str) -> str:
    """The library's name of an id of this backend, or a JaxEnvError with the close matches."""
    family, name = env_family(env_id), name_of(env_id)
    known = known_names(family)
    if name not in known:
        prefix = f"{family}:"
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
        if not close:  # case slips: 'HalfCheetah' -> 'halfcheetah'
            lowered = {k.lower(): k for k in known}
            close = [lowered[k] for k in difflib.get_close_matches(name.lower(), list(lowered), n=5, cutoff=0.5)]
        hint = f" Did you mean: {', '.join(prefix + c for c in close)}?" if close else ""
        raise JaxEnvError(f"--env: {name!r} is not one of {family}'s environments.{hint} ({family} has "
                          f"{len(known)}: {', '.join(known) if len(known) <= 16 else 'see its registry'})")
    return name


def option_items(options: dict[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    """`--env-kwargs` as a hashable key (the caches of `functional` and the evaluation programs)."""
    return tuple(sorted((options or {}).items()))


def unknown_option(env_id: str, key: str, known: Sequence[str], what: str) -> JaxEnvError:
    close = difflib.get_close_matches(key, list(known), n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return JaxEnvError(f"--env-kwargs: {env_id} has no {what} {key!r}.{hint} It has: {', '.join(known)}")


@dataclasses.dataclass(frozen=True)
class FunctionalEnv:
    """One env of a library as pure functions, and its spaces: what this module needs of gymnax or Brax."""

    reset: Callable[[jax.Array], tuple[jax.Array, Any]]  # key -> (obs, state)
    step: Callable[[jax.Array, Any, jax.Array], tuple[jax.Array, Any, jax.Array, jax.Array]]  # -> obs, state, reward, terminated
    obs_size: int
    obs_given: tuple[int, ...]  # the observation's shape as the library gives it (flattened to obs_size)
    num_actions: int  # 0 for continuous actions
    action_low: tuple[float, ...]  # () for discrete actions
    action_high: tuple[float, ...]
    max_steps: int  # the time limit: an episode is truncated after this many steps


@functools.lru_cache(maxsize=None)
def functional(env_id: str, options: tuple[tuple[str, Any], ...] = ()) -> FunctionalEnv:
    """The env of an id with its `--env-kwargs` (`option_items`) set, built once per process."""
    check_name(env_id)
    return (brax_env if env_family(env_id) == "brax" else gymnax_env)(env_id, dict(options))


def gymnax_env(env_id: str, options: dict[str, Any]) -> FunctionalEnv:
    env, params = import_library("gymnax").make(name_of(env_id))
    fields = [f.name for f in dataclasses.fields(params)]
    for key, value in options.items():
        if key not in fields:
            raise unknown_option(env_id, key, fields, "parameter")
        check_parameter(env_id, key, value, getattr(params, key))
    params = params.replace(**options)
    action = env.action_space(params)
    if not hasattr(action, "n") and not hasattr(action, "low"):
        raise JaxEnvError(f"--env: {env_id} acts in {type(action).__name__}; this backend takes a Discrete or a Box")
    fields = action_fields(action)

    def step(key, state, action):
        obs, state, reward, terminated, _ = env.step_env(key, state, action, params)
        return obs, state, reward, terminated

    return FunctionalEnv(
        reset=lambda key: env.reset_env(key, params), step=step,
        obs_size=int(np.prod(env.observation_space(params).shape)), obs_given=tuple(env.observation_space(params).shape),
        num_actions=fields["num_actions"],
        action_low=fields["action_low"], action_high=fields["action_high"], max_steps=int(params.max_steps_in_episode))


def check_parameter(env_id: str, key: str, value: Any, default: Any) -> None:
    """A gymnax parameter's value of its default's kind (a bool, an integer, a number), and a time
    limit of at least one step; refused in one line otherwise."""
    kind = np.asarray(default).dtype.kind
    fits = {"b": isinstance(value, bool), "i": isinstance(value, int) and not isinstance(value, bool),
            "u": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
            "f": isinstance(value, (int, float)) and not isinstance(value, bool)}.get(kind, True)
    if not fits:
        raise JaxEnvError(f"--env-kwargs: {key}={value!r} is of type {type(value).__name__}; {env_id}'s {key} is "
                          f"{np.asarray(default).dtype.name} (default {np.asarray(default).item()!r})")
    if key == "max_steps_in_episode" and value < 1:
        raise JaxEnvError(f"--env-kwargs: max_steps_in_episode={value!r} must be a positive integer")


BRAX_BACKENDS = ("positional", "generalized", "mjx", "spring")
BRAX_BACKEND = "positional"  # the fastest of the four at 256 envs on a 2-core CPU (docs/own-env.md)
BRAX_EPISODE_LENGTH = 1000  # Brax's training default, and its papers'


def brax_env(env_id: str, options: dict[str, Any]) -> FunctionalEnv:
    library, name = import_library("brax"), name_of(env_id)
    options = dict(options)
    given_backend = "backend" in options
    backend = options.pop("backend", BRAX_BACKEND)
    max_steps = options.pop("episode_length", BRAX_EPISODE_LENGTH)
    if backend not in BRAX_BACKENDS:
        raise JaxEnvError(f"--env-kwargs: backend={backend!r}; Brax's physics backends are {', '.join(BRAX_BACKENDS)}")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise JaxEnvError(f"--env-kwargs: episode_length={max_steps!r} must be a positive integer")
    arguments = [p for p in inspect.signature(library._envs[name].__init__).parameters
                 if p not in ("self", "backend", "kwargs")]
    for key in options:
        if key not in arguments:
            raise unknown_option(env_id, key, ["backend", "episode_length", *arguments], "argument")
    with warnings.catch_warnings():  # "not actively being maintained", at every env built (docs/own-env.md says so once)
        warnings.filterwarnings("ignore", message="Brax System", category=UserWarning)
        try:
            env = library.get_environment(name, backend=backend, **options)
        except ValueError as error:  # a backend the env does not take (swimmer: generalized only)
            if given_backend or "backend" not in str(error):
                raise JaxEnvError(f"--env: Brax's {name} cannot be made with backend={backend!r}"
                                  f"{' and ' + str(options) if options else ''}: {error}") from error
            env = library.get_environment(name, **options)  # its own default backend

    def reset(key):
        state = env.reset(key)
        return state.obs, state

    def step(key, state, action):  # Brax's physics draws no randomness: the key goes unused
        state = env.step(state, action)
        return state.obs, state, state.reward, state.done > 0.5

    size = int(env.action_size)
    # Brax's `observation_size` runs a reset op by op (15 s on a CPU under MJX); tracing one is free
    obs_given = tuple(jax.eval_shape(reset, jax.random.key(0))[0].shape)
    return FunctionalEnv(reset=reset, step=step, obs_size=int(np.prod(obs_given)), obs_given=obs_given, num_actions=0,
                         action_low=(-1.0,) * size, action_high=(1.0,) * size, max_steps=int(max_steps))


def spec_of(env_id: str, num_envs: int, options: dict[str, Any] | None = None) -> EnvSpec:
    env = functional(env_id, option_items(options))
    discrete = env.num_actions > 0
    return EnvSpec(
        env_id=env_id, family=env_family(env_id), num_envs=num_envs, obs_shape=(env.obs_size,),
        obs_parts=(("", env.obs_given),) if len(env.obs_given) != 1 else (),
        discrete=discrete, num_actions=env.num_actions, action_shape=() if discrete else (len(env.action_low),),
        action_low=env.action_low, action_high=env.action_high, max_episode_steps=env.max_steps)


class EnvBatch(NamedTuple):
    """A batch of JAX-native envs, `[num_envs, ...]` each: what the jitted loop threads as the handle."""

    state: Any  # the library's env states
    key: jax.Array  # uint32 key data, one key per env
    reset_step: jax.Array  # bool: the env's next step is a reset step
    elapsed: jax.Array  # int32: steps of the running episode (its time limit truncates it)


def env_functions(env_id: str, options: dict[str, Any] | None = None,
                  resets: str = "when_due") -> tuple[Callable, Callable]:
    """`reset(keys [N]) -> (obs, EnvBatch)` (the envs' start keys, `start_keys`) and
    `step(EnvBatch, action) -> (EnvBatch, Step)`, both pure and jittable, vmapped over the envs.
    `resets`: "when_due" computes the library's reset in the steps where an env needs one;
    "every_step" in every step (the same results, slower); "never" in none, for a program that
    plays one episode per env and reads nothing of an env after its episode ends (the same
    results until then, and the step alone to compile, with no reset and no branch)."""
    env = functional(env_id, option_items(options))

    def observe(obs: jax.Array) -> jax.Array:
        return jnp.reshape(obs, (-1,)).astype(jnp.float32)

    def reset_one(start: jax.Array) -> tuple[jax.Array, EnvBatch]:
        key, reset_key = jax.random.split(jax.random.wrap_key_data(start))
        obs, state = env.reset(reset_key)
        return observe(obs), EnvBatch(state, jax.random.key_data(key), jnp.zeros((), bool), jnp.zeros((), jnp.int32))

    def step_one(batch: EnvBatch, action: jax.Array, resets: bool) -> tuple[EnvBatch, Step]:
        key, step_key, reset_key = jax.random.split(jax.random.wrap_key_data(batch.key), 3)
        stepped_obs, stepped, reward, terminated = env.step(step_key, batch.state, action)
        obs, state, fresh = observe(stepped_obs), stepped, batch.reset_step
        if resets:
            reset_obs, reset = env.reset(reset_key)
            state = jax.tree.map(lambda r, s: jnp.where(fresh, r, s), reset, stepped)
            obs = jnp.where(fresh, observe(reset_obs), obs)
        elapsed = jnp.where(fresh, 0, batch.elapsed + 1)
        terminated = ~fresh & jnp.reshape(terminated, ())
        truncated = ~fresh & ~terminated & (elapsed >= env.max_steps)
        reward = jnp.where(fresh, 0.0, jnp.reshape(reward, ()).astype(jnp.float32))
        step = Step(obs=obs, reward=reward, terminated=terminated, truncated=truncated, elapsed_step=elapsed,
                    score=reward, game_over=terminated | truncated)
        return EnvBatch(state, jax.random.key_data(key), terminated | truncated, elapsed), step

    with_resets = jax.vmap(functools.partial(step_one, resets=True))
    without_resets = jax.vmap(functools.partial(step_one, resets=False))

    def step(batch: EnvBatch, action: jax.Array) -> tuple[EnvBatch, Step]:
        # A reset costs as much as a step or more (MinAtar: 2x), and most steps reset no env:
        # those skip it. Both branches draw the same keys, so which one runs changes no result.
        return jax.lax.cond(batch.reset_step.any(), with_resets, without_resets, batch, action)

    steps = {"when_due": step, "every_step": with_resets, "never": without_resets}
    if resets not in steps:
        raise ValueError(f"resets={resets!r}: one of {', '.join(map(repr, steps))}")
    return jax.vmap(reset_one), steps[resets]


def env_seeds(seed: int | Sequence[int], num_envs: int) -> np.ndarray:
    """Env i's seed (`spaces.seeds_of_envs`) as the uint32 a key is made from."""
    return np.asarray(seeds_of_envs(seed, num_envs), np.uint32)


ENV_STREAM = 0x656E76  # "env": env i's keys are folded off `key(seed_i)`, which the agent of seed_i draws from


def start_keys(seeds: Any, round: Any = 0) -> jax.Array:
    """The envs' key data at their `round`-th reset: `key(seed)` folded with `ENV_STREAM` first (a
    stream of the env's own: env 0's seed is the agent's, whose key splits into its parameters'
    and its loop's), then folded with the round, so that a pool reset again starts new episodes,
    as EnvPool's does. A Python `round` from the host; a traced one inside a program
    (`episodes_program`)."""
    keys = jax.vmap(lambda seed: jax.random.fold_in(jax.random.key(seed), ENV_STREAM))(jnp.asarray(seeds, jnp.uint32))
    if isinstance(round, int):
        return jax.random.key_data(jax.vmap(jax.random.fold_in, (0, None))(keys, round) if round else keys)
    folded = jax.vmap(jax.random.fold_in, (0, None))(keys, round)
    return jnp.where(round == 0, jax.random.key_data(keys), jax.random.key_data(folded))


@functools.lru_cache(maxsize=None)
def episodes_program(env_id: str, options: tuple[tuple[str, Any], ...], policy: Callable,
                     resets: str = "never") -> Callable:
    """`(payload, env seeds [N], round, seed uint32) -> (returns, lengths)`: one episode per env from
    its `round`-th reset (`start_keys`, in the program: computed from the host, its `fold_in` would
    compile on its own in a run's second evaluation), acted by `policy(payload, obs, step seed)`,
    in one jitted program, each step's uint32 seed drawn from `seed` (a sampling policy's; a
    deterministic one ignores it); one program per env, options and policy, so the evaluators of
    `--num-seeds` agents share it. `resets` as `env_functions`': "never" (an ended episode is masked;
    `profiling/eval_program.py` compiles the others to compare)."""
    reset, step = env_functions(env_id, dict(options), resets=resets)
    max_steps = functional(env_id, options).max_steps

    def episodes(payload: Any, seeds: jax.Array, round: jax.Array, seed: jax.Array) -> tuple[jax.Array, jax.Array]:
        obs, batch = reset(start_keys(seeds, round))
        return play_episodes(step, batch, obs, policy, payload, seed, max_steps)

    return jax.jit(episodes)


class JaxEnvPool:
    """`num_envs` JAX-native envs stepped from the host, with the surface the engine uses of an EnvPool
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

    def play(self, policy: Callable[[Any, jax.Array, jax.Array], jax.Array], payload: Any, seed: Any = 0,
             count: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """One episode in each env from a reset, acted by `policy(payload, obs, step seed) -> actions`
        in one jitted program (`episodes_program`, its step seeds drawn from `seed`): what
        `evaluation.run_episodes` does step by step from the host, at the cost of one call. Returns
        (returns, lengths) per env. `count=False` plays without counting a reset (the evaluator's
        compile-ahead call)."""
        program = episodes_program(self.env_id, self.options, policy)
        returns, lengths = jax.device_get(program(payload, self.seeds, np.uint32(self.resets), np.uint32(seed)))
        self.resets += count
        return np.asarray(returns, np.float64), np.asarray(lengths, np.int64)

    def prepare_play(self, policy: Callable[[Any, jax.Array, jax.Array], jax.Array], payload: Any) -> None:
        """Compile `play`'s program for payloads like `payload` by playing it uncounted: the pool's
        next evaluation starts from the reset it would have."""
        self.play(policy, payload, np.uint32(0), count=False)

    def close(self) -> None:
        self.batch = None


@dataclasses.dataclass
class JaxXlaEnv:
    """JAX-native envs as an `XlaEnv`: `handle` is their `EnvBatch` after reset, `step` is pure JAX."""

    spec: EnvSpec
    pool: JaxEnvPool  # the same envs from the host (reset, config); the loop steps `handle`
    handle: EnvBatch
    step: Callable[[EnvBatch, jax.Array], tuple[EnvBatch, Step]]
    first_obs: np.ndarray
    has_gpu_step: bool = True  # the step is XLA's: it runs on any device
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    program_key: str | None = "jax-native"  # pure JAX: its programs name nothing of this process

    def reset(self) -> np.ndarray:
        return self.first_obs


def make_jax_xla_env(env_id: str, num_envs: int, seed: int | Sequence[int], **options: Any) -> JaxXlaEnv:
    pool = JaxEnvPool(env_id, num_envs, seed, **options)
    obs, _ = pool.reset()
    return JaxXlaEnv(pool.spec, pool, jax.device_get(pool.batch), pool.step_fn, obs, options=dict(options))
