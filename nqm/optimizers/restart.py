"""SGDM with adaptive restart (O'Donoghue & Candès 2015, as the AB paper describes it)."""

from __future__ import annotations

import jax.numpy as jnp

from nqm.optimizers.base import MomentumHyper, Optimizer, convention, momentum_coefficient, register
from nqm.optimizers.sgdm import VelocityState, velocity


@register("restart")
def restart(*, dampening: bool = False, workers: int = 1) -> Optimizer:
    """Adaptive restart: the velocity is reset when it opposes the gradient,

        v'_t = 0 if g_tᵀ v_t < 0 else v_t,   v_{t+1} = m v'_t + c g_t,   w_{t+1} = w_t − η v_{t+1},

    so after every update ``g_tᵀ v_{t+1} = m g_tᵀ v'_t + c ‖g_t‖² ≥ 0``.

    Args:
      dampening: weight the gradient by ``1 − m``.
      workers: unused (one velocity, whoever computed the gradient).
    """
    del workers

    def init(w0):
        return VelocityState(jnp.zeros_like(w0))

    def step(hyper, state, w, g, ctx):
        del ctx
        kept = jnp.where(jnp.vdot(g, state.velocity) < 0, 0, state.velocity)
        v = hyper.momentum * kept + momentum_coefficient(hyper.momentum, dampening) * g
        return w - hyper.lr * v, VelocityState(v), {"restart": jnp.vdot(g, state.velocity) < 0}

    config = (("dampening", dampening), ("convention", convention(dampening)))
    return Optimizer("restart", MomentumHyper, init, step, config, velocity=velocity)
