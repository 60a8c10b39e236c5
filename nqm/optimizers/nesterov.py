"""Nesterov momentum."""

from __future__ import annotations

from nqm.optimizers.base import Optimizer, register
from nqm.optimizers.momentum import heavy_ball


@register("nesterov", title="Nesterov momentum", reductions=[({"momentum": 0.0}, "sgdm", {"momentum": 0.0}, 2)])
def nesterov(*, dampening: bool = False) -> Optimizer:
    """Nesterov momentum: ``v_{t+1} = m v_t + c g_t``, ``w_{t+1} = w_t − η (c g_t + m v_{t+1})``.

    The gradient is taken at the current (delayed) weights, and the step looks ahead along the new
    velocity; ``c = 1``, or ``1 − m`` with ``dampening``. m = 0 is SGD.

    Args:
      dampening: weight the gradient by ``1 − m``.
    """
    return heavy_ball(dampening=dampening, nesterov=True, linear=True)
