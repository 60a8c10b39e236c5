"""Constant delays: every gradient D steps old, ``constant:D``."""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from nqm import validate
from nqm.delays.registry import History, bad, register


@dataclasses.dataclass(frozen=True)
class Constant:
    """``τ_t = D``; ``D + 1`` workers served round robin (``k_t = (t − D) mod (D + 1)``)."""

    delay: int

    @property
    def label(self) -> str:
        return str(self.delay)

    @property
    def workers(self) -> int:
        return self.delay + 1

    @property
    def mean(self) -> float:
        return float(self.delay)

    def pmf(self) -> np.ndarray:
        return np.r_[np.zeros(self.delay), 1.0]

    def schedule(self, seed: int, steps: int):
        t = np.arange(steps, dtype=np.int64)
        return np.full(steps, self.delay, np.int32), ((t - self.delay) % self.workers).astype(np.int32)

    def history(self, delays) -> History:
        # With D + 1 slots, w_{t−D} and w_{t+1} share a slot: the ring is the round-robin workers'
        # snapshots, with no copy of the current weights.
        return History(self.delay + 1)


def constant(delay: int) -> Constant:
    """The constant delay process ``τ_t = D`` (:class:`Constant`).

    Args:
      delay: the delay ``D`` in steps, an integer ≥ 0.

    Returns:
      The process (its ``label`` is ``str(D)``).

    Raises:
      NqmError: ``delay`` is not an integer in range.

    Examples:
      >>> from nqm import delays
      >>> p = delays.constant(2)
      >>> p.label, p.workers, p.pmf().tolist()
      ('2', 3, [0.0, 0.0, 1.0])
      >>> [x.tolist() for x in p.schedule(0, 5)]  # delays, and the round-robin workers
      [[2, 2, 2, 2, 2], [1, 2, 0, 1, 2]]
    """
    return Constant(validate.count(delay, "a constant delay", low=0, high=validate.BOUNDS["delay"]))


@register("constant", syntax="constant:D", help="every gradient D steps old (D + 1 round-robin workers)",
          example="constant:3")
def _parse_constant(rest: str) -> Constant:
    if not re.fullmatch(r"\d+", rest):
        raise bad("constant", rest)
    return constant(int(rest))
