"""The physics of one step of one cell: the delayed noisy gradient, the optimizer's update, what the
workers keep, and the cell's status.

    g_t     = H w_{t−τ_t} + σ ξ_t,   ξ_t ~ N(0, H)        (w_{−k} = w₀)
    w_{t+1} = optimizer.step(hyper, state, w_t, g_t, ctx_t)
    T       = first t ≥ 1 with L(w_t) < target            (status 1; −1 diverged; 0 budget spent)

The weights a gradient was computed at come from the cell's *history* (:class:`nqm.delays.History`):
a ring of the last ``slots`` weights (``w_s`` in slot ``s mod slots``; with a constant delay D and
D + 1 slots, ``w_{t−D}`` and ``w_{t+1}`` share a slot), or one snapshot per worker (slot ``k_t`` is
read, then overwritten with what worker ``k_t`` fetches after the step).

A cell that reaches the target stops there, unless its stop rule (:mod:`nqm.engine.stop`) keeps it
stepping: it is then ``CONTINUING`` until the rule ends it (:func:`stop_block`), T and the loss at
T kept, riding along in its batch with the cells still running.

Two options, each a static flag of the compiled chunk (:class:`Spec`), so that a run without them is
today's program: a learning-rate **schedule** (:mod:`nqm.schedules`: step t takes ``lr · f(t)``) and
iterate **averaging** (``ŵ_{t+1} = γ ŵ_t + (1 − γ) w_{t+1}``, ``ŵ₀ = w₀``, γ per cell): the target, T and
the loss are then read on ŵ, while divergence is judged on the raw iterate, whose dynamics it leaves
alone.
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
from nqm.engine.stop import FirstPassage, StopRule
from nqm.status import BUDGET, CONTINUING, DIVERGED, REACHED, RUNNING, active

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
    stop: Any = None  # the stop rule's per-cell state (None: it keeps none)
    avg: Any = None  # (cells, N) the averaged iterate ŵ_t where the run averages (None: it does not)


class Inputs(NamedTuple):
    """Per-cell constants."""

    hyper: Any  # the optimizer's hyperparameter NamedTuple of (cells,) arrays
    sigma: Any  # noise scale
    uid: Any  # (2,) uint32: the cell's 64-bit identity (keys independent noise)
    ema: Any = None  # γ, the averaging rate, where the run averages (None: it does not)


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
    stop: StopRule = FirstPassage()  # when a cell that reached the target stops
    averaged: bool = False  # the cells keep ŵ and are judged on it (False: no ŵ, today's program)
    schedule: Any = None  # a nqm.schedules.Schedule multiplying lr at each step (None: none)

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
    """One step of one cell; returns the new cell, the traced recorders' values and, where the stop
    rule keeps reached cells stepping, the step's ``(loss, diverged)`` for the block's
    :func:`stop_block` (else ``None``)."""
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
    hyper = inputs.hyper
    if spec.schedule is not None:  # η_t = lr · f(t)
        hyper = hyper._replace(lr=hyper.lr * spec.schedule.factor(t, jnp).astype(hyper.lr.dtype))
    stepped = optimizer.step(hyper, cell.opt, w, g, ctx)
    w_next, opt, _ = stepped
    avg = None
    if spec.averaged:  # γ = 0 gives ŵ = w_next exactly
        avg = inputs.ema * cell.avg + (1 - inputs.ema) * w_next
    values, summary = {}, cell.summary
    if spec.record or spec.summaries:
        view = record.view(model, optimizer, hyper, ctx, w, cell.opt, g, stepped, avg)
        values = {name: fn(view) for name, fn in spec.record}
        summary = {name: jax.tree.map(lambda new, old: jnp.where(active(cell.status), new, old),
                                      r.update(cell.summary[name], r.value(view), t), cell.summary[name])
                   for name, r in spec.summaries}
    sent = w_next if optimizer.sent is None else optimizer.sent(hyper, opt, w_next)
    history = jax.lax.dynamic_update_index_in_dim(cell.history, sent, write, 0)
    loss = model.loss(w_next)
    diverged = ~(loss <= diverge_loss)
    reached = loss < target
    if spec.averaged:  # the target on ŵ; a raw iterate that diverged has diverged, whatever ŵ
        loss = model.loss(avg)
        reached = (loss < target) & ~diverged
    status = jnp.where(
        reached, CONTINUING if spec.stop.continues else REACHED,
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
        stop=cell.stop,
        avg=avg,
    ), values, (loss, diverged) if spec.stop.continues else None


def stop_block(rule: StopRule, u, before: CellState, after: CellState, loss, diverged, target) -> CellState:
    """A block's cells after their step to ``u``, those its stop rule kept stepping (``CONTINUING``
    before the step) ended or kept as the rule says. Done for the block, and only at a step where
    one of its cells continues: per cell at every step, a rule's bookkeeping would cost as much as
    the step itself at small N. Only the statuses and the rule's state pass through the branch (the
    cells' weights would be copied in and out of it at every step)."""
    continuing = before.status == CONTINUING

    def update(status, state):
        ends, state = rule.update(u, before.steps, before.status, loss, diverged, target, state)
        return jnp.where(continuing, ends, status), state

    status, state = jax.lax.cond(jnp.any(continuing), update, lambda status, state: (status, state),
                                 after.status, after.stop)
    return after._replace(status=status, stop=state)


def init_cells(spec: Spec, model: Model, w0, active, stop=None) -> CellState:
    """Initial state of ``active.size`` cells, on the host (numpy): each starts from ``w0`` (one
    vector, or one per cell), with the stop rule's state ``stop``."""
    count = active.size
    w0 = np.asarray(w0)
    start = w0 if w0.ndim == 1 else w0[0]
    traces, totals = record.value_shapes(model, spec.optimizer, start, spec.record, spec.summaries)
    return CellState(
        history=np.broadcast_to(w0[..., None, :] if w0.ndim > 1 else w0, (count, spec.slots, start.size)),
        w=np.broadcast_to(w0, (count, start.size)) if spec.keeps_weights else None,
        opt=jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (count,) + x.shape), spec.optimizer.init(start))
        if w0.ndim == 1 else jax.tree.map(np.asarray, jax.vmap(spec.optimizer.init)(w0)),
        status=np.where(active, RUNNING, BUDGET).astype(np.int8),
        steps=np.zeros(count, np.int32),
        loss=np.zeros(count, start.dtype),
        trace={n: np.zeros((count, spec.chunk_steps // spec.stride + 1) + s.shape, s.dtype) for n, s in traces.items()},
        summary={n: jax.tree.map(lambda x: np.broadcast_to(x, (count,) + x.shape), r.zeros(totals[n]))
                 for n, r in spec.summaries},
        stop=stop,
        avg=(np.broadcast_to(w0, (count, start.size)) if spec.averaged else None),
    )
