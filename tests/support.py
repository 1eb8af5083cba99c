"""What many tests share: configs built as the CLI and `jaxrl_fast.train` build them, a run trained
through the public API, a run resolved without its directory, and readers of a run directory."""

import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

import jaxrl_fast
from jaxrl_fast.config.overrides import with_overrides
from jaxrl_fast.env.episodes import init_episode_state, track_episodes
from jaxrl_fast.run.api import preset_config, with_env_kwargs
from jaxrl_fast.run.loop import run_training
from jaxrl_fast.run.resolve import check_inputs, on_devices, resolve


def make_config(env="CartPole-v1", algo="ppo", **overrides):
    """The env's preset for `algo` with `overrides` on top (flag names with _; the algorithm's group
    as a dict), as `jaxrl_fast.train` applies them; not validated, so a test can build one a run refuses."""
    config = preset_config(env, algo)
    return with_overrides(config, with_env_kwargs(config, overrides))


def train(config):
    """Train `config` through the public API; its summary."""
    return jaxrl_fast.train(config).summary


def train_again(config):
    """Continue the run in `config.resume` with `config` as it is: what a test does to change what
    `--resume` keeps (a hyperparameter, say) on purpose; resolved and trained as the API does."""
    return run_training(resolve(config))


def resolved(config):
    """`config` resolved on this process's devices, with no run directory (to build a schedule)."""
    return on_devices(check_inputs(config, run_dir=False), run_dir=False)


def start_cli(*args):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.Popen([sys.executable, "-m", "jaxrl_fast.train", "--progress", "plain", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def lines_of(run_dir):
    lines = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return lines


def checkpoint_steps(run_dir):
    directory = run_dir / "checkpoints"
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.exists() else []


def wait_for(predicate, proc, timeout=300.0):
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def rollout(xla_env, actions):
    """Step a real EnvPool batch inside one jitted scan; returns the Step fields and episode flags."""

    def body(carry, action):
        handle, episodes = carry
        handle, step = xla_env.step(handle, action)
        reset_step = episodes.reset_step
        episodes, finished = track_episodes(episodes, step)
        return (handle, episodes), (step, reset_step, finished)

    xla_env.reset()
    run = jax.jit(lambda h, a: jax.lax.scan(body, (h, init_episode_state(xla_env.spec.num_envs)), a))
    (_, episodes), out = run(jax.tree.map(jnp.asarray, xla_env.handle), actions)
    return jax.device_get(out), jax.device_get(episodes)
