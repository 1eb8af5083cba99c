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

from jaxrl_fast.algos import ALGORITHMS, ReplayConfig, RolloutConfig
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
    """Every module `path` imports, at its top or inside a function (`from jaxrl_fast.x import y`
    counts `jaxrl_fast.x.y` when that is a module)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names
                           if module_path(f"{node.module}.{alias.name}") is not None)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def module_path(name: str) -> Path | None:
    if not name.startswith("jaxrl_fast"):
        return None
    base = PACKAGE.parent / name.replace(".", "/")
    return next((path for path in (base.with_suffix(".py"), base / "__init__.py") if path.exists()), None)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# The layers of the house, from the ground up: a module imports from its own layer or below, never
# above (docs/contributing.md draws them). An algorithm's declaration (its config) sits below the
# configuration that gathers them; its learner above the networks it builds.
LAYERS = [
    ("contracts", ["jaxrl_fast.types", "jaxrl_fast.files"]),
    ("declarations", ["jaxrl_fast.networks.config", "jaxrl_fast.algos", "jaxrl_fast.algos.base",
                      "jaxrl_fast.algos.*.config", "jaxrl_fast.algos.*"]),
    ("configuration", ["jaxrl_fast.config"]),
    ("environments", ["jaxrl_fast.env"]),
    ("maths", ["jaxrl_fast.ops"]),
    ("networks", ["jaxrl_fast.networks"]),
    ("algorithms", ["jaxrl_fast.algos.common", "jaxrl_fast.algos.twin_critic", "jaxrl_fast.algos.*.losses",
                    "jaxrl_fast.algos.*.learner"]),
    ("engine", ["jaxrl_fast.engine"]),
    ("outputs", ["jaxrl_fast.outputs"]),
    ("calibration", ["jaxrl_fast.calibration"]),
    ("run", ["jaxrl_fast.run"]),
    ("suites", ["jaxrl_fast.suites"]),
    ("commands", ["jaxrl_fast.cli"]),
    ("entry points", ["jaxrl_fast", "jaxrl_fast.train", "jaxrl_fast.launch", "jaxrl_fast.calibrate",
                      "jaxrl_fast.benchmark"]),
]


def layer_of(name: str) -> int:
    """The layer of the most specific pattern that names the module (or a package above it)."""
    import fnmatch

    best, depth = None, (-1,)
    for index, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if fnmatch.fnmatch(name, pattern) or name.startswith(pattern + "."):
                # more named parts win, a whole match over a package prefix, a name over a wildcard
                specific = (len([part for part in pattern.split(".") if part != "*"]), fnmatch.fnmatch(name, pattern),
                            "*" not in pattern)
                if specific > depth:
                    best, depth = index, specific
    assert best is not None, name
    return best


def test_every_import_points_down_the_layers():
    upward = []
    for path in SOURCES:
        importer = module_name(path)
        for imported in imported_modules(path):
            if module_path(imported) is not None and layer_of(imported) > layer_of(importer):
                upward.append(f"{importer} ({LAYERS[layer_of(importer)][0]}) imports {imported} "
                              f"({LAYERS[layer_of(imported)][0]})")
    assert upward == []


def test_the_run_and_checkpoints_know_no_schedule_internals():
    """They take the schedule table's entry point and the interface, nothing from a schedule's module."""
    for path in [PACKAGE / "outputs" / "checkpoint.py", *sorted((PACKAGE / "run").glob("*.py"))]:
        internals = {m for m in imported_modules(path) if m.startswith("jaxrl_fast.engine.schedules.")}
        assert internals == set(), path.name


def test_configuration_imports_no_jax_and_the_package_nothing_heavy():
    """Parsing, presets, checks and the plan run without JAX (a fast `--help`, checks before any
    compile); `import jaxrl_fast` loads neither JAX nor EnvPool nor EGL (videos load it when they film)."""
    code = ("import json, sys; import jaxrl_fast.config.checks, jaxrl_fast.config.overrides, jaxrl_fast.config.plan, "
            "jaxrl_fast.config.presets; config = [m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'optax', "
            "'envpool', 'chex')]; import jaxrl_fast; print(json.dumps([config, 'EGL' in open('/proc/self/maps').read()]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    heavy, egl = json.loads(proc.stdout)
    assert heavy == [] and not egl


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
    algo = spec_of_algo.build(spec_of_algo.config(), spec, 10_000)
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
        assert issubclass(spec.config, RolloutConfig)
    assert set(spec.metrics) == reported_metrics(name, spec)
    env_id = "CartPole-v1" if spec.actions != "continuous" else "Pendulum-v1"
    bundle = spec.build(spec.config(), probe_spec(env_id), 10_000)
    assert (bundle.act_sampled is not None) == spec.stochastic_policy  # what --eval-policy sampled is checked against


@pytest.mark.slow
def test_a_new_algorithm_is_one_folder(tmp_path):
    """A copy of the package with one more folder in algos/ trains it from the CLI, flags and all."""
    package = tmp_path / "jaxrl_fast"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(PACKAGE.parent / "envs", package / "envs", ignore=shutil.ignore_patterns("__pycache__"))
    (package / "algos" / "ppo_small").mkdir()
    (package / "algos" / "ppo_small" / "__init__.py").write_text('"""PPO with a smaller default network, under its own name."""\n')
    (package / "algos" / "ppo_small" / "config.py").write_text(
        "import dataclasses\n\n"
        "from jaxrl_fast.algos.base import AlgorithmSpec\n"
        "from jaxrl_fast.algos.ppo.config import METRICS, PPOConfig, validate\n\n\n"
        "@dataclasses.dataclass(frozen=True)\n"
        "class SmallPPOConfig(PPOConfig):\n"
        "    hidden_sizes: tuple[int, ...] = (16,)\n\n\n"
        "ALGORITHM = AlgorithmSpec(name='ppo_small', family='on_policy', config=SmallPPOConfig,\n"
        "                          make='jaxrl_fast.algos.ppo.learner:make_ppo', actions='any', metrics=METRICS,\n"
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
