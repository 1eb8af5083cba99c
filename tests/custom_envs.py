"""A user's own Gymnasium environment, as a test writes one: the Gymnasium backend trains it by its
id `custom_envs:PointToTarget` (tests/ is on the path)."""

import gymnasium
import numpy as np


class PointToTarget(gymnasium.Env):
    """A point on a line, pushed by the action, paid the negative distance to a target each step.

    Observation: [position, target], both in [-1, 1]; action: a push in [-1, 1] (x 0.2). An episode is
    40 steps (a time limit set by the class). Staying put scores 40 x the mean distance between two
    uniform points, about -27; heading for the target and staying there scores about -2.
    """

    def __init__(self, speed: float = 0.2):
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.speed = speed
        self.spec = gymnasium.envs.registration.EnvSpec("PointToTarget-v0", max_episode_steps=40)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.target = self.np_random.uniform(-1, 1, 2)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.position = float(np.clip(self.position + self.speed * float(np.asarray(action).reshape(-1)[0]), -1, 1))
        self.steps += 1
        return self._obs(), -abs(self.position - self.target), False, self.steps >= 40, {}

    def _obs(self):
        return np.array([self.position, self.target], np.float32)


class Faulty(PointToTarget):
    """PointToTarget whose step raises after `fail_at` steps: an error inside a jitted loop's step."""

    def __init__(self, fail_at: int = 5, note: str = ""):
        super().__init__()
        self.fail_at, self.calls, self.note = fail_at, 0, note

    def step(self, action):
        self.calls += 1
        if self.calls > self.fail_at:
            raise ValueError(f"the simulator diverged at call {self.calls}{self.note}")
        return super().step(action)


def needs_a_package(**options):
    """A factory whose simulator is not installed, as gym:LunarLander-v3's Box2D may not be."""
    raise gymnasium.error.DependencyNotInstalled('Box2D is not installed, run `pip install "gymnasium[box2d]"`')


class DiscreteFromOne(PointToTarget):
    """Discrete actions numbered from 1 (`Discrete(3, start=1)`), which the backend refuses."""

    def __init__(self):
        super().__init__()
        self.action_space = gymnasium.spaces.Discrete(3, start=1)


class TupleObserved(PointToTarget):
    """Observations in a Tuple space, which the backend refuses (Blackjack's kind)."""

    def __init__(self):
        super().__init__()
        self.observation_space = gymnasium.spaces.Tuple((self.observation_space,))


class Unbounded(PointToTarget):
    """Actions in a Box without bounds: PPO clips to them, SAC and TD3 cannot squash into them."""

    def __init__(self):
        super().__init__()
        self.action_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float32)


class Misbehaving(PointToTarget):
    """PointToTarget that returns, from its `at`-th step of an episode, a NaN reward (`fault="reward"`),
    an observation of three numbers where its space says two (`fault="shape"`) or one of shape
    [2, 1] (`fault="dims"`); in env `only` alone (its seed's parity), else in every env."""

    def __init__(self, fault: str = "reward", at: int = 5, only: int = -1):
        super().__init__()
        self.fault, self.at, self.only, self.seed = fault, at, only, None

    def reset(self, *, seed=None, options=None):
        self.seed = seed if seed is not None else self.seed
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps >= self.at and (self.only < 0 or self.seed % 2 == self.only):
            if self.fault == "reward":
                reward = float("nan")
            else:
                obs = np.zeros(3 if self.fault == "shape" else (2, 1), np.float32)
        return obs, reward, terminated, truncated, info


class OwnSpecLimit(PointToTarget):
    """Never ends an episode itself; its spec says 12 steps, which the backend must hold it to."""

    def __init__(self):
        super().__init__()
        self.spec = gymnasium.envs.registration.EnvSpec("OwnSpecLimit-v0", max_episode_steps=12)

    def step(self, action):
        obs, reward, _, _, info = super().step(action)
        return obs, reward, False, False, info


class ScalarAction(PointToTarget):
    """A scalar Box action (shape ()); records the shapes of the actions it is given."""

    shapes: set = set()

    def __init__(self):
        super().__init__()
        self.action_space = gymnasium.spaces.Box(-1.0, 1.0, (), np.float32)

    def step(self, action):
        ScalarAction.shapes.add(np.shape(action))
        return super().step(action)


class Named(PointToTarget):
    """Records the `name` option it was made with."""

    names: list = []

    def __init__(self, name: str = "x"):
        super().__init__()
        Named.names.append(name)


class NestedDict(PointToTarget):
    """Observations in a Dict holding a Dict, which the backend refuses."""

    def __init__(self):
        super().__init__()
        box = self.observation_space
        self.observation_space = gymnasium.spaces.Dict({"a": box, "b": gymnasium.spaces.Dict({"c": box})})
