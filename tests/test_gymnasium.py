"""The Gymnasium backend: Gymnasium's registered ids (`gym:<id>`) and the user's own class
(`module:Class`) trained through the same API and CLI as EnvPool's ids."""

import json
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_fast
from jaxrl_fast.cli.train import main
from jaxrl_fast.env import ffi_forward
from jaxrl_fast.env.envpool import make_pool, make_xla_env
from support import lines_of, rollout

CUSTOM = "custom_envs:PointToTarget"  # tests/custom_envs.py


@pytest.mark.slow
@pytest.mark.parametrize("algo, steps", [("ppo", 60_000), ("sac", 6_000)])
def test_a_users_own_gymnasium_class_trains_through_the_api(tmp_path, algo, steps):
    # staying put scores about -27, heading for the target about -2
    result = jaxrl_fast.train(env=CUSTOM, algo=algo, total_steps=steps, progress="off", run_dir=tmp_path / "run")
    assert result.summary["final_eval_return_mean"] > -8.0, result.summary
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())  # --schedule auto, the default
    assert recorded["schedule"] == {"ppo": "sync", "sac": "async"}[algo] and recorded["schedule_reason"]
    policy = jaxrl_fast.load_policy(tmp_path / "run")
    assert policy(np.array([[0.0, 0.5], [0.5, -0.5]], np.float32)).shape == (2, 1)


@pytest.mark.slow
@pytest.mark.parametrize("flags", [{"schedule": "async"}, {"num_seeds": 2}], ids=["async", "num-seeds"])
def test_the_async_actors_and_many_seeds_step_python_envs_too(tmp_path, flags):
    result = jaxrl_fast.train(env=CUSTOM, algo="sac", total_steps=4_000, sac={"learning_starts": 1_000}, progress="off",
                              run_dir=tmp_path / "run", **flags)
    finals = np.atleast_1d(result.summary["final_eval_return_mean"])  # one per seed
    assert len(finals) == flags.get("num_seeds", 1) and (finals > -8.0).all(), result.summary


@pytest.mark.slow
def test_gymnasium_cartpole_learns_with_ppo(tmp_path):
    result = jaxrl_fast.train(env="gym:CartPole-v1", algo="ppo", total_steps=50_000, progress="off",
                              run_dir=tmp_path / "run")
    assert result.summary["final_eval_return_mean"] >= 300, result.summary


def test_gymnasium_ids_of_envpools_tasks_take_their_presets_and_own_classes_the_defaults():
    from jaxrl_fast.run.api import preset_config

    for algo, task in (("ppo", "CartPole-v1"), ("sac", "Pendulum-v1")):
        ours, envpools = preset_config(f"gym:{task}", algo), preset_config(task, algo)
        assert getattr(ours, algo) == getattr(envpools, algo) and ours.total_steps == envpools.total_steps
    assert preset_config(CUSTOM, "ppo").ppo == jaxrl_fast.TrainConfig(env=CUSTOM, algo="ppo").ppo


def test_no_transition_spans_a_reset_the_step_after_an_end_is_a_reset_step():
    xla_env = make_xla_env(CUSTOM, num_envs=2, num_threads=1, seed=0)
    assert xla_env.spec.family == "gymnasium" and xla_env.spec.max_episode_steps == 40
    out, _ = rollout(xla_env, jnp.ones((100, 2, 1), jnp.float32))
    step, reset_step, _ = out
    ends = np.flatnonzero(step.truncated[:, 0])
    assert list(ends) == [39, 80]  # 40 steps, a reset step, 40 steps
    assert reset_step[40, 0] and reset_step[81, 0] and not reset_step[:40, 0].any()
    assert step.reward[40, 0] == 0.0 and step.elapsed_step[40, 0] == 0 and step.elapsed_step[41, 0] == 1
    # the reset step's observation is the new episode's first; the host pool agrees step for step
    pool = make_pool(CUSTOM, num_envs=2, num_threads=1, seed=0)
    pool.reset()
    host = [pool.step(np.ones((2, 1), np.float32)) for _ in range(100)]  # each kept: never a view of a reused buffer
    np.testing.assert_allclose(np.stack([h[0] for h in host]), step.obs, rtol=1e-6)
    np.testing.assert_array_equal(np.stack([h[3] for h in host]), step.truncated)


@pytest.mark.parametrize("env_id, actions", [
    ("gym:CartPole-v1", np.arange(60 * 3).reshape(60, 3) % 2),
    (CUSTOM, np.sin(np.arange(60 * 3, dtype=np.float32)).reshape(60, 3, 1)),
])
def test_the_host_target_steps_as_the_io_callback_does_and_its_programs_name_a_slot(env_id, actions):
    """Programs step Python envs through `ffi_forward`'s host target (a slot, so JAX's cache and
    the program store keep them); without its library, through an `io_callback`: the same steps."""
    results, texts = [], []
    for forwarded in (True, False):
        with mock.patch.object(ffi_forward, "forwarder", ffi_forward.forwarder if forwarded else lambda: None):
            env = make_xla_env(env_id, num_envs=3, num_threads=1, seed=5)
        assert (env.program_key is not None) == forwarded
        out, _ = rollout(env, jnp.asarray(actions))
        results.append(out[0])
        texts.append(jax.jit(env.step).lower(jnp.asarray(env.handle), jnp.asarray(actions[0])).as_text())
    for forwarded, by_callback in zip(*results):
        np.testing.assert_array_equal(forwarded, by_callback)
    assert results[0].truncated.any() or results[0].terminated.any()  # episodes ended and reset
    assert ffi_forward.HOST_TARGET in texts[0] and "callback" not in texts[0]
    assert ffi_forward.HOST_TARGET not in texts[1]


class StepsOf:
    """A pool's `step` as `_host_call` sees it, returning what a test gives: wider dtypes, or a wrong shape."""

    def __init__(self, obs, reward, elapsed):
        self.out = obs, reward, elapsed

    def step(self, action):
        obs, reward, elapsed = self.out
        ends = np.zeros(len(reward), bool)
        return obs, reward, ends, ends, {"elapsed_step": elapsed}


def test_the_host_target_casts_wider_results_and_refuses_a_wrong_shape_never_copying_past_a_buffer():
    from jaxrl_fast.env.gymnasium_env import _host_call

    n, action = 3, jax.ShapeDtypeStruct((3,), jnp.int32)
    shapes = (jax.ShapeDtypeStruct((n, 2), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.float32),
              jax.ShapeDtypeStruct((n,), jnp.bool_), jax.ShapeDtypeStruct((n,), jnp.bool_),
              jax.ShapeDtypeStruct((n,), jnp.int32))
    wide = StepsOf(np.arange(6.0).reshape(n, 2), np.array([0.5, 1.5, 2.5]), np.arange(7, 10, dtype=np.int64))
    call, slot = _host_call(lambda: wide, action, shapes)
    assert slot is not None
    _, obs, reward, _, _, elapsed = jax.jit(call)(jnp.zeros(8, jnp.uint8), jnp.zeros(n, jnp.int32))
    np.testing.assert_array_equal(obs, np.arange(6.0).reshape(n, 2))
    np.testing.assert_array_equal(reward, [0.5, 1.5, 2.5])
    np.testing.assert_array_equal(elapsed, [7, 8, 9])
    short = StepsOf(np.zeros((n - 1, 2), np.float32), np.zeros(n, np.float32), np.zeros(n, np.int32))
    call, _ = _host_call(lambda: short, action, shapes)
    with pytest.raises(Exception, match="ValueError: could not broadcast"):
        jax.block_until_ready(jax.jit(call)(jnp.zeros(8, jnp.uint8), jnp.zeros(n, jnp.int32)))


@pytest.mark.parametrize("note", ["", ": " + "é" * 2000], ids=["short", "long-non-ascii"])
def test_an_error_in_a_python_step_reaches_the_caller_with_its_message(note):
    # a message longer than the C side's buffer is cut at a whole character, never replaced
    env = make_xla_env("custom_envs:Faulty", num_envs=2, num_threads=1, seed=0, note=note)
    assert env.program_key is not None
    with pytest.raises(Exception, match="ValueError: the simulator diverged at call 6" + note[:20]) as caught:
        rollout(env, jnp.ones((10, 2, 1), jnp.float32))
    assert "UnicodeDecodeError" not in str(caught.value)


@pytest.mark.parametrize("args, message", [
    (["--env", "gym:CartPol-v1"], "not an id of Gymnasium's registry. Did you mean: gym:CartPole-v1"),
    (["--env", "no_such_module:Env"], "cannot import 'no_such_module'"),
    (["--env", ":Env"], "cannot import ''"),  # no module name at all (once a ValueError traceback)
    (["--env", "custom_envs:needs_a_package"], "needs a package this environment lacks: Box2D is not installed, run"),
    (["--env", "custom_envs:PointToTargt"], "custom_envs has no 'PointToTargt'. Did you mean: custom_envs:PointToTarget"),
    (["--env", CUSTOM, "--algo", "sac", "--video-interval", "1"], "a Gymnasium env's run has no video"),
    (["--env", CUSTOM, "--algo", "sac", "--calibrate"], "give --num-envs yourself"),
    (["--env", CUSTOM, "--algo", "dqn"], "continuous actions"),
    (["--env", CUSTOM, "--env-kwargs", "speedd=0.5"], "refused its options"),
    (["--env", "custom_envs:DiscreteFromOne", "--algo", "dqn"], "whose actions start at 1; this backend takes"),
    (["--env", "custom_envs:TupleObserved"], "observes Tuple(Box("),
    (["--env", "gym:Blackjack-v1"], "this backend takes a Box or a Dict of Boxes"),
    (["--env", "custom_envs:NestedDict"], "this backend takes a Box or a Dict of Boxes"),
    (["--env", "custom_envs:Unbounded", "--algo", "sac"], "action bounds are not finite (low (-inf,), high (inf,))"),
])
def test_a_wrong_gymnasium_id_or_flag_gets_one_line(tmp_path, capsys, args, message):
    run_dir = tmp_path / "run"
    assert main([*args, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not run_dir.exists()


@pytest.mark.parametrize("options, flags, message", [
    (["fault=reward"], [], "custom_envs:Misbehaving returned a non-finite reward (nan) in env 0, step 5 of its episode"),
    (["fault=shape"], [], "custom_envs:Misbehaving returned an observation of shape (3,) at step 5 of its episode; its"),
    # one env of two, in another dimensionality (numpy's stacking words differ for each)
    (["fault=dims", "only=1"], [], "returned an observation of shape (2, 1) at step 5 of its episode"),
    # SAC on a Python env takes `async` (auto): the actors step the envs outside any program
    (["fault=reward"], ["--algo", "sac", "--sac.learning-starts", "256"], "returned a non-finite reward (nan) in env"),
])
def test_an_env_that_returns_what_cannot_be_trained_on_stops_the_run_in_one_line(tmp_path, capsys, options, flags, message):
    assert main(["--env", "custom_envs:Misbehaving", "--env-kwargs", *options, *flags, "--total-steps", "1024",
                 "--num-envs", "2", "--run-dir", str(tmp_path / "run"), "--progress", "off"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1] and "Traceback" not in "\n".join(err), err


def test_an_envs_own_exception_reaches_the_caller_as_itself_however_long_its_message(tmp_path):
    note = ": " + "x" * 3000  # past the host target's 1 KB message buffer, which cuts XLA's text of it
    with pytest.raises(ValueError, match="the simulator diverged at call 6: xxx") as caught:
        jaxrl_fast.train(env="custom_envs:Faulty", env_kwargs={"note": note}, total_steps=1024, eval_interval=0,
                         run_dir=tmp_path / "run", progress="off")
    assert str(caught.value).endswith(note)


def test_without_the_host_target_an_envs_error_is_one_line_too(tmp_path):
    # the io_callback path (no C compiler, or the forwarder turned off) carries the error as text too: the
    # run's last line is the env's error
    import os
    import subprocess
    import sys

    tests = os.path.dirname(os.path.abspath(__file__))  # custom_envs
    env = dict(os.environ, JAXRL_FAST_FFI_FORWARD="0", PYTHONWARNINGS="ignore",
               PYTHONPATH=os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "jaxrl_fast.train", "--env", "custom_envs:Misbehaving",
                           "--total-steps", "1024", "--num-envs", "2", "--run-dir", str(tmp_path / "run"),
                           "--progress", "off"], env=env, capture_output=True, text=True, timeout=600)
    err = done.stderr.strip().splitlines()  # JAX logs the callback's failure, with its traceback, before it
    assert done.returncode == 1 and err[-1].startswith("error: custom_envs:Misbehaving returned a non-finite reward "
                                                       "(nan) in env 0, step 5"), done.stderr


def test_a_class_is_held_to_its_specs_time_limit_in_training_and_evaluation(tmp_path):
    result = jaxrl_fast.train(env="custom_envs:OwnSpecLimit", total_steps=2048, eval_interval=1024, eval_episodes=4,
                              run_dir=tmp_path / "run", progress="off")
    lines = lines_of(tmp_path / "run")
    assert {line["train/episode_length"] for line in lines if "train/episode_length" in line} == {12.0}
    assert {line["eval/episode_length"] for line in lines if "eval/episode_length" in line} == {12.0}
    assert result.summary["steps"] == 2048


@pytest.mark.parametrize("algo, flags", [("ppo", {}), ("sac", {"schedule": "sync"}), ("td3", {"schedule": "async"})])
def test_a_scalar_box_action_reaches_the_env_and_comes_from_load_policy_in_its_shape(tmp_path, algo, flags):
    from custom_envs import ScalarAction

    ScalarAction.shapes.clear()
    warm_up = {} if algo == "ppo" else {algo: {"learning_starts": 256}}  # short: the policy acts too
    jaxrl_fast.train(env="custom_envs:ScalarAction", algo=algo, total_steps=1024, eval_interval=512, eval_episodes=2,
                     run_dir=tmp_path / "run", progress="off", **flags, **warm_up)
    assert ScalarAction.shapes == {()}  # training's envs and evaluation's alike
    policy = jaxrl_fast.load_policy(tmp_path / "run")
    obs, _ = ScalarAction().reset(seed=0)
    assert policy(obs).shape == () and policy(np.stack([obs, obs])).shape == (2,)


def test_env_kwargs_text_that_reads_as_a_number_stays_text(tmp_path):
    from custom_envs import Named

    from jaxrl_fast.env.ids import merge_env_kwargs, option_text, parse_env_kwargs

    assert parse_env_kwargs(['name="007"', "size=7", "on=true", "tag='x'"]) == {"name": "007", "size": 7, "on": True,
                                                                                "tag": "x"}
    assert merge_env_kwargs(['name="007"'], ["size=7"]) == ('name="007"', "size=7")
    for value in ["007", "true", " padded", "nan", "x", 7, 2.5, True]:
        assert parse_env_kwargs([option_text("k", value)]) == {"k": value}
    Named.names.clear()
    jaxrl_fast.train(env="custom_envs:Named", env_kwargs={"name": "007"}, total_steps=1024, eval_interval=0,
                     run_dir=tmp_path / "run", progress="off")
    assert set(Named.names) == {"007"}
    Named.names.clear()
    jaxrl_fast.train(env="custom_envs:Named", env_kwargs={"name": np.str_("008")}, total_steps=1024, eval_interval=0,
                     run_dir=tmp_path / "numpy", progress="off")
    assert set(Named.names) == {"008"}
    with pytest.raises(jaxrl_fast.ConfigError, match=r"env_kwargs\['name'\] is a NoneType"):
        jaxrl_fast.train(env="custom_envs:Named", env_kwargs={"name": None}, run_dir=tmp_path / "other")
