import dataclasses
import json
import signal

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_fast
from jaxrl_fast.cli.train import main
from jaxrl_fast.engine.replay import ended_flags
from jaxrl_fast.env.envpool import make_xla_env
from jaxrl_fast.outputs.checkpoint import Checkpointer, NonFiniteError, check_finite, flatten_state
from jaxrl_fast.outputs.streamed import SavedArray
from jaxrl_fast.run.build import build_schedule
from support import checkpoint_steps, lines_of, make_config, resolved, start_cli, train, train_again, wait_for


@pytest.mark.slow
def test_kill_9_then_resume_continues_the_log_with_no_repeated_or_missing_steps(tmp_path):
    run_dir = tmp_path / "run"
    # 256 steps per iteration (8 envs x 32), a log line every 4 iterations, a checkpoint every 8
    flags = ["--log-interval", "1024", "--checkpoint-interval", "2048", "--eval-interval", "4096"]
    proc = start_cli("--total-steps", "200000", "--run-dir", str(run_dir), *flags)
    try:  # kill it between checkpoints, after at least two
        wait_for(lambda: len(checkpoint_steps(run_dir)) >= 2 and lines_of(run_dir)[-1]["step"] > checkpoint_steps(run_dir)[-1], proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_at = max(line["step"] for line in lines_of(run_dir))
    assert killed_at < 200_000 and not (run_dir / "summary.json").exists()

    resumed = start_cli("--resume", str(run_dir), "--total-steps", "30000")
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    assert "resuming" in out
    assert "read only" not in out  # orbax's notices about the managers that only read: nothing is wrong
    lines = lines_of(run_dir)
    train_steps = [line["step"] for line in lines if "sps" in line]
    assert train_steps == list(range(1024, 29_952, 1024)) + [29_952]  # every call once, none missing
    walls = [line["wall_s"] for line in lines if "sps" in line]
    assert walls == sorted(walls)  # the resumed process's clock goes on from the run's, never back
    eval_steps = [line["step"] for line in lines if "eval_return_mean" in line]
    assert len(eval_steps) == len(set(eval_steps)) and eval_steps == sorted(eval_steps)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 29_952 and summary["final_eval_return_mean"] is not None
    assert len(checkpoint_steps(run_dir)) <= 3  # --keep-checkpoints 3

    policy = jaxrl_fast.load_policy(run_dir)  # the last checkpoint, outside the trainer
    assert policy.step == 29_952
    pool = make_xla_env("CartPole-v1", 4, 1, seed=5).pool
    obs, _ = pool.reset()
    returns, running = np.zeros(4), np.ones(4, bool)
    for _ in range(500):
        obs, reward, terminated, truncated, _ = pool.step(policy(obs))
        returns += reward * running
        running &= ~(terminated | truncated)
    # it learned, and the loaded policy is the learned one. The margin holds on any machine: of seeds
    # 0-47 trained to this step (experiments/learning_margins.py, case ppo_cartpole_30k), 47 evaluated
    # at 500 and none below 200
    assert returns.mean() >= 200.0
    assert policy(obs[0]).shape == ()  # a single observation gives a single action


@pytest.mark.slow
def test_sigterm_writes_a_final_checkpoint_and_async_sac_resumes_from_it(tmp_path):
    run_dir = tmp_path / "run"
    proc = start_cli("--algo", "sac", "--env", "Pendulum-v1", "--schedule", "async", "--total-steps", "100000",
                     "--sac.learning-starts", "500", "--log-interval", "256", "--checkpoint-interval", "0",
                     "--eval-interval", "0", "--run-dir", str(run_dir))
    wait_for(lambda: (run_dir / "metrics.jsonl").exists() and any("sps" in line for line in lines_of(run_dir)), proc)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out
    assert "SIGTERM: writing a final checkpoint" in out
    last = lines_of(run_dir)[-1]["step"]
    assert checkpoint_steps(run_dir) == [last]
    assert json.loads((run_dir / "summary.json").read_text())["interrupted"] is True
    meta = Checkpointer(run_dir, 1).restore().meta
    assert meta["schedule"]["version"] >= 1 and meta["schedule"]["consumed"] > 0

    resumed = start_cli("--resume", str(run_dir), "--total-steps", str(last + 1024))
    out, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, out
    steps = [line["step"] for line in lines_of(run_dir) if "sps" in line]
    assert steps == sorted(set(steps)) and steps[-1] >= last + 512
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["policy_lag_max"] <= 8  # the schedule picked up its counts: the ratio still holds
    assert abs(summary["replay_ratio"] - summary["target_ratio"]) <= 0.05 * summary["target_ratio"]


@pytest.mark.parametrize(
    "algo, env_id, changes",
    [
        ("ppo", "CartPole-v1", dict(total_steps=2048, normalize_observations=True)),
        ("sac", "Pendulum-v1", dict(total_steps=700)),
    ],
)
@pytest.mark.slow
def test_restoring_a_checkpoint_gives_exactly_the_saved_state(tmp_path, algo, env_id, changes):
    if algo == "sac":
        changes = dict(changes, sac={"learning_starts": 300})
    config = make_config(env_id, algo, run_dir=tmp_path / "run", progress="off", eval_interval=0, log_interval=256,
                         **changes)
    train(config)
    restored = Checkpointer(config.run_dir, 1).restore()

    env = make_xla_env(config.env, config.num_envs, 1, config.seed + 1)  # new envs: simulators are not saved
    schedule = build_schedule(resolved(config), env)
    schedule.start(restored)
    state = schedule.snapshot().state
    flat, paths = flatten_state(state)
    assert paths == restored.meta["paths"]
    if algo == "sac":
        assert any("replay" in path for path in paths)  # the buffer is part of the run state
    # the replay's columns, one file each
    expected = {name: saved.load() if isinstance(saved, SavedArray) else saved for name, saved in restored.state.items()}
    if algo == "sac":  # new envs, new episodes: each stream of the buffer ends at its last saved row
        key = {paths[int(name)].removeprefix("['replay']."): name for name in expected}
        columns = [jnp.asarray(expected[key[field]]) for field in ("rows.valid", "rows.truncated", "count", "head")]
        expected[key["rows.valid"]], expected[key["rows.truncated"]] = ended_flags(*columns)
    for name, saved in expected.items():
        np.testing.assert_array_equal(np.asarray(flat[name]), np.asarray(saved), err_msg=paths[int(name)])


def test_a_non_finite_update_stops_the_run_naming_it_and_keeps_the_last_good_checkpoint(ppo_2048):
    config = ppo_2048
    good = checkpoint_steps(config.run_dir)
    assert good == [2048]
    # The same run resumed with a learning rate that overflows float32 on its first update
    broken = dataclasses.replace(config, total_steps=4096, resume=config.run_dir,
                                 ppo=dataclasses.replace(config.ppo, learning_rate=1e38))
    with pytest.raises(NonFiniteError, match=r"(train/\S+ became|parameter .* became non-finite) .*at step 2560"):
        train_again(broken)
    assert checkpoint_steps(config.run_dir) == good
    summary = json.loads((config.run_dir / "summary.json").read_text())
    assert "NonFiniteError" in summary["error"]
    restored = Checkpointer(config.run_dir, 1).restore()
    assert all(np.isfinite(np.asarray(v)).all() for v in restored.state.values() if np.asarray(v).dtype.kind == "f")


def test_check_finite_names_the_quantity_and_the_step():
    import jax.numpy as jnp

    params = {"policy": {"w": jnp.ones(3)}, "critic": {"w": jnp.array([1.0, jnp.inf])}}
    with pytest.raises(NonFiniteError, match=r"parameter \['critic'\]\['w'\] became non-finite at step 7"):
        check_finite({"train/loss": 0.5}, params, 7)
    with pytest.raises(NonFiniteError, match="train/loss became nan at step 9"):
        check_finite({"train/loss": float("nan")}, {"w": jnp.ones(2)}, 9)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seed", "3"], "only --total-steps, --progress, --no-compile-cache may be given"),
    ],
)
def test_resume_refuses_other_flags(tmp_path, capsys, args, message):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"train_config": {}}))
    assert main(["--resume", str(run_dir), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]  # nothing written


def test_resume_of_a_damaged_config_or_checkpoint_is_one_line_and_changes_nothing(ppo_2048, capsys):
    import hashlib
    import shutil

    run_dir = ppo_2048.run_dir

    def contents():
        return {str(p.relative_to(run_dir)): hashlib.md5(p.read_bytes()).hexdigest()
                for p in sorted(run_dir.rglob("*")) if p.is_file()}

    config = (run_dir / "config.json").read_text()
    (run_dir / "config.json").write_text(config[: len(config) // 2])  # a truncated write
    assert main(["--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert "config.json cannot be read" in err and len(err.splitlines()) == 1
    (run_dir / "config.json").write_text(config)
    shutil.rmtree(run_dir / "checkpoints" / "2048" / "state")  # the newest (here the only) step, damaged
    before = contents()
    assert main(["--resume", str(run_dir), "--total-steps", "4096"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --resume: the checkpoint at step 2048") and "complete checkpoints: [2048]" in err
    assert contents() == before  # the log, the config and the other files as they were


def test_a_replay_file_cut_short_is_refused_before_the_resume_changes_anything(tmp_path, capsys):
    import hashlib

    run_dir = tmp_path / "run"
    assert main(["--algo", "sac", "--env", "Pendulum-v1", "--total-steps", "1024", "--sac.learning-starts", "256",
                 "--eval-interval", "0", "--run-dir", str(run_dir), "--progress", "off"]) == 0
    (replay, *_) = sorted((run_dir / "checkpoints").glob("*/streamed/*.npy"), key=lambda p: -p.stat().st_size)
    with open(replay, "r+b") as f:
        f.truncate(replay.stat().st_size // 2)

    def contents():
        return {str(p.relative_to(run_dir)): hashlib.md5(p.read_bytes()).hexdigest()
                for p in sorted(run_dir.rglob("*")) if p.is_file()}

    before = contents()
    assert main(["--resume", str(run_dir), "--total-steps", "2048"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --resume: the checkpoint at step 1024") and "ends early" in err[-1], err
    assert contents() == before


@pytest.mark.parametrize("schedule", ["sync", "concurrent"])
def test_a_resumed_run_that_reached_its_target_keeps_when_and_trains_no_further(tmp_path, schedule):
    """Also where the schedule's start trains an iteration to compile its learner (concurrent PPO,
    async): a resume past the target starts no schedule, and saves and evaluates nothing new."""
    run_dir = tmp_path / "run"
    # any policy scores 5: the first evaluation reaches it, long before the budget (it reports while training goes on)
    first = train(make_config(run_dir=run_dir, total_steps=400_000, log_interval=512, eval_interval=512, eval_episodes=2,
                              target_return=5.0, progress="off", schedule=schedule))
    assert first["target_step"] == 512 and first["steps"] < 400_000
    saved, lines = checkpoint_steps(run_dir), (run_dir / "metrics.jsonl").read_text()
    resumed = jaxrl_fast.train(resume=run_dir, total_steps=400_000).summary
    assert resumed["target_step"] == 512 and resumed["time_to_target_s"] == pytest.approx(first["time_to_target_s"], abs=0.01)
    assert resumed["steps"] == first["steps"] and resumed["sps"] is None  # it had ended: nothing trained
    assert resumed["final_eval_return_mean"] == first["final_eval_return_mean"]
    assert checkpoint_steps(run_dir) == saved and (run_dir / "metrics.jsonl").read_text() == lines


def test_a_resumed_runs_rates_are_of_the_steps_it_trained(ppo_2048):
    resumed = jaxrl_fast.train(resume=ppo_2048.run_dir, total_steps=4096).summary
    assert resumed["steps"] == 4096 and resumed["sps"] * resumed["train_s"] == pytest.approx(2048)


@pytest.mark.parametrize("schedule, algo, env", [("concurrent", "ppo", "CartPole-v1"), ("async", "dqn", "CartPole-v1")])
def test_a_finished_run_whose_summary_was_lost_writes_it_again(tmp_path, schedule, algo, env):
    """Where the schedule's start trains an iteration to compile its learner (concurrent PPO, async),
    a resume of a run trained to the end starts no schedule (the iteration would go past
    --total-steps): it saves and evaluates nothing new and writes the summary from the log."""
    run_dir = tmp_path / "run"
    first = train(make_config(env, algo, run_dir=run_dir, total_steps=4096, log_interval=1024, eval_interval=2048,
                              eval_episodes=2, progress="off", schedule=schedule))
    assert first["steps"] == 4096 and first["final_eval_return_mean"] is not None
    (run_dir / "summary.json").unlink()  # a crash after the final evaluation, before the summary
    saved, lines = checkpoint_steps(run_dir), (run_dir / "metrics.jsonl").read_text()
    resumed = jaxrl_fast.train(resume=run_dir).summary
    assert resumed["steps"] == 4096 and resumed["sps"] is None  # nothing trained
    assert resumed["final_eval_return_mean"] == first["final_eval_return_mean"]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 4096
    assert checkpoint_steps(run_dir) == saved and (run_dir / "metrics.jsonl").read_text() == lines


def test_load_policy_names_what_it_cannot_read(ppo_2048):
    from jaxrl_fast.outputs.checkpoint import CheckpointError

    run_dir = ppo_2048.run_dir
    (run_dir / "checkpoints" / "best_policy.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="best_policy.npz cannot be read"):
        jaxrl_fast.load_policy(run_dir, best=True)
    info = run_dir / "checkpoints" / "policy.json"
    info.write_text("{")
    with pytest.raises(CheckpointError, match="policy.json cannot be read .*a --resume of the run writes it again"):
        jaxrl_fast.load_policy(run_dir)
    (run_dir / "checkpoints" / "best_policy.npz").unlink()
    assert main(["--resume", str(run_dir), "--total-steps", "4096", "--progress", "off"]) == 0
    assert jaxrl_fast.load_policy(run_dir)(np.zeros(4, np.float32)) in (0, 1)
    seeds = run_dir.parent / "seeds"
    for k in range(2):
        (seeds / f"seed_{k}").mkdir(parents=True)
    with pytest.raises(CheckpointError, match="a --num-seeds run, whose agents' policies are in seed_0 ... seed_1"):
        jaxrl_fast.load_policy(seeds)


def test_non_finite_leaves_are_found_on_the_host_too():
    from jaxrl_fast.outputs.checkpoint import nonfinite_leaves

    # the concurrent and async schedules hand the evaluator numpy parameters
    assert [path for path, _ in nonfinite_leaves({"w": np.array([1.0, np.nan]), "n": np.arange(3)})] == ["['w']"]


def test_a_checkpoint_orbax_declines_to_write_stops_the_run(tmp_path):
    import jax.numpy as jnp

    from jaxrl_fast.outputs.checkpoint import CheckpointSaveError

    checkpointer = Checkpointer(tmp_path, keep=3)
    checkpointer.save(20, {"w": jnp.zeros(2)}, {"w": jnp.zeros(2)}, {"iterations": 20})
    with pytest.raises(CheckpointSaveError, match=r"step 10 was not written: .* holds steps \[20\] already"):
        checkpointer.save(10, {"w": jnp.ones(2)}, {"w": jnp.ones(2)}, {"iterations": 10})  # an older step: declined
    checkpointer.close()


def test_a_run_directory_in_use_by_another_process_is_refused(ppo_2048, capsys, monkeypatch, caplog):
    import fcntl

    from jaxrl_fast.outputs.run_dir import RunDirError, RunLock

    held = RunLock(ppo_2048.run_dir)  # as a run still training there holds it (the finished run let go of it)
    try:
        assert main(["--resume", str(ppo_2048.run_dir), "--total-steps", "4096"]) == 2
        assert "another process is running in" in capsys.readouterr().err
    finally:
        held.release()
    seeds = ppo_2048.run_dir.parent / "seeds"  # a --num-seeds run and one of its agents resumed alone: one run
    (seeds / "seed_0").mkdir(parents=True)
    (seeds / "config.json").write_text("{}")
    for first, second in ((seeds, seeds / "seed_0"), (seeds / "seed_0", seeds)):
        held = RunLock(first)
        with pytest.raises(RunDirError, match="another process is running in"):
            RunLock(second)
        held.release()

    def no_flock(fd, operation):  # an NFS mount: flock on a directory fails with EBADF
        raise OSError(9, "Bad file descriptor")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    RunLock(seeds).release()  # runs unlocked, with a warning
    assert "not locked" in caplog.text


@pytest.mark.parametrize("schedule", ["sync", "async"])
def test_a_resumed_buffers_streams_end_at_the_last_saved_row(tmp_path, schedule):
    """The resumed run's envs start new episodes: the rows saved before the resume must not run on
    into them (`replay.end_streams`), so the run's next checkpoint holds the last saved row as a
    reset step and the one before it as an episode's end, in every stream."""
    run_dir = tmp_path / "run"
    args = ["--algo", "dqn", "--env", "CartPole-v1", "--schedule", schedule, "--dqn.learning-starts", "600",
            "--log-interval", "512", "--eval-interval", "0", "--run-dir", str(run_dir), "--progress", "off"]
    assert main([*args, "--total-steps", "1536"]) == 0
    assert main(["--resume", str(run_dir), "--total-steps", "3072", "--progress", "off"]) == 0

    def replay(step: int) -> dict:
        restored = Checkpointer(run_dir, 3).restore(step)
        fields = {restored.meta["paths"][int(k)].removeprefix("['replay']."): v for k, v in restored.state.items()}
        return {name.removeprefix("rows."): v.load() if isinstance(v, SavedArray) else v
                for name, v in fields.items() if "[" not in name}

    saved, later = replay(1536), replay(3072)
    rows, head = len(saved["valid"]), int(saved["head"])
    assert int(saved["count"]) >= 2 and int(later["count"]) < rows  # nothing of the seam overwritten
    last, before = (head - 1) % rows, (head - 2) % rows
    assert saved["valid"][last].any() and not saved["truncated"][before].all()  # not so when saved
    assert not later["valid"][last].any() and later["truncated"][before].all()
    np.testing.assert_array_equal(later["obs"][:head], saved["obs"][:head])  # the saved rows themselves kept


def test_a_checkpoint_is_on_the_disk_before_an_older_one_is_deleted(tmp_path, monkeypatch):
    from typing import NamedTuple

    import jaxrl_fast.files as files

    class Replay(NamedTuple):
        rows: jnp.ndarray  # a replay column: streamed as a .npy file

    def state(step):
        return {"replay": Replay(jnp.full((16, 4), step, jnp.float32)), "w": jnp.full(2, step, jnp.float32)}

    checkpointer = Checkpointer(tmp_path, keep=2)
    for step in (10, 20):
        checkpointer.save(step, state(step), {"w": jnp.zeros(2)}, {"iterations": step})
    synced, oldest_there = [], []
    plain_fsync = files.fsync_path

    def recorded(path):
        synced.append(path.resolve())
        oldest_there.append((checkpointer.directory / "10").is_dir())
        plain_fsync(path)

    monkeypatch.setattr(files, "fsync_path", recorded)
    checkpointer.save(30, state(30), {"w": jnp.zeros(2)}, {"iterations": 30})
    newest = checkpointer.directory / "30"
    written = [p.resolve() for p in newest.rglob("*")]
    assert any(p.suffix == ".npy" for p in written) and any(p.parent.name == "meta" for p in written)
    assert set(written) <= set(synced)  # every file and directory of the new checkpoint
    assert checkpointer.directory in synced  # and its name in the checkpoints' directory
    assert all(oldest_there)  # the oldest was deleted only after
    assert sorted(int(p.name) for p in checkpointer.directory.iterdir() if p.name.isdigit()) == [20, 30]
    assert checkpointer.restore(30).state["00000"].shape == (16, 4)
    checkpointer.close()


def test_a_checkpoint_that_cannot_reach_the_disk_stops_the_run_and_keeps_the_older_ones(tmp_path, monkeypatch):
    import jaxrl_fast.files as files
    from jaxrl_fast.outputs.checkpoint import CheckpointSaveError

    checkpointer = Checkpointer(tmp_path, keep=1)
    checkpointer.save(10, {"w": jnp.zeros(2)}, {"w": jnp.zeros(2)}, {"iterations": 10})

    def failing(path):
        raise OSError(5, "Input/output error", str(path))

    monkeypatch.setattr(files, "fsync_path", failing)
    with pytest.raises(CheckpointSaveError, match="at step 20 .* could not be flushed to the disk: .*Input/output error"):
        checkpointer.save(20, {"w": jnp.ones(2)}, {"w": jnp.ones(2)}, {"iterations": 20})
    assert (checkpointer.directory / "10").is_dir()  # --keep-checkpoints 1, but the new one is not on the disk
    checkpointer.close()
