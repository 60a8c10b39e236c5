"""The momentum convention, named once (no JAX here: the stability analysis reads it too).

Undampened, the AB paper's ``v_{t+1} = m v_t + g_t`` (the default); dampened, Giladi et al.'s
``v_{t+1} = m v_t + (1 − m) g_t``. Results and thresholds record which one they use.
"""

from __future__ import annotations


def momentum_coefficient(momentum, dampening: bool):
    """The gradient's weight in the velocity: ``1`` (AB paper) or ``1 − m`` (dampened, Giladi et al.)."""
    return 1.0 - momentum if dampening else 1.0


def convention(dampening: bool) -> str:
    """How a result or threshold names its momentum convention."""
    return "dampened: v = m v + (1-m) g" if dampening else "undampened: v = m v + g"
