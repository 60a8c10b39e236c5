"""SGDM with adaptive restart (O'Donoghue & Candès 2015, as the AB paper describes it)."""

from __future__ import annotations

import jax.numpy as jnp

from nqm.optimizers.base import Optimizer, register
from nqm.optimizers.momentum import heavy_ball


def _kept(g, v):
    """The velocity, reset to 0 when it opposes the gradient."""
    return jnp.where(jnp.vdot(g, v) < 0, 0, v)


def _restarted(g, v):
    return {"restart": jnp.vdot(g, v) < 0}


@register("restart", title="SGDM with adaptive restart",
          reductions=[({"momentum": 0.0}, "sgdm", {"momentum": 0.0}, 2)])
def restart(*, dampening: bool = False) -> Optimizer:
    """Adaptive restart: the velocity is reset when it opposes the gradient,

        v'_t = 0 if g_tᵀ v_t < 0 else v_t,   v_{t+1} = m v'_t + c g_t,   w_{t+1} = w_t − η v_{t+1},

    so after every update ``g_tᵀ v_{t+1} = m g_tᵀ v'_t + c ‖g_t‖² ≥ 0``.

    Args:
      dampening: weight the gradient by ``1 − m``.
    """
    return heavy_ball(dampening=dampening, keep=_kept, info=_restarted)
