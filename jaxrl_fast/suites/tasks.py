"""The benchmark suites: each task's env, algorithm, published budget, the published return it is
compared with and the threshold it is timed to.

References are Stable-Baselines3's tuned agents in rl-baselines3-zoo (`benchmark.md`, "Performance
of trained agents", commit 22e3ff2 of 2026-04-23): the mean and std of the evaluation episodes of
one trained agent per task, after `n_timesteps` env steps. That is one run, not a distribution over
seeds (the zoo says so itself), so it marks what the algorithm can reach, not its IQM. Its MuJoCo
rows are v3 environments; EnvPool's ids are v4, with the same dynamics and rewards. Thresholds are
Gymnasium's `reward_threshold` where it sets one (`gymnasium/envs/__init__.py`; EnvPool's Hopper
says 6000 where Gymnasium says 3800), -200 for Pendulum-v1, and none for Walker2d and Humanoid.
Some zoo agents were trained with settings its hyperparameter files no longer hold (TD3 on
Pendulum, LunarLanderContinuous and BipedalWalker; PPO on BipedalWalker), so a row is a published
outcome, not a recipe.

The Atari suite's references are CleanRL's EnvPool agents on the same v5 ids at 10M agent steps
(40M frames): `ppo_atari_envpool_xla_jax` as its docs table its pr-424 rerun (the first column of
the table beside `ppo_atari_envpool_xla_jax_scan`; its own section's older table says 20.39 and
430.09) and `pqn_atari_envpool` (its docs' table); their thresholds are the scores the Atari
literature calls solved for Pong (20) and strong for Breakout (400).

The dm_control suite's references are the SAC baseline TD-MPC2 released (Hansen et al. 2024,
github.com/nicklashansen/tdmpc2 `results/sac/<task>.csv`, commit add30b5): the mean and std over its
3 seeds of the evaluation return at 1M steps of its step column. TD-MPC2's dm_control wrapper
repeats each action twice (`ActionRepeatWrapper(env, 2)`) and EnvPool's does not, so its 1M steps
are not ours one for one: the row marks what SAC reaches on the task, as the zoo's do. dm_control
sets no solved threshold.

The MiniGrid suite's references are the zoo's MiniGrid PPO rows (the same `benchmark.md`, all
trained with its "minigrid-defaults", which `[minigrid.ppo]` follows, and evaluated with actions
sampled from the policy: `rl_zoo3/enjoy.py` samples for MiniGrid, as `[minigrid.ppo]` does). The
zoo's agents see the image and a one-hot mission (`FlatObsWrapper`); ours see the dict's keys
flattened into one vector (direction, image, the mission's characters: docs/env-adapter.md). MiniGrid sets no solved
threshold; an episode scores 1 - 0.9 x (steps taken / the step limit) when it reaches the goal, 0
otherwise.

The MinAtar suite's references are gymnax-blines' PPO logs on gymnax's MinAtar games
(github.com/RobertTLange/gymnax-blines `agents/<game>-MinAtar/ppo.pkl`, commit 3f029d6): the
`log_return` of its last evaluation, at 9,919,936 env steps, the mean over 164 episodes with actions
sampled from the policy, of one seed, trained with the setting `[minatar]` follows (the same
flattened 2 x 256 ReLU MLP, a constant learning rate: its 5% warm-up goes from 5e-4 to 5e-4). One seed, so the row marks what the setting reached once, like the zoo's. gymnax's README
prints 15, 28, 58 and 131 for the same games; its Breakout 28 comes from an earlier log of that file
(commit 15b76af), so the file at 3f029d6 is cited. MinAtar sets no solved threshold.

The Procgen suite's references are CleanRL's `ppo_procgen` on the easy distribution at 25M steps
(its docs' table: the mean and std over its seeds of the training episodes' return, from the
stochastic policy; ours are evaluation episodes sampled from it), the setting `[procgen]` in
`envs/defaults.toml` follows. Procgen sets no solved threshold.
"""

from __future__ import annotations

from typing import NamedTuple

ZOO = "rl-baselines3-zoo benchmark.md"


class Reference(NamedTuple):
    value: float  # mean return
    std: float | None
    steps: int  # the env steps it was trained for
    source: str
    source_short: str = "SB3 / rl-zoo"


class Task(NamedTuple):
    env: str
    algo: str
    budget: int  # env steps per seed at --budget-scale 1 (the reference's)
    reference: Reference | None
    threshold: float | None

    @property
    def name(self) -> str:
        """The task's name, also its run directory's and its curve's file name: the `:` of a
        backend's prefix (`gymnax:`) becomes `_`, which every file system takes."""
        return f"{self.algo}_{self.env}".replace(":", "_")


def zoo(algo: str, env: str, value: float, std: float, steps: int, threshold: float | None, reference_env: str = "") -> Task:
    """A task whose reference is the zoo's row for `algo` on `reference_env` (default `env`)."""
    row = f"{ZOO}, {algo} {reference_env or env}"
    return Task(env, algo, steps, Reference(value, std, steps, row), threshold)


THRESHOLDS = {
    "CartPole-v1": 475.0, "Acrobot-v1": -100.0, "MountainCar-v0": -110.0, "MountainCarContinuous-v0": 90.0,
    "Pendulum-v1": -200.0, "LunarLander-v2": 200.0, "LunarLanderContinuous-v2": 200.0, "BipedalWalker-v3": 300.0,
    "HalfCheetah-v4": 4800.0, "Hopper-v4": 3800.0, "Walker2d-v4": None, "Ant-v4": 6000.0, "Humanoid-v4": None,
    "Swimmer-v4": 360.0, "Pong-v5": 20.0, "Breakout-v5": 400.0,
}

CLEANRL = ("CleanRL docs, ppo_atari_envpool_xla_jax (pr-424 rerun, beside the scan variant) and pqn_atari_envpool, "
           "Atari v5, 10M agent steps")


TDMPC2 = "TD-MPC2 results/sac (commit add30b5), 3 seeds at 1M steps, action repeat 2"
CLEANRL_PROCGEN = "CleanRL docs, ppo_procgen, Procgen easy distribution, 25M steps"
GYMNAX_BLINES = ("gymnax-blines agents/{game}-MinAtar/ppo.pkl (commit 3f029d6), last evaluation at 9,919,936 steps, "
                 "1 seed, 164 sampled-action episodes")


def gymnax_blines(game: str, value: float) -> Task:
    """A MinAtar task of gymnax's whose reference is gymnax-blines' PPO log for `game`."""
    source = GYMNAX_BLINES.format(game=game)
    return Task(f"gymnax:{game}-MinAtar", "ppo", 10_000_000, Reference(value, None, 10_000_000, source, "gymnax-blines"),
                None)


def cleanrl(algo: str, env: str, value: float, std: float | None = None, steps: int = 10_000_000,
            source: str = CLEANRL) -> Task:
    """A task whose reference is a row of CleanRL's docs (Atari's by default)."""
    row = f"{source}: {algo} {env}"
    return Task(env, algo, steps, Reference(value, std, steps, row, "CleanRL"), THRESHOLDS.get(env))


def _zoo_rows(rows: list[tuple[str, str, float, float, int]], v3: bool = False) -> list[Task]:
    return [zoo(algo, env, value, std, steps, THRESHOLDS.get(env), env.replace("-v4", "-v3") if v3 else "")
            for algo, env, value, std, steps in rows]


SUITES: dict[str, list[Task]] = {
    "classic": _zoo_rows([
        ("ppo", "CartPole-v1", 500.0, 0.0, 100_000),
        ("dqn", "CartPole-v1", 500.0, 0.0, 50_000),
        ("ppo", "Acrobot-v1", -73.506, 18.201, 1_000_000),
        ("dqn", "Acrobot-v1", -76.639, 11.752, 100_000),
        ("ppo", "MountainCar-v0", -110.423, 19.473, 1_000_000),
        ("dqn", "MountainCar-v0", -100.849, 9.925, 120_000),
        ("ppo", "MountainCarContinuous-v0", 88.343, 2.572, 20_000),
        ("sac", "MountainCarContinuous-v0", 94.679, 1.134, 50_000),
        ("td3", "MountainCarContinuous-v0", 93.483, 0.075, 300_000),
        ("ppo", "Pendulum-v1", -172.225, 104.159, 100_000),
        ("sac", "Pendulum-v1", -156.995, 88.714, 20_000),
        ("td3", "Pendulum-v1", -151.855, 90.227, 20_000),
    ]),
    "box2d": _zoo_rows([
        ("ppo", "LunarLander-v2", 242.119, 31.823, 1_000_000),
        ("dqn", "LunarLander-v2", 154.382, 79.241, 100_000),
        ("ppo", "LunarLanderContinuous-v2", 270.863, 32.072, 1_000_000),
        ("sac", "LunarLanderContinuous-v2", 260.390, 65.467, 500_000),
        ("td3", "LunarLanderContinuous-v2", 207.451, 67.562, 300_000),
        ("ppo", "BipedalWalker-v3", 287.939, 2.448, 5_000_000),
        ("sac", "BipedalWalker-v3", 297.668, 33.060, 500_000),
        ("td3", "BipedalWalker-v3", 305.990, 56.886, 1_000_000),
    ]),
    "mujoco": _zoo_rows([
        ("sac", "HalfCheetah-v4", 9535.451, 100.470, 1_000_000),
        ("td3", "HalfCheetah-v4", 9655.666, 969.916, 1_000_000),
        ("ppo", "HalfCheetah-v4", 5819.099, 663.530, 1_000_000),
        ("sac", "Hopper-v4", 2325.547, 1129.676, 1_000_000),
        ("td3", "Hopper-v4", 3606.390, 4.027, 1_000_000),
        ("ppo", "Hopper-v4", 2410.435, 10.026, 1_000_000),
        ("sac", "Walker2d-v4", 3863.203, 254.347, 1_000_000),
        ("td3", "Walker2d-v4", 4717.823, 46.303, 1_000_000),
        ("ppo", "Walker2d-v4", 3478.798, 821.708, 1_000_000),
        ("sac", "Ant-v4", 4615.791, 1354.111, 1_000_000),
        ("td3", "Ant-v4", 5813.274, 589.773, 1_000_000),
        ("ppo", "Ant-v4", 1327.158, 451.577, 1_000_000),
        ("sac", "Humanoid-v4", 6232.287, 279.885, 2_000_000),
        ("td3", "Humanoid-v4", 5566.687, 14.544, 2_000_000),
        ("sac", "Swimmer-v4", 345.568, 3.084, 1_000_000),
        ("td3", "Swimmer-v4", 359.127, 1.244, 1_000_000),
        ("ppo", "Swimmer-v4", 281.561, 9.671, 1_000_000),
    ], v3=True),
    "dm_control": [
        Task("CheetahRun-v1", "sac", 1_000_000, Reference(730.1, 2.6, 1_000_000, f"{TDMPC2}: cheetah-run", "TD-MPC2's SAC"),
             None),
        Task("WalkerWalk-v1", "sac", 1_000_000, Reference(957.3, 3.0, 1_000_000, f"{TDMPC2}: walker-walk", "TD-MPC2's SAC"),
             None),
    ],
    "minigrid": _zoo_rows([
        ("ppo", "MiniGrid-DoorKey-5x5-v0", 0.964, 0.006, 100_000),
        ("ppo", "MiniGrid-Empty-Random-5x5-v0", 0.968, 0.013, 100_000),
        ("ppo", "MiniGrid-Unlock-v0", 0.963, 0.016, 100_000),
        ("ppo", "MiniGrid-KeyCorridorS3R1-v0", 0.949, 0.011, 500_000),
    ]),
    "minatar": [
        gymnax_blines("Asterix", 14.95),
        gymnax_blines("Breakout", 22.88),
        gymnax_blines("Freeway", 58.80),
        gymnax_blines("SpaceInvaders", 131.64),
    ],
    "procgen": [
        cleanrl("ppo", "StarpilotEasy-v0", 30.99, 1.96, 25_000_000, CLEANRL_PROCGEN),
        cleanrl("ppo", "BossfightEasy-v0", 8.85, 0.33, 25_000_000, CLEANRL_PROCGEN),
        cleanrl("ppo", "BigfishEasy-v0", 16.46, 2.71, 25_000_000, CLEANRL_PROCGEN),
    ],
    "atari": [
        cleanrl("ppo", "Pong-v5", 20.82, 0.21),
        cleanrl("ppo", "Breakout-v5", 420.92, 16.75),
        cleanrl("pqn", "Pong-v5", 20.49, 0.11),
        cleanrl("pqn", "Breakout-v5", 384.85, 12.39),
    ],
}
