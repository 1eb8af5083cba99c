"""Memory: checkpoints stream large arrays (a save or restore never copies the replay whole), the
estimate a run is checked against, and the check that refuses what cannot fit before it starts.

The peak resident sets are the children's (`getrusage(RUSAGE_CHILDREN).ru_maxrss`, read by an
intermediate interpreter so each figure is one run's): measures of memory, never of time.
"""

import dataclasses
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxrl_fast.cli.train import main
from jaxrl_fast.config.run import config_from_dict
from jaxrl_fast.env.envpool import probe_spec
from jaxrl_fast.env.ids import env_family
from jaxrl_fast.outputs import streamed
from jaxrl_fast.run import memory
from support import make_config

PEAK_OF_CHILD = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
                 "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 if code == 0 else -code)")


def peak_rss(*args: str) -> int:
    """The peak resident set, in bytes, of `python -m jaxrl_fast.train ARGS` run to completion."""
    proc = subprocess.run([sys.executable, "-c", PEAK_OF_CHILD, sys.executable, "-m", "jaxrl_fast.train",
                           "--progress", "off", *args], capture_output=True, text=True, timeout=900)
    peak = int(proc.stdout.strip().splitlines()[-1])
    assert peak > 0, proc.stderr[-3000:]
    return peak


def test_streamed_arrays_round_trip_in_chunks_whole_by_agent_columns_and_by_shard(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed, "CHUNK_BYTES", 1000)  # many chunks, the last one moved back over the one before
    values = np.random.default_rng(0).normal(size=(37, 6, 3)).astype(np.float32)
    values[10:30] = 0  # rows never written: holes of the file
    array = jnp.asarray(values)
    streamed.write(streamed.Slab(array), tmp_path / "whole.npy", primary=True)
    streamed.write(streamed.Slab(array, start=2, width=3), tmp_path / "agent.npy", primary=True)
    np.testing.assert_array_equal(np.load(tmp_path / "whole.npy"), values)  # plain NumPy files
    np.testing.assert_array_equal(np.load(tmp_path / "agent.npy"), values[:, 2:5])
    filled = streamed.fill(jnp.zeros_like(array), streamed.open_saved(tmp_path / "agent.npy"), column=2)
    np.testing.assert_array_equal(np.asarray(filled)[:, 2:5], values[:, 2:5])
    assert not np.asarray(filled)[:, [0, 1, 5]].any()  # the other agents' columns untouched
    filled = streamed.fill(filled, streamed.open_saved(tmp_path / "whole.npy"))
    np.testing.assert_array_equal(np.asarray(filled), values)

    # a data-parallel buffer: [shards, rows, ...], split over the devices along the shard axis
    mesh = Mesh(np.array(jax.devices()[:2]), ("data",))
    frames = np.random.default_rng(1).integers(0, 255, size=(2, 41, 5, 3)).astype(np.uint8)
    frames[1, 5:30] = 0
    sharded = jax.device_put(jnp.asarray(frames), NamedSharding(mesh, PartitionSpec("data")))
    assert streamed.chunk_axis(sharded) == 1  # rows, not whole shards, per chunk
    streamed.write(streamed.Slab(sharded), tmp_path / "shards.npy", primary=True)
    np.testing.assert_array_equal(np.load(tmp_path / "shards.npy"), frames)
    back = streamed.fill(jax.device_put(jnp.zeros_like(sharded), sharded.sharding), streamed.open_saved(tmp_path / "shards.npy"))
    np.testing.assert_array_equal(np.asarray(back), frames)
    assert back.sharding == sharded.sharding


def test_a_damaged_streamed_file_is_refused_naming_it(tmp_path):
    streamed.write(streamed.Slab(jnp.ones((64, 4))), tmp_path / "a.npy", primary=True)
    saved = streamed.open_saved(tmp_path / "a.npy")
    with open(tmp_path / "a.npy", "r+b") as f:
        f.truncate(saved.offset + 100)
    with pytest.raises(streamed.CheckpointDamaged, match="a.npy ends early"):
        streamed.fill(jnp.zeros((64, 4)), saved)
    with pytest.raises(streamed.CheckpointDamaged, match="a.npy ends early"):  # at the restore, before anything changes
        streamed.open_saved(tmp_path / "a.npy")
    with pytest.raises(streamed.CheckpointDamaged, match="does not fit"):
        streamed.fill(jnp.zeros((32, 4)), saved)


def pong_dqn(**changes):
    return make_config("Pong-v5", "dqn", **changes)


def test_a_run_past_the_memory_available_is_refused_with_its_estimate_and_the_flag_that_shrinks_it(monkeypatch):
    spec = dataclasses.replace(probe_spec("Pong-v5", {}), num_envs=8)
    config = pong_dqn()  # the Atari preset: a replay of 1M frames
    monkeypatch.setattr(memory, "host_available", lambda: 6 * memory.GiB)
    with pytest.raises(memory.MemoryCheckError) as refused:
        memory.check_memory(config, spec, "atari", jax.devices()[0])
    message = str(refused.value)
    assert "needs about 7.69 GiB" in message and "6.00 GiB available" in message, message
    assert "replay 6.58 GiB" in message and "runtime 1.00 GiB" in message and "parameters" in message
    assert message.endswith("lower --dqn.buffer-size")
    # close to the limit: a warning line, and the run goes on
    monkeypatch.setattr(memory, "host_available", lambda: 9 * memory.GiB)
    warning = memory.check_memory(config, spec, "atari", jax.devices()[0])
    assert warning.startswith("warning: the run needs about 7.69 GiB") and "close to the limit" in warning
    monkeypatch.setattr(memory, "host_available", lambda: 20 * memory.GiB)
    assert memory.check_memory(config, spec, "atari", jax.devices()[0]) is None
    # agents of a --num-seeds run each hold their own buffer (64 of 94 MiB), and the flag is named
    monkeypatch.setattr(memory, "host_available", lambda: 6 * memory.GiB)
    sac = make_config("HalfCheetah-v4", "sac", num_seeds=64)
    with pytest.raises(memory.MemoryCheckError, match=r"lower --sac.buffer-size or --num-seeds$"):
        memory.check_memory(sac, probe_spec("HalfCheetah-v4", {}), "mujoco", jax.devices()[0])


def test_the_cli_refuses_a_replay_past_the_machine_before_writing_anything(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["--algo", "dqn", "--env", "Pong-v5", "--dqn.buffer-size", "100000000", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "replay 658.26 GiB" in err and "lower --dqn.buffer-size" in err, err
    assert not run_dir.exists()


@pytest.mark.slow
def test_saving_and_resuming_a_replay_keeps_the_peak_within_a_fifth_of_the_steady_state(tmp_path):
    # a replay of 270 MB (10M steps of CartPole: 4 floats, an action, a reward and 3 flags)
    run = ["--algo", "dqn", "--env", "CartPole-v1", "--dqn.buffer-size", "10000000", "--eval-interval", "0",
           "--checkpoint-interval", "5000"]
    steady = peak_rss(*run, "--total-steps", "10000", "--no-checkpoint-replay", "--run-dir", str(tmp_path / "steady"))
    saved = peak_rss(*run, "--total-steps", "10000", "--run-dir", str(tmp_path / "saved"))
    resumed = peak_rss("--resume", str(tmp_path / "saved"), "--total-steps", "15000")
    files = list((tmp_path / "saved" / "checkpoints").glob("15000/streamed/*.npy"))
    assert sum(np.load(path, mmap_mode="r").nbytes for path in files) > 250e6  # the replay was saved whole
    assert saved <= 1.2 * steady and resumed <= 1.2 * steady, (steady, saved, resumed)
    summary = json.loads((tmp_path / "saved" / "summary.json").read_text())
    assert summary["steps"] == 15000


@pytest.mark.slow
@pytest.mark.parametrize("env_id, algo, flags", [
    # the Atari preset with its 1M-frame replay scaled down to 300k frames (2.1 GB)
    ("Pong-v5", "dqn", ["--dqn.buffer-size", "300000", "--total-steps", "5400", "--dqn.learning-starts", "5000"]),
    # the MuJoCo preset: a replay of 1M rows
    ("HalfCheetah-v4", "sac", ["--total-steps", "3000", "--sac.learning-starts", "2000"]),
], ids=["atari-dqn", "mujoco-sac"])
def test_the_estimate_is_within_a_quarter_of_the_measured_peak(tmp_path, env_id, algo, flags):
    peak = peak_rss("--algo", algo, "--env", env_id, *flags, "--run-dir", str(tmp_path / "run"))
    run = config_from_dict(json.loads((tmp_path / "run" / "config.json").read_text())["train_config"])
    spec = dataclasses.replace(probe_spec(env_id, {}), num_envs=run.num_envs)
    estimate = memory.estimate(run, spec, env_family(env_id), on_device=False, parameters=memory.parameter_bytes(run, spec))
    assert 0.75 * peak <= estimate.total <= 1.25 * peak, (estimate, peak)
