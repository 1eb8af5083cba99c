"""EnvPool adapter: one place where EnvPool batches meet jitted code.

From an EnvPool id and options this module builds

* an `EnvSpec` (observation and action specs as the learner sees them, always float32),
* `XlaEnv.step(handle, action) -> (handle, Step)`, usable inside `jit` and `lax.scan`,
* the episode bookkeeping that EnvPool's auto-reset needs (`EpisodeState`, `track_episodes`).

EnvPool's auto-reset: when a step ends an episode (`terminated | truncated`), the *next* call
for that env is a reset step. Its action is ignored, it returns the first observation of the new
episode with reward 0, and it is no transition. `EpisodeState.reset_step` marks such steps so
that learners can mask them out.

The 64-bit hazard: MuJoCo tasks declare float64 observations and actions. EnvPool's own
`env.xla()` canonicalizes those to float32 when JAX runs in its default 32-bit mode, so XLA hands
the C++ side buffers of half the size it writes into and the process aborts (`free(): invalid
size`). We build the XLA calls ourselves from EnvPool's native specs instead: every 64-bit
field travels as pairs of uint32 words of the same byte size ("wire" format), and is converted
to or from float32 / int32 with integer arithmetic inside the jitted program. Learners stay in
float32, nothing leaves XLA, and no buffer can ever be smaller than what EnvPool writes: each
wire shape is checked against the spec's byte size before the first call.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import sys
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import ffi, lax

# Gymnasium warns whenever EnvPool's float64 Box bounds are cast to float32: expected, and noise.
warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")

# Families whose observations are flat vectors an MLP can take.
VECTOR_FAMILIES = ("classic_control", "mujoco", "box2d", "toy_text")


class EnvError(ValueError):
    """A problem with the requested environment, reported before anything expensive starts."""


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the learner needs to know about a batch of environments.

    Observations are float32 `[num_envs, *obs_shape]`. Discrete actions are int32 `[num_envs]` in
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


class Step(NamedTuple):
    """One batched step as returned by `XlaEnv.step`; arrays are `[num_envs, ...]`."""

    obs: jax.Array  # float32 [B, *obs_shape]
    reward: jax.Array  # float32 [B]
    terminated: jax.Array  # bool [B]: the episode ended in a terminal state (no bootstrap)
    truncated: jax.Array  # bool [B]: the episode was cut by the time limit (bootstrap)
    elapsed_step: jax.Array  # int32 [B]: steps since the episode began; 0 on a reset step


def check_step(step: Step, spec: EnvSpec) -> None:
    """The adapter's promise to the jitted code: shapes and dtypes of a batched step."""
    n = spec.num_envs
    chex.assert_shape(step.obs, (n, *spec.obs_shape))
    chex.assert_shape([step.reward, step.terminated, step.truncated, step.elapsed_step], (n,))
    chex.assert_type([step.obs, step.reward, step.terminated, step.elapsed_step], [jnp.float32, jnp.float32, bool, jnp.int32])


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

    def reset(self) -> np.ndarray:
        obs, _ = self.pool.reset()
        return np.asarray(obs, dtype=np.float32)


# --------------------------------------------------------------------------------------------
# Looking up ids and specs.


# Registered alone when one of them holds the id: `import envpool` registers every family, and
# some registrations are slow (jumanji's imports matplotlib: ~0.7 s of EnvPool's ~0.9 s).
LIGHT_FAMILIES = ("classic_control", "box2d", "toy_text")


def import_envpool_light() -> Any:
    """EnvPool's package without its `envpool.entry` (the import of every family's registration);
    the light families registered. Falls back to the whole `import envpool` if that fails."""
    import importlib
    import types

    if "envpool" not in sys.modules:
        stub = sys.modules.setdefault("envpool.entry", types.ModuleType("envpool.entry"))
        try:
            import envpool  # noqa: F401  its `import envpool.entry` finds the stub
        except Exception:  # a layout this does not know: the whole package, as EnvPool imports it
            sys.modules.pop("envpool.entry", None)
            import envpool  # noqa: F401
        finally:
            if sys.modules.get("envpool.entry") is stub:
                del sys.modules["envpool.entry"]  # a later `import envpool.entry` registers the rest
    try:
        for family in LIGHT_FAMILIES:
            importlib.import_module(f"envpool.{family}.registration")
    except ImportError:
        import envpool.entry  # noqa: F401
    import envpool.registration

    return envpool.registration.registry


def registered_specs(env_id: str) -> dict[str, Any]:
    """EnvPool's registry of ids, holding `env_id` if EnvPool knows it: the light families' only
    when one of them holds it, every family's otherwise."""
    registry = import_envpool_light()
    if env_id not in registry.specs:
        import envpool.entry  # noqa: F401  every family
    return registry.specs


def env_family(env_id: str) -> str:
    """The EnvPool module family of an id: 'classic_control', 'mujoco', 'atari', ..."""
    specs = registered_specs(env_id)
    if env_id not in specs:
        raise EnvError(unknown_env_message(env_id))
    return specs[env_id][0].split(".")[1]


def unknown_env_message(env_id: str) -> str:
    import envpool
    import envpool.entry  # noqa: F401  every family's ids

    known = envpool.list_all_envs()
    close = difflib.get_close_matches(env_id, known, n=5, cutoff=0.6)
    if not close:  # case and punctuation slips: 'cartpole' -> 'CartPole-v1'
        lowered = {k.lower(): k for k in known}
        close = [lowered[k] for k in difflib.get_close_matches(env_id.lower(), list(lowered), n=5, cutoff=0.5)]
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return f"--env: unknown EnvPool id {env_id!r}.{hint} (envpool.list_all_envs() lists all {len(known)}.)"


def check_env_id(env_id: str) -> str:
    """Return the family of a known id whose observations an MLP can take, or raise EnvError."""
    family = env_family(env_id)
    if family not in VECTOR_FAMILIES:
        raise EnvError(
            f"--env: {env_id!r} is an EnvPool {family!r} task with image or structured observations; "
            f"this version trains MLP policies on vector observations ({', '.join(VECTOR_FAMILIES)})."
        )
    return family


def make_pool(env_id: str, num_envs: int, num_threads: int, seed: int | Sequence[int], batch_size: int = 0,
              **options: Any) -> Any:
    """A gymnasium-style EnvPool; synchronous unless `0 < batch_size < num_envs` (async mode:
    `recv` returns the first `batch_size` envs to finish, `send` takes actions with their ids).
    Env i is seeded `seed + i` either way, or `seed[i]` when `seed` is a sequence (one per env)."""
    check_env_id(env_id)  # registers the id's family (and imports EnvPool)
    import envpool

    return envpool.make(
        env_id,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=batch_size or num_envs,
        num_threads=num_threads,
        seed=[int(s) for s in seed] if isinstance(seed, (Sequence, np.ndarray)) else int(seed),
        **options,
    )


def agent_env_seeds(seed: int, num_agents: int, num_envs: int) -> list[int]:
    """Per-env seeds of one pool shared by `num_agents` agents of `num_envs` envs each: agent k's
    envs get `seed + k + i`, as a single run with seed `seed + k` seeds its env i. So agent k's env
    i + 1 and agent k + 1's env i start from one seed, exactly as those two single runs would."""
    return [seed + k + i for k in range(num_agents) for i in range(num_envs)]


def spec_of(pool: Any, env_id: str) -> EnvSpec:
    space = pool.single_action_space if hasattr(pool, "single_action_space") else pool.action_space
    obs_space = pool.single_observation_space if hasattr(pool, "single_observation_space") else pool.observation_space
    discrete = hasattr(space, "n")
    if discrete:
        num_actions, shape, low, high = int(space.n), (), (), ()
    else:
        num_actions, shape = 0, tuple(space.shape)
        low = tuple(float(x) for x in np.asarray(space.low, np.float64).reshape(-1))
        high = tuple(float(x) for x in np.asarray(space.high, np.float64).reshape(-1))
    return EnvSpec(
        env_id=env_id,
        family=env_family(env_id),
        num_envs=int(pool.config["num_envs"]),
        obs_shape=tuple(obs_space.shape),
        discrete=discrete,
        num_actions=num_actions,
        action_shape=shape,
        action_low=low,
        action_high=high,
        max_episode_steps=int(pool.config["max_episode_steps"]),
    )


@functools.lru_cache(maxsize=None)
def probe_spec(env_id: str) -> EnvSpec:
    """The spec of an env id, from a one-env pool that is closed again at once (once per id: the
    CLI's checks ask for it more than once, and a MuJoCo pool takes a while to build)."""
    pool = make_pool(env_id, num_envs=1, num_threads=1, seed=0)
    try:
        return spec_of(pool, env_id)
    finally:
        pool.close()


# --------------------------------------------------------------------------------------------
# Wire format: how each EnvPool field crosses the XLA custom call.


def _is_wide(dtype: np.dtype) -> bool:
    """A dtype JAX cannot hold in the current mode (64-bit while x64 is off)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype)) != np.dtype(dtype)


def wire_struct(dtype: Any, shape: Any) -> jax.ShapeDtypeStruct:
    """The buffer XLA allocates for an EnvPool field: same byte size as the spec, always."""
    dtype, shape = np.dtype(dtype), tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise EnvError(f"EnvPool field has an unresolved shape {shape}")
    if _is_wide(dtype):
        if dtype.itemsize != 8 or dtype.kind not in "fiu":
            raise EnvError(f"EnvPool field dtype {dtype} is not supported by the adapter")
        struct = jax.ShapeDtypeStruct(shape + (2,), jnp.uint32)
    else:
        struct = jax.ShapeDtypeStruct(shape, dtype)
    wire_bytes = int(np.prod(struct.shape, dtype=np.int64)) * np.dtype(struct.dtype).itemsize
    spec_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if wire_bytes != spec_bytes:  # the invariant that makes the 64-bit crash impossible
        raise EnvError(f"wire buffer of {wire_bytes} bytes for a {spec_bytes}-byte {dtype}{list(shape)} field")
    return struct


def float64_words_to_float32(words: jax.Array) -> jax.Array:
    """IEEE-754 binary64 given as little-endian uint32 pairs `[..., 2]` -> float32 `[...]`.

    Exact round-to-nearest-even, as numpy's cast; beyond float32's range gives +-inf, and
    values below its smallest normal (1.2e-38) flush to 0.
    """
    lo, hi = words[..., 0], words[..., 1]
    exponent = (hi >> 20) & 0x7FF
    mantissa = ((hi & 0xFFFFF) << 3) | (lo >> 29)  # the 23 bits float32 keeps
    rest = lo & 0x1FFFFFFF  # the 29 bits it drops
    half = jnp.uint32(1 << 28)
    round_up = (rest > half) | ((rest == half) & ((mantissa & 1) == 1))
    exponent32 = exponent.astype(jnp.int32) - (1023 - 127)
    # a carry out of the mantissa bumps the exponent, and past the top lands exactly on inf
    bits = (jnp.clip(exponent32, 0, 255).astype(jnp.uint32) << 23) + mantissa + round_up.astype(jnp.uint32)
    bits = jnp.minimum(bits, jnp.uint32(0x7F800000))
    bits = jnp.where(exponent32 <= 0, jnp.uint32(0), bits)
    is_nan = ((hi & 0xFFFFF) | lo) != 0
    bits = jnp.where(exponent == 0x7FF, jnp.where(is_nan, jnp.uint32(0x7FC00000), jnp.uint32(0x7F800000)), bits)
    return lax.bitcast_convert_type((hi & jnp.uint32(0x80000000)) | bits, jnp.float32)


def float32_to_float64_words(x: jax.Array) -> jax.Array:
    """float32 `[...]` -> IEEE-754 binary64 as little-endian uint32 pairs `[..., 2]` (exact)."""
    bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    sign, exponent, mantissa = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    exponent64 = jnp.where(exponent == 0, 0, jnp.where(exponent == 0xFF, 0x7FF, exponent + (1023 - 127)))
    mantissa = jnp.where(exponent == 0, 0, mantissa)  # float32 subnormals -> 0
    hi = (sign << 31) | (exponent64.astype(jnp.uint32) << 20) | (mantissa >> 3)
    lo = (mantissa & 0x7) << 29
    return jnp.stack([lo, hi], axis=-1)


def int64_words_to_int32(words: jax.Array) -> jax.Array:
    """A little-endian int64 as uint32 pairs -> int32 (the low word; EnvPool ints here are small)."""
    return lax.bitcast_convert_type(words[..., 0], jnp.int32)


def int32_to_int64_words(x: jax.Array) -> jax.Array:
    x = x.astype(jnp.int32)
    return jnp.stack([lax.bitcast_convert_type(x, jnp.uint32), jnp.where(x < 0, jnp.uint32(0xFFFFFFFF), jnp.uint32(0))], -1)


def from_wire(value: jax.Array, dtype: Any) -> jax.Array:
    dtype = np.dtype(dtype)
    if not _is_wide(dtype):
        return value
    return float64_words_to_float32(value) if dtype.kind == "f" else int64_words_to_int32(value)


def to_wire(value: jax.Array, dtype: Any) -> jax.Array:
    dtype = np.dtype(dtype)
    if not _is_wide(dtype):
        return value.astype(dtype)
    return float32_to_float64_words(value) if dtype.kind == "f" else int32_to_int64_words(value)


def _xla_call(pool: Any, name: str, handle: bytes, specs: Any, capsules: Any) -> Callable:
    """One of EnvPool's native XLA entry points as an `ffi_call` in wire format."""
    in_specs, out_specs = specs
    cpu_capsule, gpu_capsule = capsules
    target = f"jaxrl_fast_{type(pool).__name__}_{id(pool)}_{name}"
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
    handle_value = int.from_bytes(handle, byteorder=sys.byteorder, signed=False)

    def checked(*args: jax.Array) -> Any:
        for arg, want in zip(args, ins):  # runs at trace time: a wrong buffer never reaches C++
            if tuple(arg.shape) != tuple(want.shape) or arg.dtype != want.dtype:
                raise EnvError(f"EnvPool {name}: got {arg.dtype}{list(arg.shape)}, expected {want.dtype}{list(want.shape)}")
        return call(*args, handle=handle_value)

    return checked


def end_flags(done: Any, trunc: Any, elapsed: Any, max_steps: int) -> tuple[Any, Any]:
    """(terminated, truncated) from EnvPool's flags, for numpy or jax arrays.

    EnvPool has reported time-limit ends as plain `done` in some versions: trust the clock."""
    truncated = done & (trunc | (elapsed >= max_steps))
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
    """Build the pool and its jittable `step`. Observations and rewards arrive as float32."""
    pool = make_pool(env_id, num_envs, num_threads, seed, **options)
    spec = spec_of(pool, env_id)
    native = {name: entry for name, entry in pool._xla()}
    recv_handle, recv_specs, recv_caps = native["recv"]
    send_handle, send_specs, send_caps = native["send"]
    recv = _xla_call(pool, "recv", recv_handle, recv_specs, recv_caps)
    send = _xla_call(pool, "send", send_handle, send_specs, send_caps)
    state_keys = list(pool._state_keys)
    state_dtypes = {k: d for k, (d, _) in zip(state_keys, recv_specs[1][1:])}
    action_keys = list(pool._spec._action_keys)
    action_dtypes = [d for d, _ in send_specs[0][1:]]
    for key in ("obs", "reward", "done", "trunc", "elapsed_step"):
        if key not in state_dtypes:
            raise EnvError(f"EnvPool {env_id}: state field {key!r} missing from {state_keys}")
    if action_keys[-1] != "action" or len(action_keys) != len(action_dtypes):
        raise EnvError(f"EnvPool {env_id}: unexpected action fields {action_keys}")
    env_ids = np.arange(num_envs, dtype=np.int32)
    max_steps = spec.max_episode_steps

    def step(handle: jax.Array, action: jax.Array) -> tuple[jax.Array, Step]:
        ids = jnp.asarray(env_ids)
        inputs = [to_wire(ids, d) for d in action_dtypes[:-1]] + [to_wire(action, action_dtypes[-1])]
        (handle,) = send(handle, *inputs)
        handle, *fields = recv(handle)
        state = {k: from_wire(v, state_dtypes[k]) for k, v in zip(state_keys, fields)}
        elapsed = state["elapsed_step"].astype(jnp.int32)
        terminated, truncated = end_flags(state["done"].astype(bool), state["trunc"].astype(bool), elapsed, max_steps)
        out = Step(
            obs=state["obs"].astype(jnp.float32),
            reward=state["reward"].astype(jnp.float32),
            terminated=terminated,
            truncated=truncated,
            elapsed_step=elapsed,
        )
        check_step(out, spec)  # at trace time: free at run time
        return handle, out

    return XlaEnv(
        spec=spec,
        pool=pool,
        handle=np.frombuffer(recv_handle, dtype=np.uint8).copy(),
        step=step,
        has_gpu_step=recv_caps[1] is not None and send_caps[1] is not None,
    )


# --------------------------------------------------------------------------------------------
# Episode bookkeeping inside the jitted loop.


class EpisodeState(NamedTuple):
    """Per-env running statistics carried through the jitted loop, `[num_envs]` each.

    `reset_step` is True where the next step is EnvPool's reset step (the previous step ended
    an episode): that step's action is ignored and it is no transition.
    """

    episode_return: jax.Array  # float32: undiscounted return of the running episode
    episode_length: jax.Array  # int32
    reset_step: jax.Array  # bool


class EpisodeStats(NamedTuple):
    """Completed episodes, summed so they can be reduced inside jit and fetched rarely."""

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
    """Advance the running statistics by one step and report the episodes that just ended.

    Reset steps contribute nothing: their reward is not part of any episode.
    """
    valid = ~state.reset_step
    ret = jnp.where(valid, state.episode_return + step.reward, 0.0)
    length = jnp.where(valid, state.episode_length + 1, 0)
    ended = valid & (step.terminated | step.truncated)
    stats = EpisodeStats(
        count=ended.sum(dtype=jnp.int32),
        return_sum=jnp.where(ended, ret, 0.0).sum(),
        length_sum=jnp.where(ended, length, 0).sum(dtype=jnp.int32),
    )
    new_state = EpisodeState(
        episode_return=jnp.where(ended, 0.0, ret),
        episode_length=jnp.where(ended, 0, length),
        reset_step=ended,
    )
    return new_state, stats


def track_rollout_episodes(
    state: EpisodeState, reward: jax.Array, terminated: jax.Array, truncated: jax.Array, valid: jax.Array
) -> tuple[EpisodeState, EpisodeStats]:
    """`track_episodes` over a whole rollout at once: `[T, B]` raw rewards and flags, `valid[t]`
    False on reset steps (`valid[0] == ~state.reset_step`). Same state and totals as scanning
    `track_episodes` step by step, in a few batched ops after the loop instead of ops in every step.

    The episodes that end within the rollout partition each env's valid steps up to its last end:
    their returns sum to the running return carried in plus every valid reward up to that end.
    """
    ended = valid & (terminated | truncated)
    t = jnp.arange(reward.shape[0], dtype=jnp.int32)[:, None]
    last_end = jnp.max(jnp.where(ended, t, -1), axis=0)  # [B]; -1 where no episode ended
    any_end = last_end >= 0
    closed = t <= last_end  # [T, B]: steps of episodes that ended in this rollout
    reward = jnp.where(valid, reward, 0.0)
    steps = valid.astype(jnp.int32)
    stats = EpisodeStats(
        count=ended.sum(dtype=jnp.int32),
        return_sum=jnp.where(closed, reward, 0.0).sum() + jnp.where(any_end, state.episode_return, 0.0).sum(),
        length_sum=(jnp.where(closed, steps, 0).sum() + jnp.where(any_end, state.episode_length, 0).sum()).astype(jnp.int32),
    )
    new_state = EpisodeState(
        episode_return=jnp.where(any_end, 0.0, state.episode_return) + jnp.where(closed, 0.0, reward).sum(0),
        episode_length=jnp.where(any_end, 0, state.episode_length) + jnp.where(closed, 0, steps).sum(0, dtype=jnp.int32),
        reset_step=ended[-1],
    )
    return new_state, stats


def add_stats(a: EpisodeStats, b: EpisodeStats) -> EpisodeStats:
    return EpisodeStats(*(x + y for x, y in zip(a, b)))


class HostEpisodes:
    """`track_episodes` on the host, for envs whose steps arrive a few at a time and out of order
    (EnvPool's async mode): the same rules, per env id, in numpy."""

    def __init__(self, num_envs: int):
        self.episode_return = np.zeros(num_envs, np.float64)
        self.episode_length = np.zeros(num_envs, np.int64)
        self.reset_step = np.zeros(num_envs, bool)  # the env's next step is EnvPool's reset step
        self._finished = [0, 0.0, 0]  # count, return sum, length sum

    def track(self, ids: np.ndarray, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """Advance envs `ids` by one step each; returns which steps were transitions (not reset steps)."""
        valid = ~self.reset_step[ids]
        self.episode_return[ids] = np.where(valid, self.episode_return[ids] + reward, 0.0)
        self.episode_length[ids] = np.where(valid, self.episode_length[ids] + 1, 0)
        ended = valid & (terminated | truncated)
        self._finished[0] += int(ended.sum())
        self._finished[1] += float(self.episode_return[ids][ended].sum())
        self._finished[2] += int(self.episode_length[ids][ended].sum())
        self.episode_return[ids[ended]] = 0.0
        self.episode_length[ids[ended]] = 0
        self.reset_step[ids] = ended
        return valid

    def take(self) -> EpisodeStats:
        """Episodes finished since the last `take` (numpy scalars)."""
        count, return_sum, length_sum = self._finished
        self._finished = [0, 0.0, 0]
        return EpisodeStats(np.int32(count), np.float32(return_sum), np.int32(length_sum))


# --------------------------------------------------------------------------------------------
# Random actions (off-policy warm-up, and EnvPool measured alone).


def random_actions(spec: EnvSpec, key: jax.Array, n: int) -> jax.Array:
    """Uniform random actions for `n` envs: int32 indices, or floats within the action bounds."""
    if spec.discrete:
        return jax.random.randint(key, (n,), 0, spec.num_actions)
    low, high = jnp.asarray(spec.action_low, jnp.float32), jnp.asarray(spec.action_high, jnp.float32)
    return jax.random.uniform(key, (n, *spec.action_shape), minval=low, maxval=high)


def random_actions_np(spec: EnvSpec, rng: np.random.Generator, n: int) -> np.ndarray:
    """`random_actions` on the host, for EnvPool's Python API."""
    if spec.discrete:
        return rng.integers(0, spec.num_actions, size=n)
    return rng.uniform(spec.action_low, spec.action_high, size=(n, *spec.action_shape)).astype(np.float32)

