"""The engine's shape, as promised in the contributing guide: placement owns devices, algorithms come
from the registry (one file adds one), checkpoints and the trainer know no schedule internals, and
functions and classes stay small."""

import ast
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import pytest

from jaxrl_fast.algos import ALGORITHMS, ReplayConfig
from jaxrl_fast.env.envpool import probe_spec

PACKAGE = Path(__file__).resolve().parents[1] / "jaxrl_fast"
SOURCES = sorted(PACKAGE.rglob("*.py"))


def calls_to(tree: ast.AST, dotted: str) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == dotted:
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("category", [DeprecationWarning, FutureWarning])
def test_a_deprecation_raised_from_the_package_fails_the_suite(category):
    """pyproject.toml's warning filters turn a deprecation attributed to a jaxrl_fast module into an
    error (a library's notice that our call will break in its next release), and leave others' alone."""
    with pytest.raises(category):
        warnings.warn_explicit("old call", category, "jaxrl_fast/env/envpool.py", 1, module="jaxrl_fast.env.envpool")
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit("old call", category, "somewhere/else.py", 1, module="somewhere.else")
    assert len(caught) == 1


def test_only_placement_asks_jax_for_devices():
    found = []
    for path in SOURCES:
        if path.name == "placement.py":
            continue
        tree = ast.parse(path.read_text())
        found += [f"{path.name}:{line}" for name in ("jax.devices", "jax.local_devices") for line in calls_to(tree, name)]
    assert found == []


def test_functions_and_classes_stay_small():
    too_long = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            size = node.end_lineno - node.lineno + 1 if hasattr(node, "end_lineno") else 0
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > 80:
                too_long.append(f"{path.name}:{node.name} ({size} lines)")
            if isinstance(node, ast.ClassDef) and size > 250:
                too_long.append(f"{path.name}:{node.name} ({size} lines)")
    assert too_long == []


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_checkpoints_and_the_trainer_know_no_schedule_internals():
    assert not {m for m in imported_modules(PACKAGE / "outputs" / "checkpoint.py") if m.startswith("jaxrl_fast.engine.schedules")}
    # the trainer takes the table's entry point and the interface, nothing from a schedule's module
    assert {m for m in imported_modules(PACKAGE / "run" / "trainer.py") if m.startswith("jaxrl_fast.engine.schedules")} == {
        "jaxrl_fast.engine.schedules"}


def example_rollout(spec, algo):
    from jaxrl_fast.types import Rollout, Transition

    T, B = algo.rollout_length, spec.num_envs
    obs = jax.ShapeDtypeStruct((T, B, *spec.obs_shape), jax.numpy.float32)
    state = jax.eval_shape(algo.init, jax.random.key(0))
    act = jax.eval_shape(lambda s, o, k: algo.act(s, o, k), state, jax.ShapeDtypeStruct((B, *spec.obs_shape), "float32"),
                         jax.random.key(0))
    stack = lambda x: jax.ShapeDtypeStruct((T, *x.shape), x.dtype)  # noqa: E731
    flag = jax.ShapeDtypeStruct((T, B), bool)
    transitions = Transition(obs, stack(act.action), jax.ShapeDtypeStruct((T, B), "float32"), flag, flag, flag,
                             jax.tree.map(stack, act.extras))
    return state, Rollout(transitions, jax.ShapeDtypeStruct((B, *spec.obs_shape), "float32"))


def reported_metrics(name, spec_of_algo):
    """The metric names an algorithm's updates report, read off their shapes (nothing runs)."""
    from jaxrl_fast.types import Batch

    env_id = "CartPole-v1" if spec_of_algo.actions != "continuous" else "Pendulum-v1"
    spec = probe_spec(env_id)
    algo = spec_of_algo.make(spec_of_algo.config(), spec, 10_000)
    key = jax.random.key(0)
    if spec_of_algo.family == "on_policy":
        state, rollout = example_rollout(spec, algo)
        return set(jax.eval_shape(algo.update, state, rollout, key)[1])
    actor, critic = jax.eval_shape(algo.init, key)
    n = 4
    obs = jax.ShapeDtypeStruct((n, *spec.obs_shape), "float32")
    action = jax.eval_shape(algo.random_act, obs, key).action
    scalar = jax.ShapeDtypeStruct((n,), "float32")
    batch = Batch(obs, action, scalar, scalar, obs, scalar)
    names = set(jax.eval_shape(algo.update_critic, critic, algo.actor_exchange(actor), batch, key)[1])
    names |= set(jax.eval_shape(algo.update_actor, actor, algo.critic_exchange(critic), obs, scalar, key)[1])
    return names | {"train/actor_updates"}  # counted by the schedule for every off-policy algorithm


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_each_algorithm_declares_what_the_engine_reads(name):
    spec = ALGORITHMS[name]
    assert spec.name == name and spec.family in ("on_policy", "off_policy")
    assert dataclasses.is_dataclass(spec.config) and spec.config.__dataclass_params__.frozen
    if spec.family == "off_policy":
        assert issubclass(spec.config, ReplayConfig)
    else:
        assert "num_steps" in {f.name for f in dataclasses.fields(spec.config)}
    assert set(spec.metrics) == reported_metrics(name, spec)


@pytest.mark.slow
def test_a_new_algorithm_is_one_file(tmp_path):
    """A copy of the package with one more module in algos/ trains it from the CLI, flags and all."""
    package = tmp_path / "jaxrl_fast"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PACKAGE.parent / "envs", package / "envs", ignore=shutil.ignore_patterns("__pycache__"))
    (package / "algos" / "ppo_small.py").write_text(
        '"""PPO with a smaller default network, under its own name."""\n'
        "import dataclasses\n\n"
        "from jaxrl_fast.algos.base import AlgorithmSpec\n"
        "from jaxrl_fast.algos.ppo import METRICS, PPOConfig, make_ppo, validate\n\n\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class SmallPPOConfig(PPOConfig):\n"
        "    hidden_sizes: tuple[int, ...] = (16,)\n\n\n"
        "ALGORITHM = AlgorithmSpec(name='ppo_small', family='on_policy', config=SmallPPOConfig, make=make_ppo,\n"
        "                          actions='any', metrics=METRICS,\n"
        "                          validate=lambda hyper, config: validate(hyper, config))\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "jaxrl_fast.train", "--algo", "ppo_small", "--ppo-small.num-steps", "16",
         "--total-steps", "1024", "--eval-interval", "0", "--eval-episodes", "1", "--progress", "off",
         "--run-dir", str(run_dir)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "config.json").read_text())["train_config"]
    assert config["algo"] == "ppo_small" and config["ppo_small"]["hidden_sizes"] == [16]
    assert config["ppo_small"]["num_steps"] == 16 and (run_dir / "summary.json").exists()
