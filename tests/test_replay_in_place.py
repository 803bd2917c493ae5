"""The training chunk writes the replay in place: the optimized program copies no
replay-sized array, the prioritized replay's sum-tree leaves included. A copy per tick
of every replay array is silent (same results) and slows small runs severalfold (issue
14); this pins the layout that avoids it."""

import re

import jax
import pytest

import jaxrl_async
from jaxrl_async.pipeline.build import build_pipeline
from jaxrl_async.pipeline.program import compile_chunk

CAPACITY = 3001  # a size no other array in these programs has

CASES = {
    # one env, one step a tick: the store is a one-row dynamic-update-slice
    "sac": (
        "sac_pendulum",
        [
            "env.num_envs=1",
            "agent.updates_per_tick=1",
            "agent.hidden_sizes=[8]",
            "replay.batch_size=16",
        ],
    ),
    "dqn_prioritized": (
        "dqn_cartpole",
        [
            "env.num_envs=1",
            "pipeline.rollout_len=1",
            "agent.updates_per_tick=2",
            "agent.hidden_sizes=[8]",
            "replay.batch_size=16",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.slow
def test_chunk_copies_no_replay_array(case):
    name, overrides = CASES[case]
    config = jaxrl_async.load_config(
        name, overrides + [f"replay.capacity={CAPACITY}", "replay.learning_starts=4"]
    )
    pipeline, _ = build_pipeline(config)
    key = jax.random.key(0, impl=config.prng_impl)
    state = jax.jit(pipeline.init).lower(key).out_info
    hlo = compile_chunk(pipeline.chunk(2), state).as_text()
    assert re.search(rf"\[(1,)?{CAPACITY}[,\]]", hlo), "the replay should be in the program"
    copies = re.findall(rf"= \S*\[(?:1,)?{CAPACITY}[,\]]\S* copy\(", hlo)
    assert not copies, f"{len(copies)} copies of replay arrays in the chunk"
    if config.replay.kind == "prioritized":  # the sum tree's leaves: capacity padded to 2^k
        leaves = 1 << (CAPACITY - 1).bit_length()
        assert re.search(rf"\[(1,)?{leaves}\]", hlo), "the sum tree should be in the program"
        copies = re.findall(rf"= \S*\[(?:1,)?{leaves}\]\S* copy\(", hlo)
        assert not copies, f"{len(copies)} copies of the sum tree's leaves in the chunk"
