"""The EnvPool backend: one place where EnvPool batches meet jitted code.

From an EnvPool id and options this module builds

* an `EnvSpec` (observation and action specs as the learner sees them: float32 vectors, or uint8
  images that stay uint8 until a network's first layer scales them),
* `XlaEnv.step(handle, action) -> (handle, Step)`, usable inside `jit` and `lax.scan`, its 64-bit
  fields crossing in the wire format of `jaxrl_fast.env.wire`.

EnvPool's auto-reset: when a step ends an episode (`terminated | truncated`), the *next* call
for that env is a reset step. Its action is ignored, it returns the first observation of the new
episode with reward 0, and it is no transition. `EpisodeState.reset_step` marks such steps so
that learners can mask them out.

Games and episodes: with Atari's training options (`episodic_life`, `reward_clip`) the learner's
episode ends at every lost life and its rewards are clipped to their sign, while the score that
published tables count is the game's own: unclipped, over every life. Each step carries both, the
learner's `reward`/`terminated` and the game's `score`/`game_over` (EnvPool's `info:reward` and
`info:terminated`); episode statistics count games. Elsewhere the two are the same.
"""

from __future__ import annotations

import functools
import sys
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import ffi

from jaxrl_fast.env import ffi_forward
from jaxrl_fast.env.episodes import play_episodes
from jaxrl_fast.env.ids import PIXEL_FAMILIES, EnvError, check_env_id, env_family, is_gymnasium_id, is_jax_env_id
from jaxrl_fast.env.spaces import action_fields, flatten_observations, observation_keys_of
from jaxrl_fast.env.wire import from_wire, to_wire, wire_struct
from jaxrl_fast.types import EnvSpec, Step

# Gymnasium warns whenever EnvPool's float64 Box bounds are cast to float32: expected, and noise.
warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")


def check_step(step: Step, spec: EnvSpec) -> None:
    """The adapter's promise to the jitted code: shapes and dtypes of a batched step."""
    n = spec.num_envs
    chex.assert_shape(step.obs, (n, *spec.obs_shape))
    chex.assert_shape([step.reward, step.terminated, step.truncated, step.elapsed_step, step.score, step.game_over], (n,))
    chex.assert_type([step.obs, step.reward, step.terminated, step.elapsed_step, step.score, step.game_over],
                     [jnp.dtype(spec.obs_dtype), jnp.float32, bool, jnp.int32, jnp.float32, bool])


class XlaEnv(NamedTuple):
    """A batch of EnvPool environments driven from jitted code.

    `reset()` runs on the host once, before the first jitted call, and returns the first
    observations. `step` is pure in the sense JAX needs: the handle is threaded through.
    """

    spec: EnvSpec
    pool: Any  # the EnvPool object; kept alive as long as the handle is used
    handle: np.ndarray
    step: Callable[[jax.Array, jax.Array], tuple[jax.Array, Step]]
    has_gpu_step: bool  # EnvPool was built with a GPU target for its XLA calls
    options: dict[str, Any]  # the EnvPool options it was made with (e.g. Atari's episodic_life)
    program_key: str | None = None  # the forwarder's slots (`ffi_forward`); None: the program names the pool's address

    def reset(self) -> np.ndarray:
        obs, _ = self.pool.reset()
        return np.asarray(obs, dtype=self.spec.obs_dtype)


class FlatObservations:
    """An EnvPool pool whose dict observations (dm_control's) come as one float32 vector each: the
    keys' arrays flattened and concatenated in `keys` order. Everything else is the pool's own."""

    def __init__(self, pool: Any, keys: tuple[str, ...]):
        import gymnasium

        self._pool, self.keys = pool, keys
        size = sum(int(np.prod(pool.observation_space[k].shape)) for k in keys)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    @property
    def single_observation_space(self) -> Any:
        return self.observation_space

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    def reset(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, Any]:
        obs, info = self._pool.reset(*args, **kwargs)
        return flatten_observations(obs, self.keys), info

    def step(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        obs, *rest = self._pool.step(*args, **kwargs)
        return (flatten_observations(obs, self.keys), *rest)

    def recv(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        obs, *rest = self._pool.recv(*args, **kwargs)
        return (flatten_observations(obs, self.keys), *rest)


def make_pool(env_id: str, num_envs: int, num_threads: int, seed: int | Sequence[int], batch_size: int = 0,
              **options: Any) -> Any:
    """A gymnasium-style EnvPool; synchronous unless `0 < batch_size < num_envs` (async mode:
    `recv` returns the first `batch_size` envs to finish, `send` takes actions with their ids).
    Env i is seeded `seed + i` either way, or `seed[i]` when `seed` is a sequence (one per env).
    Dict observations come flat (`FlatObservations`). An id of the Gymnasium or the JAX-native
    backend gives that backend's pool."""
    if is_jax_env_id(env_id):
        from jaxrl_fast.env.jax_envs import JaxEnvError, JaxEnvPool

        if 0 < batch_size < num_envs:
            raise JaxEnvError(f"{env_id}: EnvPool's async mode (--env-batch-size) needs an EnvPool id")
        return JaxEnvPool(env_id, num_envs, seed, **options)
    if is_gymnasium_id(env_id):
        from jaxrl_fast.env.gymnasium_env import GymEnvError, GymPool

        if 0 < batch_size < num_envs:
            raise GymEnvError(f"{env_id}: EnvPool's async mode (--env-batch-size) needs an EnvPool id")
        return GymPool(env_id, num_envs, seed, **options)
    check_env_id(env_id)  # registers the id's family (and imports EnvPool)
    import envpool

    pool = envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=batch_size or num_envs,
        num_threads=num_threads,
        seed=[int(s) for s in seed] if isinstance(seed, (Sequence, np.ndarray)) else int(seed),
        **options,
    )
    keys = observation_keys_of(pool.observation_space)
    return FlatObservations(pool, keys) if keys else pool


def agent_env_seeds(seed: int, num_agents: int, num_envs: int) -> list[int]:
    """Per-env seeds of one pool shared by `num_agents` agents of `num_envs` envs each: agent k's
    envs get `seed + k + i`, as a single run with seed `seed + k` seeds its env i. So agent k's env
    i + 1 and agent k + 1's env i start from one seed, exactly as those two single runs would."""
    return [seed + k + i for k in range(num_agents) for i in range(num_envs)]


def spec_of(pool: Any, env_id: str) -> EnvSpec:
    space = pool.single_action_space if hasattr(pool, "single_action_space") else pool.action_space
    obs_space = pool.single_observation_space if hasattr(pool, "single_observation_space") else pool.observation_space
    return EnvSpec(
        env_id=env_id,
        family=env_family(env_id),
        num_envs=int(pool.config["num_envs"]),
        obs_shape=tuple(obs_space.shape),
        **action_fields(space),
        max_episode_steps=int(pool.config["max_episode_steps"]),
        obs_dtype="uint8" if np.dtype(obs_space.dtype) == np.uint8 else "float32",
        frame_stack=int(pool.config.get("stack_num", 1)) if env_family(env_id) in PIXEL_FAMILIES else 1,
        obs_keys=pool.keys if isinstance(pool, FlatObservations) else (),
        obs_parts=tuple((k, tuple(pool._pool.observation_space[k].shape)) for k in pool.keys)
        if isinstance(pool, FlatObservations) else (),
    )


def probe_spec(env_id: str, options: dict[str, Any] | None = None) -> EnvSpec:
    """The spec of an env id with pool options (e.g. Atari's frame size), from a one-env pool that
    is closed again at once (once per id and options: the checks ask for it more than once, and a
    MuJoCo pool takes a while to build)."""
    return _probe(env_id, tuple(sorted((options or {}).items())))[0]


def probe_gpu_step(env_id: str, options: dict[str, Any] | None = None) -> bool:
    """Whether EnvPool registers its XLA step for the GPU too (a wheel built with CUDA), from the same probe."""
    return _probe(env_id, tuple(sorted((options or {}).items())))[1]


@functools.lru_cache(maxsize=None)
def _probe(env_id: str, options: tuple[tuple[str, Any], ...]) -> tuple[EnvSpec, bool]:
    if is_jax_env_id(env_id):  # the JAX-native backend: no pool to build, its step runs on any device
        from jaxrl_fast.env.jax_envs import spec_of as jax_spec

        return jax_spec(env_id, 1, dict(options)), True
    pool = make_pool(env_id, num_envs=1, num_threads=1, seed=0, **dict(options))
    if is_gymnasium_id(env_id):  # the Gymnasium backend: host envs, no XLA step of EnvPool's
        from jaxrl_fast.env.gymnasium_env import spec_of as gym_spec

        try:
            return gym_spec(pool, env_id), False
        finally:
            pool.close()
    try:
        native = {name: entry for name, entry in pool._xla()}
        return spec_of(pool, env_id), all(native[name][2][1] is not None for name in ("recv", "send"))
    finally:
        pool.close()


def _xla_call(pool: Any, name: str, handle: bytes, specs: Any, capsules: Any) -> tuple[Callable, int | None]:
    """One of EnvPool's native XLA entry points as an `ffi_call` in wire format, and the slot of
    `ffi_forward` that its programs name (None: they name the pool's address and cannot be cached)."""
    in_specs, out_specs = specs
    cpu_capsule, gpu_capsule = capsules
    address = int.from_bytes(handle, byteorder=sys.byteorder, signed=False)
    forwarder = ffi_forward.forwarder()
    slot = forwarder.slot(cpu_capsule, gpu_capsule, address) if forwarder is not None else None
    if slot is not None:
        target, attrs = ffi_forward.TARGET, {"slot": np.int64(slot)}
    else:
        target, attrs = f"jaxrl_fast_{type(pool).__name__}_{id(pool)}_{name}", {"handle": address}
        ffi.register_ffi_target(target, cpu_capsule, platform="cpu", api_version=1)
        if gpu_capsule is not None:
            ffi.register_ffi_target(target, gpu_capsule, platform="gpu", api_version=1)
    ins = tuple(wire_struct(d, s) for d, s in in_specs)
    outs = tuple(wire_struct(d, s) for d, s in out_specs)
    call = ffi.ffi_call(
        target,
        outs,
        has_side_effect=True,
        input_layouts=tuple(tuple(range(len(x.shape))) for x in ins),
        output_layouts=tuple(tuple(range(len(x.shape))) for x in outs),
        input_output_aliases={0: 0},
    )

    def checked(*args: jax.Array) -> Any:
        for arg, want in zip(args, ins):  # runs at trace time: a wrong buffer never reaches C++
            if tuple(arg.shape) != tuple(want.shape) or arg.dtype != want.dtype:
                raise EnvError(f"EnvPool {name}: got {arg.dtype}{list(arg.shape)}, expected {want.dtype}{list(want.shape)}")
        return call(*args, **attrs)

    return checked, slot


def end_flags(done: Any, trunc: Any, elapsed: Any, max_steps: int) -> tuple[Any, Any]:
    """(terminated, truncated) from EnvPool's flags, for numpy or jax arrays.

    EnvPool has reported time-limit ends as plain `done` in some versions: trust the clock, where
    there is one (`max_steps` 0: the id registers none and its env sets `trunc` itself, BabyAI's)."""
    truncated = done & (trunc | (elapsed >= max_steps)) if max_steps > 0 else done & trunc
    return done & ~truncated, truncated


class HostSteps(NamedTuple):
    """What one `recv` of an async-mode pool returns, on the host; arrays are `[batch_size, ...]`."""

    env_id: np.ndarray  # int32: which envs these are
    obs: np.ndarray  # float32
    reward: np.ndarray  # float32
    terminated: np.ndarray  # bool
    truncated: np.ndarray  # bool


def recv_steps(pool: Any, max_steps: int) -> HostSteps:
    """The next `batch_size` finished envs of an async-mode pool, in the learner's dtypes."""
    obs, reward, terminated, truncated, info = pool.recv()
    terminated, truncated = end_flags(terminated | truncated, truncated, info["elapsed_step"], max_steps)
    return HostSteps(np.asarray(info["env_id"], np.int32), np.asarray(obs, np.float32),
                     np.asarray(reward, np.float32), terminated, truncated)


def make_xla_env(
    env_id: str, num_envs: int, num_threads: int, seed: int | Sequence[int], **options: Any
) -> XlaEnv:
    """Build the pool and its jittable `step`. Rewards arrive as float32, observations as float32
    or, for images, uint8. An id of the Gymnasium backend gives its `GymXlaEnv`, one of the
    JAX-native backend its `JaxXlaEnv`."""
    if is_jax_env_id(env_id):
        from jaxrl_fast.env.jax_envs import make_jax_xla_env

        return make_jax_xla_env(env_id, num_envs, seed, **options)
    if is_gymnasium_id(env_id):
        from jaxrl_fast.env.gymnasium_env import make_gym_xla_env

        return make_gym_xla_env(env_id, num_envs, seed, **options)
    pool = make_pool(env_id, num_envs, num_threads, seed, **options)
    spec = spec_of(pool, env_id)
    native = {name: entry for name, entry in pool._xla()}
    recv_handle, recv_specs, recv_caps = native["recv"]
    send_handle, send_specs, send_caps = native["send"]
    recv, recv_slot = _xla_call(pool, "recv", recv_handle, recv_specs, recv_caps)
    send, send_slot = _xla_call(pool, "send", send_handle, send_specs, send_caps)
    state_keys = list(pool._state_keys)
    state_dtypes = {k: d for k, (d, _) in zip(state_keys, recv_specs[1][1:])}
    action_keys = list(pool._spec._action_keys)
    action_dtypes = [d for d, _ in send_specs[0][1:]]
    flat = isinstance(pool, FlatObservations)
    obs_keys = [f"obs:{k}" for k in pool.keys] if flat else ["obs"]
    for key in (*obs_keys, "reward", "done", "trunc", "elapsed_step"):
        if key not in state_dtypes:
            raise EnvError(f"EnvPool {env_id}: state field {key!r} missing from {state_keys}")
    if action_keys[-1] != "action" or len(action_keys) != len(action_dtypes):
        raise EnvError(f"EnvPool {env_id}: unexpected action fields {action_keys}")
    env_ids = np.arange(num_envs, dtype=np.int32)
    max_steps = spec.max_episode_steps
    scored = "info:reward" in state_dtypes and "info:terminated" in state_dtypes  # Atari's game fields

    def step(handle: jax.Array, action: jax.Array) -> tuple[jax.Array, Step]:
        ids = jnp.asarray(env_ids)
        inputs = [to_wire(ids, d) for d in action_dtypes[:-1]] + [to_wire(action, action_dtypes[-1])]
        (handle,) = send(handle, *inputs)
        handle, *fields = recv(handle)
        state = {k: from_wire(v, state_dtypes[k]) for k, v in zip(state_keys, fields)}
        elapsed = state["elapsed_step"].astype(jnp.int32)
        terminated, truncated = end_flags(state["done"].astype(bool), state["trunc"].astype(bool), elapsed, max_steps)
        reward = state["reward"].astype(jnp.float32)
        out = Step(
            obs=flatten_observations(state, obs_keys) if flat else state["obs"].astype(spec.obs_dtype),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            elapsed_step=elapsed,
            score=state["info:reward"].astype(jnp.float32) if scored else reward,
            game_over=(state["info:terminated"].astype(bool) | truncated) if scored else terminated | truncated,
        )
        check_step(out, spec)  # at trace time: free at run time
        return handle, out

    return XlaEnv(
        spec=spec,
        pool=pool,
        handle=np.frombuffer(recv_handle, dtype=np.uint8).copy(),
        step=step,
        has_gpu_step=recv_caps[1] is not None and send_caps[1] is not None,
        options=dict(options),
        program_key=None if recv_slot is None or send_slot is None else f"envpool-slots-{recv_slot}-{send_slot}",
    )


class EpisodesPool:
    """An evaluation's EnvPool pool that plays whole episodes in one program (`play`), stepping
    through the pool's XLA entry points (`make_xla_env`'s step), where `evaluation.run_episodes`
    makes a policy call and a pool step from the host per step. Everything else (`reset`, `step`,
    `config`, `close`) is the pool's own."""

    def __init__(self, env: XlaEnv, max_steps: int):
        self.env, self.max_steps = env, max_steps
        self._programs: dict[Any, Any] = {}  # per policy and payload's tree, shapes and dtypes: compiled once

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env.pool, name)

    def _program(self, policy: Callable, payload: Any, obs: np.ndarray) -> Any:
        leaves, tree = jax.tree.flatten(payload)
        key = (policy, tree, tuple((np.shape(x), getattr(x, "dtype", None) or np.result_type(x)) for x in leaves))
        program = self._programs.get(key)
        if program is None:
            def episodes(payload: Any, handle: jax.Array, obs: jax.Array, seed: jax.Array) -> tuple[jax.Array, jax.Array]:
                return play_episodes(self.env.step, handle, obs, policy, payload, seed, self.max_steps)

            program = jax.jit(episodes).lower(payload, self.env.handle, obs, np.uint32(0)).compile()
            self._programs[key] = program
        return program

    def prepare_play(self, policy: Callable, payload: Any) -> None:
        """Compile `play`'s program for payloads like `payload`, playing nothing: the pool's next
        episodes are the ones they would have been."""
        spec = self.env.spec
        self._program(policy, payload, np.zeros((spec.num_envs, *spec.obs_shape), spec.obs_dtype))

    def play(self, policy: Callable[[Any, jax.Array, jax.Array], jax.Array], payload: Any,
             seed: Any = 0) -> tuple[np.ndarray, np.ndarray]:
        """One episode in each env from a reset, acted by `policy(payload, obs, step seed) -> actions`
        in one program (`episodes.play_episodes`, its step seeds drawn from `seed`). Returns
        (returns, lengths) per env."""
        obs = self.env.reset()
        program = self._program(policy, payload, obs)
        returns, lengths = jax.device_get(program(payload, self.env.handle, obs, np.uint32(seed)))
        return np.asarray(returns, np.float64), np.asarray(lengths, np.int64)


def evaluation_pool(env_id: str, num_envs: int, seed: int, max_steps: int, in_program: bool, **options: Any) -> Any:
    """The evaluator's pool of `num_envs` envs (`make_pool`'s). With `in_program`, an EnvPool id's
    pool plays whole episodes in one program (`EpisodesPool`) where the forwarder gives its entry
    points slots (a program naming the pool's address would compile again in every process); a
    JAX-native pool always can."""
    if not in_program or is_jax_env_id(env_id) or is_gymnasium_id(env_id) or ffi_forward.forwarder() is None:
        return make_pool(env_id, num_envs=num_envs, num_threads=1, seed=seed, **options)
    return EpisodesPool(make_xla_env(env_id, num_envs, 1, seed, **options), max_steps)
