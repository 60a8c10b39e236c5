"""Shifted momentum (Giladi et al. 2020): every worker keeps its own velocity."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from nqm.optimizers.base import MomentumHyper, Optimizer, convention, momentum_coefficient, register


class WorkerVelocities(NamedTuple):
    velocities: Any  # (delay + 1, N): the velocity of each of the D+1 round-robin workers


@register("shifted")
def shifted(*, dampening: bool = False, delay: int = 0) -> Optimizer:
    """Shifted momentum: ``v_{t+1} = m v_{t−D} + c g_t``, ``w_{t+1} = w_t − η v_{t+1}``, ``v_{≤0} = 0``.

    With ``D + 1`` workers served round-robin, the worker that computes ``g_t`` last updated at
    step ``t − D``, so it continues its own velocity ``v_{t−D}``. ``D = 0`` is SGDM.

    Args:
      dampening: weight the gradient by ``c = 1 − m`` instead of 1.
      delay: the constant gradient delay ``D``; it sets the number of workers.

    Reference: Giladi et al. (2020), eq. 10.
    """
    workers = int(delay) + 1

    def init(w0):
        return WorkerVelocities(jnp.zeros((workers,) + w0.shape, w0.dtype))

    def step(hyper, state, w, g, t):
        # v_s lives in slot s mod (D+1); v_{t−D} and v_{t+1} share slot (t+1) mod (D+1).
        slot = (t + 1) % workers
        v_old = jax.lax.dynamic_index_in_dim(state.velocities, slot, keepdims=False)
        v = hyper.momentum * v_old + momentum_coefficient(hyper.momentum, dampening) * g
        velocities = jax.lax.dynamic_update_index_in_dim(state.velocities, v, slot, 0)
        return w - hyper.lr * v, WorkerVelocities(velocities), {}

    return Optimizer(
        "shifted", MomentumHyper, init, step,
        (("dampening", dampening), ("convention", convention(dampening)), ("workers", workers)),
    )
