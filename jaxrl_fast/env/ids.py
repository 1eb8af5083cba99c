"""Environment ids: which backend an id takes (EnvPool's plain ids, `gymnax:<id>`, `brax:<id>`,
`gym:<id>` and `module:Class`), EnvPool's ids and families, which the engine can train on, and their options."""

from __future__ import annotations

import difflib
import functools
import sys
import warnings
from typing import Any, Sequence

from jaxrl_fast.types import ConfigError

# Families whose observations are flat vectors an MLP can take, and those of stacked uint8 frames.
VECTOR_FAMILIES = ("classic_control", "mujoco", "box2d", "toy_text", "minigrid")  # minigrid: dicts, flattened


PIXEL_FAMILIES = ("atari", "procgen")  # uint8 images, channels first: Atari's [4, 84, 84] stacks, Procgen's [3, 64, 64]


# Pool options the engine sets itself (`make_pool`'s arguments), never given through --env-kwargs.
ENGINE_OPTIONS = ("num_envs", "batch_size", "num_threads", "seed", "env_seed", "max_num_players",
                  "thread_affinity_offset", "gym_reset_return_info", "base_path", "task",
                  "channel_first")  # Procgen's frame layout: the encoders take it channels first


# Options that shape the learner's view of a game but not the game: evaluation pools leave them out,
# so an evaluation episode is one whole game scored as published tables score it.
TRAINING_ONLY_OPTIONS = ("episodic_life", "reward_clip")


def option_refusal(key: str, value: Any) -> str | None:
    """Why an EnvPool option that this engine cannot honour, or that crashes EnvPool, is refused; None if it is not."""
    if key == "zero_discount_on_life_loss" and value:
        return ("EnvPool applies it through its `discount` field, which this engine does not read (the run would train "
                "as if it were off); episodic_life=True ends the learner's episode at each lost life")
    if key == "noop_max" and isinstance(value, int) and value < 1:
        return "EnvPool's no-op starts draw from 0..noop_max-1 and crash at 0; noop_max=1 gives no no-op starts"
    return None


class EnvError(ConfigError):
    """A problem with the requested environment, reported before anything expensive starts."""


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
            import_every_family()
        finally:
            if sys.modules.get("envpool.entry") is stub:
                del sys.modules["envpool.entry"]  # a later `import envpool.entry` registers the rest
    try:
        for family in LIGHT_FAMILIES:
            importlib.import_module(f"envpool.{family}.registration")
    except ImportError:
        import_every_family()
    import envpool.registration

    return envpool.registration.registry


def import_every_family() -> None:
    """`import envpool.entry`, which registers every family, Qt 5 loaded first where it can be
    (`load_qt_runtime`): Procgen's module tries to load its library once, at registration."""
    load_qt_runtime()
    import envpool.entry  # noqa: F401


def registered_specs(env_id: str) -> dict[str, Any]:
    """EnvPool's registry of ids, holding `env_id` if EnvPool knows it: the light families' only
    when one of them holds it, every family's otherwise."""
    registry = import_envpool_light()
    if env_id not in registry.specs:
        import_every_family()
    return registry.specs


# The JAX-native backend's ids (jaxrl_fast.env.jax_envs): each prefix's library is the id's family.
JAX_ENV_PREFIXES = {"gymnax:": "gymnax", "brax:": "brax"}
JAX_FAMILIES = tuple(JAX_ENV_PREFIXES.values())


def is_jax_env_id(env_id: str) -> bool:
    """An id of the JAX-native backend: `gymnax:<name>` or `brax:<name>`."""
    return env_id.startswith(tuple(JAX_ENV_PREFIXES))


def is_gymnasium_id(env_id: str) -> bool:
    """An id of the Gymnasium backend: `gym:<id>` or `module.path:Name` (EnvPool's ids have no colon)."""
    return ":" in env_id and not is_jax_env_id(env_id)


def env_family(env_id: str) -> str:
    """The EnvPool module family of an id: 'classic_control', 'mujoco', 'atari', ...; 'gymnasium'
    for an id of the Gymnasium backend (`gym:<id>`, `module:Class`), 'gymnax' or 'brax' for the JAX-native one's."""
    if is_jax_env_id(env_id):
        return JAX_ENV_PREFIXES[env_id.split(":", 1)[0] + ":"]
    if is_gymnasium_id(env_id):
        return "gymnasium"
    specs = registered_specs(env_id)
    if env_id not in specs:
        raise EnvError(unknown_env_message(env_id))
    return specs[env_id][0].split(".")[1]


def env_suite(env_id: str) -> str | None:
    """The suite whose presets an id takes on top of its family's: 'dm_control' for dm_control's
    tasks (EnvPool's `envpool.mujoco.dmc`, in the mujoco family beside gym's MuJoCo); for gymnax's,
    'minatar' for MinAtar's games and EnvPool's family of the same task for classic control; for a
    Gymnasium id of a task EnvPool has too (`gym:CartPole-v1`), that task's family; else None.
    gymnax's and Gymnasium's classic-control tasks have the dynamics, limits and rewards of EnvPool's
    ids of the same names, so they take those ids' presets."""
    if ":" in env_id:  # the JAX-native or the Gymnasium backend's
        prefix, name = env_id.split(":", 1)
        if prefix == "gymnax":
            return "minatar" if name.endswith("-MinAtar") else envpool_family_of(name)
        return envpool_family_of(name) if prefix == "gym" else None
    return "dm_control" if registered_specs(env_id)[env_id][0] == "envpool.mujoco.dmc" else None


def envpool_family_of(name: str) -> str | None:
    """The family of EnvPool's id `name`, or None where EnvPool has no such id."""
    specs = registered_specs(name)
    return specs[name][0].split(".")[1] if name in specs else None


def unknown_env_message(env_id: str) -> str:
    import envpool

    import_every_family()
    known = envpool.list_all_envs()
    close = difflib.get_close_matches(env_id, known, n=5, cutoff=0.6)
    if not close:  # case and punctuation slips: 'cartpole' -> 'CartPole-v1'
        lowered = {k.lower(): k for k in known}
        close = [lowered[k] for k in difflib.get_close_matches(env_id.lower(), list(lowered), n=5, cutoff=0.5)]
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return (f"--env: unknown EnvPool id {env_id!r}.{hint} (envpool.list_all_envs() lists all {len(known)}; "
            f"gymnax:<id> and brax:<id> take gymnax's and Brax's JAX-native envs, gym:<id> Gymnasium's registry, module.path:Class your own "
            f"gymnasium.Env.)")


def check_env_id(env_id: str) -> str:
    """Return the family of a known id whose observations the networks can take, or raise EnvError."""
    if is_jax_env_id(env_id):
        from jaxrl_fast.env.jax_envs import check_name

        check_name(env_id)
        return env_family(env_id)
    if is_gymnasium_id(env_id):  # the Gymnasium backend's: its spaces are checked when its envs are made
        from jaxrl_fast.env.gymnasium_env import FAMILY, constructor

        constructor(env_id)
        return FAMILY
    family = env_family(env_id)
    if family not in VECTOR_FAMILIES + PIXEL_FAMILIES:
        raise EnvError(
            f"--env: {env_id!r} is an EnvPool {family!r} task; this version trains "
            f"on vector observations ({', '.join(VECTOR_FAMILIES)}) and images ({', '.join(PIXEL_FAMILIES)})."
        )
    if family == "procgen" and not load_qt_runtime():
        raise EnvError(f"--env: {env_id!r}: EnvPool's Procgen needs Qt 5's runtime: pip install -e \".[procgen]\" "
                       f"(the PyQt5-Qt5 wheel's libraries), or the system's (apt install libqt5gui5)")
    observation_keys(env_id)  # an id EnvPool cannot make as we build it is refused here, in one line
    return family


@functools.cache
def load_qt_runtime() -> bool:
    """Whether Qt 5's libraries, which EnvPool's Procgen module links to, can be loaded: the
    system's, or those of the PyQt5-Qt5 wheel (the `procgen` extra), which this loads by path so
    that the dynamic linker resolves Procgen's `libQt5Gui.so.5` to them."""
    import ctypes
    import ctypes.util
    import importlib.util
    from pathlib import Path

    if sys.platform != "linux" or ctypes.util.find_library("Qt5Gui"):
        return True
    wheel = importlib.util.find_spec("PyQt5")
    lib = Path(list(wheel.submodule_search_locations)[0]) / "Qt5" / "lib" if wheel else None
    if lib is None or not (lib / "libQt5Gui.so.5").exists():
        return False
    try:
        for name in ("libQt5Core.so.5", "libQt5Gui.so.5"):
            ctypes.CDLL(str(lib / name), mode=ctypes.RTLD_GLOBAL)
    except OSError:  # e.g. a system library they need (libGL) missing: Procgen is refused, the rest goes on
        return False
    retry_procgen_import()
    return True


def retry_procgen_import() -> None:
    """Import EnvPool's Procgen module again where it was imported before Qt 5 was loaded (a plain
    `import envpool` registers every family, Procgen's module among them, which then keeps its
    failed import: every Procgen id of the process would be refused). Its extension, never loaded,
    loads now."""
    import importlib

    module = sys.modules.get("envpool.procgen")
    if module is not None and getattr(module, "_PROCGEN_IMPORT_ERROR", None) is not None:
        importlib.reload(module)


@functools.cache
def observation_keys(env_id: str) -> tuple[str, ...]:
    """The keys of an id's dict observations (none for one array), from its spec: no pool is built,
    and no family is imported that `env_family` did not register."""
    registry = import_envpool_light()
    registered_specs(env_id)
    with warnings.catch_warnings():  # Gymnasium's float64 -> float32 bounds note
        warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
        try:
            space = registry.make_spec(env_id).observation_space
        except Exception as error:  # EnvPool's own refusal, e.g. mjlab's tracking tasks without a motion file
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise EnvError(f"--env: EnvPool cannot make {env_id!r} as this version builds it: {reason}") from error
    return tuple(getattr(space, "spaces", {}))


def parse_env_kwargs(items: Sequence[str]) -> dict[str, Any]:
    """`--env-kwargs` as a dict: `key=value` items, values read as bool, int, float or text (text in
    quotes as it is: `name="007"`); a key given twice takes its last value (a preset's options,
    then the command line's)."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise EnvError(f"--env-kwargs: {item!r} is not key=value (e.g. repeat_action_probability=0.25)")
        options[key.strip()] = _option_value(text.strip())
    return options


def _option_value(text: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":  # quoted: text as it is ("007" stays text)
        return text[1:-1]
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
    if not options or is_gymnasium_id(env_id):  # the Gymnasium backend passes them to the constructor, which checks them
        return
    if is_jax_env_id(env_id):  # fields of gymnax's env parameters, arguments of Brax's env
        from jaxrl_fast.env.jax_envs import functional, option_items

        functional(env_id, option_items(options))
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
        refusal = option_refusal(key, value)
        if refusal:
            raise EnvError(f"--env-kwargs: {key}={value!r}: {refusal}")


def merge_env_kwargs(*items: Sequence[str]) -> tuple[str, ...]:
    """Several `--env-kwargs` lists as one, a later list's value of a key replacing an earlier one's."""
    return tuple(option_text(key, value) for key, value in parse_env_kwargs([i for part in items for i in part]).items())


def option_text(key: str, value: Any) -> str:
    """`key=value` as `parse_env_kwargs` reads it back to `value`: text that would read as something
    else ("007", "true", " padded") is quoted."""
    if isinstance(value, str) and _option_value(value.strip()) != value:  # read back stripped, then typed
        return f'{key}="{value}"'
    return f"{key}={value}"


def evaluation_options(options: dict[str, Any]) -> dict[str, Any]:
    """The pool options of evaluation envs: the training ones without those that only shape the
    learner's view (life-loss episodes, clipped rewards)."""
    return {k: v for k, v in options.items() if k not in TRAINING_ONLY_OPTIONS}
