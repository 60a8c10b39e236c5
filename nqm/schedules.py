"""Learning-rate schedules, and the domain of iterate averaging's rate: two choices of Zhang et al.
(2019) that an entry point checks once, before any work.

A schedule multiplies the swept learning rate by a factor ``f(t)`` of the step ``t`` (0-based: the
step that makes ``w_{t+1}``), so a cell steps with ``η_t = lr · f(t)``. Built in, by spec:

    constant       f(t) = 1                                   (the default: no schedule)
    step:S:R       f(t) = 1 for t < S, R from step S on      (S >= 1, R > 0)
    warmup:S       f(t) = min(t, S) / S                       (linear from 0 to 1 over S steps)
    cosine:S       f(t) = (1 + cos(π min(t, S) / S)) / 2      (half a cosine to 0 at step S)

(warmup and cosine as optax's ``linear_schedule(0, 1, S)`` and ``cosine_decay_schedule(1, S)``).
At the API any callable ``f(count)`` with ``f(0) = 1`` — an optax schedule with ``init_value`` 1 —
is one too, one per run. A schedule's **regime** is where it ends: its last breakpoint (the first
step from which ``f`` is constant for good) and that final factor; the settled test judges a run
there (docs/conventions.md).

Iterate averaging keeps ``ŵ_{t+1} = γ ŵ_t + (1 − γ) w_{t+1}`` (``ŵ₀ = w₀``) beside the run and reads
the target on ŵ; its rate γ lies in :data:`EMA` (γ = 0: ŵ = w). Numpy only: the engine evaluates
a schedule with ``jax.numpy`` through the same :meth:`Schedule.factor`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Any, Callable

import numpy as np

from nqm.errors import NqmError
from nqm.validate import MAX_STEPS, Domain

EMA = Domain("an averaging rate γ in [0, 1)", 0.0, 1.0, closed_high=False)
SYNTAX = "constant, step:S:R (× R from step S on), warmup:S (linear from 0 to 1 over S steps) or cosine:S " \
         "(half a cosine to 0 at step S); S an integer >= 1, R a number > 0"
KINDS = ("constant", "step", "warmup", "cosine")
SAMPLES = 2**20  # steps of a custom schedule evaluated at once on the host


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule (module docstring); make one with :func:`schedule`.

    Attributes:
      kind: ``"constant"``, ``"step"``, ``"warmup"``, ``"cosine"`` or ``"custom"`` (a callable).
      steps: S (0 for constant and custom).
      rate: R of ``step`` (1 otherwise).
      function: a custom schedule's callable (compared by identity: the engine compiles it in).
      label: its spec, the ``schedule`` coordinate of a result.
    """

    kind: str
    steps: int = 0
    rate: float = 1.0
    function: Callable | None = None
    label: str = "constant"

    @property
    def constant(self) -> bool:
        """Whether ``f`` is 1 at every step (the run is the run without a schedule, bit for bit)."""
        return self.kind == "constant"

    @property
    def piecewise_constant(self) -> bool:
        """Whether ``f`` changes only at breakpoints (constant, step)."""
        return self.kind in ("constant", "step")

    def factor(self, t, xp=np):
        """``f(t)`` at the integer steps ``t`` (an array or a scalar), with the array module ``xp``
        (numpy, or ``jax.numpy`` inside the engine's step), float64 under numpy."""
        if self.kind == "custom":
            return xp.asarray(self.function(t))
        t = xp.asarray(t)
        real = t.astype(xp.float64) if xp is np else t.astype(float)
        if self.kind == "constant":
            return xp.ones_like(real)
        if self.kind == "step":
            return xp.where(t >= self.steps, self.rate, 1.0)
        fraction = xp.minimum(real, self.steps) / self.steps
        if self.kind == "warmup":
            return fraction
        return 0.5 * (1.0 + xp.cos(np.pi * fraction))

    def factors(self, start: int, count: int) -> np.ndarray:
        """``f`` at steps ``start … start + count − 1`` on the host (float64)."""
        t = np.arange(start, start + count, dtype=np.int64)
        if self.kind != "custom":
            return np.asarray(self.factor(t), np.float64)
        return _custom_factors(self.function, t)

    def regime(self, horizon: int) -> tuple[int, float]:
        """``(last, final)``: the first step from which ``f`` stays at ``final`` (within ``horizon``
        steps for a custom schedule, which is sampled up to there; a built-in one knows it).

        Args:
          horizon: the last step a run of it may reach.

        Returns:
          The last breakpoint (a step) and the factor from there on.
        """
        if self.kind == "constant":
            return 0, 1.0
        if self.kind != "custom":
            return self.steps, {"step": self.rate, "warmup": 1.0, "cosine": 0.0}[self.kind]
        return _custom_regime(self, int(horizon))

    def identity(self, horizon: int) -> str:
        """What defines the factors of a run of ``horizon`` steps, exactly (a checkpoint compares it):
        the spec, or a custom schedule's factors by digest."""
        if self.kind != "custom":
            return self.label
        digest = hashlib.sha256()
        for start in range(0, int(horizon), SAMPLES):
            digest.update(self.factors(start, min(SAMPLES, int(horizon) - start)).tobytes())
        return f"{self.label}:{digest.hexdigest()[:16]}"


@functools.lru_cache(maxsize=32)
def _custom_regime(schedule: Schedule, horizon: int) -> tuple[int, float]:
    last, previous = 0, None
    for start in range(0, horizon + 1, SAMPLES):
        f = schedule.factors(start, min(SAMPLES, horizon + 1 - start))
        joined, offset = (f, start) if previous is None else (np.concatenate([[previous], f]), start - 1)
        changes = np.flatnonzero(joined[1:] != joined[:-1])  # a change at j: f differs between steps j and j + 1
        if changes.size:
            last = offset + int(changes[-1]) + 1
        previous = f[-1]
    return last, float(previous)


def _custom_factors(function, t: np.ndarray) -> np.ndarray:
    try:
        f = np.asarray(function(t), np.float64)
    except Exception as exc:  # noqa: BLE001 - a user's callable: say what it did, in one line
        raise NqmError(f"the schedule could not be evaluated at an array of steps ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else 'no message'}); give a function of the step count "
                       "such as an optax schedule") from None
    f = np.broadcast_to(f, t.shape) if f.ndim == 0 else f
    if f.shape != t.shape or not np.all(np.isfinite(f)) or np.any(f < 0):
        raise NqmError("a schedule must give one finite factor >= 0 per step (an optax schedule of the step count)")
    return f


def schedule(spec) -> Schedule:
    """The schedule of ``spec``: a spec string (module docstring), a :class:`Schedule`, or a
    callable of the step count with ``f(0) = 1`` (an optax schedule with ``init_value`` 1).

    Args:
      spec: the schedule.

    Returns:
      The :class:`Schedule`.

    Raises:
      NqmError: a spec that does not parse, S <= 0, R <= 0, or a callable that is not 1 at step 0,
        in one line.
    """
    if isinstance(spec, Schedule):
        return spec
    if callable(spec):
        first = _custom_factors(spec, np.arange(2))[0]
        if first != 1.0:
            raise NqmError(f"a custom schedule multiplies the swept lr: it must be 1 at step 0 (an optax schedule "
                           f"with init_value=1), got {first:g}")
        name = getattr(spec, "__name__", "schedule")
        return Schedule("custom", function=spec, label=f"custom:{name}")
    if not isinstance(spec, str):
        raise NqmError(f"a schedule is a spec ({SYNTAX}) or an optax schedule, got {spec!r}")
    parts = spec.strip().split(":")
    kind, args = parts[0].strip().lower(), parts[1:]
    arity = {"constant": 0, "step": 2, "warmup": 1, "cosine": 1}
    if kind not in arity or len(args) != arity[kind]:
        raise NqmError(f"schedule {spec!r} does not parse: give {SYNTAX}")
    if kind == "constant":
        return Schedule("constant")
    steps = _number(args[0], spec)
    if not (np.isfinite(steps) and steps == np.round(steps) and 1 <= steps <= MAX_STEPS):
        raise NqmError(f"schedule {spec!r}: S must be an integer step between 1 and {MAX_STEPS:,}, got {args[0]}")
    steps = int(steps)
    if kind != "step":
        return Schedule(kind, steps, label=f"{kind}:{steps}")
    rate = _number(args[1], spec)
    if not (np.isfinite(rate) and rate > 0):
        raise NqmError(f"schedule {spec!r}: R must be a number > 0 (the factor from step S on), got {args[1]}")
    return Schedule("step", steps, float(rate), label=f"step:{steps}:{float(rate):g}")


def _number(text: str, spec: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise NqmError(f"schedule {spec!r} does not parse: {text!r} is not a number; give {SYNTAX}") from None


def coordinate(values) -> tuple[np.ndarray, list]:
    """The ``schedule`` coordinate of a result (the specs' labels) and the schedules: one spec or
    schedule, or a list of specs; a custom callable only alone.

    Args:
      values: the schedule(s).

    Returns:
      ``(labels, schedules)``.

    Raises:
      NqmError: an empty or repeated list, a callable among others, or a spec that does not parse.
    """
    items = list(values) if isinstance(values, (list, tuple, np.ndarray)) else [values]
    if not items:
        raise NqmError(f"schedule is empty: give at least one ({SYNTAX})")
    made = [schedule(v) for v in items]
    if len(made) > 1 and any(s.kind == "custom" for s in made):
        raise NqmError("a custom schedule is one per run: give it alone (a list takes specs such as step:500:0.1)")
    labels = np.array([s.label for s in made])
    if np.unique(labels).size != labels.size:
        raise NqmError("schedule has repeated values: give each once")
    return labels, made


def one(value) -> Schedule | None:
    """The one schedule of a run that takes one (``None``: none given).

    Args:
      value: a spec, a :class:`Schedule`, a callable, or ``None``.

    Returns:
      The schedule, or ``None``.

    Raises:
      NqmError: a list of several, or an invalid schedule.
    """
    if value is None:
        return None
    labels, made = coordinate(value)
    if len(made) != 1:
        raise NqmError("give one schedule here (a spec such as step:500:0.1, or an optax schedule), not a list")
    return made[0]


def engine_schedule(value: Schedule | None) -> Any:
    """What the engine compiles in: ``None`` where the factor is 1 at every step (a run without a
    schedule, bit for bit), else the schedule."""
    return None if value is None or value.constant else value
