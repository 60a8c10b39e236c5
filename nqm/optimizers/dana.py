"""DANA (Hakimi et al. 2019; AB paper, App. A.4): per-worker velocities and look-ahead weights."""

from __future__ import annotations

from nqm.optimizers.base import Optimizer, register
from nqm.optimizers.momentum import worker_momentum


def _look_ahead(hyper, state, w_next):
    """``ŵ_{t+1} = w_{t+1} − η m Σ_j v^j``: the master's estimate of the future weights."""
    return w_next - hyper.lr * hyper.momentum * state.velocities.sum(0)


@register("dana", title="DANA", reductions=[({"momentum": 0.0}, "sgdm", {"momentum": 0.0}, 2)])
def dana(*, dampening: bool = False, workers: int = 1) -> Optimizer:
    """DANA: worker ``k`` keeps its own velocity, and workers compute gradients at the master's
    estimate of the future weights (AB paper, Algorithms 6–7):

        v^k ← m v^k + c g_t,   w_{t+1} = w_t − η v^k,   ŵ_{t+1} = w_{t+1} − η m Σ_j v^j,

    where ``k`` computed ``g_t`` and ``ŵ_{t+1}`` is what the master sends (the gradient applied
    at step t was computed at ``ŵ_{t−τ_t}``). The loss is measured at ``w``. m = 0 is delayed SGD.

    Args:
      dampening: weight the gradient by ``c = 1 − m`` instead of 1.
      workers: how many workers (and velocities) the delay process has.
    """
    return worker_momentum(dampening=dampening, workers=workers, sent=_look_ahead)
