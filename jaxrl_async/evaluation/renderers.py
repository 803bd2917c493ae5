"""How each env family turns one step of an evaluation into an RGB frame.

A `Renderer` has two halves. `select(env_state, obs)` runs inside the recording program
(traced, per env, vmapped there): it keeps only what a frame needs, or draws it in JAX
where the suite's renderer is JAX (navix, Craftax). `draw(selected)` runs on the host
on one step's selection, as numpy, and returns the frame [H, W, 3] uint8. Nothing of
this runs while training.

Rendered: gymnax classic control (Gymnasium's classic-control drawing, through gymnax's
state mapping), MinAtar and bsuite's Catch and DeepSea (their observation grids), navix
(its RGB observation), XLand-MiniGrid (its RGB renderer), Craftax (its pixel renderer)
and Brax (MuJoCo's renderer, headless through EGL). Anything else is refused in one line.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from jaxrl_async.errors import ConfigError, UserError, first_line

GRID_ENVS = ("Catch-bsuite", "DeepSea-bsuite")  # besides MinAtar: observations are grids
SUITES = ("navix", "xminigrid", "craftax", "brax")
CELL = 16  # pixels a side of a grid cell


class Renderer(NamedTuple):
    select: Callable  # (env_state, obs) of one env -> pytree, traced
    draw: Callable  # that pytree of one step, numpy -> uint8 [H, W, 3]
    fps: float  # frames a second of the video


def renderer_for(name: str, env, env_params) -> Renderer:
    """The renderer of env `name` (a config's env.name) built as `env`, `env_params`; a
    one-line ConfigError for an env no renderer draws."""
    suite, _, env_id = name.partition(":")
    if env_id and suite in SUITES:
        return _SUITE_RENDERERS[suite](env_id, env, env_params)
    if name.endswith("-MinAtar") or name in GRID_ENVS:
        return Renderer(lambda state, obs: obs, draw_grid, 10.0)
    if name in CLASSIC:
        return _classic(name, env_params)
    raise ConfigError(
        f"env {name} cannot be rendered: videos draw gymnax classic control "
        f"({', '.join(CLASSIC)}), MinAtar, {', '.join(GRID_ENVS)}, navix, XLand-MiniGrid, "
        "Craftax, Brax and gymnasium: envs"
    )


CLASSIC = ("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")


def _classic(name: str, env_params) -> Renderer:
    """Gymnasium's classic-control drawing of a gymnax state, as gymnax's own visualizer
    maps it (`gymnax.visualize.vis_gym`), with one Gymnasium env kept for every frame."""
    try:
        quiet_pygame()
        import gymnasium
        from gymnax.visualize import vis_gym
    except ImportError as e:
        raise UserError(
            f"rendering {name} needs gymnasium and pygame ({e.name} is missing): "
            "pip install 'jaxrl_async[video]'"
        ) from None
    gym_env = gymnasium.make(name, render_mode="rgb_array")
    try:
        gym_env.reset(seed=0)
    except gymnasium.error.DependencyNotInstalled as e:
        raise UserError(f"rendering {name}: {first_line(e)}") from None
    unwrapped: Any = gym_env.unwrapped
    vis_gym.set_gym_params(unwrapped, name, env_params)

    def draw(state) -> np.ndarray:
        unwrapped.state = vis_gym.get_gym_state(state, name)
        if hasattr(state, "last_u"):  # Pendulum draws the last torque
            unwrapped.last_u = np.asarray(state.last_u, np.float64)
        return _half(np.asarray(gym_env.render()))  # 300 x 200

    return Renderer(lambda state, obs: state, draw, 1 / float(_step_seconds(env_params)))


def _half(frame: np.ndarray) -> np.ndarray:
    """`frame` at half its size, each pixel the mean of a 2 x 2 block: one-pixel lines
    (CartPole's track) stay, greyed, where dropping every other row would lose them."""
    h, w = frame.shape[0] // 2 * 2, frame.shape[1] // 2 * 2
    blocks = frame[:h, :w, :3].reshape(h // 2, 2, w // 2, 2, 3).astype(np.float32)
    return blocks.mean(axis=(1, 3)).round().astype(np.uint8)


def quiet_pygame() -> None:
    """Import pygame to draw off screen: without these settings it greets on stdout,
    opens a sound device and looks for a display, and its font module warns about
    pkg_resources. Gymnasium's classic-control envs draw with it."""
    for key in ("SDL_AUDIODRIVER", "SDL_VIDEODRIVER"):
        os.environ.setdefault(key, "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        import pygame.pkgdata  # noqa: F401


def _step_seconds(env_params) -> float:
    for field in ("tau", "dt"):
        if hasattr(env_params, field):
            return min(float(getattr(env_params, field)), 0.1)
    return 1 / 30


def _palette(n: int) -> np.ndarray:
    """n + 1 colours [n + 1, 3] uint8: black for an empty cell, then n distinct hues."""
    import matplotlib

    listed = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    colours = listed(np.arange(n) % listed.N)[:, :3]
    return np.concatenate([np.zeros((1, 3)), colours * 255]).astype(np.uint8)


def draw_grid(obs) -> np.ndarray:
    """An observation grid as a frame, CELL pixels a cell: [H, W, C] channels (MinAtar's
    objects) coloured by the last channel set in a cell, [H, W] values as greys."""
    obs = np.asarray(obs, np.float32)
    if obs.ndim == 3:
        channels = obs.shape[-1]
        top = np.where(obs.max(-1) > 0, channels - np.argmax(obs[..., ::-1] > 0, axis=-1), 0)
        image = _palette(channels)[top]
    else:
        grey = np.clip(obs / max(float(obs.max()), 1e-6), 0, 1)
        image = np.repeat((grey * 255).astype(np.uint8)[..., None], 3, axis=-1)
    return image.repeat(CELL, axis=0).repeat(CELL, axis=1)


def _navix(env_id: str, env, env_params) -> Renderer:
    """navix's fully observed RGB image of the state, drawn in JAX from its sprite cache."""
    import jax.numpy as jnp
    import navix

    def select(timestep, obs):
        return jnp.asarray(navix.observations.rgb(timestep.state), jnp.uint8)

    return Renderer(select, np.asarray, 5.0)


def _xminigrid(env_id: str, env, env_params) -> Renderer:
    """XLand-MiniGrid's RGB renderer (numpy, on the host) of the grid and the agent."""
    from xminigrid.rendering.rgb_render import render

    def select(timestep, obs):
        return timestep.state.grid, timestep.state.agent

    def draw(selected) -> np.ndarray:
        grid, agent = selected
        return render(np.asarray(grid), agent, int(env_params.view_size), tile_size=16)

    return Renderer(select, draw, 5.0)


def _craftax(env_id: str, env, env_params) -> Renderer:
    """Craftax's pixel renderer (JAX) at its image block size, in the recording program."""
    import jax.numpy as jnp

    if "Classic" in env_id:
        from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_IMG
        from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
    else:
        from craftax.craftax.constants import BLOCK_PIXEL_SIZE_IMG
        from craftax.craftax.renderer import make_craftax_pixel_renderer
    pixels = make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_IMG)

    def select(state, obs):
        return jnp.clip(pixels(state), 0, 255).astype(jnp.uint8)

    return Renderer(select, np.asarray, 10.0)


def headless_gl() -> None:
    """Choose EGL for MuJoCo's renderer unless MUJOCO_GL says otherwise: MuJoCo reads the
    variable once, when first imported, and its default (GLFW) needs a display."""
    if "mujoco" not in sys.modules:
        os.environ.setdefault("MUJOCO_GL", "egl")


def _brax(env_id: str, env, env_params) -> Renderer:
    """MuJoCo's renderer of the Brax system at each step's joint positions and velocities."""
    headless_gl()
    import mujoco  # type: ignore[import-untyped]

    model = env.env.sys.mj_model
    try:
        renderer = mujoco.Renderer(model, height=240, width=320)
    except Exception as e:  # noqa: BLE001  (no OpenGL: MuJoCo raises several kinds)
        raise UserError(
            f"cannot render brax:{env_id}: MuJoCo has no OpenGL context "
            f"(MUJOCO_GL={os.environ.get('MUJOCO_GL', '')!r}; EGL or OSMesa needed): "
            f"{type(e).__name__}: {first_line(e)}"
        ) from None
    data = mujoco.MjData(model)

    def select(state, obs):
        return state.env_state.pipeline_state.q, state.env_state.pipeline_state.qd

    def draw(selected) -> np.ndarray:
        data.qpos, data.qvel = selected
        mujoco.mj_forward(model, data)
        renderer.update_scene(data, camera=-1)
        return renderer.render()

    return Renderer(select, draw, 1 / float(env.env.dt))


_SUITE_RENDERERS: dict[str, Callable[..., Renderer]] = {
    "navix": _navix,
    "xminigrid": _xminigrid,
    "craftax": _craftax,
    "brax": _brax,
}
