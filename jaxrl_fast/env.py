"""EnvPool adapter: one place where EnvPool batches meet jitted code.

From an EnvPool id and options this module builds

* an `EnvSpec` (observation and action specs as the learner sees them: float32 vectors, or uint8
  images that stay uint8 until a network's first layer scales them),
* `XlaEnv.step(handle, action) -> (handle, Step)`, usable inside `jit` and `lax.scan`,
* the episode bookkeeping that EnvPool's auto-reset needs (`EpisodeState`, `track_episodes`).

EnvPool's auto-reset: when a step ends an episode (`terminated | truncated`), the *next* call
for that env is a reset step. Its action is ignored, it returns the first observation of the new
episode with reward 0, and it is no transition. `EpisodeState.reset_step` marks such steps so
that learners can mask them out.

Games and episodes: with Atari's training options (`episodic_life`, `reward_clip`) the learner's
episode ends at every lost life and its rewards are clipped to their sign, while the score that
published tables count is the game's own: unclipped, over every life. Each step carries both, the
learner's `reward`/`terminated` and the game's `score`/`game_over` (EnvPool's `info:reward` and
`info:terminated`); episode statistics count games. Elsewhere the two are the same.

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

# Families whose observations are flat vectors an MLP can take, and those of stacked uint8 frames.
VECTOR_FAMILIES = ("classic_control", "mujoco", "box2d", "toy_text")
PIXEL_FAMILIES = ("atari",)
# Pool options the engine sets itself (`make_pool`'s arguments), never given through --env-kwargs.
ENGINE_OPTIONS = ("num_envs", "batch_size", "num_threads", "seed", "env_seed", "max_num_players",
                  "thread_affinity_offset", "gym_reset_return_info", "base_path", "task")
# Options that shape the learner's view of a game but not the game: evaluation pools leave them out,
# so an evaluation episode is one whole game scored as published tables score it.
TRAINING_ONLY_OPTIONS = ("episodic_life", "reward_clip", "zero_discount_on_life_loss")


class EnvError(ValueError):
    """A problem with the requested environment, reported before anything expensive starts."""


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

    def reset(self) -> np.ndarray:
        obs, _ = self.pool.reset()
        return np.asarray(obs, dtype=self.spec.obs_dtype)


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
    """Return the family of a known id whose observations the networks can take, or raise EnvError."""
    family = env_family(env_id)
    if family not in VECTOR_FAMILIES + PIXEL_FAMILIES:
        raise EnvError(
            f"--env: {env_id!r} is an EnvPool {family!r} task; this version trains "
            f"on vector observations ({', '.join(VECTOR_FAMILIES)}) and Atari frames ({', '.join(PIXEL_FAMILIES)})."
        )
    return family


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """`--env-kwargs` as a dict: `key=value` items, values read as bool, int, float or text; a key
    given twice takes its last value (a preset's options, then the command line's)."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise EnvError(f"--env-kwargs: {item!r} is not key=value (e.g. repeat_action_probability=0.25)")
        options[key.strip()] = _option_value(text.strip())
    return options


def _option_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def check_env_kwargs(env_id: str, options: dict[str, Any]) -> None:
    """Refuse an EnvPool option the id does not have, one the engine sets itself, or a value of
    another type than the option's default, naming the options there are."""
    if not options:
        return
    check_env_id(env_id)
    import envpool

    spec = envpool.make_spec(env_id)
    defaults = dict(zip(spec.config._fields, spec._default_config_values))
    settable = sorted(set(defaults) - set(ENGINE_OPTIONS))
    for key, value in options.items():
        if key in ENGINE_OPTIONS:
            raise EnvError(f"--env-kwargs: {key} is set by --env or by the engine's own flags (--num-envs, --num-threads, --seed)")
        if key not in defaults:
            close = difflib.get_close_matches(key, settable, n=3)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise EnvError(f"--env-kwargs: {env_id} has no option {key!r}.{hint} It has: {', '.join(settable)}")
        default = defaults[key]
        fits = isinstance(value, type(default)) or (isinstance(default, float) and type(value) is int)
        if not fits or (isinstance(value, bool) and not isinstance(default, bool)):
            raise EnvError(f"--env-kwargs: {key}={value!r} is of type {type(value).__name__}; {env_id}'s {key} is of "
                           f"type {type(default).__name__} (default {default!r})")


def merge_env_kwargs(*items: Sequence[str]) -> tuple[str, ...]:
    """Several `--env-kwargs` lists as one, a later list's value of a key replacing an earlier one's."""
    return tuple(f"{key}={value}" for key, value in parse_env_kwargs([i for part in items for i in part]).items())


def evaluation_options(options: dict[str, Any]) -> dict[str, Any]:
    """The pool options of evaluation envs: the training ones without those that only shape the
    learner's view (life-loss episodes, clipped rewards)."""
    return {k: v for k, v in options.items() if k not in TRAINING_ONLY_OPTIONS}


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
        obs_dtype="uint8" if np.dtype(obs_space.dtype) == np.uint8 else "float32",
        frame_stack=int(pool.config.get("stack_num", 1)) if env_family(env_id) in PIXEL_FAMILIES else 1,
    )


def probe_spec(env_id: str, options: dict[str, Any] | None = None) -> EnvSpec:
    """The spec of an env id with pool options (e.g. Atari's frame size), from a one-env pool that
    is closed again at once (once per id and options: the CLI's checks ask for it more than once,
    and a MuJoCo pool takes a while to build)."""
    return _probe_spec(env_id, tuple(sorted((options or {}).items())))


@functools.lru_cache(maxsize=None)
def _probe_spec(env_id: str, options: tuple[tuple[str, Any], ...]) -> EnvSpec:
    pool = make_pool(env_id, num_envs=1, num_threads=1, seed=0, **dict(options))
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
    """Build the pool and its jittable `step`. Rewards arrive as float32, observations as float32
    or, for images, uint8."""
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
            obs=state["obs"].astype(spec.obs_dtype),
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
    )


# --------------------------------------------------------------------------------------------
# Episode bookkeeping inside the jitted loop.


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

