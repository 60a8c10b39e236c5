"""Staleness-aware learning rate (Zhang et al. 2016; AB paper, App. A.2)."""

from __future__ import annotations

import jax.numpy as jnp

from nqm.optimizers.base import Optimizer, register
from nqm.optimizers.momentum import heavy_ball


def _stale_rate(hyper, ctx, dtype):
    """``η / max(1, τ_t)``."""
    return hyper.lr / jnp.maximum(1, ctx.delay).astype(dtype)


@register("staleness", title="staleness-aware SGDM", reductions=[({}, "sgdm", {}, 1)])
def staleness(*, dampening: bool = False) -> Optimizer:
    """SGDM whose step is divided by the staleness of the gradient it applies:

        s_t = max(1, τ_t),   v_{t+1} = m v_t + c g_t,   w_{t+1} = w_t − (η / s_t) v_{t+1}

    (AB paper, Algorithm 3). With a constant delay D it is SGDM at ``η / max(1, D)``.

    Args:
      dampening: weight the gradient by ``1 − m``.
    """
    return heavy_ball(dampening=dampening, rate=_stale_rate, linear=True)
