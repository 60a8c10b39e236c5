"""Shifted momentum (Giladi et al. 2020): every worker keeps its own velocity."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from nqm.optimizers.base import MomentumHyper, Optimizer, convention, momentum_coefficient, register


class WorkerVelocities(NamedTuple):
    velocities: Any  # (workers, N): each worker's own velocity


@register("shifted")
def shifted(*, dampening: bool = False, workers: int = 1) -> Optimizer:
    """Shifted momentum: the worker ``k`` that computed ``g_t`` continues its own velocity,
    ``v^k ← m v^k + c g_t``, ``w_{t+1} = w_t − η v^k`` (all ``v^k = 0`` at first).

    With a constant delay ``D`` (``D + 1`` workers served round robin) the worker that computes
    ``g_t`` last updated at step ``t − D``: ``v_{t+1} = m v_{t−D} + c g_t``. ``D = 0`` is SGDM.

    Args:
      dampening: weight the gradient by ``c = 1 − m`` instead of 1.
      workers: how many workers (and velocities) the delay process has.

    Reference: Giladi et al. (2020), eq. 10.
    """

    def init(w0):
        return WorkerVelocities(jnp.zeros((workers,) + w0.shape, w0.dtype))

    def velocity(state, ctx):
        return jax.lax.dynamic_index_in_dim(state.velocities, ctx.worker, keepdims=False)

    def step(hyper, state, w, g, ctx):
        v = hyper.momentum * velocity(state, ctx) + momentum_coefficient(hyper.momentum, dampening) * g
        velocities = jax.lax.dynamic_update_index_in_dim(state.velocities, v, ctx.worker, 0)
        return w - hyper.lr * v, WorkerVelocities(velocities), {}

    config = (("dampening", dampening), ("convention", convention(dampening)), ("workers", workers))
    return Optimizer("shifted", MomentumHyper, init, step, config, velocity=velocity, workers=workers, linear=True)
