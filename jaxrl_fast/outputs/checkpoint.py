"""Checkpoints of a run's state with orbax, and the policy loader that needs no training code.

A checkpoint is a directory `RUN_DIR/checkpoints/<step>/` written by orbax's CheckpointManager
(into a temporary directory, renamed when complete, so a crash never leaves a half checkpoint
that counts). It holds three items:

* `state`: the run state as a flat dict of arrays (keys `00000`, `00001`, ... in tree order;
  their tree paths are in `meta`, so a mismatch is caught and named). PRNG keys are stored as
  their raw key data. EnvPool's simulators cannot be saved: a resumed run starts new episodes.
* `streamed`: the replay's columns and any other large array, one `.npy` file each under the
  same keys, written and read back in chunks (`jaxrl_fast.outputs.streamed`): a save or a
  restore holds the buffer and one chunk, never a second copy of it.
* `policy`: what evaluation acts with (policy parameters and observation statistics), for
  `load_policy`.
* `meta`: JSON: step, iterations, the tree paths, and schedule counters.

`RUN_DIR/checkpoints/policy.json` describes the network (algorithm, env spec, config) beside
the weights.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_fast.engine.sharding import is_key
from jaxrl_fast.files import fsync_tree
from jaxrl_fast.outputs.run_dir import BEST_POLICY, CHECKPOINT_DIR, POLICY_JSON, seed_run_dirs

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    pass


class NonFiniteError(RuntimeError):
    pass


class CheckpointSaveError(RuntimeError):
    """A checkpoint that could not be written (a full disk, a file-size limit); the ones before it stay."""


def write_failure(error: BaseException) -> str:
    """One line for a failed write: the OS's reason when the innermost error names one (orbax wraps it
    in a page of tensorstore context), else the innermost error's first line."""
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    text = str(error)
    code = re.search(r"os_error_code='(\d+)'", text)
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return os.strerror(int(code.group(1))) if code else f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


@functools.cache  # once per process
def _ignore_late_write_callbacks() -> None:
    """After a failed write, the writes still in flight finish into the event loop orbax closed, and
    each would print a traceback of `RuntimeError: Event loop is closed` (through sys.excepthook,
    from tensorstore's threads); the failure is reported once, by the save."""

    def closed_loop(error: BaseException) -> bool:
        return isinstance(error, RuntimeError) and "Event loop is closed" in str(error)

    excepthook, unraisablehook = sys.excepthook, sys.unraisablehook
    sys.excepthook = lambda kind, error, tb: None if closed_loop(error) else excepthook(kind, error, tb)
    sys.unraisablehook = lambda unraisable: None if closed_loop(unraisable.exc_value) else unraisablehook(unraisable)


class _DropErrors(logging.Filter):
    """Orbax logs the traceback of a failed background write before the save reports it, and asyncio
    the error of each write still in flight; the save reports the failure in one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


def flatten_state(tree: Any) -> tuple[dict[str, Any], list[str]]:
    """Arrays by position (`00000`, ...) and their tree paths; keys become their key data."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    flat = {f"{i:05d}": jax.random.key_data(leaf) if is_key(leaf) else leaf for i, (_, leaf) in enumerate(leaves)}
    return flat, [jax.tree_util.keystr(path) for path, _ in leaves]


def streams(path: str, leaf: Any) -> bool:
    """Whether a state's leaf is written in chunks: the replay's columns (whatever their size) and any
    other array of `STREAM_BYTES` or more."""
    from jaxrl_fast.outputs.streamed import Slab

    if isinstance(leaf, Slab):
        return True
    large = isinstance(leaf, jax.Array) and leaf.nbytes >= STREAM_BYTES
    return isinstance(leaf, jax.Array) and leaf.ndim >= 2 and (path.startswith(REPLAY_COLUMNS) or large)


STREAM_BYTES = 8 * 2**20
REPLAY_COLUMNS = "['replay'].rows"  # the tree paths of the replay's columns


def unflatten_into(template: Any, flat: dict[str, Any], paths: list[str]) -> Any:
    """Saved arrays in the structure, dtypes and placement of `template` (a freshly built state).

    The replay's streamed columns are read into the template's own buffers, which are donated: they
    must not be used after (for a --num-seeds agent's `Slab`, the whole buffer comes back, this
    agent's columns filled). Another streamed array is mapped from its file and placed anew: a
    template may share one buffer between leaves (a target network built as a copy)."""
    from jaxrl_fast.outputs.streamed import SavedArray, Slab, fill

    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    expected = [jax.tree_util.keystr(path) for path, _ in leaves]
    if expected != paths:
        missing = sorted(set(expected) - set(paths))[:3]
        extra = sorted(set(paths) - set(expected))[:3]
        raise CheckpointError(f"the checkpoint does not match this run's state (missing {missing}, unexpected {extra})")
    out = []
    for i, (_, leaf) in enumerate(leaves):
        saved = flat[f"{i:05d}"]
        in_place = isinstance(leaf, Slab) or (isinstance(leaf, jax.Array) and expected[i].startswith(REPLAY_COLUMNS))
        shape = leaf.shape if isinstance(leaf, Slab) else np.shape(leaf)
        if np.shape(saved) != shape and not is_key(leaf):
            raise CheckpointError(f"{expected[i]}: saved shape {np.shape(saved)} != {shape}")
        if in_place and (isinstance(saved, SavedArray) or isinstance(leaf, Slab)):
            target, column = (leaf.array, leaf.start) if isinstance(leaf, Slab) else (leaf, 0)
            out.append(fill(target, saved if isinstance(saved, SavedArray) else np.asarray(saved), column))
            continue
        if isinstance(saved, SavedArray):  # mapped: read as it is placed
            saved = saved.load()
        if is_key(leaf):
            value = jax.random.wrap_key_data(jnp.asarray(saved), impl=jax.random.key_impl(leaf))
        else:
            value = np.asarray(saved, dtype=leaf.dtype)  # no copy where the dtype is the same (a mapped file)
        out.append(jax.device_put(value, leaf.sharding) if isinstance(leaf, jax.Array) else value)
    return jax.tree_util.tree_unflatten(treedef, out)


class Restored(NamedTuple):
    step: int
    meta: dict[str, Any]
    state: dict[str, Any]  # flat arrays; `into(template)` rebuilds them

    def into(self, template: Any, item: str = "paths") -> Any:
        return unflatten_into(template, self.state, self.meta[item])


class StackedRestored(NamedTuple):
    """The checkpoints of a --num-seeds run's agents at one step (each a single run's checkpoint),
    rebuilt along the leading agents axis of the run's state."""

    parts: list[Restored]

    @property
    def step(self) -> int:
        return self.parts[0].step

    @property
    def meta(self) -> dict[str, Any]:
        return self.parts[0].meta

    def into(self, template: dict[str, Any], item: str = "paths") -> dict[str, Any]:
        agents = []
        for k, part in enumerate(self.parts):
            agents.append(part.into(agent_state(template, k, len(self.parts)), item))
            if "replay" in template:  # the shared buffer, this agent's columns filled (the one before was donated)
                template = dict(template, replay=agents[-1]["replay"])
        return join_agents(template, agents)


def agent_state(state: dict[str, Any], index: int, num_agents: int) -> dict[str, Any]:
    """Agent `index`'s part of a --num-seeds run's state (a schedule's snapshot): a single run's
    state, its replay columns the `Slab`s of the buffer its siblings share (streamed, never copied)."""
    from jaxrl_fast.engine.acting import agent_part
    from jaxrl_fast.outputs.streamed import Slab

    own = {name: agent_part(value, index) for name, value in state.items() if name != "replay"}
    if "replay" in state:  # one buffer, each agent's envs a block of its columns
        replay = state["replay"]
        width = replay.rows.obs.shape[1] // num_agents
        own["replay"] = replay._replace(rows=jax.tree.map(lambda x: Slab(x, index * width, width), replay.rows))
    return own


def join_agents(template: dict[str, Any], agents: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's state from its agents' (the inverse of `agent_state`), placed like `template`; the
    replay is the template's, into which the agents' columns were read."""

    def stack(like: Any, *values: Any) -> Any:
        if jnp.ndim(like) == 0:  # a counter the agents share
            return values[0]
        return jax.device_put(jnp.stack(values), like.sharding) if isinstance(like, jax.Array) else np.stack(values)

    joined = {name: jax.tree.map(stack, value, *[agent[name] for agent in agents])
              for name, value in template.items() if name != "replay"}
    if "replay" in template:
        joined["replay"] = agents[-1]["replay"]
    return joined


def host_copy(tree: Any) -> Any:
    """`jax.device_get` of a tree whose arrays may span processes (a data-parallel run's per-shard
    state): each such array is gathered from every process first, a collective that every process
    of the run calls at the same point (they checkpoint and check alike)."""

    def local(x: Any) -> Any:
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return x

    return jax.device_get(jax.tree.map(local, tree))


def nonfinite_leaves(tree: Any) -> list[tuple[str, np.ndarray]]:
    """Tree paths and values of floating-point leaves holding a NaN or an infinity (one device-to-host copy)."""
    # an array spread over the processes of a data-parallel run (a shard's own state) is left to its
    # shard: what the shards share, each process checks alike, without a collective per call
    leaves = [(jax.tree_util.keystr(p), x) for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
              if isinstance(x, (jax.Array, np.ndarray)) and jnp.issubdtype(x.dtype, jnp.floating)
              and getattr(x, "is_fully_addressable", True)]  # numpy: a payload handed over from the host
    if not leaves:
        return []
    # on the host: op by op on the device, each leaf's shape compiled programs of its own (a second of
    # start-up), and the parameters are small beside one training call
    values = jax.device_get([x for _, x in leaves])
    return [(path, value) for (path, _), value in zip(leaves, values) if not np.isfinite(value).all()]


def check_finite(metrics: dict[str, Any], params: Any, step: int, num_agents: int = 1) -> None:
    """Raise NonFiniteError naming the first non-finite loss/metric or parameter and the step; with
    `num_agents` > 1 (leaves with a leading agents axis), also the agents' run directories."""

    def agents(value: np.ndarray) -> str:
        if num_agents == 1:
            return ""
        finite = np.isfinite(np.asarray(value)).reshape(num_agents, -1).all(axis=1)
        return " in " + ", ".join(f"seed_{k}" for k in np.flatnonzero(~finite))

    for name, value in metrics.items():
        if name.startswith("train/") and not np.isfinite(value).all():
            first = np.asarray(value).reshape(-1)[~np.isfinite(np.asarray(value).reshape(-1))][0]
            raise NonFiniteError(f"{name} became {float(first)} at step {step}{agents(value)}")
    bad = nonfinite_leaves(params)
    if bad:
        path, value = bad[0]
        raise NonFiniteError(f"parameter {path} became non-finite at step {step}{agents(value)}"
                             + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))


class Checkpointer:
    """Periodic, atomic checkpoints keeping the newest `keep`; saving runs in the background. A save
    returns once its checkpoint is on the disk, and only then are older ones deleted: a power cut
    never leaves the newest checkpoint half flushed with the one before it gone."""

    def __init__(self, run_dir: Path, keep: int):
        self.directory = Path(run_dir).resolve() / CHECKPOINT_DIR
        self.keep = keep
        self._opened: Any = None

    @property
    def _manager(self) -> Any:
        """orbax's manager, made at the first save or restore: importing orbax takes a few tenths of
        a second that a run's start-up need not wait for."""
        if self._opened is None:
            import orbax.checkpoint as ocp

            _ignore_late_write_callbacks()
            # no max_to_keep: orbax would delete the older steps before the new one is on the disk
            self._opened = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(create=True))
        return self._opened

    def save(self, step: int, state: Any, policy: Any, meta: dict[str, Any]) -> None:
        import orbax.checkpoint as ocp

        from jaxrl_fast.outputs.streamed import Slab, orbax_item

        flat, paths = flatten_state(state)
        streamed = {k: v if isinstance(v, Slab) else Slab(v) for k, v, path in zip(flat, flat.values(), paths)
                    if streams(path, v)}
        small = {k: v for k, v in flat.items() if k not in streamed}
        policy_flat, policy_paths = flatten_state(policy)
        # Copies on the host before returning: the next training call donates (reuses) the buffers. The
        # streamed arrays are written before `save` returns (orbax runs a blocking item in its call).
        small, policy_flat = jax.tree.map(np.array, host_copy((small, policy_flat)))
        meta = dict(meta, step=int(step), paths=paths, policy_paths=policy_paths, streamed=sorted(streamed))
        items = dict(state=ocp.args.StandardSave(small), policy=ocp.args.StandardSave(policy_flat),
                     meta=ocp.args.JsonSave(meta))
        if streamed:
            items["streamed"] = orbax_item().save(streamed)
        quiet = _DropErrors()
        logging.getLogger("absl").addFilter(quiet)
        try:
            written = self._manager.save(int(step), args=ocp.args.Composite(**items))
            # Wait for the background write: a failure is reported at this step, not at the next save
            # (the host copy above is what the training calls overlapped with; writing it takes little more).
            self._manager.wait_until_finished()
        except Exception as failure:
            # the writes still in flight fail too, and asyncio would log each task's error when it is collected
            logging.getLogger("asyncio").addFilter(_DropErrors())
            raise CheckpointSaveError(f"the checkpoint at step {step:,d} could not be written to {self.directory}: "
                                      f"{write_failure(failure)}") from failure
        finally:
            logging.getLogger("absl").removeFilter(quiet)
        if not written:  # orbax declines a step it holds already, or one older than it holds: another run's
            raise CheckpointSaveError(f"the checkpoint at step {step:,d} was not written: {self.directory} holds "
                                      f"steps {list(self._manager.all_steps())} already (another run's?)")
        if jax.process_index() == 0:  # process 0 writes the run directory; the others join orbax's gathers only
            self._keep_best(step)
            try:
                fsync_tree(self.directory / str(step))
            except OSError as failure:  # the older checkpoints stay
                raise CheckpointSaveError(f"the checkpoint at step {step:,d} in {self.directory} could not be "
                                          f"flushed to the disk: {failure}") from failure
        self._drop_oldest()

    def _drop_oldest(self) -> None:
        """Keep the newest `keep` steps, deleting older ones only once the newest is on the disk (every
        process takes part: orbax's delete waits for all of them)."""
        for old in sorted(self._manager.all_steps())[:-self.keep]:
            self._manager.delete(old)

    def _keep_best(self, step: int) -> None:
        """A link to the run's best policy as it stands, inside the step's checkpoint (rotated with
        it): a run resumed from this step gets this best back if a later one replaced it."""
        best = self.directory / BEST_POLICY
        try:
            os.link(best, self.directory / str(step) / BEST_POLICY)  # the file as it is now: a new best is a new file
        except FileNotFoundError:  # no evaluation has been kept yet
            pass
        except OSError as error:  # a file system without links: the resume then removes a late best instead
            log.debug("best policy not linked into checkpoint %d: %s", step, error)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def drop_after(self, step: int) -> None:
        """Delete the checkpoints newer than `step`: a --num-seeds run stopped between its agents'
        saves of one step resumes from the step every agent saved, and saves the newer one again."""
        for newer in [s for s in self._manager.all_steps() if s > step]:
            self._manager.delete(newer)

    def restore(self, step: int | None = None) -> Restored:
        import orbax.checkpoint as ocp

        step = self._manager.latest_step() if step is None else step
        if step is None:
            raise CheckpointError(f"no complete checkpoint in {self.directory}")
        from jaxrl_fast.outputs.streamed import orbax_item

        items = dict(state=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore())
        if (self.directory / str(step) / "streamed").is_dir():  # checkpoints before streaming have none
            items["streamed"] = orbax_item().restore()
        out = self._manager.restore(step, args=ocp.args.Composite(**items))
        return Restored(step, out.meta, dict(out.state) | (dict(out.streamed) if "streamed" in items else {}))

    def wait(self) -> None:
        if self._opened is not None:
            self._opened.wait_until_finished()

    def close(self) -> None:
        if self._opened is not None:
            self._opened.wait_until_finished()
            self._opened.close()


class _ReadOnlyNotices(logging.Filter):
    """Drops orbax's warnings that a manager is read only: reading is all we mean to do."""

    NOTICES = ("Given directory is read only", "CheckpointManagerOptions.read_only=True")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.NOTICES)


def open_read_only(directory: Path) -> Any:
    """An orbax CheckpointManager that reads `directory` and creates, saves and deletes nothing."""
    import orbax.checkpoint as ocp

    notice = _ReadOnlyNotices()
    absl_log = logging.getLogger("absl")  # where orbax's absl.logging writes
    absl_log.addFilter(notice)
    try:
        return ocp.CheckpointManager(directory, options=ocp.CheckpointManagerOptions(create=False, read_only=True))
    finally:
        absl_log.removeFilter(notice)


def saved_steps(run_dir: Path) -> list[int]:
    """The steps of a run directory's complete checkpoints, oldest first, without creating anything."""
    directory = Path(run_dir).resolve() / CHECKPOINT_DIR
    if not directory.is_dir():
        return []
    # orbax writes a step into a temporary directory and renames it to the bare step when complete;
    # listing the names needs no orbax manager, which would start JAX's backend (before a
    # distributed run's processes have joined, that would leave each of them alone)
    return sorted(int(path.name) for path in directory.iterdir() if path.name.isdigit() and path.is_dir())


def latest_step(run_dir: Path) -> int | None:
    """The newest complete checkpoint's step, without creating anything; for a --num-seeds run, the
    newest step every agent saved."""
    agents = seed_run_dirs(run_dir)
    if agents:
        common = set.intersection(*(set(saved_steps(path)) for path in agents))
        return max(common) if common else None
    steps = saved_steps(run_dir)
    return steps[-1] if steps else None


def agents_out_of_step(run_dir: Path) -> list[str]:
    """The agents of a --num-seeds run with more than one checkpoint past the newest step the least
    trained agent saved: trained on by themselves (`--resume RUN_DIR/seed_<k>`), which resuming the
    whole run would undo (or, once their rotation dropped every step the others kept, start over).
    One checkpoint past it is a save the run stopped in the middle of."""
    saved = [(path.name, saved_steps(path)) for path in seed_run_dirs(run_dir)]
    if not saved:
        return []
    floor = min((steps[-1] if steps else -1) for _, steps in saved)
    return [name for name, steps in saved if len([s for s in steps if s > floor]) > 1]


def write_policy_info(run_dir: Path, info: dict[str, Any]) -> None:
    from jaxrl_fast.outputs.metrics import write_json

    directory = Path(run_dir) / CHECKPOINT_DIR
    directory.mkdir(parents=True, exist_ok=True)
    write_json(directory / POLICY_JSON, info)


def load_policy(run_dir: str | Path, step: int | None = None, *, best: bool = False, sampled: bool | None = None,
                seed: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """The evaluation policy of a run's newest (or given) checkpoint: observations -> actions.
    `best=True`: the policy of the run's best evaluation instead (`checkpoints/best_policy.npz`,
    which a run stopped at `--target-return` ends after: training went on while it was evaluated).

    It acts deterministically or, where the run evaluated with `--eval-policy sampled` (the MiniGrid
    and Procgen PPO presets), with actions sampled from the policy, a fresh draw each call from a
    generator seeded by `seed`. `sampled` True or False overrides the run's choice (True needs a
    policy that samples: PPO's or SAC's). A run's `--eval-epsilon` (the Atari presets' 0.05) is not
    applied: the policy is the greedy one.

    Takes a batch `[N, *obs_shape]` or a single observation `[*obs_shape]`; returns actions in the
    env's action space. A dict-observation env's policy (dm_control) also takes EnvPool's dict, one
    observation or a batch, and flattens it as training did (keys in `spec.obs_keys` order). Needs the run directory only: no environment, trainer or EnvPool pool.
    Raises CheckpointError for a step that was not saved (listing those that were), for `best=True`
    where no evaluation finished (or with a `step`), for `sampled=True` with a deterministic
    policy, and, when called, for observations of another shape (naming the expected one).
    `policy.step` is the step its parameters were trained to; with `best=True`,
    `policy.eval_return` is the evaluation's mean that made it the best.
    """
    from jaxrl_fast.algos import ALGORITHMS, make_algorithm
    from jaxrl_fast.config.run import config_from_dict, family
    from jaxrl_fast.engine.acting import EvalPayload, draw_seed, env_options, evaluation_policy
    from jaxrl_fast.ops.normalization import init_moments

    directory = Path(run_dir).resolve() / CHECKPOINT_DIR
    info_path = directory / POLICY_JSON
    if not info_path.exists():
        agents = seed_run_dirs(Path(run_dir))
        raise CheckpointError(f"{run_dir} has no {CHECKPOINT_DIR}/{POLICY_JSON}: " + (
            f"a --num-seeds run, whose agents' policies are in {agents[0].name} ... {agents[-1].name} (load_policy of "
            "one of those)" if agents else "not a jaxrl_fast run directory with checkpoints"))
    try:
        info = json.loads(info_path.read_text())
        config = config_from_dict(info["train_config"])
        spec = spec_from_json(info["env_spec"])
    except (OSError, ValueError, KeyError, TypeError) as error:  # a truncated or hand-edited file
        raise CheckpointError(f"{info_path} cannot be read ({type(error).__name__}: {error}); a --resume of the run "
                              "writes it again") from error
    sampled = config.eval_policy == "sampled" if sampled is None else sampled
    if sampled and not ALGORITHMS[config.algo].stochastic_policy:
        samplers = ", ".join(name for name, spec_of in ALGORITHMS.items() if spec_of.stochastic_policy)
        raise CheckpointError(f"load_policy(..., sampled=True): {config.algo}'s policy is deterministic "
                              f"(policies that sample: {samplers})")
    arrays, policy_paths, step, eval_return = saved_policy(directory, step, best)
    algo = make_algorithm(config, spec)
    if family(config) == "off_policy":
        shapes = jax.eval_shape(lambda k: algo.acting_params(*algo.init(k)), jax.random.key(0))
    else:
        shapes = jax.eval_shape(lambda k: algo.policy_params(algo.init(k)), jax.random.key(0))
    template = EvalPayload(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes), init_moments(spec.obs_shape))
    payload = unflatten_into(template, arrays, policy_paths)
    seeds = np.random.default_rng(seed)
    evaluate = jax.jit(functools.partial(evaluation_policy(algo, env_options(config), sampled), payload))
    act = lambda obs: evaluate(obs, draw_seed(seeds))  # noqa: E731

    def policy(obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
        if isinstance(obs, dict) and spec.obs_keys:
            obs = flat_observation(obs, spec)
        elif spec.obs_parts and not spec.obs_keys:  # a Box of several axes, which the learner saw flattened
            obs = flat_box(np.asarray(obs), tuple(spec.obs_parts[0][1]))
        obs = np.asarray(obs, spec.obs_dtype)  # uint8 frames stay uint8: the encoder scales them
        check_observation_shape(obs.shape, tuple(spec.obs_shape), spec.env_id)
        single = obs.shape == tuple(spec.obs_shape)
        actions = np.asarray(act(obs[None] if single else obs))
        if not spec.discrete:  # in the space's own shape (a scalar Box's too)
            actions = actions.reshape((actions.shape[0], *spec.action_shape))
        return actions[0] if single else actions

    policy.step = step  # which checkpoint (or best evaluation) it came from
    policy.eval_return = eval_return
    policy.sampled = sampled
    return policy


def saved_policy(directory: Path, step: int | None, best: bool) -> tuple[dict[str, Any], list[str], int, float | None]:
    """A run's saved policy arrays (by position), their tree paths, the step they were trained to
    and, for the best evaluation's policy, its evaluation mean: from the checkpoint at `step` (the
    newest by default) or, with `best`, from `best_policy.npz`."""
    if best:
        from jaxrl_fast.outputs.best import read_best_policy

        if step is not None:
            raise CheckpointError("load_policy: give a step or best=True, not both")
        if not (directory / BEST_POLICY).exists():
            raise CheckpointError(f"{directory.parent} has no {CHECKPOINT_DIR}/{BEST_POLICY}: "
                                  "no evaluation of the run finished")
        try:
            arrays, meta = read_best_policy(directory / BEST_POLICY)
        except Exception as error:  # noqa: BLE001 - numpy's and zipfile's errors for a damaged file are of many kinds
            raise CheckpointError(f"{directory / BEST_POLICY} cannot be read ({type(error).__name__}: {error}); "
                                  "load the newest checkpoint's policy instead (best=False)") from error
        return arrays, meta["paths"], meta["step"], meta["eval_return_mean"]
    import orbax.checkpoint as ocp

    with open_read_only(directory) as manager:
        saved = sorted(manager.all_steps())
        if not saved:
            raise CheckpointError(f"no complete checkpoint in {directory}")
        step = saved[-1] if step is None else step
        if step not in saved:
            raise CheckpointError(f"no checkpoint at step {step} in {directory}; "
                                  f"saved steps: {', '.join(map(str, saved))}")
        items = ocp.args.Composite(policy=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore())
        out = manager.restore(step, args=items)
    return dict(out.policy), out.meta["policy_paths"], step, None


def spec_from_json(fields: dict[str, Any]) -> Any:
    """An `EnvSpec` as `policy.json` holds it (JSON lists for its tuples)."""
    from jaxrl_fast.types import EnvSpec

    def as_tuple(value: Any) -> Any:
        return tuple(as_tuple(v) for v in value) if isinstance(value, list) else value

    return EnvSpec(**{k: as_tuple(v) for k, v in fields.items()})


def flat_box(obs: np.ndarray, given: tuple[int, ...]) -> np.ndarray:
    """A Box observation of several axes (one of shape `given`, or a batch `[N, *given]`) as the
    vector(s) the policy trained on; any other shape is left for the shape check to refuse."""
    if obs.shape == given:
        return obs.reshape(-1)
    if obs.shape[1:] == given:
        return obs.reshape(obs.shape[0], -1)
    return obs


def flat_observation(obs: dict[str, Any], spec: Any) -> np.ndarray:
    """A dict observation (one, or a batch `[N, ...]` per key) as the vector(s) the policy trained
    on: one where every key has its own shape (`spec.obs_parts`), a batch otherwise, a batch of one
    too (a policy.json of before 2026-11-29, which names no shapes, reads a batch of one as one)."""
    from jaxrl_fast.env.spaces import flatten_observations

    missing = [k for k in spec.obs_keys if k not in obs]
    if missing:
        raise CheckpointError(f"load_policy: the observation lacks {', '.join(missing)}; this policy ({spec.env_id}) "
                              f"takes a dict of {', '.join(spec.obs_keys)}")
    shapes = dict(spec.obs_parts)
    single = (all(np.shape(obs[k]) == tuple(shapes[k]) for k in spec.obs_keys) if shapes else
              sum(np.size(obs[k]) for k in spec.obs_keys) == spec.obs_shape[0])
    rows = 1 if single else np.shape(obs[spec.obs_keys[0]])[0]
    flat = flatten_observations({k: np.reshape(np.asarray(obs[k]), (rows, -1)) for k in spec.obs_keys}, spec.obs_keys)
    return flat[0] if single else flat


def check_observation_shape(shape: tuple[int, ...], expected: tuple[int, ...], env_id: str) -> None:
    """Refuse observations that are neither one `expected`-shaped observation nor a batch of them."""
    if shape != expected and shape[1:] != expected:
        raise CheckpointError(f"load_policy: observations of shape {shape}; this policy ({env_id}) takes one "
                              f"observation of shape {expected} or a batch of shape (N, {', '.join(map(str, expected))})")
