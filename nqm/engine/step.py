"""The physics of one step of one cell: the delayed noisy gradient, the optimizer's update, what the
workers keep, and the cell's status.

    g_t     = H w_{t−τ_t} + σ ξ_t,   ξ_t ~ N(0, H)        (w_{−k} = w₀)
    w_{t+1} = optimizer.step(hyper, state, w_t, g_t, ctx_t)
    T       = first t ≥ 1 with L(w_t) < target            (status 1; −1 diverged; 0 budget spent)

The weights a gradient was computed at come from the cell's *history* (:class:`nqm.delays.History`):
a ring of the last ``slots`` weights (``w_s`` in slot ``s mod slots``; with a constant delay D and
D + 1 slots, ``w_{t−D}`` and ``w_{t+1}`` share a slot), or one snapshot per worker (slot ``k_t`` is
read, then overwritten with what worker ``k_t`` fetches after the step).

With ``Spec.settle``, a cell that reaches the target does not stop: it *settles* (status
``SETTLING``), stepping on to its horizon H (:func:`settle_window`: at least 2T + 1000, and past
32 × its optimizer's memory where it has one) while its loss is sampled, every ``H // 256`` steps,
over the second half of what follows T, and its largest loss there is kept (every step) — the
window the settled test reads (:mod:`nqm.settling`). It ends ``REACHED`` at H, or ``TRANSIENT`` if it diverges
first; T and the loss at T are kept. In a batch it rides along with the cells still running.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from nqm.engine import record
from nqm.optimizers import Optimizer
from nqm.optimizers.base import StepContext
from nqm.problem import Problem
from nqm.status import BUDGET, DIVERGED, REACHED, RUNNING, SETTLING, TRANSIENT
from nqm.validate import MAX_STEPS

CONTINUE = 1000  # a cell that reached the target at T steps on to at least 2·T + CONTINUE
MEMORIES = 32  # ... and past MEMORIES × its optimizer's memory (a moment estimate's forgetting time)
WINDOW_POINTS = 256  # its loss is sampled every horizon // WINDOW_POINTS steps
WINDOW_SLOTS = 168  # the most samples a window holds (at T = 2; every T is checked in the tests)


class CellState(NamedTuple):
    """The carried state of a set of cells (leading axis = cells)."""

    history: Any  # (cells, slots, N): the ring of past weights, or each worker's snapshot
    w: Any  # (cells, N) the current weights, kept apart from the history only when it does not hold them
    opt: Any  # optimizer state
    status: Any  # int8
    steps: Any  # int32
    loss: Any  # loss at `steps`
    trace: Any  # name -> (cells, chunk_steps // stride + 1, ...) values recorded in the current chunk
    summary: Any  # name -> (cells, ...) running totals of the Summary recorders
    window: Any = None  # (cells, WINDOW_SLOTS) the settling window's losses (NaN until sampled), or None
    peak: Any = None  # (cells,) the largest loss over the settling window's steps, every step (0 before), or None


class Inputs(NamedTuple):
    """Per-cell constants."""

    hyper: Any  # the optimizer's hyperparameter NamedTuple of (cells,) arrays
    sigma: Any  # noise scale
    uid: Any  # (2,) uint32: the cell's 64-bit identity (keys independent noise)
    span: Any  # int32: the settling run's least span (MEMORIES × the optimizer's memory; 0 without one)


class Model(NamedTuple):
    """The problem as arrays: the engine's only view of it."""

    lam: Any  # (N,) eigenvalues
    hessian: Any  # (N, N) dense H, or None when axis-aligned
    noise_map: Any  # (N, N) Q diag(√λ), or (N,) √λ when axis-aligned
    basis: Any  # (N, N) eigenvectors Q, or None when axis-aligned

    def hvp(self, w):
        return self.lam * w if self.hessian is None else self.hessian @ w

    def shape_noise(self, z):
        """``N(0, I) → N(0, H)``."""
        return self.noise_map * z if self.noise_map.ndim == 1 else self.noise_map @ z

    def loss(self, w):
        return 0.5 * jnp.sum(w * self.hvp(w))


def model(problem: Problem, dtype) -> Model:
    lam = jnp.asarray(problem.eigenvalues, dtype)
    q = problem.rotation
    if q is None:
        return Model(lam, None, jnp.sqrt(lam), None)
    hessian = (q * problem.eigenvalues) @ q.T
    root = q * np.sqrt(problem.eigenvalues)
    return Model(lam, jnp.asarray(hessian, dtype), jnp.asarray(root, dtype), jnp.asarray(q, dtype))


@dataclasses.dataclass(frozen=True)
class Spec:
    """Everything static about a compiled chunk (the jit cache key)."""

    optimizer: Optimizer
    slots: int  # history slots
    by_worker: bool  # the history holds each worker's snapshot (else a ring of past weights)
    chunk_steps: int
    block_cells: int
    independent_noise: bool
    mesh: Mesh
    record: tuple = ()  # (name, recorder) pairs; recorder(StepView) -> array, traced every `stride` steps
    summaries: tuple = ()  # (name, Summary) pairs
    stride: int = 1
    settle: bool = False  # a cell that reaches the target steps on through its settling window

    @property
    def keeps_weights(self) -> bool:
        """Whether the current weights are kept apart from the history."""
        return self.by_worker or self.optimizer.sent is not None


def normal(key, t, like):
    # Threefry's sequential bit layout: about 1.5x faster on CPU than the partitionable one, and
    # nothing is lost, since each device draws whole steps (or whole cells) itself.
    with jax.threefry_partitionable(False):
        return jax.random.normal(jax.random.fold_in(key, t), like.shape, like.dtype)


def cell_step(spec: Spec, t, source, cell: CellState, inputs: Inputs, model: Model, noise, key, limits):
    """One step of one cell; returns the new cell, the traced recorders' values and, with
    ``spec.settle``, the step's ``(loss, diverged)`` for the block's :func:`settle_block` (else
    ``None``)."""
    target, diverge_loss, max_steps = limits
    delay, worker = source
    optimizer, slots = spec.optimizer, spec.slots
    if spec.by_worker:
        read = write = worker
    else:  # slots of iterations t − slots < s < 0 were never written, so they still hold w₀
        read, write = (t - delay) % slots, (t + 1) % slots
    w = jax.lax.dynamic_index_in_dim(cell.history, t % slots, keepdims=False) if cell.w is None else cell.w
    w_stale = jax.lax.dynamic_index_in_dim(cell.history, read, keepdims=False)
    if noise is None:
        cell_key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, 1), inputs.uid[0]), inputs.uid[1])
        noise = model.shape_noise(normal(cell_key, t, model.lam))
    g = model.hvp(w_stale) + inputs.sigma * noise
    ctx = StepContext(t, delay, worker, w_stale)
    stepped = optimizer.step(inputs.hyper, cell.opt, w, g, ctx)
    w_next, opt, _ = stepped
    values, summary = {}, cell.summary
    if spec.record or spec.summaries:
        view = record.view(model, optimizer, inputs.hyper, ctx, w, cell.opt, g, stepped)
        values = {name: fn(view) for name, fn in spec.record}
        summary = {name: jax.tree.map(lambda new, old: jnp.where(cell.status == RUNNING, new, old),
                                      r.update(cell.summary[name], r.value(view), t), cell.summary[name])
                   for name, r in spec.summaries}
    sent = w_next if optimizer.sent is None else optimizer.sent(inputs.hyper, opt, w_next)
    history = jax.lax.dynamic_update_index_in_dim(cell.history, sent, write, 0)
    loss = model.loss(w_next)
    diverged = ~(loss <= diverge_loss)
    status = jnp.where(
        loss < target, SETTLING if spec.settle else REACHED,
        jnp.where(diverged, DIVERGED, jnp.where(t + 1 >= max_steps, BUDGET, RUNNING)),
    ).astype(jnp.int8)
    live = cell.status == RUNNING
    status = jnp.where(live, status, cell.status)
    return CellState(
        history=history,
        w=None if cell.w is None else w_next,
        opt=opt,
        status=status,
        steps=jnp.where(live, t + 1, cell.steps),
        loss=jnp.where(live, loss, cell.loss),
        trace=cell.trace,
        summary=summary,
        window=cell.window,
        peak=cell.peak,
    ), values, (loss, diverged) if spec.settle else None


def settle_block(u, before: CellState, after: CellState, loss, diverged, span) -> CellState:
    """A block's settling cells after their step to ``u``: each ends ``TRANSIENT`` if it diverged,
    ``REACHED`` at its horizon; its loss is sampled into its window when due, and its window's peak
    follows every step. Done for the block, and only at a step where one of its cells settles: per
    cell at every step, this bookkeeping would cost as much as the step itself at small N."""
    def settle(after):
        horizon, stride, first, last = settle_window(before.steps, span)
        n = u // stride
        settling = before.status == SETTLING
        due = settling & (u % stride == 0) & (n >= first) & (n <= last)
        rows, slot = jnp.arange(due.size), jnp.clip(n - first, 0, WINDOW_SLOTS - 1)
        window = after.window.at[rows, slot].set(jnp.where(due, loss, after.window[rows, slot]))
        inside = settling & (2 * u > before.steps + horizon)  # the second half of what follows T
        peak = jnp.where(inside, jnp.maximum(after.peak, loss), after.peak)
        ends = jnp.where(diverged, TRANSIENT, jnp.where(u >= horizon, REACHED, SETTLING)).astype(jnp.int8)
        return after._replace(status=jnp.where(settling, ends, after.status), window=window, peak=peak)

    return jax.lax.cond(jnp.any(before.status == SETTLING), settle, lambda after: after, after)


def settle_window(first, span=0):
    """The settling run of a cell that first reached the target at step ``first`` = T ≥ 1 (numpy
    or jax integers), whose optimizer asks for a settling run of at least ``span`` steps (its
    :func:`settling_span`): ``(horizon, stride, n0, n1)``. With ``S = max(T, span)``, the horizon H
    is 2^(k+2) + CONTINUE for S in [2^k, 2^(k+1)) — at least 2S + CONTINUE, the same for a whole
    octave — capped at the largest budget; the loss is sampled at steps n·stride, ``stride =
    max(1, H // WINDOW_POINTS)``, and the window is n0 ≤ n ≤ n1: the steps in ((T + H)/2, H], the
    second half of what follows T."""
    if isinstance(first, jax.Array):
        scale = jnp.maximum(first.astype(jnp.int32), jnp.asarray(span, jnp.int32))
        bits = 32 - jax.lax.clz(scale)  # k + 1
        horizon = jnp.minimum(jnp.left_shift(jnp.int32(1), bits + 1) + CONTINUE, MAX_STEPS)
        stride = jnp.maximum(1, horizon // WINDOW_POINTS)
    else:
        first = np.asarray(first, np.int64)
        scale = np.maximum(np.maximum(first, np.asarray(span, np.int64)), 1)
        horizon = np.minimum(2 ** (np.frexp(scale)[1] + 1) + CONTINUE, MAX_STEPS)
        stride = np.maximum(1, horizon // WINDOW_POINTS)
    return horizon, stride, (first + horizon) // (2 * stride) + 1, horizon // stride


def settling_span(optimizer: Optimizer, hyper: dict) -> np.ndarray:
    """Per cell, the least span of its settling run: :data:`MEMORIES` × the optimizer's memory
    (:attr:`nqm.optimizers.Optimizer.memory`: the steps its moment estimates take to forget), so
    that the window sees what the method does once the state of its first passage is forgotten
    (Adam's bursts come when its second moment has decayed with the gradient); 0 for a method
    without one.

    Args:
      optimizer: the configured optimizer.
      hyper: per-cell hyperparameter arrays by name.

    Returns:
      int64 steps per cell, at most the largest budget.
    """
    size = np.broadcast(*hyper.values()).size if hyper else 1
    if optimizer.memory is None:
        return np.zeros(size, np.int64)
    memory = np.broadcast_to(np.asarray(optimizer.memory(hyper), np.float64), (size,))
    return np.minimum(np.ceil(MEMORIES * memory), MAX_STEPS).astype(np.int64)


def init_cells(spec: Spec, model: Model, w0, active) -> CellState:
    """Initial state of ``active.size`` cells, on the host (numpy)."""
    count = active.size
    w0 = np.asarray(w0)
    traces, totals = record.value_shapes(model, spec.optimizer, w0, spec.record, spec.summaries)
    return CellState(
        history=np.broadcast_to(w0, (count, spec.slots, w0.size)),
        w=np.broadcast_to(w0, (count, w0.size)) if spec.keeps_weights else None,
        opt=jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (count,) + x.shape), spec.optimizer.init(w0)),
        status=np.where(active, RUNNING, BUDGET).astype(np.int8),
        steps=np.zeros(count, np.int32),
        loss=np.zeros(count, w0.dtype),
        trace={n: np.zeros((count, spec.chunk_steps // spec.stride + 1) + s.shape, s.dtype) for n, s in traces.items()},
        summary={n: jax.tree.map(lambda x: np.broadcast_to(x, (count,) + x.shape), r.zeros(totals[n]))
                 for n, r in spec.summaries},
        window=np.full((count, WINDOW_SLOTS), np.nan, w0.dtype) if spec.settle else None,
        peak=np.zeros(count, w0.dtype) if spec.settle else None,
    )
