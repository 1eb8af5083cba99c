"""Runs of several processes (`jax.distributed` over loopback, gloo collectives on the CPU), started
by `python -m jaxrl_fast.launch`, against the same program in one process of two XLA CPU devices."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from jaxrl_fast.cli.launch import Launcher, with_run_dir, worker_environment
from jaxrl_fast.cli.train import parse_args
from jaxrl_fast.engine.cluster import Cluster, ClusterError, split_flags
from jaxrl_fast.outputs.checkpoint import Checkpointer, latest_step
from jaxrl_fast.outputs.metrics import read_metrics
from jaxrl_fast.outputs.streamed import SavedArray
from support import train


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def launch(*flags, processes=2, timeout_s=20):
    """The launcher's command line for a run of `processes` processes."""
    return [sys.executable, "-m", "jaxrl_fast.launch", "--num-processes", str(processes),
            "--distributed-timeout-s", str(timeout_s), "--", *flags]


def run_launcher(*flags, timeout=300):
    return subprocess.run(launch(*flags), capture_output=True, text=True, timeout=timeout)


def saved_state(run_dir):
    """The checkpoint's step and arrays, by tree path."""
    restored = Checkpointer(Path(run_dir), 2).restore()
    paths = restored.meta["paths"]
    arrays = {key: value.load() if isinstance(value, SavedArray) else value for key, value in restored.state.items()}
    return restored.step, {paths[int(key)]: np.asarray(value) for key, value in arrays.items()}


def one_process_of_two_devices(run_dir, argv):
    """The reference: the same data-parallel program in this process, over its two XLA CPU devices."""
    train(parse_args([*argv, "--data-parallel", "--run-dir", str(run_dir), "--progress", "off"]))


def child_pids(run_dir, process_id=None):
    """The training processes of the run in `run_dir` (or its process `process_id`)."""
    found = subprocess.run(["pgrep", "-f", f"jaxrl_fast.train.*{run_dir}"], capture_output=True, text=True).stdout.split()
    pids = []
    for pid in map(int, found):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if process_id is None or str(process_id).encode() == argv[argv.index(b"--process-id") + 1]:
            pids.append(pid)
    return pids


def start_training(run_dir):
    """The launcher of a 2-process PPO run far longer than a test, once it has logged a training call."""
    flags = ["--env", "CartPole-v1", "--total-steps", "5000000", "--run-dir", str(run_dir), "--progress", "off",
             "--eval-interval", "0"]
    launcher = subprocess.Popen(launch(*flags), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (run_dir / "metrics.jsonl").exists() and read_metrics(run_dir / "metrics.jsonl"), 180)
    except BaseException:
        launcher.kill()
        raise
    return launcher


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    # PPO with both statistics on (observation moments and the return's std are reduced over the shards)
    ["--env", "CartPole-v1", "--algo", "ppo", "--total-steps", "3072", "--num-envs", "8", "--ppo.num-steps", "128",
     "--normalize-observations", "--scale-rewards", "--eval-interval", "0", "--log-interval", "1024"],
    # SAC: each shard's own replay buffer, a shard's half of every batch
    ["--env", "Pendulum-v1", "--algo", "sac", "--total-steps", "1200", "--num-envs", "2", "--sac.learning-starts", "400",
     "--sac.batch-size", "64", "--eval-interval", "0", "--log-interval", "400"],
], ids=["ppo", "sac"])
def test_two_processes_of_one_device_train_the_parameters_one_process_of_two_devices_trains(tmp_path, argv):
    one_process_of_two_devices(tmp_path / "one", argv)
    proc = run_launcher(*argv, "--run-dir", str(tmp_path / "two"), "--progress", "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((tmp_path / "two" / "config.json").read_text())
    assert config["distributed"]["num_processes"] == 2 and len(config["distributed"]["devices"]) == 2
    assert config["placement"]["mode"] == "data" and config["train_config"]["data_parallel"]
    lines = [(line["step"], "sps" in line) for line in read_metrics(tmp_path / "two" / "metrics.jsonl")]
    assert len(lines) == len(set(lines)) and lines[-1] == (lines[-2][0], False)  # one writer: each line once
    step_one, one = saved_state(tmp_path / "one")
    step_two, two = saved_state(tmp_path / "two")
    assert step_one == step_two == int(argv[argv.index("--total-steps") + 1])
    assert one.keys() == two.keys()
    for key in one:  # the same program on the same global batch: equal to the last bit
        np.testing.assert_array_equal(one[key], two[key], err_msg=key)
    # one copy of what the shards share (their copies stayed equal), each shard's part of the rest
    assert all(not path.startswith(("['replay']", "['reward_scale']")) or value.shape[0] == 2 for path, value in two.items())
    if "ppo" in argv:  # a resume over another count of shards is refused before anything is written
        before = (tmp_path / "one" / "config.json").read_text()
        proc = subprocess.run([sys.executable, "-m", "jaxrl_fast.train", "--resume", str(tmp_path / "one")],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1"))
        assert proc.returncode == 2, proc.stderr
        assert "was trained over 2 data-parallel shards (devices of all its processes); this run has 1" in proc.stderr
        assert (tmp_path / "one" / "config.json").read_text() == before


@pytest.mark.slow
def test_a_two_process_run_killed_with_its_launcher_resumes_and_reaches_475(tmp_path):
    """Killed with its launcher, a two-process run resumes and an evaluation reaches 475.

    Why the margin holds on any machine (where last bits differ, the run is as another seed's): the
    program two processes run is, to the last bit, one process's over two devices, and over seeds
    0-31 of that (`experiments/learning_margins.py`, case ppo_cartpole_data_parallel) every run
    reached 475 by the end of this budget. Training outpaces the evaluator here, so a run evaluates
    at its first request and at the end: 12 of the 32 missed 475 at the first and 1 at the end (a
    run that had reached it already), so a run misses both with a chance of about 1%."""
    run_dir = tmp_path / "run"
    flags = ["--env", "CartPole-v1", "--algo", "ppo", "--total-steps", "81920", "--checkpoint-interval", "10240",
             "--eval-interval", "10240", "--target-return", "475", "--run-dir", str(run_dir), "--progress", "off"]
    launcher = subprocess.Popen(launch(*flags), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: latest_step(run_dir) is not None, 180)
    finally:
        launcher.kill()  # kill -9: no signal reaches its processes but the kernel's
    assert launcher.wait() == -signal.SIGKILL  # killed while training, not after the run ended
    wait_for(lambda: not child_pids(run_dir), 30)  # its processes die with it
    saved = latest_step(run_dir)
    proc = run_launcher("--resume", str(run_dir), "--progress", "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["resumed"][0]["from_step"] >= saved
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_eval_return_mean"] >= 475, summary
    assert summary["target_step"] is not None
    steps = [line["step"] for line in read_metrics(run_dir / "metrics.jsonl") if "sps" in line]
    assert steps == sorted(set(steps))  # the log goes on from the checkpoint, without repeated lines


@pytest.mark.slow
def test_a_killed_process_ends_the_run_with_an_error_and_leaves_no_process(tmp_path):
    run_dir = tmp_path / "run"
    launcher = start_training(run_dir)
    try:
        victim, = child_pids(run_dir, process_id=1)
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert time.monotonic() - killed < 30
    assert launcher.returncode != 0
    assert "launch: process 1 was killed by SIGKILL" in stderr
    wait_for(lambda: not child_pids(run_dir), 15)


@pytest.mark.slow
def test_ctrl_c_on_the_launcher_stops_every_process_at_one_call_with_a_final_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    launcher = start_training(run_dir)
    try:
        launcher.send_signal(signal.SIGINT)
        _, stderr = launcher.communicate(timeout=120)
    finally:
        launcher.kill()
    assert launcher.returncode == 130, stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and latest_step(run_dir) == summary["steps"] > 0
    assert not child_pids(run_dir)


@pytest.mark.parametrize("flags, message", [
    (["--num-envs", "3"], "error: --num-envs 3 does not split over 2 processes"),
    (["--schedule", "concurrent"], "error: --data-parallel (and a run of several processes) runs the sync schedule"),
    (["--num-seeds", "2"], "error: --data-parallel trains one agent over every device"),
])
def test_bad_input_is_refused_by_every_process_alike_before_they_join(tmp_path, flags, message):
    proc = run_launcher(*flags, "--run-dir", str(tmp_path / "run"), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count(message) == 2, proc.stderr  # one line from each process (they may interleave)
    assert not (tmp_path / "run").exists()


def test_cluster_flags_explicit_detected_or_refused():
    cluster, rest = split_flags(["--env", "CartPole-v1", "--coordinator-address", "10.0.0.1:1234", "--num-processes", "4",
                                 "--process-id", "3"])
    assert cluster == Cluster(4, 3, "10.0.0.1:1234", 60) and rest == ["--env", "CartPole-v1"] and cluster.distributed
    for argv in (["--num-processes", "2"], ["--coordinator-address", "h:1", "--num-processes", "2", "--process-id", "2"],
                 ["--coordinator-address", "h", "--num-processes", "2", "--process-id", "0"],
                 ["--distributed-timeout-s", "0"]):
        with pytest.raises(ClusterError):
            split_flags(argv)


def test_cluster_detection_from_slurm_open_mpi_and_jax_variables(monkeypatch):
    for name in ("SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_orte_hnp_uri", "JAX_COORDINATOR_ADDRESS",
                 "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    assert not split_flags([])[0].distributed
    monkeypatch.setenv("SLURM_NTASKS", "8")
    assert not split_flags([])[0].distributed  # a batch script's own shell: one process
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "8")
    assert split_flags([])[0].auto  # a job step of 8 tasks (srun)
    monkeypatch.delenv("SLURM_STEP_NUM_TASKS")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    assert not split_flags([])[0].distributed  # Open MPI 5: nothing JAX's detection reads
    monkeypatch.setenv("OMPI_MCA_orte_hnp_uri", "1234.0;tcp://10.0.0.1:5678")
    assert split_flags([])[0].auto  # Open MPI 4, as JAX detects it
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE")
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
    with pytest.raises(ClusterError, match="JAX_NUM_PROCESSES and JAX_PROCESS_ID"):
        split_flags([])
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    assert split_flags([])[0] == Cluster(2, 1, "10.0.0.1:1234", 60)


def test_the_launcher_blames_a_killed_process_before_the_peer_that_failed_because_of_it():
    ended = lambda *codes: SimpleNamespace(children=[SimpleNamespace(returncode=code) for code in codes])  # noqa: E731
    assert Launcher.first_failure(ended(1, -9)) == (1, -9)  # process 0 saw process 1 die, in the same poll
    assert Launcher.first_failure(ended(None, 2, 1)) == (1, 2)
    assert Launcher.first_failure(ended(0, 130)) is None


def test_the_launcher_gives_its_processes_one_device_and_one_run_directory(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2 --xla_cpu_enable_fast_math=false")
    env = worker_environment(2, "127.0.0.1:1234")
    assert env["XLA_FLAGS"] == "--xla_cpu_enable_fast_math=false" and env["JAXRL_FAST_HOST_PROCESSES"] == "2"
    assert env["JAX_COORDINATOR_BIND_ADDRESS"].startswith("127.0.0.1:")  # not every interface
    flags = with_run_dir(["--env", "Pendulum-v1", "--algo", "sac"])
    assert flags[-2] == "--run-dir" and "Pendulum-v1__sac__0__" in flags[-1]
    assert with_run_dir(["--run-dir", "x"]) == ["--run-dir", "x"]


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_gsde_shards_explore_apart(tmp_path, algo):
    """A data-parallel run's shards share their parameters and keys, but each explores its own
    gSDE directions (SAC's matrices per draw, PPO's per rollout), as they act with keys of their own."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec

    from jaxrl_fast.engine.schedules.base import shard_key
    from jaxrl_fast.engine.sharding import AXIS
    from jaxrl_fast.run.build import build
    from jaxrl_fast.run.resolve import resolve

    sizes = ["--sac.learning-starts", "200", "--sac.batch-size", "64"] if algo == "sac" else ["--ppo.num-steps", "64"]
    config = parse_args(["--env", "Pendulum-v1", "--algo", algo, f"--{algo}.use-sde", "--num-envs", "4", *sizes,
                         "--total-steps", "512", "--data-parallel", "--eval-interval", "0", "--progress", "off",
                         "--run-dir", str(tmp_path / "run")])
    run = build(resolve(config, log=lambda _: None))
    schedule = run.schedule
    try:
        schedule.start(None)
        if algo == "ppo":
            matrices = np.asarray(schedule.state.algo.sde_matrix)  # [shards, envs per shard, F, A]
            assert not np.array_equal(matrices[0], matrices[1])
            return
        algo_ = schedule.ctx.algo
        params = schedule.loop.acting_params(schedule.state)

        def act(params, obs, key):  # the same observation and step on every shard
            params = jax.tree.map(lambda x: x[0], params)
            return algo_.act(params, obs[0], shard_key(key, AXIS), jnp.float32(1000.0)).env_action[None]

        shards = PartitionSpec(AXIS)
        actions = np.asarray(jax.jit(jax.shard_map(act, mesh=schedule.mesh, in_specs=(shards, shards, PartitionSpec()),
                                                   out_specs=shards, check_vma=False))(
            params, jnp.ones((2, 2, 3), jnp.float32), jax.random.key(0)))
        assert not np.array_equal(actions[0], actions[1])
    finally:
        schedule.close()


def test_a_port_in_use_is_refused_before_any_process_starts(capsys):
    import socket

    from jaxrl_fast.cli.launch import parse

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(SystemExit) as exit_:
            parse(["--num-processes", "2", "--port", str(port), "--", "--env", "CartPole-v1"])
    assert exit_.value.code == 2 and f"--port {port} cannot be bound" in capsys.readouterr().err


def test_processes_given_different_flags_are_refused_by_every_process(tmp_path):
    """Started by hand (as on two hosts), each process parses its own command line: a --seed that
    differs would give each shard its own parameters, and the run would train on, silently."""
    import socket

    from jaxrl_fast.cli.launch import worker_environment

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    processes = [subprocess.Popen(
        [sys.executable, "-m", "jaxrl_fast.train", "--total-steps", "2048", "--num-envs", "4", "--seed", str(index),
         "--run-dir", str(tmp_path / "run"), "--progress", "off", "--coordinator-address", address,
         "--num-processes", "2", "--process-id", str(index), "--distributed-timeout-s", "30"],
        env=worker_environment(2, address), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for index in range(2)]
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    for process, out in zip(processes, outputs):
        assert process.returncode == 2, out
        assert "the processes of the run were given different --seed: every process takes the same flags" in out, out
    assert not (tmp_path / "run").exists()
