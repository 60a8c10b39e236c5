"""A real model's data and loss, checked before any work: how many examples its data holds, and
its loss at the starting point (:mod:`nqm.transfer`)."""

from __future__ import annotations

import jax
import numpy as np

from nqm.errors import NqmError


def examples(data) -> int:
    """The number of examples of a real model's data: a pytree of arrays that share one leading
    example axis (:mod:`nqm.transfer`).

    Args:
      data: the pytree.

    Returns:
      The length of that axis.

    Raises:
      NqmError: leaves of different lengths, a scalar leaf, or no example.
    """
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree.leaves(data)}
    if len(sizes) != 1 or None in sizes or 0 in sizes:
        raise NqmError("data must be a pytree of arrays that share one leading example axis (at least one example)")
    return sizes.pop()


def loss_at(loss, w) -> float:
    """A real model's loss ``loss(w)`` at its starting point, checked: a finite scalar (:mod:`nqm.transfer`).

    Args:
      loss: the batch's mean loss as a function of the flattened parameters.
      w: the flattened parameters.

    Returns:
      Its value.

    Raises:
      NqmError: a loss that is not a scalar, or not finite at ``w``.
    """
    shape = jax.eval_shape(loss, w).shape
    if shape != ():
        raise NqmError(f"loss(params, batch) must return a scalar (the batch's mean loss), got shape {shape}")
    value = float(loss(w))
    if not np.isfinite(value):
        raise NqmError(f"the loss is not finite at params (got {value}): start the model where it is")
    return value
