"""Fixed-length sequences of a recurrent actor's steps: what R2D2's replay stores.

R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed
Reinforcement Learning") replays sequences of L consecutive steps of one env with the
carry the actor held before the first of them ("stored state"); consecutive sequences of
an env overlap by `overlap` steps, so they start every stride = L - overlap steps.

The replay stage (stage.py) keeps a window of the previous rollout [T, B] behind the
last L - stride steps of the one before, and cuts the window into sequences starting at
0, stride, 2·stride, ... With stride dividing T, every env's sequences start at env steps
0, stride, 2·stride, ... of its stream whatever the tick, each step lies in L / stride
sequences (the first ones fewer), and no sequence is cut short or padded: episode ends
inside a sequence are the flags `episode_start` (the learner resets the carry there, as
the actor did) and `terminated` / `truncated` (its targets stop there).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Sequence(NamedTuple):
    """One replay item, L steps of one env, time first within the item ([L, ...]); a
    sampled batch is [batch, L, ...]. Fields as in `types.Transition`."""

    obs: Any  # [L, ...] raw observations (the pipeline normalises a sampled batch)
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: Any  # [L, ...] the observation after each step, before any auto-reset
    episode_start: jax.Array  # bool [L]: an episode starts at this step (carry reset first)
    carry: Any  # the actor's carry before step 0 (before that step's reset), no time axis


def sequence_starts(window_len: int, length: int, stride: int) -> list[int]:
    """The window positions where sequences start: 0, stride, ... while one fits."""
    return list(range(0, window_len - length + 1, stride))


def window_sequences(window, length: int, stride: int) -> Sequence:
    """The sequences of `window` (a Transition [W, B, ...] with `memory`), [N, B, L, ...],
    N = len(sequence_starts(W, length, stride)), sequence i starting at step i·stride."""
    if window.memory is None:
        raise ValueError("sequence replay needs a recurrent agent (Transition.memory)")
    starts = sequence_starts(window.reward.shape[0], length, stride)

    def cut(x):  # [W, B, ...] -> [N, B, L, ...]
        return jnp.stack([jnp.moveaxis(x[s : s + length], 0, 1) for s in starts])

    cut_tree = lambda tree: jax.tree.map(cut, tree)  # noqa: E731
    carry = jax.tree.map(lambda c: jnp.stack([c[s] for s in starts]), window.memory.carry)
    return Sequence(
        cut_tree(window.obs),
        cut(window.action),
        cut(window.reward),
        cut(window.terminated),
        cut(window.truncated),
        cut_tree(window.next_obs),
        cut(window.memory.episode_start),
        carry,
    )
