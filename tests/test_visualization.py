"""Evaluation videos and the learning-curve image (jaxrl_fast.outputs.video, jaxrl_fast.outputs.curves)."""

import json
import logging
import sys
import threading

import numpy as np
import pytest
from PIL import Image

from jaxrl_fast.cli.train import main
from jaxrl_fast.outputs import video
from jaxrl_fast.outputs.curves import LearningCurve, draw_learning_curve, evaluation_label, read_curve_points
from jaxrl_fast.outputs.run_dir import CURVE_FILE
from jaxrl_fast.run.evaluation import Evaluator, VideoPlan

pytest.importorskip("imageio_ffmpeg", reason="videos need the video extra: pip install -e '.[video]'")

CARTPOLE_FRAME = (600, 400)  # (width, height) EnvPool renders CartPole-v1 at


def push_left(payload, obs, seed):
    return np.zeros(obs.shape[0], np.int32)


def tiny_run_args(run_dir, *extra):
    return ["--total-steps", "4096", "--eval-interval", "2048", "--log-interval", "2048", "--eval-episodes", "2",
            "--run-dir", str(run_dir), "--progress", "off", *extra]


def test_video_plan_films_the_first_every_nth_and_the_final_evaluation():
    plan = VideoPlan(run_dir=None, every=3, final_step=1000)
    assert [plan.records(index, step=100 * index) for index in range(7)] == [True, False, False, True, False, False, True]
    assert plan.records(4, step=1000) and plan.records(5, step=1024)


def test_filmed_episode_is_the_first_evaluation_episode_frame_for_frame(tmp_path):
    results = []
    done = threading.Event()
    evaluator = Evaluator("CartPole-v1", 2, 0, push_left, lambda r, _: (results.append(r), done.set()), 500,
                          VideoPlan(tmp_path, every=1, final_step=10**9))
    try:
        evaluator.request(None, step=123)
        assert done.wait(60)
    finally:
        evaluator.close()
    (result,) = results
    assert evaluator.videos == [tmp_path / "videos" / "step_0000000123.mp4"] and evaluator.video_failures == 0
    size, frames = video.read_video(evaluator.videos[0])
    assert size == CARTPOLE_FRAME
    assert frames == result.lengths[0] + 1 > 1  # the reset frame, then one per step of env 0's episode
    assert [path.name for path in (tmp_path / "videos").iterdir()] == ["step_0000000123.mp4"]  # no partial left


def test_run_with_video_interval_leaves_decodable_videos_and_a_learning_curve(tmp_path):
    run_dir = tmp_path / "run"
    assert main(tiny_run_args(run_dir, "--video-interval", "1")) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["video_failures"] == 0 and summary["curve_failures"] == 0
    videos = sorted((run_dir / "videos").glob("*.mp4"))
    assert [str(path.relative_to(run_dir)) for path in videos] == sorted(summary["videos"])
    assert "videos/step_0000004096.mp4" in summary["videos"]  # the final evaluation is always filmed
    for path in videos:
        size, frames = video.read_video(path)
        assert size == CARTPOLE_FRAME and frames > 1
    with Image.open(run_dir / CURVE_FILE) as image:
        image.verify()
        assert image.format == "PNG" and image.size == (640, 400)
    assert not [path for path in run_dir.rglob(".*") if path.is_file()]  # no write left half done



def test_a_run_stopped_at_its_target_ends_with_a_video_of_its_final_policy(tmp_path):
    """The evaluation of its last step ran already (the one that reached the target, or the one
    after) and is reused, unfilmed (only the 1st and every 100th are): the final policy is filmed all the same."""
    run_dir = tmp_path / "run"
    assert main(["--total-steps", "100000", "--eval-interval", "1024", "--log-interval", "1024", "--eval-episodes", "2",
                 "--target-return", "9", "--video-interval", "100", "--run-dir", str(run_dir), "--progress", "off"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] < 100000 and summary["final_eval_return_mean"] is not None  # stopped at its target
    assert f"videos/step_{summary['steps']:010d}.mp4" in summary["videos"], summary["videos"]
    evals = [line["step"] for line in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
             if "eval_return_mean" in line]
    assert len(evals) == len(set(evals))  # the video's evaluation logged no second line

def test_a_renderer_that_raises_costs_the_video_not_the_run(tmp_path, monkeypatch, caplog):
    def broken_renderer(pool, env_index=0):
        raise RuntimeError("no OpenGL today")

    monkeypatch.setattr(video, "render_frame", broken_renderer)
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.ERROR, logger="jaxrl_fast.outputs.video"):
        assert main(tiny_run_args(run_dir, "--video-interval", "1")) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4096 and summary["final_eval_return_mean"] is not None  # training and evaluation went on
    assert summary["video_failures"] >= 2 and summary["videos"] == [] and summary["eval_failures"] == 0
    assert "no OpenGL today" in caplog.text
    assert not list((run_dir / "videos").glob("*"))  # no half-written file left behind
    eval_steps = [line["step"] for line in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
                  if "eval_return_mean" in line]
    assert 4096 in eval_steps


def test_learning_curve_reads_what_was_logged_and_skips_a_line_cut_short(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    lines = [
        {"step": 100, "wall_s": 1.0, "sps": 10.0, "train/episode_return": 12.0},
        {"step": 100, "wall_s": 1.1, "eval_return_mean": 20.0, "eval_return_std": 2.0, "eval_episodes": 10},
        {"step": 200, "wall_s": 2.0, "sps": 10.0, "train/episodes": 0},  # no finished episode: no point
        {"step": 200, "wall_s": 2.1, "eval_return_mean": 50.0, "eval_return_std": 5.0, "eval_episodes": 10},
    ]
    metrics.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 300, "eval_ret')
    points = read_curve_points(metrics)
    assert points.eval_step.tolist() == [100, 200] and points.eval_mean.tolist() == [20.0, 50.0]
    assert points.eval_std.tolist() == [2.0, 5.0]
    assert points.train_step.tolist() == [100] and points.train_return.tolist() == [12.0]
    draw_learning_curve(points, tmp_path / CURVE_FILE, "test")
    with Image.open(tmp_path / CURVE_FILE) as image:
        image.verify()
        assert image.format == "PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["metrics.jsonl", CURVE_FILE])  # the temp file renamed


def test_the_curve_says_how_evaluations_acted():
    assert evaluation_label(0.0) == "evaluation (deterministic, mean ± std)"
    assert evaluation_label(0.05) == "evaluation (epsilon-greedy, 0.05, mean ± std)"  # --eval-epsilon, Atari's presets
    assert evaluation_label(0.0, "sampled") == "evaluation (sampled, mean ± std)"  # --eval-policy, MiniGrid's presets


def test_learning_curve_redraws_on_its_own_thread_at_most_every_interval_and_at_close(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 100, "wall_s": 1.0, "eval_return_mean": 20.0,
                                                        "eval_return_std": 2.0, "eval_episodes": 10}) + "\n")
    curve = LearningCurve(tmp_path, "test", interval_s=3600)
    curve.update()
    curve.update()  # returns at once; no redraw before the interval has passed
    assert not (tmp_path / CURVE_FILE).exists()
    curve.close()  # the redraw asked for is done before close returns
    assert (tmp_path / CURVE_FILE).exists() and curve.failures == 0
    eager = LearningCurve(tmp_path / "eager", "test", interval_s=0)
    eager.update()  # no metrics file: the failure is counted, never raised
    eager.close()
    assert eager.failures == 1


def test_missing_encoder_is_refused_with_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # importing it now raises ImportError
    with pytest.raises(video.VideoError, match=r"pip install 'jaxrl_fast\[video\]'"):
        video.check_encoder()


def test_mujoco_renders_here_when_egl_is_installed():
    try:
        shape = video.check_video_support("HalfCheetah-v4")
    except video.VideoError as error:
        pytest.skip(f"no EGL on this machine: {error}")
    assert shape == (480, 480, 3)
