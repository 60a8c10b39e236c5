"""Shifted momentum (Giladi et al. 2020): every worker keeps its own velocity."""

from __future__ import annotations

from nqm.optimizers.base import Optimizer, register
from nqm.optimizers.momentum import worker_momentum


@register("shifted", title="shifted momentum", reductions=[({}, "sgdm", {}, 0)])
def shifted(*, dampening: bool = False, workers: int = 1) -> Optimizer:
    """Shifted momentum: the worker ``k`` that computed ``g_t`` continues its own velocity,
    ``v^k ← m v^k + c g_t``, ``w_{t+1} = w_t − η v^k`` (all ``v^k = 0`` at first).

    With a constant delay ``D`` (``D + 1`` workers served round robin) the worker that computes
    ``g_t`` last updated at step ``t − D``: ``v_{t+1} = m v_{t−D} + c g_t``. ``D = 0`` is SGDM.

    Args:
      dampening: weight the gradient by ``c = 1 − m`` instead of 1.
      workers: how many workers (and velocities) the delay process has.

    Reference: Giladi et al. (2020), eq. 10.
    """
    return worker_momentum(dampening=dampening, workers=workers)
