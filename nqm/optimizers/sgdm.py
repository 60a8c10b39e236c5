"""Heavy-ball momentum (SGDM)."""

from __future__ import annotations

from nqm.optimizers.base import Optimizer, heavy_ball, register


@register("sgdm", title="SGDM", reductions=[({"momentum": 0.0}, "nesterov", {"momentum": 0.0}, 2)])
def sgdm(*, dampening: bool = False) -> Optimizer:
    """Heavy ball: ``v_{t+1} = m v_t + c g_t``, ``w_{t+1} = w_t − η v_{t+1}``.

    ``c = 1`` (AB paper convention) or ``c = 1 − m`` with ``dampening`` (Giladi et al. 2020).

    Args:
      dampening: weight the gradient by ``1 − m``.
    """
    return heavy_ball(dampening=dampening, linear=True)
