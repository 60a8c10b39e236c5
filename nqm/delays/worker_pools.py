"""Worker pools: ``workers:K[:slow=F:S]``, K workers with exponential compute times, each gradient
as old as the updates since its worker fetched the weights."""

from __future__ import annotations

import dataclasses
import functools
import heapq
import re

import numpy as np

from nqm import validate
from nqm.delays.registry import STREAM, History, bad, register
from nqm.errors import NqmError


@dataclasses.dataclass(frozen=True)
class Workers:
    """A parameter server with ``count`` workers whose compute times are exponential (mean 1; a
    fraction ``slow_fraction`` of them ``slowdown`` times slower). All start on ``w_0``; the server
    applies gradients in arrival order, and the worker that delivered at step ``t`` fetches
    ``w_{t+1}``. Its delays are unbounded in principle, but the engine keeps only what each worker
    fetched (``count`` snapshots), never a ring as deep as the longest delay."""

    count: int
    slow_fraction: float = 0.0
    slowdown: float = 1.0

    @property
    def label(self) -> str:
        slow = f":slow={self.slow_fraction:g}:{self.slowdown:g}" if self.slow_fraction else ""
        return f"workers:{self.count}{slow}"

    @property
    def workers(self) -> int:
        return self.count

    @property
    def mean(self) -> float:
        """The long-run mean delay: ``K − 1`` (each step, the K − 1 other workers are in flight)."""
        return float(self.count - 1)

    def pmf(self) -> None:
        return None  # delays of a pool are not independent

    def mean_times(self) -> np.ndarray:
        """Mean compute time of each worker (the slow ones first)."""
        times = np.ones(self.count)
        times[: int(round(self.slow_fraction * self.count))] = self.slowdown
        return times

    def schedule(self, seed: int, steps: int):
        return _worker_schedule(self, int(seed), int(steps))

    def history(self, delays) -> History:
        return History(self.count, by_worker=True)


@functools.lru_cache(maxsize=16)
def _worker_schedule(pool: Workers, seed: int, steps: int):
    means = pool.mean_times()
    k = pool.count
    draws = np.random.default_rng([STREAM, seed]).standard_exponential(k + steps)
    arrivals = [(draws[j] * means[j], j) for j in range(k)]
    heapq.heapify(arrivals)
    fetched = [0] * k
    delay, worker = np.empty(steps, np.int32), np.empty(steps, np.int32)
    for t in range(steps):
        time, j = heapq.heappop(arrivals)
        delay[t], worker[t] = t - fetched[j], j
        fetched[j] = t + 1
        heapq.heappush(arrivals, (time + draws[k + t] * means[j], j))
    delay.flags.writeable = worker.flags.writeable = False
    return delay, worker


def workers(count: int, slow_fraction: float = 0.0, slowdown: float = 1.0) -> Workers:
    """A pool of worker processes (:class:`Workers`), checked.

    Args:
      count: the number of workers ``K`` ≥ 1.
      slow_fraction: the fraction of them that are slow, in [0, 1].
      slowdown: how many times longer a slow worker's mean compute time is (> 0).

    Returns:
      The process, whose delays come from the workers' event order.

    Raises:
      NqmError: any of them out of range.

    Examples:
      Four workers, one of them four times slower; a pool has no pmf (its delays are not iid):

      >>> from nqm import delays
      >>> pool = delays.workers(4, slow_fraction=0.25, slowdown=4)
      >>> pool.label, pool.workers, pool.pmf()
      ('workers:4:slow=0.25:4', 4, None)
      >>> delay, worker = pool.schedule(0, 8)
      >>> delay.tolist(), worker.tolist()
      ([0, 0, 0, 3, 0, 0, 0, 7], [3, 3, 3, 2, 2, 2, 2, 0])
    """
    count = validate.count(count, "the number of workers", low=1, high=validate.BOUNDS["workers"])
    if not 0 <= slow_fraction <= 1:
        raise NqmError(f"the fraction of slow workers must be in [0, 1], got {slow_fraction}")
    if not (np.isfinite(slowdown) and slowdown > 0):
        raise NqmError(f"the slowdown of slow workers must be a finite number > 0, got {slowdown}")
    return Workers(count, float(slow_fraction), float(slowdown))


@register("workers", syntax="workers:K[:slow=F:S]", help="a pool of K exponential workers, a fraction F of them "
          "S times slower, gradients applied in arrival order", example="workers:4:slow=0.25:4")
def _parse_workers(rest: str) -> Workers:
    match = re.fullmatch(r"(\d+)(?::slow=([0-9.eE+-]+):([0-9.eE+-]+))?", rest)
    if not match:
        raise bad("workers", rest)
    k, f, s = match.groups()
    try:
        fraction, slowdown = float(f or 0), float(s or 1)
    except ValueError:
        raise bad("workers", rest) from None
    return workers(int(k), fraction, slowdown)

