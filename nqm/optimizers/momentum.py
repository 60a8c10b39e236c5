"""The momentum families every heavy-ball method builds on: one velocity (:func:`heavy_ball`, whoever
computed the gradient) or one per worker (:func:`worker_momentum`, shifted momentum and DANA)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from nqm.conventions import convention, momentum_coefficient
from nqm.optimizers.base import MomentumHyper, Optimizer


class VelocityState(NamedTuple):
    """The state of the heavy-ball families (:func:`heavy_ball`): one velocity ``v_t``, shaped like the weights."""
    velocity: Any


class WorkerVelocities(NamedTuple):
    """The state of :func:`worker_momentum`: one velocity per worker, shape ``(workers, N)``."""
    velocities: Any  # (workers, N): each worker's own velocity


def heavy_ball(hyper: type = MomentumHyper, *, dampening: bool = False, gradient=None, keep=None,
               rate=None, nesterov: bool = False, info=None, linear: bool = False) -> Optimizer:
    """The heavy-ball family, one velocity whoever computed the gradient:

        ĝ = gradient(hyper, w, g, ctx),   v_{t+1} = m · keep(g, v_t) + c ĝ,
        w_{t+1} = w_t − rate(hyper, ctx, dtype) · v_{t+1}      (Nesterov: · (c ĝ + m v_{t+1}))

    with ``c = 1``, or ``1 − m`` with ``dampening``. Left out, ``gradient`` is ``g``, ``keep`` is
    ``v_t`` and ``rate`` is ``η``: plain SGDM. ``info(g, v_t)`` gives the step's diagnostics.

    Args:
      hyper: the NamedTuple type of its hyperparameters (fields ``lr`` and ``momentum`` at least).
      dampening: use ``c = 1 − m`` rather than 1.
      gradient: ``gradient(hyper, w, g, ctx) -> ĝ``, or ``None`` for ``g``.
      keep: ``keep(g, v_t)``, the velocity carried on, or ``None`` for ``v_t``.
      rate: ``rate(hyper, ctx, dtype)``, the step size, or ``None`` for ``hyper.lr``.
      nesterov: step along ``c ĝ + m v_{t+1}`` rather than ``v_{t+1}``.
      info: ``info(g, v_t) -> dict`` of diagnostics, or ``None`` (none).
      linear: the :attr:`Optimizer.linear` flag the caller declares.

    Returns:
      The :class:`Optimizer` (no name: :func:`make` gives it).
    """

    def init(w0):
        return VelocityState(jnp.zeros_like(w0))

    def step(hyper, state, w, g, ctx):
        c = momentum_coefficient(hyper.momentum, dampening)
        g_hat = g if gradient is None else gradient(hyper, w, g, ctx)
        v = c * g_hat + hyper.momentum * (state.velocity if keep is None else keep(g, state.velocity))
        direction = c * g_hat + hyper.momentum * v if nesterov else v
        step_size = hyper.lr if rate is None else rate(hyper, ctx, w.dtype)
        return w - step_size * direction, VelocityState(v), {} if info is None else info(g, state.velocity)

    config = (("dampening", dampening), ("convention", convention(dampening)))
    return Optimizer(hyper, init, step, config, velocity=velocity, linear=linear)


def worker_momentum(*, dampening: bool = False, workers: int = 1, sent=None) -> Optimizer:
    """One velocity per worker: the worker ``k`` that computed ``g_t`` continues its own,

        v^k ← m v^k + c g_t,   w_{t+1} = w_t − η v^k,

    and workers receive ``sent(hyper, state, w_{t+1})`` (default ``w_{t+1}``).

    Args:
      dampening: use ``c = 1 − m`` rather than 1.
      workers: the number of workers, one velocity each.
      sent: ``sent(hyper, state, w_next)``, what a worker receives, or ``None`` for ``w_next``.

    Returns:
      The :class:`Optimizer` (linear, with per-worker state).
    """

    def init(w0):
        return WorkerVelocities(jnp.zeros((workers,) + w0.shape, w0.dtype))

    def own(state, ctx):
        return jax.lax.dynamic_index_in_dim(state.velocities, ctx.worker, keepdims=False)

    def step(hyper, state, w, g, ctx):
        v = hyper.momentum * own(state, ctx) + momentum_coefficient(hyper.momentum, dampening) * g
        velocities = jax.lax.dynamic_update_index_in_dim(state.velocities, v, ctx.worker, 0)
        return w - hyper.lr * v, WorkerVelocities(velocities), {}

    config = (("dampening", dampening), ("convention", convention(dampening)), ("workers", workers))
    return Optimizer(MomentumHyper, init, step, config, velocity=own, sent=sent, workers=workers, linear=True)


def velocity(state, ctx):
    """The single velocity of the heavy-ball families.

    Args:
      state: a :class:`VelocityState`.
      ctx: the step's :class:`StepContext` (unused).

    Returns:
      ``state.velocity``.
    """
    del ctx
    return state.velocity
