"""Device-resident replay: a uniform ring buffer and proportional prioritized replay.

Both are pure functions over state pytrees (`ring.init/add/sample`,
`prioritized.init/add/sample/update_priorities`); both samples are a
`Sample(items, indices, probabilities, weights)`.
"""

from jaxrl_async.replay import prioritized, ring, sum_tree
from jaxrl_async.replay.prioritized import PrioritizedState
from jaxrl_async.replay.ring import RingState
from jaxrl_async.types import Sample

__all__ = ["PrioritizedState", "RingState", "Sample", "prioritized", "ring", "sum_tree"]
