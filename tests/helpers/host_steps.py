"""Expected `HostStep`s of a host adapter, built from an env's own loop, and the adapter's
steps over a run of actions, for the step-by-step tests of the Atari and EnvPool adapters."""

import numpy as np

from jaxrl_async.host import HostStep

FIELDS = HostStep._fields


class Expected:
    """One env's expected HostSteps, row by row from its own loop; with `atari` = (clip,
    episodic), what the adapter's Atari layer adds, applied by hand: frames channels last,
    the sign of each reward, a life lost (fewer `lives` than the last row's, the game
    playing on) as a termination. Reported episodes stay whole games with raw scores."""

    def __init__(self, atari=None, lives=None):
        self.atari, self.lives = atari, lives
        self.score, self.length = 0.0, 0

    def row(self, obs, reward, terminated, truncated, final, lives=None, valid=True):
        done = bool(terminated or truncated)
        self.score, self.length = self.score + reward, self.length + int(valid)
        if self.atari is not None:
            clip, episodic = self.atari
            lost = valid and not done and lives < self.lives
            self.lives = lives
            obs, final = np.moveaxis(obs, 0, -1), np.moveaxis(final, 0, -1)
            reward = np.sign(reward) if clip else reward
            terminated = terminated or (episodic and lost)
        step = HostStep(
            obs=obs,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            final_obs=final,
            valid=valid,
            episode_return=self.score if done else 0.0,
            episode_length=self.length if done else 0,
            episode_done=done,
        )
        if done:
            self.score, self.length = 0.0, 0
        return step


def run_adapter(env, seed, actions):
    """(first obs, HostStep of arrays [T, B, ...]) of the adapter over `actions` [T, B]."""
    first = env.reset(seed)
    steps = [env.step(a) for a in actions]
    return first, HostStep(*(np.stack([getattr(s, f) for s in steps]) for f in FIELDS))


def assert_matches(got, ref):
    """`run_adapter`'s result equals the reference's (first obs, rows [T][B] of HostStep)."""
    (first, step), (ref_first, rows) = got, ref
    np.testing.assert_array_equal(first, ref_first.astype(first.dtype), err_msg="first obs")
    for name in FIELDS:
        want = np.array([[getattr(r, name) for r in row] for row in rows])
        have = getattr(step, name)
        assert have.shape == want.shape, (name, have.shape, want.shape)
        np.testing.assert_array_equal(have, want.astype(have.dtype), err_msg=name)
