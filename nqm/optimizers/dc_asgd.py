"""Delay-compensated ASGD (Zheng et al. 2017; AB paper, App. A.5, with momentum)."""

from __future__ import annotations

from typing import Any, NamedTuple

from nqm.optimizers.base import NearZero, Optimizer, register
from nqm.optimizers.momentum import heavy_ball


class CompensationHyper(NamedTuple):
    lr: Any
    momentum: Any
    lambda_dc: Any = 0.04  # λ_dc, the variance-control parameter (swept like AB's ρ)


def _compensated(hyper, w, g, ctx):
    """``g + λ_dc g ⊙ g ⊙ (w_t − w_{t−τ_t})``: the stale gradient moved along a diagonal Hessian estimate."""
    return g + hyper.lambda_dc * g * g * (w - ctx.stale)


@register("dc-asgd", title="DC-ASGD", reductions=[({"lambda_dc": 0.0}, "sgdm", {}, 2)], near_zero=NearZero("sgdm"))
def dc_asgd(*, dampening: bool = False) -> Optimizer:
    """The stale gradient corrected by a diagonal Hessian estimate, then an SGDM step:

        ĝ_t = g_t + λ_dc g_t ⊙ g_t ⊙ (w_t − w_{t−τ_t}),
        v_{t+1} = m v_t + c ĝ_t,   w_{t+1} = w_t − η v_{t+1}

    (AB paper, Algorithm 8, with a constant λ_dc instead of the original's moving average).
    m = 0 is the original DC-ASGD; λ_dc = 0 is SGDM.

    Args:
      dampening: weight the gradient by ``1 − m``.
    """
    return heavy_ball(CompensationHyper, dampening=dampening, gradient=_compensated)
