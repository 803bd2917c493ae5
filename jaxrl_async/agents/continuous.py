"""What the continuous-control agents on replay (SAC, TD3) share: the env's action box,
the replay batch, per-sample noise, and the twin critics with their clipped double-Q
target (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic
Methods"; Haarnoja et al. 2018 use the same pair in SAC).

Actions: the policies act in (-1, 1)^A, mapped affinely onto the env's bounds
(`ActionBox`); the critics, and any noise scale an agent sets, live in that (-1, 1)
space, so none of them depends on the env's units. Stored env actions are mapped back
before the critics see them (`replay_batch`).
"""

from __future__ import annotations

from typing import NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl_async.errors import ConfigError
from jaxrl_async.nn.networks import QEnsemble

NUM_CRITICS = 2


class ActionBox(NamedTuple):
    """The env's bounds [A] and the affine map between them and (-1, 1)^A."""

    low: np.ndarray
    high: np.ndarray
    center: jax.Array
    half: jax.Array
    dtype: np.dtype

    @property
    def dim(self) -> int:
        return self.low.shape[0]

    def to_env(self, unit):
        """(-1, 1)^A onto the env's bounds (clipped: float rounding at the edges)."""
        return jnp.clip(self.center + self.half * unit, self.low, self.high).astype(self.dtype)

    def from_env(self, action):
        """An env action back into (-1, 1)^A, float32."""
        return (action.astype(jnp.float32) - self.center) / self.half


def action_box(spec, algo: str) -> ActionBox:
    """The ActionBox of `spec` (envs.EnvSpec); a ConfigError naming `algo` unless the
    actions are one finite, non-empty box."""
    if spec.discrete:
        raise ConfigError(
            f"{algo} needs continuous actions; this env's are discrete ({spec.num_actions} actions)"
        )
    if len(spec.action_shape) != 1:
        raise ConfigError(f"{algo} needs a vector action, got shape {spec.action_shape}")
    low = np.asarray(spec.action_low, np.float32)
    high = np.asarray(spec.action_high, np.float32)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
        raise ConfigError(
            f"{algo} squashes actions into the env's bounds, which must be "
            f"finite with low < high (got low={low.tolist()}, "
            f"high={high.tolist()})"
        )
    return ActionBox(
        low, high, jnp.asarray((high + low) / 2), jnp.asarray((high - low) / 2), spec.action_dtype
    )


def make_critics(config) -> QEnsemble:
    """The twin critics Q_i(x, a) -> [NUM_CRITICS, B], on the config's torso."""
    return QEnsemble(NUM_CRITICS, config.torso_spec())


def replay_batch(sample, box: ActionBox) -> dict:
    """A replay Sample of [b] NStepTransition items as the critics' float32 batch, the
    actions in (-1, 1)^A."""
    items = sample.items
    return {
        "obs": items.obs,
        "next_obs": items.next_obs,
        "action": box.from_env(items.action),
        "reward": items.reward.astype(jnp.float32),
        "discount": items.discount.astype(jnp.float32),
        "weights": sample.weights.astype(jnp.float32),
    }


def sample_keys(key, batch: int, axis_name: str | None):
    """One key per sample [batch]: `key` folded with the sample's position in the batch
    over all devices, so a sample's draws do not depend on how the batch is split."""
    first = 0 if axis_name is None else jax.lax.axis_index(axis_name) * batch
    return jax.vmap(jax.random.fold_in, (None, 0))(key, first + jnp.arange(batch))


def standard_normal_rows(keys, width: int):
    """float32 [B, width]: the draws `distributions.gaussian_sample` makes with keys [B],
    computed once into their own buffer. Left to XLA, the random bits and their
    transform to normals fuse into every consumer and are recomputed in each (the
    forward pass and the log-density's gradient), a visible share of a SAC update."""
    noise = jax.vmap(lambda k: jax.random.normal(k, (width,), jnp.float32))(keys)
    # max(x, -inf) = x exactly. XLA never fuses a reduction into its consumers (an
    # optimization_barrier is expanded before fusion on CPU and did not hold).
    return jnp.stack([noise, jnp.full_like(noise, -jnp.inf)]).max(axis=0)


def twin_min_target(
    critic: QEnsemble, target_critic, batch: dict, next_action, reward_scale, bonus=None
):
    """The clipped double-Q target [b], without gradient:
    reward_scale · r + d · (min_i Q'_i(x', a') - bonus), Q' the target critics; `bonus`
    [b] is SAC's α log π(a'|x') (None: TD3's, nothing)."""
    next_qs = cast(jax.Array, critic.apply(target_critic, batch["next_obs"], next_action))
    next_q = jnp.min(next_qs, axis=0)
    if bonus is not None:
        next_q = next_q - bonus
    return jax.lax.stop_gradient(reward_scale * batch["reward"] + batch["discount"] * next_q)


def critic_td_loss(critic: QEnsemble, params, batch: dict, target):
    """(loss, td [NUM_CRITICS, b], q [NUM_CRITICS, b]): the importance-weighted
    Σ_i mean(w · (Q_i(x, a) - y)^2) / 2 over the sampled actions."""
    q = critic.apply(params, batch["obs"], batch["action"])
    td = q - target
    loss = 0.5 * jnp.sum(jnp.mean(batch["weights"] * jnp.square(td), axis=-1))
    return loss, td, q


def td_priorities(td):
    """The new priority of each sample [b]: |TD| averaged over the critics."""
    return jnp.mean(jnp.abs(td), axis=0)
