"""Adaptive Braking (Venigalla et al. 2020): scale the gradient by ``α = 1 − ρ cos(g, v)``."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nqm.errors import NqmError
from nqm.optimizers.base import NearZero, Optimizer, convention, momentum_coefficient, register
from nqm.optimizers.base import VelocityState, velocity

MODES = ("both", "vel-only", "weight-only")


class BrakingHyper(NamedTuple):
    lr: Any
    momentum: Any
    rho: Any = 0.5  # the braking coefficient ρ (swept; 0 is SGDM)


@register("ab", title="Adaptive Braking", reductions=[({"rho": 0.0}, "sgdm", {}, 2)],
          near_zero=NearZero("sgdm", floor="eps", homogeneous=True))
def adaptive_braking(
    *,
    group="global",
    micro_steps: int = 1,
    mode: str = "both",
    alpha_min: float | None = None,
    alpha_max: float | None = None,
    eps: float = 1e-12,
    dampening: bool = False,
) -> Optimizer:
    """Adaptive Braking, per parameter group ``i``:

        α_t^i = 1 − ρ ⟨g_t^i, v_t^i⟩ / max(‖g_t^i‖ ‖v_t^i‖, ε)
        v_{t+1} = m v_t + c α_t g_t,      w_{t+1} = w_t − η v_{t+1}

    (``c = 1``, or ``1 − m`` with ``dampening``). α uses ``v_t``, before the new gradient; with
    ``v = 0``, α = 1; ρ = 0 is SGDM bit for bit.

    Micro-stepping (AB paper, Algorithm 10) splits the velocity update into ``S`` parts:
    ``u ← m v``, then ``S`` times ``α ← 1 − ρ cos(g, ·)``, ``u ← u + c (α/S) g``. The first
    alignment is measured against ``v_t`` (the direction of ``m v_t``, and still defined at m = 0),
    later ones against the partly updated ``u``; so S = 1 is plain AB exactly.

    Modes (AB paper, Fig. 12): ``both`` (default); ``vel-only`` brakes the velocity but steps the
    weights with ``m v_t + c g_t``; ``weight-only`` keeps ``v_{t+1} = m v_t + c g_t`` and steps the
    weights with the braked ``u``.

    Args:
      group: ``"global"`` (one group; rotation-invariant), ``"element"`` (α per coordinate),
        ``"blocks:K"`` (K contiguous, near-equal blocks) or an integer array of group labels.
      micro_steps: ``S ≥ 1``.
      mode: ``"both"``, ``"vel-only"`` or ``"weight-only"``.
      alpha_min, alpha_max: optional clamps of α (e.g. ``alpha_max=1`` never amplifies).
      eps: floor ``ε`` of the norm product.
      dampening: weight the gradient by ``1 − m``.

    Reference: Venigalla et al. (2020), eq. 2 and Algorithm 10.
    """
    if mode not in MODES:
        raise NqmError(f"unknown AB mode {mode!r}; choose one of {', '.join(MODES)}")
    if int(micro_steps) != micro_steps or micro_steps < 1:
        raise NqmError(f"micro_steps must be an integer >= 1, got {micro_steps}")
    if not (np.isfinite(eps) and eps > 0):
        raise NqmError(f"eps must be a finite number > 0, got {eps}")
    for name, bound in (("alpha_min", alpha_min), ("alpha_max", alpha_max)):
        if bound is not None and not np.isfinite(bound):
            raise NqmError(f"{name} must be a finite number, got {bound}")
    if alpha_min is not None and alpha_max is not None and alpha_min > alpha_max:
        raise NqmError(f"alpha_min ({alpha_min}) must not exceed alpha_max ({alpha_max})")
    micro_steps = int(micro_steps)
    group_label, cosine = grouping(group)

    def init(w0):
        return VelocityState(jnp.zeros_like(w0))

    def step(hyper, state, w, g, ctx):
        del ctx
        c = momentum_coefficient(hyper.momentum, dampening)
        v = state.velocity
        heavy_ball = hyper.momentum * v
        braked, reference, alphas, cosines = heavy_ball, v, [], []
        for _ in range(micro_steps):
            cosines.append(cosine(g, reference, eps))
            alpha = 1.0 - hyper.rho * cosines[-1]
            if alpha_min is not None or alpha_max is not None:
                alpha = jnp.clip(alpha, alpha_min, alpha_max)
            braked = braked + (c * alpha / micro_steps) * g
            reference = braked
            alphas.append(alpha)
        if mode == "both":
            v_next, direction = braked, braked
        elif mode == "vel-only":
            v_next, direction = braked, heavy_ball + c * g
        else:
            v_next, direction = heavy_ball + c * g, braked
        # The first micro-step's α (mean over parameters) and cos(g, v) of each group, per parameter.
        info = {"alpha": jnp.mean(alphas[0]), "cosine": jnp.broadcast_to(cosines[0], g.shape)}
        return w - hyper.lr * direction, VelocityState(v_next), info

    config = (
        ("group", group_label), ("micro_steps", micro_steps), ("mode", mode),
        ("alpha_min", alpha_min), ("alpha_max", alpha_max), ("eps", eps),
        ("dampening", dampening), ("convention", convention(dampening)),
    )
    return Optimizer(BrakingHyper, init, step, config, velocity=velocity)


def grouping(group):
    """AB's parameter groups (also used by the braked optax optimizers).

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


def _ratio(gv, gg, vv, eps):
    """``⟨g,v⟩ / max(‖g‖‖v‖, ε)``; the norms are multiplied after the square roots to avoid overflow."""
    return gv / jnp.maximum(jnp.sqrt(gg) * jnp.sqrt(vv), eps)
