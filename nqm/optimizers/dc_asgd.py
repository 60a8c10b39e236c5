"""Delay-compensated ASGD (Zheng et al. 2017; AB paper, App. A.5, with momentum)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from nqm.optimizers.base import Optimizer, convention, momentum_coefficient, register
from nqm.optimizers.sgdm import VelocityState, velocity


class CompensationHyper(NamedTuple):
    lr: Any
    momentum: Any
    lambda_dc: Any = 0.04  # λ_dc, the variance-control parameter (swept like AB's ρ)


@register("dc-asgd")
def dc_asgd(*, dampening: bool = False, workers: int = 1) -> Optimizer:
    """The stale gradient corrected by a diagonal Hessian estimate, then an SGDM step:

        ĝ_t = g_t + λ_dc g_t ⊙ g_t ⊙ (w_t − w_{t−τ_t}),
        v_{t+1} = m v_t + c ĝ_t,   w_{t+1} = w_t − η v_{t+1}

    (AB paper, Algorithm 8, with a constant λ_dc instead of the original's moving average).
    m = 0 is the original DC-ASGD; λ_dc = 0 is SGDM.

    Args:
      dampening: weight the gradient by ``1 − m``.
      workers: unused (the stale weights come with each gradient).
    """
    del workers

    def init(w0):
        return VelocityState(jnp.zeros_like(w0))

    def step(hyper, state, w, g, ctx):
        corrected = g + hyper.lambda_dc * g * g * (w - ctx.stale)
        v = hyper.momentum * state.velocity + momentum_coefficient(hyper.momentum, dampening) * corrected
        return w - hyper.lr * v, VelocityState(v), {}

    config = (("dampening", dampening), ("convention", convention(dampening)))
    return Optimizer("dc-asgd", CompensationHyper, init, step, config, velocity=velocity)
