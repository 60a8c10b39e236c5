"""The momentum convention, the "sgd" alias and the noise of a batch, named once (no JAX here: the
stability analysis reads them too).

Undampened, the AB paper's ``v_{t+1} = m v_t + g_t`` (the default); dampened, Giladi et al.'s
``v_{t+1} = m v_t + (1 − m) g_t``. Results and thresholds record which one they use.

A batch of B examples averages B independent single-example gradients: its noise scale is
``σ / √B``, σ being the single-example scale ``noise`` (:func:`batch_noise`).
"""

from __future__ import annotations

import numpy as np

from nqm.errors import NqmError


def momentum_coefficient(momentum, dampening: bool):
    """The gradient's weight in the velocity: ``1`` (AB paper) or ``1 − m`` (dampened, Giladi et al.).

    Args:
      momentum: the momentum ``m`` (a number or an array).
      dampening: whether the dampened convention is used.

    Returns:
      ``1 − m`` if dampened, else ``1.0``.
    """
    return 1.0 - momentum if dampening else 1.0


def convention(dampening: bool) -> str:
    """How a result or threshold names its momentum convention.

    Args:
      dampening: whether the dampened convention is used.

    Returns:
      The convention's text, as recorded in results.
    """
    return "dampened: v = m v + (1-m) g" if dampening else "undampened: v = m v + g"


# SGD is SGDM at momentum 0. The analyses (thresholds, the exact mode, searches) accept it by name;
# the engine runs the family it stands for. Resolved here only.
ALIASES = {"sgd": "sgdm"}


def family(method: str, momenta=None) -> str:
    """The registered family that ``method`` names: ``"sgd"`` is ``"sgdm"`` at momentum 0, and
    refused with any other ``momenta``; every other name is itself.

    Args:
      method: the method's name.
      momenta: the momenta it will run with, or ``None`` (unchecked).

    Returns:
      The registered family's name.

    Raises:
      NqmError: ``"sgd"`` given a nonzero momentum.
    """
    if method in ALIASES and momenta is not None and np.any(np.asarray(momenta, dtype=float) != 0):
        raise NqmError(f"{method} has no momentum: give momentum=0, or use method {ALIASES[method]!r}")
    return ALIASES.get(method, method)


def convention_of(method: str, dampening: bool) -> str:
    """How a threshold or result names the momentum convention of ``method``.

    Args:
      method: the method's name.
      dampening: whether the dampened convention is used.

    Returns:
      ``"no momentum"`` for an alias of SGD, else :func:`convention`.
    """
    return "no momentum" if method in ALIASES else convention(dampening)


# Decay rates in [0, 1) (momentum, Adam's and Lion's b1/b2, RMSProp's decay, the iterate average's γ): searched on log(1 − x),
# since what matters is the memory 1/(1 − x), which a box like (0, 0.999) spans over decades.
DECAYS = frozenset({"momentum", "b1", "b2", "decay", "ema"})


# What a result with a batch_size dimension records (attribute ``batch_noise``).
BATCH_NOISE = "noise is the single-example scale sigma; a batch of batch_size B runs with gradient noise sigma/sqrt(B)"


def batch_noise(noise, batch_size):
    """The gradient-noise scale of a batch: ``σ / √B`` (in float64), ``σ`` the single-example scale.

    Args:
      noise: the single-example scale σ (a number or an array).
      batch_size: the batch size B (a number or an array, broadcast with ``noise``).

    Returns:
      ``σ / √B`` as float64 (``σ`` itself, bit for bit, at B = 1).
    """
    return np.asarray(noise, np.float64) / np.sqrt(np.asarray(batch_size, np.float64))
