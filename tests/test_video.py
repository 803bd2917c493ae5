"""Videos of the agent (`jaxrl_async/evaluation/`): the recorder keeps one frame per episode
step (the state acted on: the reset state first, the final state not shown), frames
follow the state, files are written and read back, and bad input is one line."""

import json
import subprocess
import sys

import imageio.v3 as iio
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl_async
from jaxrl_async import envs as envs_lib
from jaxrl_async.errors import ConfigError, UserError
from jaxrl_async.evaluation import record_video
from jaxrl_async.evaluation.evaluate import eval_key, eval_parts, make_evaluator
from jaxrl_async.evaluation.record import frames_of, make_recorder, record_episodes
from jaxrl_async.evaluation.renderers import renderer_for
from jaxrl_async.evaluation.writer import check_video_path
from jaxrl_async.pipeline.build import build_pipeline
from tests.helpers.cli import run_cli_in_process, run_cli_with_output, subprocess_env
from tests.helpers.configs import PPO_SMALL
from tests.helpers.tb_events import summaries


def _recorded(name: str, episodes: int = 2, max_steps: int = 0):
    """A fresh (untrained) PPO policy's sampled evaluation of env `name`, recorded: the
    evaluation's returns and lengths, each episode's frames, and a check function."""
    config = jaxrl_async.load_config(
        "ppo_cartpole",
        [
            f"env.name={name}",
            "agent.hidden_sizes=[8]",
            f"eval.episodes={episodes}",
            f"eval.max_steps={max_steps}",
            "eval.mode=sample",
        ],
    )
    env, env_params = envs_lib.resolve(config.env)
    renderer = renderer_for(name, env, env_params)
    _, agent = build_pipeline(config, env, env_params)
    args = (agent.init(jax.random.key(0)).params, eval_key(0, 0), jnp.int32(0), None)
    parts = eval_parts(agent, env, env_params, config.eval)
    returns, lengths, selections = record_episodes(make_recorder(parts, renderer.select, 16), args)
    frames = [list(frames_of(renderer, [episode])) for episode in selections]
    evaluate = make_evaluator(agent, env, env_params, config.eval)
    return (returns, lengths), frames, lambda: jax.jit(evaluate)(*args)


def _check_frames(lengths, frames):
    assert [len(f) for f in frames] == list(lengths)
    for episode in frames:
        assert all(f.dtype == np.uint8 and f.ndim == 3 and f.shape[-1] == 3 for f in episode)
        # the agent moves things: an episode's frames are not all one picture
        assert len({f.tobytes() for f in episode}) > 1


def test_cartpole_frames_are_the_evaluations_steps():
    (returns, lengths), frames, evaluate = _recorded("CartPole-v1", episodes=3)
    # the recording is the evaluation: the same returns and lengths, bit for bit
    np.testing.assert_array_equal(returns, evaluate()[0])
    np.testing.assert_array_equal(lengths, evaluate()[1])
    _check_frames(lengths, frames)
    # different resets, different first frames (the pole's angle, the cart's place)
    assert frames[0][0].tobytes() != frames[1][0].tobytes()


@pytest.mark.parametrize(
    "name",
    [
        "Breakout-MinAtar",
        *(
            pytest.param(name, marks=pytest.mark.slow)
            for name in ("Acrobot-v1", "Pendulum-v1", "MountainCar-v0", "Catch-bsuite")
        ),
    ],
)
def test_gymnax_envs_render_one_frame_per_step(name):
    (_, lengths), frames, _ = _recorded(name, max_steps=24)
    _check_frames(lengths, frames)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("navix:Navix-Empty-5x5-v0", marks=pytest.mark.slow),
        pytest.param("xminigrid:MiniGrid-Empty-5x5", marks=pytest.mark.slow),
        pytest.param("craftax:Craftax-Classic-Symbolic-v1", marks=pytest.mark.slow),
    ],
)
def test_suite_envs_render_one_frame_per_step(name):
    pytest.importorskip(name.partition(":")[0])
    (_, lengths), frames, _ = _recorded(name, max_steps=12)
    _check_frames(lengths, frames)


def test_an_env_without_a_renderer_is_refused_in_one_line():
    env, env_params = envs_lib.make("Reacher-misc")
    with pytest.raises(ConfigError, match="cannot be rendered") as e:
        renderer_for("Reacher-misc", env, env_params)
    assert "\n" not in str(e.value)


def test_video_path_and_writer_are_checked_first(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"\.gif or \.mp4"):
        check_video_path(tmp_path / "out.avi")
    with pytest.raises(UserError, match="no directory"):
        check_video_path(tmp_path / "missing" / "out.gif")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda m, *a: None if m == "imageio_ffmpeg" else real(m, *a)
    )
    with pytest.raises(
        UserError, match=r"needs imageio-ffmpeg: pip install 'jaxrl_async\[video\]'"
    ):
        check_video_path(tmp_path / "out.mp4")
    assert check_video_path(tmp_path / "out.gif").suffix == ".gif"


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("video") / "run"
    jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", PPO_SMALL), run_dir=run_dir)
    return run_dir


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # imageio's ffmpeg reader
def test_eval_video_writes_gif_and_mp4_of_the_evaluation(cartpole_run, tmp_path):
    code, err = run_cli_in_process(
        "eval",
        str(cartpole_run),
        "--episodes",
        "2",
        "--video",
        str(tmp_path / "a.gif"),
        cwd=tmp_path,
    )
    assert code == 0, err
    result = json.loads((cartpole_run / "eval.json").read_text())
    gif = iio.imread(tmp_path / "a.gif")  # [frames, H, W, 3]
    # a GIF merges repeated pictures into one longer frame, so at most one per step
    assert 1 < gif.shape[0] <= sum(result["lengths"]) and gif.shape[-1] == 3
    mp4 = record_video(cartpole_run, tmp_path / "a.mp4", episodes=2)
    assert mp4["frames"] == sum(mp4["lengths"]) == sum(result["lengths"])
    assert mp4["returns"] == result["returns"]  # the same evaluation
    assert iio.imread(tmp_path / "a.mp4").shape[0] == mp4["frames"]
    assert not list(tmp_path.glob(".*partial*"))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # imageio's ffmpeg reader
def test_eval_video_without_episodes_shows_the_first_of_the_runs_evaluation(cartpole_run, tmp_path):
    code, out, err = run_cli_with_output(
        "eval", str(cartpole_run), "--video", str(tmp_path / "one.mp4"), cwd=tmp_path
    )
    assert code == 0, err
    result = json.loads((cartpole_run / "eval.json").read_text())
    run_episodes = jaxrl_async.load_config("ppo_cartpole", PPO_SMALL).eval.episodes
    assert result["episodes"] == run_episodes > 1  # the evaluation is the run's own
    frames = result["lengths"][0]  # the video: its first episode alone
    assert iio.imread(tmp_path / "one.mp4").shape[0] == frames
    assert f"(1 episode of {run_episodes} evaluated, {frames:,} frames)" in out


def test_eval_video_refuses_a_bad_path_in_one_line_before_reading_the_run(tmp_path):
    code, err = run_cli_in_process("eval", "no-such-run", "--video", "out.avi", cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1 and ".gif or .mp4" in err, err
    assert not (tmp_path / "out.avi").exists()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # imageio's ffmpeg reader
def test_host_env_video_is_gymnasiums_frames_of_the_evaluation(tmp_path):
    pytest.importorskip("pygame")
    config = jaxrl_async.load_config(
        "ppo_gymnasium_cartpole",
        [
            "env.num_envs=4",
            "pipeline.rollout_len=8",
            "agent.hidden_sizes=[8]",
            "agent.num_minibatches=2",
            "train.total_steps=64",
            "train.log_every=32",
            "train.progress=false",
        ],
    )
    jaxrl_async.train(config, run_dir=tmp_path / "run")
    result = record_video(tmp_path / "run", tmp_path / "host.mp4", episodes=2)
    assert result["frames"] == sum(result["lengths"])
    frames = iio.imread(tmp_path / "host.mp4")
    assert frames.shape[0] == result["frames"] and frames.shape[-1] == 3
    first = frames[: result["lengths"][0]]
    assert len({f.tobytes() for f in first}) > 1
    one = record_video(tmp_path / "run", tmp_path / "one.mp4")  # the first episode only
    assert one["video_episodes"] == 1 and one["frames"] == one["lengths"][0]
    assert one["episodes"] == config.eval.episodes
    assert iio.imread(tmp_path / "one.mp4").shape[0] == one["frames"]


def test_eval_video_needs_periodic_evaluation():
    with pytest.raises(ConfigError, match=r"eval\.video must be false without eval\.every"):
        jaxrl_async.load_config("ppo_cartpole", ["eval.video=true"])


@pytest.mark.slow
def test_eval_video_logs_each_evaluations_first_episode_to_tensorboard(tmp_path):
    evaluating = [*PPO_SMALL, "eval.every=2048", "eval.episodes=2", "eval.max_steps=40"]
    plain = jaxrl_async.train(jaxrl_async.load_config("ppo_cartpole", evaluating))
    config = jaxrl_async.load_config("ppo_cartpole", [*evaluating, "eval.video=true"])
    run = jaxrl_async.train(config, run_dir=tmp_path / "run")
    # the recording is the evaluation: the numbers of a run without videos
    for key in ("eval_return_mean", "eval_length_mean", "eval_episodes"):
        np.testing.assert_array_equal(run.metrics[key], plain.metrics[key], err_msg=key)
    evaluated = run.metrics["env_steps"][run.metrics["eval_episodes"] > 0]
    videos = [(step, v.image) for step, tag, v in summaries(run.run_dir) if tag == "eval/video"]
    assert [step for step, _ in videos] == list(evaluated) and len(videos) == 2
    for _, image in videos:
        gif = iio.imread(image.encoded_image_string, extension=".gif")  # [frames, H, W, 3]
        assert 1 < gif.shape[0] <= 40 and gif.shape[1:3] == (image.height, image.width)


def test_wandb_sink_logs_the_gif_at_its_env_step(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from jaxrl_async.evaluation.writer import gif_bytes
    from jaxrl_async.run import tracking
    from tests.helpers.wandb_files import offline, offline_runs, read_run

    offline(monkeypatch, tmp_path / "wandb")
    config = jaxrl_async.load_config("ppo_cartpole", ["logger.wandb=true"])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text(config.to_yaml())
    sink = tracking.WandbRun(config.logger, tmp_path / "run", group="g")
    frames = np.zeros((3, 8, 8, 3), np.uint8)
    frames[1, 2:4], frames[2, 5:7] = 255, 255  # three different pictures
    sink.video(256, gif_bytes(frames, 10.0))
    tracking.finish(tmp_path / "run", {})
    [run_file] = offline_runs(tmp_path / "wandb")
    [logged] = [h for h in read_run(run_file)["history"] if "eval/video/path" in h]
    assert logged["env_steps"] == 256 and logged["eval/video/_type"] == "video-file"
    gif = iio.imread(run_file.parent / "files" / logged["eval/video/path"])
    assert gif.shape == (3, 128, 128, 3)  # the frames, enlarged to the smallest side shown


# MuJoCo picks its OpenGL platform when first imported: a fresh interpreter, so that
# `headless_gl` comes before brax imports it.
BRAX_FRAMES = """
import json
from jaxrl_async.evaluation.renderers import headless_gl, renderer_for
headless_gl()
import jax, jax.numpy as jnp, numpy as np
from jaxrl_async import envs
env, params = envs.make("brax:inverted_pendulum")
renderer = renderer_for("brax:inverted_pendulum", env, params)
state = jax.jit(env.reset)(jax.random.key(0), params)[1]
step = jax.jit(lambda s: env.step(jax.random.key(1), s, jnp.ones(1), params)[1])
states = [state]
for _ in range(10):
    states.append(step(states[-1]))
draw = lambda s: renderer.draw(jax.device_get(renderer.select(s, None)))
first, last, again = draw(states[0]), draw(states[-1]), draw(states[0])
print(json.dumps({"shape": first.shape, "dtype": str(first.dtype),
                  "moved": bool((first != last).any()), "same": bool((first == again).all())}))
"""


@pytest.mark.slow
def test_brax_frames_follow_the_state_headless():
    pytest.importorskip("brax")
    out = subprocess.run(
        [sys.executable, "-c", BRAX_FRAMES],
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"shape": [240, 320, 3], "dtype": "uint8", "moved": True, "same": True}
