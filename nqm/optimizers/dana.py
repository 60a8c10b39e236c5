"""DANA (Hakimi et al. 2019; AB paper, App. A.4): per-worker velocities and look-ahead weights."""

from __future__ import annotations

import jax

from nqm.optimizers.base import MomentumHyper, Optimizer, convention, momentum_coefficient, register
from nqm.optimizers.shifted import WorkerVelocities


@register("dana")
def dana(*, dampening: bool = False, workers: int = 1) -> Optimizer:
    """DANA: worker ``k`` keeps its own velocity, and workers compute gradients at the master's
    estimate of the future weights (AB paper, Algorithms 6–7):

        v^k ← m v^k + c g_t,   w_{t+1} = w_t − η v^k,   ŵ_{t+1} = w_{t+1} − η m Σ_j v^j,

    where ``k`` computed ``g_t`` and ``ŵ_{t+1}`` is what the master sends (the gradient applied
    at step t was computed at ``ŵ_{t−τ_t}``). The loss is measured at ``w``. m = 0 is delayed SGD.

    Args:
      dampening: weight the gradient by ``c = 1 − m`` instead of 1.
      workers: how many workers (and velocities) the delay process has.
    """

    def init(w0):
        return WorkerVelocities(jax.numpy.zeros((workers,) + w0.shape, w0.dtype))

    def velocity(state, ctx):
        return jax.lax.dynamic_index_in_dim(state.velocities, ctx.worker, keepdims=False)

    def step(hyper, state, w, g, ctx):
        v = hyper.momentum * velocity(state, ctx) + momentum_coefficient(hyper.momentum, dampening) * g
        velocities = jax.lax.dynamic_update_index_in_dim(state.velocities, v, ctx.worker, 0)
        return w - hyper.lr * v, WorkerVelocities(velocities), {}

    def sent(hyper, state, w_next):
        return w_next - hyper.lr * hyper.momentum * state.velocities.sum(0)

    config = (("dampening", dampening), ("convention", convention(dampening)), ("workers", workers))
    return Optimizer("dana", MomentumHyper, init, step, config, velocity=velocity, sent=sent, workers=workers, linear=True)
