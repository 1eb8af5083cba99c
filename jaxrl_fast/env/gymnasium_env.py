"""The Gymnasium backend: a Python environment, Gymnasium's registered ids or the user's own class,
stepped on the host as a vector environment and called from the jitted loops.

An id takes this backend by its form:

* `gym:LunarLander-v3`: an id of Gymnasium's registry (close matches when it is not one);
* `my_package.envs:MyEnv`: a module path, a colon, and a `gymnasium.Env` class or a factory
  returning one (built with the `--env-kwargs` options as keyword arguments).

The envs run in Gymnasium's `SyncVectorEnv` with its `NEXT_STEP` autoreset, which is EnvPool's
convention: the step that ends an episode returns its final observation, and the next step of that
env is a reset step (its action ignored, reward 0) that returns the new episode's first
observation. So a transition never spans a reset, and the engine's reset-step mask applies as it
does to EnvPool. Inside a jitted loop the step is a call of `env.ffi_forward`'s host target, which
hands the buffers to this pool's Python step (or an ordered `io_callback` where that library cannot
be built), so every schedule that drives an `XlaEnv` drives these envs too; the acting stays
jitted, the stepping is Python's, and the programs name a slot number, so JAX's cache and the
program store keep them.

Observations are float32 vectors (a Box of any shape is flattened; a Dict of Boxes is flattened in
key order, as EnvPool's dicts are); actions are a Discrete or a Box.
"""

from __future__ import annotations

import ctypes
import dataclasses
import difflib
import functools
import importlib
import math
import weakref
from collections.abc import Mapping
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import ffi

from jaxrl_fast.env import ffi_forward
from jaxrl_fast.env.spaces import action_fields, flatten_observations, observation_keys_of, seeds_of_envs
from jaxrl_fast.types import ConfigError, EnvSpec, Step

FAMILY = "gymnasium"
DEFAULT_MAX_STEPS = 1000  # the time limit of a class that sets none


class GymEnvError(ConfigError):
    pass


def _registered(name: str) -> Any:
    import gymnasium

    if name not in gymnasium.registry:
        close = difflib.get_close_matches(name, list(gymnasium.registry), n=5, cutoff=0.6)
        hint = f" Did you mean: {', '.join('gym:' + c for c in close)}?" if close else ""
        raise GymEnvError(f"--env: {name!r} is not an id of Gymnasium's registry.{hint}")
    return gymnasium.registry[name]


def constructor(env_id: str) -> tuple[Callable[..., Any], int]:
    """A callable making one env of `env_id` from keyword options, and its time limit."""
    import gymnasium

    prefix, name = env_id.split(":", 1)
    if prefix == "gym":
        spec = _registered(name)
        return functools.partial(gymnasium.make, name), int(spec.max_episode_steps or DEFAULT_MAX_STEPS)
    try:
        module = importlib.import_module(prefix)
    except (ImportError, ValueError, TypeError) as error:  # ValueError: an empty or relative module name
        raise GymEnvError(f"--env: cannot import {prefix!r} for {env_id!r} ({error}); the forms are an EnvPool id, "
                          f"gym:<Gymnasium id> or module.path:ClassOrFactory") from error
    if not hasattr(module, name):
        close = difflib.get_close_matches(name, [n for n in dir(module) if not n.startswith("_")], n=3)
        hint = f" Did you mean: {', '.join(f'{prefix}:{c}' for c in close)}?" if close else ""
        raise GymEnvError(f"--env: {prefix} has no {name!r}.{hint}")
    make = getattr(module, name)

    def made(**options: Any) -> Any:
        env = make(**options)
        if not isinstance(env, gymnasium.Env):
            raise GymEnvError(f"--env: {env_id} made a {type(env).__name__}, not a gymnasium.Env")
        limit = env.spec.max_episode_steps if env.spec is not None else None
        if limit and time_limited(env):  # as gymnasium.make wraps a registered id
            return env
        return gymnasium.wrappers.TimeLimit(env, limit or DEFAULT_MAX_STEPS)  # a class's own spec: held to it

    return made, DEFAULT_MAX_STEPS


def checked_env(make: Callable[..., Any], env_id: str, **options: Any) -> Any:
    """One env of `make`, its observations checked against its space's shapes (`ShapeChecked`)."""
    return _shape_checked()(make(**options), env_id)


@functools.lru_cache(maxsize=None)
def _shape_checked() -> type:
    """`ShapeChecked(env, env_id)`, a Gymnasium wrapper (made at the first use: Gymnasium is
    imported only by runs that use this backend)."""
    import gymnasium

    class ShapeChecked(gymnasium.Wrapper):
        """Refuses an observation of another shape than its space's (a Box's, or a Dict's per key)
        in a GymEnvError naming the env and the step; the vector env would fail stacking it, in
        numpy's words."""

        def __init__(self, env: Any, env_id: str):
            super().__init__(env)
            space, self.env_id, self.steps = env.observation_space, env_id, 0
            keys = observation_keys_of(space)
            # a subspace without a shape (a nested Dict's) is the pool's to refuse, with the space
            self.shapes = ({k: tuple(getattr(space.spaces[k], "shape", None) or ()) for k in keys} if keys
                           else tuple(getattr(space, "shape", None) or ()))

        def reset(self, **kwargs: Any) -> Any:
            obs, info = self.env.reset(**kwargs)
            self.steps = 0
            self.check(obs)
            return obs, info

        def step(self, action: Any) -> Any:
            result = self.env.step(action)
            self.steps += 1
            self.check(result[0])
            return result

        def check(self, obs: Any) -> None:
            if isinstance(self.shapes, dict):
                got = ({k: tuple(np.shape(obs[k])) if k in obs else "missing" for k in self.shapes}
                       if isinstance(obs, Mapping) else type(obs).__name__)
            else:
                got = tuple(np.shape(obs))
            if got != self.shapes:
                raise GymEnvError(f"{self.env_id} returned an observation of shape {got} at step {self.steps} of its "
                                  f"episode; its observation space {self.observation_space} says {self.shapes}")

    return ShapeChecked


def time_limited(env: Any) -> bool:
    """Whether a TimeLimit wrapper is among `env`'s wrappers."""
    import gymnasium

    while env is not None:
        if isinstance(env, gymnasium.wrappers.TimeLimit):
            return True
        env = getattr(env, "env", None) if isinstance(env, gymnasium.Wrapper) else None
    return False


class GymPool:
    """`num_envs` envs in a `SyncVectorEnv` (NEXT_STEP autoreset), seeded `seed + i`, with the
    surface the engine uses of an EnvPool pool: `reset()`, `step(actions)`, spaces and `config`."""

    def __init__(self, env_id: str, num_envs: int, seed: int | Sequence[int], **options: Any):
        import gymnasium
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        make, limit = constructor(env_id)
        try:
            # copy=False: the vector env then hands back its own observation buffer, which its next step
            # overwrites; `flat` copies it (`astype` copies by default, `concatenate` always), so keep it so
            self.vector = SyncVectorEnv([functools.partial(checked_env, make, env_id, **options) for _ in range(num_envs)],
                                        autoreset_mode=AutoresetMode.NEXT_STEP, copy=False)
        except TypeError as error:  # an option the constructor does not take, or a callable that makes no env
            if not options:
                raise GymEnvError(f"--env: {env_id} could not be made with no options: {error}") from error
            raise GymEnvError(f"--env-kwargs: {env_id} refused its options: {error}") from error
        except (ImportError, gymnasium.error.DependencyNotInstalled) as error:  # gym:LunarLander-v3 without Box2D
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise GymEnvError(f"--env: {env_id} needs a package this environment lacks: {reason}") from error
        single = self.vector.single_observation_space
        self.keys = observation_keys_of(single)
        spaces = [single.spaces[k] for k in self.keys] if self.keys else [single]
        if not all(isinstance(s, gymnasium.spaces.Box) for s in spaces):
            raise GymEnvError(f"--env: {env_id} observes {single}; this backend takes a Box or a Dict of Boxes")
        action = self.vector.single_action_space
        if not isinstance(action, (gymnasium.spaces.Box, gymnasium.spaces.Discrete)):
            raise GymEnvError(f"--env: {env_id} acts in {action}; this backend takes a Discrete or a Box")
        if isinstance(action, gymnasium.spaces.Discrete) and int(action.start) != 0:
            raise GymEnvError(f"--env: {env_id} acts in {action}, whose actions start at {int(action.start)}; this "
                              "backend takes a Discrete whose actions start at 0 (wrap the env in a "
                              "gymnasium.ActionWrapper that adds the start)")
        size = sum(int(np.prod(s.shape)) for s in spaces)
        self.env_id = env_id
        self.box_shape = tuple(action.shape) if isinstance(action, gymnasium.spaces.Box) else None
        self.single_observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.single_action_space = action
        self.num_envs = num_envs
        self.seeds = seeds_of_envs(seed, num_envs)
        self.limit = int(self.vector.envs[0].spec.max_episode_steps or limit) if self.vector.envs[0].spec else limit
        self.config = {"num_envs": num_envs, "num_threads": 1, "max_episode_steps": self.limit}  # EnvPool's keys; one host thread
        self.elapsed = np.zeros(num_envs, np.int32)
        self.ended = np.zeros(num_envs, bool)
        self.seeded = False

    def reset(self) -> tuple[np.ndarray, dict]:
        # seeded once: a pool reset again (the evaluator's, at each evaluation) starts new episodes, as EnvPool's does
        obs, info = self.vector.reset(seed=None if self.seeded else self.seeds)
        self.seeded = True
        self.elapsed[:], self.ended[:] = 0, False
        return self.flat(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        action = np.asarray(action)
        if self.box_shape is not None:  # in the Box's shape (a scalar Box's arrive as [N, 1] from a network)
            action = action.reshape((self.num_envs, *self.box_shape))
        obs, reward, terminated, truncated, info = self.vector.step(action)
        # NEXT_STEP: an env that ended on the last call was reset by this one (elapsed 0, reward 0)
        self.elapsed = np.where(self.ended, 0, self.elapsed + 1).astype(np.int32)
        self.ended = np.asarray(terminated | truncated)
        info = dict(info, elapsed_step=self.elapsed.copy())
        obs, reward = self.flat(obs), np.asarray(reward, np.float32)
        if not np.isfinite(reward).all():
            raise GymEnvError(self.non_finite("reward", reward))
        return obs, reward, np.asarray(terminated, bool), np.asarray(truncated, bool), info

    def flat(self, obs: Any) -> np.ndarray:
        """A batch of observations as float32 vectors (a Box's flattened, a Dict's in key order),
        always a copy: the vector env (`copy=False`) overwrites its own buffer at the next step.
        Their shapes are each env's `ShapeChecked`'s to check; one not finite in float32 is the env's error."""
        flat = flatten_observations(obs, self.keys) if self.keys else np.reshape(obs, (self.num_envs, -1)).astype(np.float32)
        if not np.isfinite(flat).all():
            raise GymEnvError(self.non_finite("observation", flat))
        return flat

    def non_finite(self, what: str, values: np.ndarray) -> str:
        rows = values.reshape(self.num_envs, -1)
        env = int(np.flatnonzero(~np.isfinite(rows).all(axis=1))[0])
        first = rows[env][~np.isfinite(rows[env])][0]
        return (f"{self.env_id} returned a non-finite {what} ({first}) in env {env}, step {int(self.elapsed[env])} "
                "of its episode (as float32; the learner cannot train on it)")

    def close(self) -> None:
        self.vector.close()


def spec_of(pool: GymPool, env_id: str) -> EnvSpec:
    raw = pool.vector.single_observation_space
    parts = (tuple((k, tuple(raw.spaces[k].shape)) for k in pool.keys) if pool.keys else
             (("", tuple(raw.shape)),) if len(raw.shape) != 1 else ())
    return EnvSpec(
        env_id=env_id, family=FAMILY, num_envs=pool.num_envs, obs_shape=pool.single_observation_space.shape,
        **action_fields(pool.single_action_space), max_episode_steps=pool.limit, obs_keys=pool.keys, obs_parts=parts)


@dataclasses.dataclass
class GymXlaEnv:
    """A `GymPool` seen from jitted code as an `XlaEnv`: `step(handle, action)` calls into the host
    envs (`_host_call`); the handle is a token threaded through, as EnvPool's is."""

    spec: EnvSpec
    pool: GymPool
    handle: np.ndarray
    step: Callable[[jax.Array, jax.Array], tuple[jax.Array, Step]]
    has_gpu_step: bool = False
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    program_key: str | None = None  # the host target's slot; None: an `io_callback`, which no cache keeps

    def reset(self) -> np.ndarray:
        return self.pool.reset()[0]


def make_gym_xla_env(env_id: str, num_envs: int, seed: int | Sequence[int], **options: Any) -> GymXlaEnv:
    pool = GymPool(env_id, num_envs, seed, **options)
    spec = spec_of(pool, env_id)
    n = num_envs
    action = jax.ShapeDtypeStruct((n,) if spec.discrete else (n, *spec.action_shape),
                                  jnp.int32 if spec.discrete else jnp.float32)
    shapes = (jax.ShapeDtypeStruct((n, *spec.obs_shape), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.float32),
              jax.ShapeDtypeStruct((n,), jnp.bool_), jax.ShapeDtypeStruct((n,), jnp.bool_),
              jax.ShapeDtypeStruct((n,), jnp.int32))
    call, slot = _host_call(weakref.ref(pool), action, shapes)

    def step(handle: jax.Array, action_in: jax.Array) -> tuple[jax.Array, Step]:
        handle, obs, reward, terminated, truncated, elapsed = call(
            handle, jnp.asarray(action_in, action.dtype).reshape(action.shape))
        done = terminated | truncated
        return handle, Step(obs=obs, reward=reward, terminated=terminated, truncated=truncated & ~terminated,
                            elapsed_step=elapsed, score=reward, game_over=done)

    return GymXlaEnv(spec, pool, np.zeros(8, np.uint8), step, options=dict(options),
                     program_key=None if slot is None else f"host-slot-{slot}")


def _stepped(pool: GymPool, action: np.ndarray) -> tuple[np.ndarray, ...]:
    """One step of the pool as the programs receive it: obs, reward, terminated, truncated, elapsed."""
    obs, reward, terminated, truncated, info = pool.step(action)
    return obs, reward, terminated, truncated, info["elapsed_step"]


def _viewer(struct: jax.ShapeDtypeStruct) -> Callable[[int], np.ndarray]:
    """`view(address)`: XLA's buffer at `address`, of `struct`'s shape and dtype, as a numpy view
    (no copy). The layout is worked out once: per step, numpy's size arithmetic cost more than
    the rest of the view (2.1 of 2.7 us, seven views a step)."""
    dtype, shape = np.dtype(struct.dtype), tuple(struct.shape)
    raw = ctypes.c_char * (math.prod(shape) * dtype.itemsize)
    return lambda address: np.frombuffer(raw.from_address(address), dtype).reshape(shape)


def _host_call(pool: Callable[[], GymPool | None], action: jax.ShapeDtypeStruct, shapes: tuple[jax.ShapeDtypeStruct, ...]
               ) -> tuple[Callable[[jax.Array, jax.Array], tuple[jax.Array, ...]], int | None]:
    """`call(handle, action) -> (handle, *step)` stepping the pool from a program, and the slot of
    `ffi_forward`'s host target it names: the programs are then the persistent cache's and the
    program store's like any other. Without that library (None), an ordered `io_callback`, which
    names this process's Python function: such programs are compiled every run.

    The target reads and writes host memory, so it is registered for the CPU alone: a program
    that steps these envs runs on the host device (`has_gpu_step` False; the engine places the
    acting there). Slots are never reused: the first pool of a process has slot 0 in every run of
    the same configuration, a second pool in the same process (a notebook's second run) a new slot,
    whose programs are compiled and stored anew."""
    forwarder = ffi_forward.forwarder()
    if forwarder is None:
        def host_step(action: np.ndarray) -> tuple[np.ndarray, ...]:
            try:
                return _stepped(pool(), action)
            except BaseException as error:
                ffi_forward.note_host_error(error)  # XLA hands the caller its text only
                raise

        def by_callback(handle: jax.Array, action: jax.Array) -> tuple[jax.Array, ...]:
            from jax.experimental import io_callback

            return handle, *io_callback(host_step, shapes, action, ordered=True)

        return by_callback, None

    action_view, result_views = _viewer(action), [_viewer(struct) for struct in shapes]

    def host_step(args: Any, rets: Any) -> None:
        live = pool()
        if live is None:
            raise RuntimeError("the Gymnasium envs of this program were closed")
        for i, value in enumerate(_stepped(live, action_view(args[1]).copy())):
            np.copyto(result_views[i](rets[i + 1]), value, casting="same_kind")  # a wrong shape raises, never overruns

    slot = forwarder.host_slot(host_step)
    call = ffi.ffi_call(ffi_forward.HOST_TARGET, (jax.ShapeDtypeStruct((8,), jnp.uint8), *shapes), has_side_effect=True,
                        input_output_aliases={0: 0})
    return lambda handle, action: call(handle, action, slot=np.int64(slot)), slot
