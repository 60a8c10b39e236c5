"""Delay processes: where each applied gradient comes from.

At step ``t`` the server applies a gradient computed at the weights of iteration ``t − τ_t`` by
worker ``k_t`` (``w_{s<0} = w_0``). A process turns a seed into the whole schedule
``(τ_t, k_t)`` for ``t = 0 … steps − 1``; it is drawn on the host before a run, keyed by the seed
alone and drawn sequentially, so a cell's delays never depend on its grid, batch, chunking, device
count or budget (a longer budget extends the same schedule). Every cell of a run sees the same
schedule (common random delays, like the common noise).

* ``constant(D)`` — ``τ_t = D``; ``D + 1`` workers served round robin (``k_t = (t − D) mod (D + 1)``).
* ``iid(pmf)`` — ``τ_t ~ pmf`` independently (``uniform:A:B``, ``gaussian:MU``, ``pmf:P0,P1,…``).
  There are no real workers: per-worker methods see ``W = max delay + 1`` round-robin workers,
  ``k_t = (t − τ_t) mod W`` (the worker that would have fetched iteration ``t − τ_t``).
* ``workers(K)`` — a parameter server with ``K`` workers whose compute times are exponential (mean
  1; a fraction ``F`` of them, ``slow=F:S``, ``S`` times slower). All start on ``w_0``; the server
  applies gradients in arrival order, and the worker that delivered at step ``t`` fetches ``w_{t+1}``.
  Its delays are unbounded in principle: the engine sizes its weight ring from the largest delay
  the schedule actually holds within the budget, so no delay ever wraps around the ring.

Spec strings (CLI ``--delay-dist``, ``nqm.sweep(delay=...)``): ``D`` or ``constant:D``,
``uniform:A:B``, ``gaussian:MU``, ``pmf:P0,P1,...``, ``workers:K`` or ``workers:K:slow=F:S``.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import re

import numpy as np

from nqm.errors import NqmError

SYNTAX = "D, constant:D, uniform:A:B, gaussian:MU, pmf:P0,P1,... or workers:K[:slow=F:S]"

_STREAM = 0x64656C61  # separates the delay stream from anything else drawn from the same seed


@dataclasses.dataclass(frozen=True)
class Constant:
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

    def schedule(self, seed: int, steps: int):
        t = np.arange(steps, dtype=np.int64)
        return np.full(steps, self.delay, np.int32), ((t - self.delay) % self.workers).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class Iid:
    pmf: tuple  # P(τ = k), k = 0..K, normalised, K = the largest delay
    label: str

    @property
    def workers(self) -> int:
        return len(self.pmf)

    @property
    def mean(self) -> float:
        return float(np.arange(len(self.pmf)) @ np.asarray(self.pmf))

    def schedule(self, seed: int, steps: int):
        u = np.random.default_rng([_STREAM, int(seed)]).random(steps)
        cdf = np.cumsum(self.pmf)
        delay = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), len(self.pmf) - 1)
        t = np.arange(steps, dtype=np.int64)
        return delay.astype(np.int32), ((t - delay) % self.workers).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class Workers:
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

    def mean_times(self) -> np.ndarray:
        """Mean compute time of each worker (the slow ones first)."""
        times = np.ones(self.count)
        times[: int(round(self.slow_fraction * self.count))] = self.slowdown
        return times

    def schedule(self, seed: int, steps: int):
        return _worker_schedule(self, int(seed), int(steps))


@functools.lru_cache(maxsize=16)
def _worker_schedule(process: Workers, seed: int, steps: int):
    means = process.mean_times()
    k = process.count
    draws = np.random.default_rng([_STREAM, seed]).standard_exponential(k + steps)
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


Process = Constant | Iid | Workers


def constant(delay: int) -> Constant:
    return Constant(_count(delay, "a constant delay", low=0))


def iid(pmf, label: str | None = None) -> Iid:
    from nqm.stability import validate_pmf

    p = validate_pmf(pmf)
    return Iid(tuple(float(x) for x in p), label or "pmf:" + ",".join(f"{x:g}" for x in p))


def workers(count: int, slow_fraction: float = 0.0, slowdown: float = 1.0) -> Workers:
    count = _count(count, "the number of workers", low=1)
    if not 0 <= slow_fraction <= 1:
        raise NqmError(f"the fraction of slow workers must be in [0, 1], got {slow_fraction}")
    if not (np.isfinite(slowdown) and slowdown > 0):
        raise NqmError(f"the slowdown of slow workers must be a finite number > 0, got {slowdown}")
    return Workers(count, float(slow_fraction), float(slowdown))


def process(spec) -> Process:
    """A delay process from a process, an integer delay or a spec string (see the module doc)."""
    if isinstance(spec, (Constant, Iid, Workers)):
        return spec
    if isinstance(spec, (int, np.integer)) or (isinstance(spec, float) and float(spec).is_integer()):
        return constant(int(spec))
    text = str(spec).strip()
    if re.fullmatch(r"\d+", text):
        return constant(int(text))
    family, _, rest = text.partition(":")
    try:
        if family == "constant" and re.fullmatch(r"\d+", rest):
            return constant(int(rest))
        if family in ("uniform", "gaussian"):
            from nqm.stability import parse_delay_dist

            return iid(parse_delay_dist(text), text)
        if family == "pmf" and rest:
            return iid([float(x) for x in rest.split(",")], text)
        if family == "workers":
            match = re.fullmatch(r"(\d+)(?::slow=([0-9.eE+-]+):([0-9.eE+-]+))?", rest)
            if match:
                k, f, s = match.groups()
                return workers(int(k), float(f or 0), float(s or 1))
    except ValueError:
        pass
    raise NqmError(f"delay process must be {SYNTAX}, got {spec!r}")


def pmf(process: Process) -> np.ndarray | None:
    """The delay pmf of a constant or iid process (``None`` for a worker pool, whose delays are
    not independent); what :mod:`nqm.stability` analyses."""
    if isinstance(process, Constant):
        return np.r_[np.zeros(process.delay), 1.0]
    return np.asarray(process.pmf) if isinstance(process, Iid) else None


def _count(value, what: str, *, low: int) -> int:
    try:
        ok = float(value) == int(value) and int(value) >= low
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise NqmError(f"{what} must be an integer >= {low}, got {value!r}")
    return int(value)
