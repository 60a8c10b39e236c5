"""Recording: what a recorder sees of a step, the summary kinds kept on the device, and the traced
values of a chunk.

A recorder maps a :class:`StepView` (one step of one cell) to an array. It is either *traced*
(every ``stride`` steps, into the chunk's trace and then the host's arrays) or kept as a running
:class:`Summary`, whose memory does not grow with the number of steps. Summary kinds are small
classes with their own zeros, update and finalisation; :data:`KINDS` lists them by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nqm.optimizers.base import Optimizer, StepContext


class StepView(NamedTuple):
    """What a recorder sees of one step of one cell: ``w_t``, the state before, the gradient and
    its context, the velocity the step continues (zeros for families without one), after, and the
    optimizer itself; ``average``: ŵ_{t+1} where the run averages its iterates (else ``None``)."""

    model: Any
    hyper: Any
    ctx: StepContext
    w: Any
    state: Any
    velocity: Any
    g: Any
    w_next: Any
    state_next: Any
    info: dict
    optimizer: Optimizer
    average: Any = None


def judged(view: StepView):
    """The weights the target is read on after the step: ŵ_{t+1} where the run averages, else ``w_{t+1}``."""
    return view.w_next if view.average is None else view.average


def loss(view: StepView):
    """``L(w_{t+1})`` (``L(ŵ_{t+1})`` where the run averages), the loss the engine judges a step by (a recorder).

    Args:
      view: one step of one cell.

    Returns:
      A scalar.
    """
    return view.model.loss(judged(view))


def raw_loss(view: StepView):
    """``L(w_{t+1})``, the raw iterate's loss also where the run averages (a recorder).

    Args:
      view: one step of one cell.

    Returns:
      A scalar.
    """
    return view.model.loss(view.w_next)


@dataclasses.dataclass(frozen=True)
class Exceeds:
    """Whether a step leaves the loss at or above ``target`` (a hashable recorder: compiled once)."""

    target: float

    def __call__(self, view: StepView):
        return view.model.loss(judged(view)) >= self.target


def view(model, optimizer: Optimizer, hyper, ctx: StepContext, w, state, g, stepped=None, average=None) -> StepView:
    """Describe one step of ``optimizer`` (taking it, unless its ``(w_next, state_next, info)`` are
    given as ``stepped``; ``average``: ŵ_{t+1} where the run averages)."""
    w_next, state_next, info = optimizer.step(hyper, state, w, g, ctx) if stepped is None else stepped
    velocity = jnp.zeros_like(ctx.stale) if optimizer.velocity is None else optimizer.velocity(state, ctx)
    return StepView(model, hyper, ctx, w, state, velocity, g, w_next, state_next, info, optimizer, average)


def first_view(model, optimizer: Optimizer, w) -> StepView:
    """The first step from ``w`` (hyperparameters set to ``w[0]``: only shapes and dtypes matter).
    Traced abstractly (``jax.eval_shape``), it is the one place where the engine checks a
    configuration against a problem and learns what recorders return."""
    hyper = optimizer.hyper(*(w[0] for _ in optimizer.hyper._fields))
    ctx = StepContext(jnp.int32(0), jnp.int32(0), jnp.int32(0), w)
    return view(model, optimizer, hyper, ctx, w, optimizer.init(w), w)


@dataclasses.dataclass(frozen=True)
class Summary:
    """A recorder kept as a running summary of ``value(view)`` over a cell's steps.

    ``value`` must be a module-level function (or another stable, hashable object), so that the
    same recorder never compiles twice. Subclasses say how to start, update and finish."""

    value: Callable[[StepView], Any]
    long_name: str = ""

    def zeros(self, like) -> np.ndarray:
        """The running total before any step (an array, or a tuple of arrays); ``like`` has one
        step's value's shape and dtype."""
        return np.zeros(like.shape, like.dtype)

    def update(self, total, x, t):
        return total + x

    def result(self, total, steps):
        """The summary of a cell that ran ``steps`` steps, from its total (host arrays)."""
        return total

    def shape(self, like) -> tuple:
        """The shape of one cell's result."""
        return self.zeros(like).shape


def _per_step(total, steps):
    return total / np.maximum(steps, 1).reshape((-1,) + (1,) * (total.ndim - 1))


@dataclasses.dataclass(frozen=True)
class Mean(Summary):
    """The mean of ``value`` over the cell's steps."""

    def result(self, total, steps):
        return _per_step(total, steps)


@dataclasses.dataclass(frozen=True)
class GeometricMean(Summary):
    """``exp`` of the mean of ``log value`` over the cell's steps (e.g. a relative energy decay),
    over the steps before the first one with a value that is not finite (a run that diverges):
    its total is the sum of logs and the number of steps it covers."""

    def zeros(self, like):
        return np.zeros(like.shape, like.dtype), np.zeros((), np.int32)

    def update(self, total, x, t):
        logs, covered = total
        counts = (covered == t) & jnp.all(jnp.isfinite(x))  # every step so far, and this one, finite
        return logs + jnp.where(counts, jnp.log(x), 0), covered + counts

    def result(self, total, steps):
        logs, covered = total
        mean = np.exp(_per_step(logs, covered))
        return np.where(np.reshape(covered, (-1,) + (1,) * (mean.ndim - 1)) > 0, mean, np.nan)

    def shape(self, like) -> tuple:
        return like.shape


@dataclasses.dataclass(frozen=True)
class Histogram(Summary):
    """Counts of ``value``'s elements in the bins ``(−∞, e₀), [e₀, e₁), …, [e_last, ∞)`` of ``edges``
    (a dimension ``dim`` of a result, whose coordinate is each bin's left edge)."""

    edges: tuple = ()
    dim: str = "bin"

    @property
    def coordinate(self) -> np.ndarray:
        return np.r_[-np.inf, self.edges]

    def zeros(self, like):
        return np.zeros(len(self.edges) + 1, np.int32)

    def update(self, total, x, t):
        bins = jnp.searchsorted(jnp.asarray(self.edges, x.dtype), jnp.ravel(x), side="right")
        return total.at[bins].add(1)


@dataclasses.dataclass(frozen=True)
class First(Summary):
    """The first step ``t + 1`` at which ``value`` is true (0: never)."""

    def zeros(self, like):
        return np.zeros((), np.int32)

    def update(self, total, x, t):
        return jnp.where((total == 0) & x, t + 1, total)


@dataclasses.dataclass(frozen=True)
class Last(Summary):
    """The last step ``t + 1`` at which ``value`` is true (0: never)."""

    def zeros(self, like):
        return np.zeros((), np.int32)

    def update(self, total, x, t):
        return jnp.where(x, t + 1, total)


KINDS = {"mean": Mean, "geometric_mean": GeometricMean, "histogram": Histogram, "first": First, "last": Last}


def value_shapes(model, optimizer: Optimizer, w0, record: tuple, summaries: tuple) -> tuple[dict, dict]:
    """Shape and dtype of one step's value of each traced and each summarised recorder."""
    if not (record or summaries):
        return {}, {}

    def values(w):
        step = first_view(model, optimizer, w)
        return ({name: jnp.asarray(fn(step)) for name, fn in record},
                {name: jnp.asarray(s.value(step)) for name, s in summaries})

    return jax.eval_shape(values, w0)


def traced(stride: int, trace: dict, values: dict, t0, k) -> dict:
    """Write step ``t0 + k``'s values into the chunk's trace when ``t0 + k + 1`` is a multiple of
    the stride (entry ``(t0 + k + 1) // stride − 1 − t0 // stride``)."""
    if stride == 1:
        return {n: jax.lax.dynamic_update_index_in_dim(trace[n], values[n], k, 1) for n in values}
    t = t0 + k
    row = (t + 1) // stride - 1 - t0 // stride
    due = (t + 1) % stride == 0
    out = {}
    for n, value in values.items():
        old = jax.lax.dynamic_index_in_dim(trace[n], jnp.maximum(row, 0), 1, keepdims=False)
        out[n] = jax.lax.dynamic_update_index_in_dim(trace[n], jnp.where(due, value, old), jnp.maximum(row, 0), 1)
    return out
