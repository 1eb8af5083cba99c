"""Frozen configuration dataclasses, one per concern. Nothing mutates a config after parsing.

`python -m jaxrl_fast.train --help` is generated from these by tyro (each field's docstring is its
flag's description, one paragraph without line breaks: tyro wraps it); the defaults it shows are
already resolved from the environment's preset (see `jaxrl_fast.config.presets`).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Literal

from jaxrl_fast.algos import ALGORITHMS

EVAL_SEED_OFFSET = 10_000  # evaluation env i of seed s is seeded s + EVAL_SEED_OFFSET + i, apart from the training envs
ALGOS = tuple(ALGORITHMS)
OFF_POLICY = tuple(name for name, spec in ALGORITHMS.items() if spec.family == "off_policy")
AlgoName = Literal[ALGOS]  # type: ignore[valid-type]  (tyro lists the choices)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Train an agent on an EnvPool environment. Defaults come from the env's preset in envs/."""

    algo: AlgoName = "ppo"
    """Algorithm."""
    env: str = "CartPole-v1"
    """An EnvPool id, gymnax:<id>, brax:<id>, gym:<id> or module.path:Class (docs/own-env.md)."""
    seed: int = 0
    """Seeds the training envs, the parameters and the sampling (evaluation envs get seed + 10,000)."""
    total_steps: int = 100_000
    """Environment steps to train for (summed over all envs; per seed with --num-seeds)."""
    num_seeds: int = 1
    """Train N independent agents, seeds --seed .. --seed + N - 1, in one program over one EnvPool of N x --num-envs envs, each the single run with its seed (bitwise for PQN on raw observations, and for PPO on JAX 0.10; docs/seeds.md). RUN_DIR/seed_<k> is agent k's complete run directory; RUN_DIR/summary.json aggregates them. sync schedule, single placement."""
    batch_seed_updates: bool = False
    """--num-seeds: vmap the agents' updates into one batched program instead of one agent after another. Faster where an update is bound by its batch (accelerators); agent k then equals the single run with its seed only up to floating-point reassociation, which training amplifies until trajectories part."""
    env_kwargs: tuple[str, ...] = ()
    """EnvPool options as key=value (e.g. repeat_action_probability=0.25), over the preset's. Atari's episodic_life and reward_clip shape training only: evaluation plays whole games."""
    num_envs: int = 8
    """Environments stepped together by EnvPool."""
    num_threads: int = 0
    """EnvPool worker threads; 0 picks min(num_envs, CPU cores)."""
    data_parallel: bool = False
    """Shard envs, batches over devices."""
    normalize_observations: bool = False
    """Normalize observations with running statistics (part of the run state)."""
    scale_rewards: bool = False
    """Divide rewards by the running std of the discounted return (part of the run state)."""
    scaled_reward_clip: float = 0.0
    """With --scale-rewards: clip scaled rewards to ±C, as SB3 and CleanRL do (10); 0: no clip (every preset)."""
    run_dir: Path | None = None
    """Output directory; default runs/<env>__<algo>__<seed>__<time>."""
    target_return: float | None = None
    """Stop at the first evaluation whose mean return reaches this. Training goes on while it runs, so the run ends with a later policy; every run keeps its best evaluation's (load_policy(run_dir, best=True))."""
    eval_interval: int = 10_000
    """Environment steps between evaluations (0: only the final one)."""
    eval_episodes: int = 10
    """Episodes per evaluation: deterministic, epsilon-greedy with --eval-epsilon, or sampled with --eval-policy sampled."""
    eval_policy: Literal["deterministic", "sampled"] = "deterministic"
    """How evaluation acts: the policy's deterministic action, or actions sampled from its distribution (PPO, SAC), as rl-baselines3-zoo evaluates MiniGrid and CleanRL reports Procgen (those families' presets set it)."""
    eval_epsilon: float = 0.0
    """Chance of a uniformly random action per evaluation step (Atari presets: 0.05, as Mnih et al. 2015)."""
    video_interval: int = 0
    """Film one evaluation episode every N evaluations (the first, every N-th after it, and the final one) into RUN_DIR/videos/step_<step>.mp4; 0: no videos. Needs `pip install 'jaxrl_fast[video]'` and an env that renders (docs/run-directory.md)."""
    log_interval: int = 10_000
    """Environment steps between training log lines (also the length of one jitted call)."""
    progress: Literal["auto", "bar", "plain", "off"] = "auto"
    """Live progress bar on a terminal, plain periodic lines otherwise."""
    compile_cache: bool = True
    """Keep compiled programs in JAX's persistent compilation cache, so that the next run with the same programs loads them instead of compiling (in $JAXRL_FAST_COMPILE_CACHE_DIR, default ~/.cache/jaxrl_fast/xla, one subdirectory per JAX version). A setting of this process, not of the run: --resume takes it from its own command line."""
    schedule: Literal["auto", "sync", "concurrent", "async"] = "auto"
    """'auto': what was measured fastest for the run's kind, recorded in config.json with why: 'async' for SAC and TD3 on Python-stepped Gymnasium envs, 'sync' everywhere else, and with --calibrate an on-policy run's 'sync' or 'concurrent' as calibration measures them (docs/schedules.md). 'sync': act, then learn, in one program. 'concurrent' (HTS-RL): act for iteration k+1 with the policy of iteration k while learning on the data of iteration k; deterministic for a seed. 'async' (off-policy): actor threads and the learner at their own pace, --policy-lag versions apart; deterministic too (but in EnvPool's async mode)."""
    num_actors: int = 1
    """async: actor threads, each with its own EnvPool of --num-envs envs."""
    env_batch_size: int = 0
    """async: EnvPool's async mode in each actor when below --num-envs: each recv returns the first this many envs to finish their step, and the policy acts on them while the others step. 0: --num-envs (synchronous, the whole chunk one jitted program around EnvPool's XLA step)."""
    policy_lag: int = 1
    """async: each chunk is acted by the parameters exactly this many versions older than the learner's when it reaches the buffer (actors wait for them), so a run is deterministic for a seed (except in EnvPool's async mode); 1 is HTS-RL's lag."""
    max_policy_lag: int = 8
    """async: rows acted by parameters more than this many versions old are dropped."""
    dispatch_steps: int = 0
    """Off-policy concurrent and async: fewest env steps (all envs together) per host dispatch, with their updates (the update-to-data ratio kept). 0: 64, or 256 where --schedule auto takes async (docs/schedules.md)."""
    resume: Path | None = None
    """Continue the run in this directory from its newest complete checkpoint, with the config it saved; only --total-steps, --progress and --no-compile-cache may be given beside it."""
    checkpoint_interval: int = 100_000
    """Environment steps between checkpoints (0: only at the end). Checkpoints go to RUN_DIR/checkpoints, are written atomically in the background, and hold the whole run state."""
    keep_checkpoints: int = 3
    """Newest checkpoints kept; older ones are deleted."""
    checkpoint_replay: bool = True
    """Off-policy: include the replay buffer in checkpoints (large; without it a resumed run refills it with --*.learning-starts steps of random actions, not counted as training steps)."""
    calibrate: bool = False
    """Measure this machine first (or reuse the cached measurement) and train with the sizes it picks: EnvPool threads, the split of an on-policy batch between envs and steps, the async actors' env batch, and under --schedule auto an on-policy run's schedule (sync or concurrent) (see `python -m jaxrl_fast.calibrate`, docs/calibration.md)."""
    recalibrate: bool = False
    """Like --calibrate, but measure again instead of reusing the cache."""
    calibration_budget_s: float = 30.0
    """Seconds the calibration pass may spend measuring."""
    placement: Literal["auto", "single", "split"] = "auto"
    """Off-policy: 'split' updates the actor and the critic as separate programs on separate devices, 'single' fuses everything into one program on one device, 'auto' splits when 2+ devices exist."""
    exchange: Literal["fresh", "lagged"] = "fresh"
    """With split placement: 'fresh' gives each update the other role's newest parameters (same results as single); 'lagged' gives the actor the critic from one update earlier, so both updates run at the same time."""
    profile: bool = False
    """Capture a jax.profiler trace of a window of training calls into RUN_DIR/profile/ (opens in Perfetto and TensorBoard's profile plugin; `python profiling/summarize_trace.py RUN_DIR` gives the time per phase). A training call is one log interval (one metrics line)."""
    profile_start: int | None = None
    """--profile: training calls run before the trace starts (default 1: the first carries one-off work; 0 when the run has a single call)."""
    profile_calls: int | None = None
    """--profile: training calls traced (default 3, or as many as the run has after --profile-start). Every XLA op becomes a trace event: keep the window small. A window given here that does not fit in the run is refused."""


# The run's fields, then one group of flags per registered algorithm (`--ppo.*`, `--sac.*`, ...).
TrainConfig = dataclasses.make_dataclass(
    "TrainConfig",
    [(name, spec.config, dataclasses.field(default_factory=spec.config)) for name, spec in ALGORITHMS.items()],
    bases=(RunConfig,),
    frozen=True,
    namespace={"__doc__": RunConfig.__doc__},
)
TrainConfig.__module__ = __name__


@functools.cache
def cli_config(algo: str) -> type:
    """What the command line parses for `--algo algo`: the run's fields and that algorithm's group
    only, so that `--help` lists the flags that apply (the run is then a `TrainConfig`)."""
    spec = ALGORITHMS[algo]
    cls = dataclasses.make_dataclass(
        "TrainConfig", [(algo, spec.config, dataclasses.field(default_factory=spec.config))],
        bases=(RunConfig,), frozen=True, namespace={"__doc__": RunConfig.__doc__})
    cls.__module__ = __name__
    return cls


def algo_config(config: TrainConfig) -> Any:
    """The hyperparameters of the run's algorithm (`config.<algo>`)."""
    return getattr(config, config.algo)


def family(config: TrainConfig) -> str:
    """"on_policy" or "off_policy", as the run's algorithm declares."""
    return ALGORITHMS[config.algo].family


def uses_async_mode(config: TrainConfig) -> bool:
    """Whether the async actors run EnvPool's async mode: an env batch below --num-envs."""
    return 0 < config.env_batch_size < config.num_envs


def oldest_acting_lag(config: TrainConfig, async_mode: bool) -> int:
    """How many versions behind the learner's the oldest row of an async chunk can be acted:
    --policy-lag, and in EnvPool's async mode --num-actors more for the envs that ran a chunk ahead."""
    return config.policy_lag + (config.num_actors if async_mode else 0)


def to_dict(config: Any) -> dict[str, Any]:
    """JSON-ready dict of a config (paths as strings, tuples as lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


ALGO_CONFIGS = {name: spec.config for name, spec in ALGORITHMS.items()}


def run_dict(config: TrainConfig) -> dict[str, Any]:
    """`to_dict` with only the run's algorithm's group (what `config.json` and `policy.json` record;
    `config_from_dict` fills the other groups with their defaults)."""
    others = set(ALGO_CONFIGS) - {config.algo}
    return {name: value for name, value in to_dict(config).items() if name not in others}


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """The inverse of `to_dict` and `run_dict` (what `config.json` records as `train_config`);
    algorithm groups left out get their defaults."""

    def build(cls: Any, values: dict[str, Any]) -> Any:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {unknown}")
        out = {}
        for name, value in values.items():
            if name in ALGO_CONFIGS and cls is TrainConfig:
                value = build(ALGO_CONFIGS[name], value)
            elif isinstance(value, list):
                value = tuple(value)
            elif name == "run_dir" and value is not None:
                value = Path(value)
            out[name] = value
        return cls(**out)

    return build(TrainConfig, data)
