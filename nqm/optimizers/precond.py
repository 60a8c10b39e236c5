"""SGDM preconditioned by a power of the curvature, ``H^(−p)``: Zhang et al.'s (2019) NQM model of
Adam (p ≈ 1/2, a diagonal preconditioner of the square root of the curvature) and of K-FAC (p = 1).

    v_{t+1} = m v_t + c H^(−p) g_t,      w_{t+1} = w_t − η v_{t+1},      H^(−p) = Q diag(λ^(−p)) Qᵀ

(``c = 1``, or ``1 − m`` with ``dampening``). Per eigencomponent it is SGDM at the learning rate
``η λ^(−p)``, that is at ``x = η λ^(1−p)``: its threshold is SGDM's, ``η* = x*_sgdm(m, D) / λ_max^(1−p)``
(:func:`nqm.thresholds.derived.precond_threshold`). The update reads the problem's spectrum (and its
rotation), which :func:`nqm.optimizers.make` gives the factory (its ``problem`` parameter); at p = 0
it is SGDM, rotated or not: the same first passages, losses equal to float32 rounding (the compiler
may contract a multiply-add differently in the two programs).

It is not registered as linear: the derived thresholds and the exact mode build the transition of
one eigencomponent from the method's own step at a curvature λ, where this step reads the whole
problem's spectrum instead.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from nqm.errors import NqmError
from nqm.optimizers.base import Optimizer, register
from nqm.validate import UNIT
from nqm.optimizers.momentum import heavy_ball


class PrecondHyper(NamedTuple):
    lr: Any
    momentum: Any
    power: Any = 0.5  # the exponent p of H^(−p) (swept; 0 is SGDM, 1/2 Zhang et al.'s Adam, 1 K-FAC)


@register("precond", title="Preconditioned SGDM", reductions=[({"power": 0.0}, "sgdm", {}, 2)],
          domains={"power": UNIT._replace(text="an exponent in [0, 1]")})
def precond(*, dampening: bool = False, problem=None) -> Optimizer:
    """Heavy ball on the preconditioned gradient: ``v_{t+1} = m v_t + c H^(−p) g_t``,
    ``w_{t+1} = w_t − η v_{t+1}``, with ``H^(−p) = Q diag(λ^(−p)) Qᵀ`` and ``p = power``, a swept
    hyperparameter in [0, 1] (default 0.5).

    Args:
      dampening: weight the gradient by ``1 − m``.
      problem: the problem it runs on, whose spectrum and rotation give ``H^(−p)``; filled by
        :func:`nqm.optimizers.make` (never a user option).

    Returns:
      The :class:`Optimizer`; without a problem it has its hyperparameters but cannot step.

    Reference: Zhang et al. (2019), "Which algorithmic choices matter at which batch sizes?", sec. 3.
    """
    log_lam = None if problem is None else np.log(problem.eigenvalues)
    rotation = None if problem is None else problem.rotation

    def gradient(hyper, w, g, ctx):
        del w, ctx
        if log_lam is None:
            raise NqmError("precond reads the problem's spectrum: build it with make('precond', problem=...) "
                           "or run it through nqm.sweep and the other entry points")
        if g.shape[-1] != log_lam.size:
            raise NqmError(f"this precond optimizer was built for a problem of dimension {log_lam.size}, not "
                           f"{g.shape[-1]}: build it with make('precond', problem=...) for the problem it runs on")
        scale = jnp.exp(-hyper.power * jnp.asarray(log_lam, g.dtype))  # λ^(−p), exactly 1 at p = 0
        if rotation is None:
            preconditioned = scale * g
        else:
            q = jnp.asarray(rotation, g.dtype)
            preconditioned = q @ (scale * (q.T @ g))
        # p = 0: g itself, not Q Qᵀ g nor 1 · g, which the compiler may fuse into another rounding
        return jnp.where(hyper.power == 0, g, preconditioned)

    optimizer = heavy_ball(PrecondHyper, dampening=dampening, gradient=gradient)
    return optimizer._replace(config=optimizer.config + (("preconditioner", "H^(-power)"),))
