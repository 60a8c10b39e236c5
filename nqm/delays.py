"""Delay processes: where each applied gradient comes from, as registered parts.

At step ``t`` the server applies a gradient computed at the weights of iteration ``t − τ_t`` by
worker ``k_t`` (``w_{s<0} = w_0``). A process turns a seed into the whole schedule ``(τ_t, k_t)``
for ``t = 0 … steps − 1``; it is drawn on the host before a run, keyed by the seed alone and drawn
sequentially, so a cell's delays never depend on its grid, batch, chunking, device count or budget
(a longer budget extends the same schedule). Every cell of a run sees the same schedule (common
random delays, like the common noise).

A process is a small frozen object with

* ``label``: its spec string (``process(label)`` gives it back);
* ``mean``: the long-run mean delay;
* ``workers``: how many workers per-worker optimizers (shifted momentum, DANA, OrMo) see;
* ``pmf()``: ``P(τ = k)``, ``k = 0…K``, when the delays are iid (a constant is a one-hot pmf), else
  ``None`` — what the stability analysis and the exact expected dynamics read;
* ``schedule(seed, steps)``: the ``(τ_t, k_t)`` arrays (int32);
* ``history(delays)``: what the engine must keep to serve those delays (:class:`History`): a ring
  of the last ``slots`` weights, or one snapshot per worker — what a worker fetched last, all that
  the hardware keeps, however old it is.

Families are registered with :func:`register` (one parser each, for the text after ``NAME:``); the
syntax help of the CLI and every entry point read this one registry:
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import re
from typing import Callable, NamedTuple, Protocol

import numpy as np

from nqm import validate
from nqm.errors import NqmError
from nqm.pmfs import gaussian_pmf, uniform_pmf, validate_pmf

_STREAM = 0x64656C61  # separates the delay stream from anything else drawn from the same seed


class History(NamedTuple):
    """What the engine keeps per cell to serve a schedule's delays.

    ``by_worker=False``: a ring of the last ``slots`` weights (``w_s`` in slot ``s mod slots``; every
    delay must be below ``slots``). ``by_worker=True``: one snapshot per worker (slot ``k`` holds what
    worker ``k`` fetched last; the current weights are kept apart)."""

    slots: int
    by_worker: bool = False


class Process(Protocol):
    """The interface of a delay process (see the module docstring): ``label``, ``mean``, ``workers``,
    ``pmf()``, ``schedule(seed, steps)`` and ``history(delays)``."""
    label: str
    mean: float
    workers: int

    def pmf(self) -> np.ndarray | None: ...

    def schedule(self, seed: int, steps: int) -> tuple[np.ndarray, np.ndarray]: ...

    def history(self, delays: np.ndarray) -> History: ...


class Family(NamedTuple):
    """A registered family: its name, syntax, one-line help, an example spec (the contract tests run
    it) and ``parse(rest) -> Process`` for the text after ``NAME:``."""

    name: str
    syntax: str
    help: str
    example: str
    parse: Callable[[str], Process]


_FAMILIES: dict[str, Family] = {}


def register(name: str, *, syntax: str, help: str, example: str):
    """Decorator: make ``parse(rest) -> Process`` the parser of specs ``NAME:rest``.

    Args:
      name: the family's name, the ``NAME`` of specs ``NAME:rest``.
      syntax: the spec syntax shown in help and errors (e.g. ``uniform:A:B``).
      help: a one-line description.
      example: a valid spec, run by the contract tests.

    Returns:
      The decorator; it returns the parser unchanged.
    """

    def deco(parse):
        _FAMILIES[name] = Family(name, syntax, help, example, parse)
        return parse

    return deco


def families() -> tuple[Family, ...]:
    """Every registered delay family, in registration order."""
    return tuple(_FAMILIES.values())


def syntax() -> str:
    """The spec syntax of every registered family, for help texts and error messages."""
    return "D, " + ", ".join(f.syntax for f in _FAMILIES.values())


def process(spec) -> Process:
    """A delay process from a process, an integer delay or a spec string (``D`` is ``constant:D``).

    Args:
      spec: a process (returned as it is), an integer delay ``D`` (an integral float too), or a
        spec string ``D`` or ``NAME:rest``.

    Returns:
      The process.

    Raises:
      NqmError: ``spec`` is neither, or names no registered family.

    Examples:
      >>> from nqm import delays
      >>> p = delays.process("uniform:1:4")
      >>> p.label, p.mean, p.workers
      ('uniform:1:4', 2.5, 5)
      >>> p.pmf().tolist()
      [0.0, 0.25, 0.25, 0.25, 0.25]
      >>> delay, worker = p.schedule(0, 8)  # seed 0, the first 8 steps
      >>> delay.tolist()
      [1, 3, 4, 1, 1, 1, 4, 2]
      >>> delays.process(3)
      Constant(delay=3)
    """
    if isinstance(spec, (bool, np.bool_)) or not isinstance(spec, (str, int, float, np.integer, np.floating)):
        if all(hasattr(spec, name) for name in ("label", "schedule", "history")):
            return spec
        raise NqmError(f"delay must be an integer or a spec ({syntax()}), got {spec!r}")
    if isinstance(spec, (int, np.integer)) or (isinstance(spec, (float, np.floating)) and float(spec).is_integer()):
        return constant(int(spec))
    text = str(spec).strip()
    if re.fullmatch(r"\d+", text):
        return constant(int(text))
    name, _, rest = text.partition(":")
    family = _FAMILIES.get(name)
    if family is None or not rest:
        raise NqmError(f"delay process must be {syntax()}, got {spec!r}")
    return family.parse(rest)


def coordinate(values) -> tuple[np.ndarray, list]:
    """The ``delay`` coordinate of a result or a table, and the processes: integers when every delay
    given is a number (a constant), else every process's label (an integer still selects its
    constant there: :class:`nqm.results.DelayIndex`). Empty or repeated delays are errors.

    Args:
      values: one delay or a sequence of them (integers, spec strings or processes).

    Returns:
      ``(coord, processes)``: the coordinate (int array, or array of labels) and one process
      per entry.

    Raises:
      NqmError: no delay, or a process given twice.
    """

    items = list(values) if isinstance(values, (list, tuple, range, np.ndarray)) else [values]
    if not items:
        raise NqmError("delay is empty: give at least one delay (an integer, or a spec such as uniform:1:8)")
    if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in items):
        coord = validate.coordinates(delay=items)["delay"]
        return coord, [constant(int(d)) for d in coord]
    processes = [process(v) for v in items]
    labels = np.array([p.label for p in processes])
    if np.unique(labels).size != labels.size:
        raise NqmError("delay has repeated processes: give each once")
    return labels, processes
def identity(process: Process) -> str:
    """Everything that defines a process's schedule, exactly (a pmf to the last bit), as text: what
    a checkpoint compares to know that it holds the same delays.

    Args:
      process: the delay process.

    Returns:
      Its dataclass repr (type name and fields), else its label.
    """
    if dataclasses.is_dataclass(process):
        return f"{type(process).__name__}{dataclasses.astuple(process)!r}"
    return str(process.label)


def pmf(spec) -> np.ndarray | None:
    """The delay pmf of a process (``None`` when its delays are not iid, e.g. a worker pool).

    Args:
      spec: anything :func:`process` accepts.

    Returns:
      ``P(τ = k)``, ``k = 0…K``, or ``None``.
    """
    return process(spec).pmf()


def _bad(family: str, rest: str):
    return NqmError(f"delay process {family}:{rest} is not of the form {_FAMILIES[family].syntax}")


# --------------------------------------------------------------------------- constant delays


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
        raise _bad("constant", rest)
    return constant(int(rest))


# --------------------------------------------------------------------------- iid delays


@dataclasses.dataclass(frozen=True)
class Iid:
    """``τ_t ~ pmf`` independently. There are no real workers: per-worker methods see
    ``W = max delay + 1`` round-robin workers, ``k_t = (t − τ_t) mod W`` (the worker that would
    have fetched iteration ``t − τ_t``)."""

    probabilities: tuple  # P(τ = k), k = 0..K, normalised, K = the largest delay
    label: str

    @property
    def workers(self) -> int:
        return len(self.probabilities)

    @property
    def mean(self) -> float:
        return float(np.arange(len(self.probabilities)) @ np.asarray(self.probabilities))

    def pmf(self) -> np.ndarray:
        return np.asarray(self.probabilities)

    def schedule(self, seed: int, steps: int):
        u = np.random.default_rng([_STREAM, int(seed)]).random(steps)
        cdf = np.cumsum(self.probabilities)
        delay = np.minimum(np.searchsorted(cdf / cdf[-1], u, side="right"), len(self.probabilities) - 1)
        t = np.arange(steps, dtype=np.int64)
        return delay.astype(np.int32), ((t - delay) % self.workers).astype(np.int32)

    def history(self, delays) -> History:
        # As deep as the largest delay drawn within the budget: no delay ever wraps around it.
        return History(int(np.max(delays, initial=0)) + 1)


def iid(probabilities, label: str | None = None) -> Iid:
    """The iid delay process ``τ_t ~ probabilities`` (:class:`Iid`).

    Args:
      probabilities: the weights of ``P(τ = k)``, ``k = 0…K`` (normalised by :func:`validate_pmf`).
      label: the spec string; default ``pmf:`` followed by the normalised weights.

    Returns:
      The process, drawing ``τ_t`` independently at every step.

    Raises:
      NqmError: the weights are not a valid pmf.

    Examples:
      >>> from nqm import delays
      >>> p = delays.iid([0.5, 0.0, 0.5])
      >>> p.label, p.mean
      ('pmf:0.5,0,0.5', 1.0)
    """
    p = validate_pmf(probabilities)
    return Iid(tuple(float(x) for x in p), label or "pmf:" + ",".join(f"{x:g}" for x in p))


@register("uniform", syntax="uniform:A:B", help="iid, uniform on {A..B}", example="uniform:1:4")
def _parse_uniform(rest: str) -> Iid:
    match = re.fullmatch(r"(\d+):(\d+)", rest)
    if not match:
        raise _bad("uniform", rest)
    return iid(uniform_pmf(*map(int, match.groups())), f"uniform:{rest}")


@register("gaussian", syntax="gaussian:MU", help="iid, N(MU, 1) discretised on 1..2MU", example="gaussian:3")
def _parse_gaussian(rest: str) -> Iid:
    if not re.fullmatch(r"\d+", rest):
        raise _bad("gaussian", rest)
    return iid(gaussian_pmf(int(rest)), f"gaussian:{rest}")


@register("pmf", syntax="pmf:P0,P1,...", help="iid with P(τ = k) = Pk (normalised)", example="pmf:0.5,0,0.5")
def _parse_pmf(rest: str) -> Iid:
    try:
        weights = [float(x) for x in rest.split(",")]
    except ValueError:
        raise _bad("pmf", rest) from None
    return iid(weights, f"pmf:{rest}")


# --------------------------------------------------------------------------- worker pools


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
        raise _bad("workers", rest)
    k, f, s = match.groups()
    try:
        fraction, slowdown = float(f or 0), float(s or 1)
    except ValueError:
        raise _bad("workers", rest) from None
    return workers(int(k), fraction, slowdown)


__doc__ += "\n" + "\n".join(f"* ``{f.syntax}`` — {f.help}." for f in _FAMILIES.values()) + "\n"
