"""Heavy-ball momentum (SGDM)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp

from nqm.optimizers.base import MomentumHyper, Optimizer, convention, momentum_coefficient, register


class VelocityState(NamedTuple):
    velocity: Any


@register("sgdm")
def sgdm(*, dampening: bool = False, workers: int = 1) -> Optimizer:
    """Heavy ball: ``v_{t+1} = m v_t + c g_t``, ``w_{t+1} = w_t − η v_{t+1}``.

    ``c = 1`` (AB paper convention) or ``c = 1 − m`` with ``dampening`` (Giladi et al. 2020).

    Args:
      dampening: weight the gradient by ``1 − m``.
      workers: unused (one velocity, whoever computed the gradient).
    """
    del workers

    def init(w0):
        return VelocityState(jnp.zeros_like(w0))

    def step(hyper, state, w, g, ctx):
        del ctx
        v = hyper.momentum * state.velocity + momentum_coefficient(hyper.momentum, dampening) * g
        return w - hyper.lr * v, VelocityState(v), {}

    config = (("dampening", dampening), ("convention", convention(dampening)))
    return Optimizer("sgdm", MomentumHyper, init, step, config, velocity=velocity, linear=True)


def velocity(state, ctx):
    """The single velocity of the heavy-ball families."""
    return state.velocity
