"""Heavy-ball momentum (SGDM), and plain SGD: the heavy ball at momentum 0."""

from __future__ import annotations

from typing import Any, NamedTuple

from nqm.optimizers.base import Optimizer, register
from nqm.optimizers.momentum import heavy_ball


@register("sgdm", title="SGDM", reductions=[({"momentum": 0.0}, "nesterov", {"momentum": 0.0}, 2)])
def sgdm(*, dampening: bool = False) -> Optimizer:
    """Heavy ball: ``v_{t+1} = m v_t + c g_t``, ``w_{t+1} = w_t − η v_{t+1}``.

    ``c = 1`` (AB paper convention) or ``c = 1 − m`` with ``dampening`` (Giladi et al. 2020).

    Args:
      dampening: weight the gradient by ``1 − m``.
    """
    return heavy_ball(dampening=dampening, linear=True)


class SgdHyper(NamedTuple):
    """SGD's one hyperparameter, the learning rate; its momentum is 0, not a grid axis."""
    lr: Any

    @property
    def momentum(self):
        return 0.0


@register("sgd", title="SGD", reductions=[({}, "sgdm", {"momentum": 0.0}, 2)])
def sgd() -> Optimizer:
    """Plain SGD: ``w_{t+1} = w_t − η g_t``, the heavy ball at momentum 0 (``sgdm`` there, bit for
    bit). It takes no momentum; its results have the single momentum 0.
    """
    return heavy_ball(SgdHyper, linear=True)
