"""Nesterov momentum."""

from __future__ import annotations

import jax.numpy as jnp

from nqm.optimizers.base import MomentumHyper, Optimizer, convention, momentum_coefficient, register
from nqm.optimizers.sgdm import VelocityState, velocity


@register("nesterov")
def nesterov(*, dampening: bool = False, workers: int = 1) -> Optimizer:
    """Nesterov momentum: ``v_{t+1} = m v_t + c g_t``, ``w_{t+1} = w_t − η (c g_t + m v_{t+1})``.

    The gradient is taken at the current (delayed) weights, and the step looks ahead along the new
    velocity; ``c = 1``, or ``1 − m`` with ``dampening``. m = 0 is SGD.

    Args:
      dampening: weight the gradient by ``1 − m``.
      workers: unused (one velocity, whoever computed the gradient).
    """
    del workers

    def init(w0):
        return VelocityState(jnp.zeros_like(w0))

    def step(hyper, state, w, g, ctx):
        del ctx
        c = momentum_coefficient(hyper.momentum, dampening)
        v = hyper.momentum * state.velocity + c * g
        return w - hyper.lr * (c * g + hyper.momentum * v), VelocityState(v), {}

    config = (("dampening", dampening), ("convention", convention(dampening)))
    return Optimizer("nesterov", MomentumHyper, init, step, config, velocity=velocity, linear=True)
