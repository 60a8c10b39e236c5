"""Adaptive Braking as a transform of any optimizer with a first moment (Venigalla et al. 2020).

Per parameter group ``i``, the gradient is scaled before the optimizer sees it::

    α_t^i = 1 − ρ ⟨g_t^i, u_t^i⟩ / max(‖g_t^i‖ ‖u_t^i‖, ε),     g_t ← α_t g_t

``u_t`` being the optimizer's own first moment before the step (its declared
:attr:`~nqm.optimizers.Optimizer.velocity`: the heavy ball's velocity, Adam's and Lion's ``mu``,
SGD's trace). Adaptive Braking is this transform of SGDM (:mod:`nqm.optimizers.ab`, which adds
micro-stepping and its ablations); a braked optax optimizer is this transform of the bridged one
(:func:`nqm.optimizers.from_optax` with ``brake=True``).

Bit for bit: braked optax SGD is AB (the heavy ball adds its two terms in optax's order, so that
XLA contracts the same product into the sum), and a braked optimizer at ρ = 0 is the optimizer
itself (it is handed ``g``, not ``1·g``).
"""

from __future__ import annotations

import collections
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from nqm.errors import NqmError
from nqm.validate import number
from nqm.optimizers.base import Optimizer

EPS = 1e-12  # the floor ε of the norm product (AB's default)
RHO = 0.5  # the braking coefficient's default


def checked_clamps(alpha_min, alpha_max) -> None:
    """Refuse clamps of α that are not finite or not ordered (one line each).

    Args:
      alpha_min, alpha_max: the optional lower and upper clamps of α.

    Raises:
      NqmError: a clamp that is not finite, or ``alpha_min > alpha_max``.
    """
    for name, bound in (("alpha_min", alpha_min), ("alpha_max", alpha_max)):
        if bound is not None and not np.isfinite(number(bound, name)):
            raise NqmError(f"{name} must be a finite number, got {bound}")
    if alpha_min is not None and alpha_max is not None and alpha_min > alpha_max:
        raise NqmError(f"alpha_min ({alpha_min}) must not exceed alpha_max ({alpha_max})")


def factor(g, u, rho, cosine, eps, alpha_min=None, alpha_max=None):
    """The braking factor and the cosine it was made from: ``(α, cos(g, u))`` per coordinate.

    Args:
      g: the gradient.
      u: the first moment it is braked against.
      rho: the braking coefficient ρ.
      cosine: ``cosine(g, u, eps)``, each group's cosine per coordinate (:func:`grouping`).
      eps: the floor ε of the norm product.
      alpha_min, alpha_max: optional clamps of α.

    Returns:
      ``(alpha, cos)``.
    """
    cos = cosine(g, u, eps)
    alpha = 1.0 - rho * cos
    if alpha_min is not None or alpha_max is not None:
        alpha = jnp.clip(alpha, alpha_min, alpha_max)
    return alpha, cos


def braked(base: Optimizer, *, group="global", eps: float = EPS, alpha_min: float | None = None,
           alpha_max: float | None = None, eps_name: str = "eps") -> Optimizer:
    """``base`` with its gradient braked (module docstring); its hyperparameters and ``rho``.

    Args:
      base: an optimizer that declares its first moment (:attr:`Optimizer.velocity`).
      group: ``"global"``, ``"element"``, ``"blocks:K"`` or an integer array of group labels.
      eps: the floor ε of the norm product.
      alpha_min, alpha_max: optional clamps of α.
      eps_name: the name ε is recorded under in the configuration (``brake_eps`` where the base has
        an ``eps`` of its own).

    Returns:
      The braked :class:`Optimizer` (no name: :func:`nqm.optimizers.make` gives it).

    Raises:
      NqmError: a base without a first moment, bad clamps, an unknown grouping or a bad ε.
    """
    if base.velocity is None:
        raise NqmError("braking needs the optimizer's first moment to brake against, and this one declares none")
    if not (np.isfinite(number(eps, eps_name)) and eps > 0):
        raise NqmError(f"eps must be a finite number > 0, got {eps}")
    checked_clamps(alpha_min, alpha_max)
    group_label, cosine = grouping(group)
    unbraked = base.hyper
    hyper = collections.namedtuple(f"Braked{unbraked.__name__}", [*unbraked._fields, "rho"],
                                   defaults=[*unbraked._field_defaults.values(), RHO])

    def step(cell, state, w, g, ctx):
        alpha, cos = factor(g, base.velocity(state, ctx), cell.rho, cosine, eps, alpha_min, alpha_max)
        # At ρ = 0 the base sees g itself, not 1·g: XLA would fuse the product into the base's sums
        # and round them otherwise (in the last bits), so that braking at ρ = 0 would not be the base.
        g = jnp.where(cell.rho == 0, g, alpha * g)
        w_next, state, info = base.step(unbraked(**{f: getattr(cell, f) for f in unbraked._fields}), state, w, g, ctx)
        return w_next, state, {**info, "alpha": jnp.mean(alpha), "cosine": jnp.broadcast_to(cos, g.shape)}

    config = base.config + (("group", group_label), ("alpha_min", alpha_min), ("alpha_max", alpha_max), (eps_name, eps))
    return base._replace(hyper=hyper, step=step, config=config)


def grouping(group):
    """The braking groups.

    Args:
      group: ``"global"``, ``"element"``, ``"blocks:K"`` or an integer array of group labels.

    Returns:
      ``(label, cosine)``: a description of the grouping, and ``cosine(g, v, eps)``, each group's
      cosine of ``g`` and ``v`` per coordinate.

    Raises:
      NqmError: an unknown or malformed grouping.
    """
    if isinstance(group, str) and group == "global":
        return "global", lambda g, v, eps: _ratio(jnp.vdot(g, v), jnp.vdot(g, g), jnp.vdot(v, v), eps)
    if isinstance(group, str) and group == "element":
        return "element", lambda g, v, eps: _ratio(g * v, g * g, v * v, eps)
    if isinstance(group, str) and group.startswith("blocks:"):
        count = group.split(":", 1)[1]
        if not count.isdigit() or int(count) < 1:
            raise NqmError(f"group {group!r}: write blocks:K with K a positive integer number of blocks")
        return group, _segment_cosine(lambda n: _blocks(int(count), n), int(count))
    if isinstance(group, str):
        raise NqmError(f"unknown group {group!r}; choose global, element, blocks:K or pass an array of labels")
    labels = np.asarray(group)
    if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
        raise NqmError("a group partition must be a 1-D array of non-negative integer labels, one per parameter")
    return f"partition({labels.max() + 1} groups)", _segment_cosine(lambda n: _check_size(labels, n), int(labels.max()) + 1)


def _segment_cosine(labels_for, count):
    def cosine(g, v, eps):
        labels = jnp.asarray(labels_for(g.shape[-1]), jnp.int32)
        sums = [jax.ops.segment_sum(x, labels, num_segments=count) for x in (g * v, g * g, v * v)]
        return _ratio(*sums, eps)[labels]

    return cosine


def _blocks(count, n):
    if count > n:
        raise NqmError(f"group blocks:{count} has more blocks than the problem's {n} parameters; use K <= {n}")
    return (np.arange(n) * count) // n


def _check_size(labels, n):
    if labels.size != n:
        raise NqmError(f"the group partition has {labels.size} labels but the problem has {n} parameters")
    return labels


def _ratio(gv, gg, vv, eps) -> Any:
    """``⟨g,v⟩ / max(‖g‖‖v‖, ε)``; the norms are multiplied after the square roots to avoid overflow."""
    return gv / jnp.maximum(jnp.sqrt(gg) * jnp.sqrt(vv), eps)
