"""Image observations: the encoders, the convolution they use on CPU, EnvPool options, and the CLI's
checks of pixel runs (the adapter's Atari tests are in test_env.py)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast import ConfigError
from jaxrl_fast.cli.train import parse_args
from jaxrl_fast.env.envpool import make_pool, probe_spec
from jaxrl_fast.env.ids import EnvError, check_env_kwargs, evaluation_options, merge_env_kwargs, parse_env_kwargs
from jaxrl_fast.networks.config import NetworkConfig
from jaxrl_fast.networks.heads import make_discrete_q_network, make_policy_network, make_q_network, make_value_network
from jaxrl_fast.networks.torso import patches_conv
from jaxrl_fast.outputs.checkpoint import CheckpointError
from jaxrl_fast.run.resolve import check_inputs


@pytest.mark.parametrize("size, channels, out, kernel, stride, padding", [
    (84, 4, 32, 8, 4, "VALID"),  # the Nature CNN's three layers
    (20, 32, 64, 4, 2, "VALID"),
    (9, 64, 64, 3, 1, "VALID"),
    (21, 16, 16, 3, 1, "SAME"),  # IMPALA's (odd and even sizes)
    (10, 32, 32, 3, 1, "SAME"),
])
def test_patches_conv_is_xla_convolution_with_its_gradients(size, channels, out, kernel, stride, padding):
    x = jax.random.normal(jax.random.key(0), (3, size, size, channels))
    w = jax.random.normal(jax.random.key(1), (kernel, kernel, channels, out))

    def xla(x, w):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def ours(x, w):
        return patches_conv(x, w, stride, padding)

    want, got = xla(x, w), ours(x, w)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(jnp.abs(want).max()))
    loss = lambda f: jax.grad(lambda x, w: (f(x, w) ** 2).sum(), argnums=(0, 1))(x, w)  # noqa: E731
    for g, h in zip(loss(ours), loss(xla)):
        np.testing.assert_allclose(g, h, rtol=1e-4, atol=1e-4 * float(jnp.abs(h).max()))


def spec_of(env_id, **options):
    return probe_spec(env_id, options)


@pytest.mark.parametrize("encoder, features", [("nature", 512), ("impala", 256)])
def test_encoders_take_uint8_frames_with_any_leading_shape(encoder, features):
    spec = spec_of("Breakout-v5")
    net = NetworkConfig(hidden_sizes=(), encoder=encoder)
    policy, value, q = make_policy_network(spec, net), make_value_network(spec, net), make_discrete_q_network(spec, net)
    frames = jax.random.randint(jax.random.key(0), (5, 3, 4, 84, 84), 0, 256).astype(jnp.uint8)  # [T, B, ...]
    # the shapes from tracing alone; compiling each network took 20 s of this test on a 2-core CPU
    shape = lambda net, x: jax.eval_shape(net.apply, jax.eval_shape(net.init, jax.random.key(0)), x).shape  # noqa: E731
    assert shape(policy, frames) == (5, 3, 4) and shape(value, frames) == (5, 3) and shape(q, frames[0]) == (3, 4)

    @jax.jit  # one program, as a run compiles its networks
    def outputs(key, frames):
        params = policy.init(key)
        return params, policy.apply(params, frames), policy.apply(params, frames.astype(jnp.float32))

    params, from_uint8, from_float = outputs(jax.random.key(1), frames[:1])
    assert jax.tree.leaves(params["params"]["head"])[-1].shape[0] == features  # the linear head reads the encoder's features
    # frames are scaled in the first layer: the same pixels as floats give the same outputs
    np.testing.assert_allclose(from_float, from_uint8, rtol=1e-6)


def test_nature_encoder_has_the_published_size():
    """Mnih et al.'s network: 1,686,180 parameters with a linear head over Breakout's 4 actions (CleanRL's count)."""
    spec = spec_of("Breakout-v5")
    policy = make_policy_network(spec, NetworkConfig(hidden_sizes=(), encoder="nature"))
    params = jax.eval_shape(policy.init, jax.random.key(0))  # the shapes alone: nothing to compute
    assert sum(x.size for x in jax.tree.leaves(params)) == 1_686_180


def test_channels_last_images_and_continuous_critics():
    """CarRacing observes [96, 96, 3] RGB frames and acts continuously: the critic's head takes the features and the action."""
    spec = spec_of("CarRacing-v3")
    assert spec.pixels and spec.obs_shape == (96, 96, 3) and not spec.discrete
    q = make_q_network(spec, NetworkConfig(hidden_sizes=(64,), encoder="nature"), num_critics=2)
    obs, action = jnp.zeros((7, 96, 96, 3), jnp.uint8), jnp.zeros((7, 3))
    assert jax.jit(q.apply)(jax.jit(q.init)(jax.random.key(0)), obs, action).shape == (2, 7)


def test_env_kwargs_are_parsed_merged_and_checked_against_the_env():
    assert parse_env_kwargs(["episodic_life=true", "repeat_action_probability=0.25", "stack_num=2"]) == {
        "episodic_life": True, "repeat_action_probability": 0.25, "stack_num": 2}
    assert merge_env_kwargs(["episodic_life=true", "reward_clip=true"], ["episodic_life=false"]) == (
        "episodic_life=False", "reward_clip=True")
    assert evaluation_options({"episodic_life": True, "reward_clip": True, "stack_num": 2}) == {"stack_num": 2}
    check_env_kwargs("Pong-v5", {"repeat_action_probability": 0.25, "img_height": 64, "frame_skip": 2})
    for options, message in [
        ({"episodic_lif": True}, "no option 'episodic_lif'. Did you mean: episodic_life"),
        ({"num_envs": 3}, "set by --env or by the engine"),
        ({"stack_num": 2.5}, "stack_num is of type int"),
        ({"episodic_life": 1}, "episodic_life is of type bool"),
    ]:
        with pytest.raises(EnvError, match=message):
            check_env_kwargs("Pong-v5", options)
    with pytest.raises(EnvError, match="not key=value"):
        parse_env_kwargs(["episodic_life"])
    assert spec_of("Pong-v5", stack_num=2, img_height=64).obs_shape == (2, 64, 84)


def test_atari_presets_and_their_overrides():
    ppo = parse_args(["--env", "Pong-v5"])
    assert ppo.env_kwargs == ("episodic_life=True", "reward_clip=True")
    assert (ppo.num_envs, ppo.ppo.num_steps, ppo.ppo.clip_coef, ppo.ppo.encoder) == (8, 128, 0.1, "nature")
    pqn = parse_args(["--env", "Breakout-v5", "--algo", "pqn", "--env-kwargs", "repeat_action_probability=0.25"])
    assert pqn.env_kwargs == ("episodic_life=True", "reward_clip=True", "repeat_action_probability=0.25")
    assert (pqn.num_envs, pqn.pqn.layer_norm, pqn.pqn.q_lambda) == (128, True, 0.65)
    dqn = parse_args(["--env", "Pong-v5", "--algo", "dqn", "--env-kwargs", "episodic_life=false"])
    assert dqn.env_kwargs == ("episodic_life=False", "reward_clip=True")


@pytest.mark.parametrize("argv, message", [
    (["--env", "Pong-v5", "--normalize-observations"], "uint8 images"),
    (["--env", "Pong-v5", "--ppo.encoder", "none"], "need an encoder"),
    (["--env", "CartPole-v1", "--ppo.encoder", "impala"], "observes vectors"),
    (["--env", "Pong-v5", "--algo", "dqn", "--schedule", "async"], "--schedule async"),
    (["--env", "Pong-v5", "--calibrate"], "--calibrate"),
    (["--env", "CarRacing-v3", "--algo", "sac"], "Atari's and Procgen's only"),
    (["--env", "Pong-v5", "--algo", "dqn", "--dqn.learning-starts", "4"], "at least 5 rows per env: give 5"),
])
def test_pixel_runs_refuse_what_cannot_take_images(argv, message):
    with pytest.raises(ConfigError, match=message):
        check_inputs(parse_args(argv), run_dir=False)


def training_lines(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if "train/episode_return" in line]


@pytest.mark.slow
def test_pqn_trains_on_breakout_frames_and_its_policy_loads_and_films(tmp_path):
    """A short pixel run through the CLI with the Atari preset (episodic life and clipped rewards for
    the learner, whole unclipped games in the statistics, epsilon 0.05 in evaluation), the Nature CNN
    with LayerNorm on 42x42 frames, 32 envs, 8k steps: the losses stay finite, the statistics count
    whole games, and the greedy policy films and loads.

    It asserts no score: a CI budget on 2 CPU cores cannot show learning from pixels with a margin
    that holds on any machine. Over seeds 0-15 of 64k steps (`experiments/learning_margins.py`, case
    pqn_breakout_pixels) the training score rose from the first half of the run to the second by
    0.81 points a game on average with a standard deviation of 0.41 across seeds (2 of the 16 rose
    less than 0.2), and three agents in one process would have needed about 140 s to make that
    rise's mean a margin of 2.6 deviations. Learning on Atari is measured by the benchmark instead
    (docs/atari.md: Breakout 54.8 after 1.5M steps on this CPU)."""
    import jaxrl_fast
    from jaxrl_fast.cli.train import main
    from jaxrl_fast.outputs.video import read_video

    run_dir = tmp_path / "run"
    assert main(["--env", "Breakout-v5", "--algo", "pqn", "--env-kwargs", "img_height=42", "img_width=42",
                 "--num-envs", "32", "--total-steps", "8192", "--log-interval", "4096", "--eval-interval", "0",
                 "--video-interval", "1", "--run-dir", str(run_dir), "--progress", "off"]) == 0
    lines = training_lines(run_dir)
    assert [line["step"] for line in lines] == [4096, 8192]
    assert np.isfinite([line["train/q_loss"] for line in lines]).all()
    games = [line for line in lines if line["train/episodes"] > 0]
    assert games and all(line["train/episode_length"] > 100 for line in games)  # whole games of 5 lives, not lives

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval_failures"] == 0 and np.isfinite(summary["final_eval_return_mean"])
    (film,) = summary["videos"]  # the final evaluation's first game, as EnvPool renders it (210x160 RGB)
    size, frames = read_video(run_dir / film)
    assert size == (160, 210) and frames > 100

    policy = jaxrl_fast.load_policy(run_dir)
    pool = make_pool("Breakout-v5", num_envs=3, num_threads=1, seed=1, img_height=42, img_width=42)
    obs, _ = pool.reset()
    assert obs.dtype == np.uint8 and obs.shape == (3, 4, 42, 42)
    actions = policy(obs)
    assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1, 2, 3}
    assert policy(obs[1]) == actions[1]
    assert not policy.sampled  # greedy: the run's --eval-epsilon 0.05 is evaluation's alone
    with pytest.raises(CheckpointError, match="pqn's policy is deterministic"):
        jaxrl_fast.load_policy(run_dir, sampled=True)
    pool.close()


@pytest.mark.slow
def test_ppo_trains_on_pixels_under_the_concurrent_schedule(tmp_path):
    """PPO with the Atari preset on Breakout's 42x42 frames, 16 envs x 32 steps, 6,144 steps under
    the concurrent schedule (the behaviour policy one update behind), at a constant learning rate
    (annealed over so short a run, the last updates would be nearly 0): every update moves the
    policy and the statistics count whole games. Its score does not move in a CI budget: on 2 CPU cores PPO runs
    about 1,000 steps/s here, and 100,000 steps on Breakout, Boxing or RoadRunner left the game
    scores where a random policy's are (measured)."""
    from jaxrl_fast.cli.train import main

    run_dir = tmp_path / "run"
    assert main(["--env", "Breakout-v5", "--schedule", "concurrent", "--env-kwargs", "img_height=42", "img_width=42",
                 "--num-envs", "16", "--ppo.num-steps", "32", "--ppo.no-anneal-lr", "--total-steps", "6144", "--log-interval", "2048",
                 "--eval-interval", "0", "--eval-episodes", "2", "--run-dir", str(run_dir), "--progress", "off"]) == 0
    lines = training_lines(run_dir)
    for key in ("train/policy_loss", "train/value_loss", "train/entropy", "train/approx_kl"):
        assert np.isfinite([line[key] for line in lines]).all(), key
    assert all(line["train/approx_kl"] > 1e-4 for line in lines)  # each update moves the policy
    games = [line for line in lines if line["train/episodes"] > 0]
    assert games and all(line["train/episode_length"] > 100 for line in games)  # whole games of 5 lives, not lives
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["schedule"] == "concurrent" and summary["eval_failures"] == 0


@pytest.mark.slow
def test_dqn_trains_on_stored_frames_and_resumes_with_its_replay(tmp_path):
    """DQN on Pong's 42x42 frames through the fused loop: the replay keeps one frame per step and
    rebuilds stacks for its updates; a resumed run restores that buffer from its checkpoint and
    goes on learning from it."""
    from jaxrl_fast.cli.train import main

    run_dir = tmp_path / "run"
    first = ["--env", "Pong-v5", "--algo", "dqn", "--env-kwargs", "img_height=42", "img_width=42",
             "--total-steps", "1500", "--dqn.buffer-size", "4000", "--dqn.learning-starts", "600",
             "--log-interval", "500", "--checkpoint-interval", "1000", "--eval-interval", "0", "--eval-episodes", "1",
             "--run-dir", str(run_dir), "--progress", "off"]
    assert main(first) == 0
    assert main(["--resume", str(run_dir), "--total-steps", "2500", "--progress", "off"]) == 0
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    lines = [line for line in lines if "train/q_loss" in line]
    # 600 warm-up steps, then calls of 500 on one grid, the resumed run (from the final checkpoint at 1,500) on it too
    assert [line["step"] for line in lines] == [1100, 1500, 1600, 2100, 2500]
    assert all(np.isfinite(line["train/q_loss"]) and line["train/q_loss"] > 0 for line in lines)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2500 and summary["eval_failures"] == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["env_spec"]["frame_stack"] == 4 and config["env_spec"]["obs_dtype"] == "uint8"


def test_procgen_is_made_after_a_plain_import_envpool_that_came_before_qt():
    """`import envpool` registers every family, and Procgen's module then keeps its failed import
    of the extension (Qt 5 not yet loaded): the check loads Qt and imports it again."""
    import subprocess
    import sys

    script = ("import envpool\n"  # before anything of jaxrl_fast
              "from jaxrl_fast.env.envpool import probe_spec\n"
              "print(probe_spec('StarpilotEasy-v0').obs_shape)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "(3, 64, 64)", done.stderr[-2000:]


def test_procgen_frames_are_channels_first_rgb_and_take_the_published_ppo_setting():
    spec = probe_spec("StarpilotEasy-v0")  # EnvPool's Procgen loads Qt 5 from the PyQt5-Qt5 wheel here
    assert spec.family == "procgen" and spec.pixels and spec.obs_shape == (3, 64, 64) and spec.frame_stack == 1
    assert spec.discrete and spec.num_actions == 15
    config = parse_args(["--env", "StarpilotEasy-v0", "--algo", "ppo"])
    assert (config.num_envs, config.ppo.num_steps, config.ppo.update_epochs, config.ppo.gamma) == (64, 256, 3, 0.999)
    assert config.ppo.encoder == "impala" and config.scale_rewards
    assert config.ppo.clip_value_loss and not config.ppo.anneal_lr  # CleanRL's clip_vloss, a constant rate
    assert parse_args(["--env", "StarpilotEasy-v0", "--algo", "pqn"]).pqn.encoder == "impala"


def test_a_procgen_time_out_ends_on_its_own_levels_last_frame():
    """Procgen's games start their next level by themselves; a time-out (Coinrun's 1,000 steps) is a
    truncation, which bootstraps from the observation its step returned (the buffer's next row): the
    old level's last frame, with the new level's first one in the reset step after it (EnvPool
    1.2.5 and 1.2.7)."""
    import envpool

    probe_spec("CoinrunEasy-v0")  # loads Qt 5
    env = envpool.make("CoinrunEasy-v0", env_type="gymnasium", num_envs=1, seed=0)
    still = np.full(1, 4, np.int32)  # Coinrun's no-op: the agent stands where its level starts it, and no frame moves
    before, _ = env.reset()
    for _ in range(1000):
        obs, _, terminated, truncated, info = env.step(still)
        if truncated[0] or terminated[0]:
            break
        before = obs
    assert truncated[0] and not terminated[0] and info["elapsed_step"][0] == 1000
    np.testing.assert_array_equal(obs, before)  # still the old level
    after, _, _, _, info = env.step(still)
    assert info["elapsed_step"][0] == 0 and not np.array_equal(after, obs)  # the reset step: a new level
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("algo, flags", [
    ("ppo", ["--ppo.num-steps", "64", "--ppo.num-minibatches", "4", "--ppo.update-epochs", "1", "--total-steps", "1024"]),
    ("pqn", ["--pqn.num-steps", "32", "--pqn.num-minibatches", "2", "--pqn.update-epochs", "1", "--total-steps", "1024"]),
])
def test_procgen_trains_on_the_impala_encoder_its_losses_and_scores_moving(tmp_path, algo, flags):
    """Starpilot pays for every enemy shot, so even a short run scores; on 2 CPU cores the IMPALA
    encoder trains about 120-200 env steps/s, so the run stays at 1,024 steps (seed 0 ends 11 PPO
    and 14 PQN episodes in them, scoring up to 3.3 and 1.3: the test asks for 4 and above 0)."""
    from jaxrl_fast.cli.train import main
    from jaxrl_fast.outputs.metrics import read_metrics

    run = tmp_path / "run"
    assert main(["--env", "StarpilotEasy-v0", "--algo", algo, "--num-envs", "4", "--log-interval", "256",
                 "--eval-interval", "0", "--eval-episodes", "2", "--progress", "off", "--run-dir", str(run), *flags]) == 0
    lines = [line for line in read_metrics(run / "metrics.jsonl") if "train/episodes" in line]
    loss = "train/value_loss" if algo == "ppo" else "train/q_loss"
    losses = [line[loss] for line in lines]
    assert len(lines) >= 3 and np.isfinite(losses).all() and len(set(losses)) == len(losses)
    assert sum(line["train/episodes"] for line in lines) >= 4  # episodes ended and were counted
    assert max(line["train/episode_return"] for line in lines) > 0  # enemies were shot
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final_eval_return_mean"] is not None
