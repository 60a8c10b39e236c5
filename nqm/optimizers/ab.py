"""Adaptive Braking (Venigalla et al. 2020): SGDM with its gradient scaled by ``α = 1 − ρ cos(g, v)``."""

from __future__ import annotations

import jax.numpy as jnp

from nqm.errors import NqmError
from nqm.validate import count
from nqm.conventions import momentum_coefficient
from nqm.optimizers.base import NearZero, Optimizer, register
from nqm.optimizers.momentum import VelocityState, heavy_ball
from nqm.optimizers.braking import EPS, braked, checked_clamps, factor, grouping

MODES = ("both", "vel-only", "weight-only")
MAX_MICRO_STEPS = 1000  # a step costs S gradient alignments: the bound keeps a run's cost that of 1,000 runs


@register("ab", title="Adaptive Braking", reductions=[({"rho": 0.0}, "sgdm", {}, 2)], braking_of="sgdm",
          near_zero=NearZero("sgdm", floor="eps", homogeneous=True))
def adaptive_braking(
    *,
    group="global",
    micro_steps: int = 1,
    mode: str = "both",
    alpha_min: float | None = None,
    alpha_max: float | None = None,
    eps: float = EPS,
    dampening: bool = False,
) -> Optimizer:
    """Adaptive Braking, per parameter group ``i``:

        α_t^i = 1 − ρ ⟨g_t^i, v_t^i⟩ / max(‖g_t^i‖ ‖v_t^i‖, ε)
        v_{t+1} = m v_t + c α_t g_t,      w_{t+1} = w_t − η v_{t+1}

    (``c = 1``, or ``1 − m`` with ``dampening``). α uses ``v_t``, before the new gradient; with
    ``v = 0``, α = 1; ρ = 0 is SGDM bit for bit. It is the braking transform of SGDM
    (:func:`nqm.optimizers.braking.braked`), the braked gradient rounded once.

    Micro-stepping (AB paper, Algorithm 10) splits the velocity update into ``S`` parts:
    ``u ← m v``, then ``S`` times ``α ← 1 − ρ cos(g, ·)``, ``u ← u + c (α/S) g``. The first
    alignment is measured against ``v_t`` (the direction of ``m v_t``, and still defined at m = 0),
    later ones against the partly updated ``u``.

    Modes (AB paper, Fig. 12): ``both`` (default); ``vel-only`` brakes the velocity but steps the
    weights with ``m v_t + c g_t``; ``weight-only`` keeps ``v_{t+1} = m v_t + c g_t`` and steps the
    weights with the braked ``u``.

    Args:
      group: ``"global"`` (one group; rotation-invariant), ``"element"`` (α per coordinate),
        ``"blocks:K"`` (K contiguous, near-equal blocks) or an integer array of group labels.
      micro_steps: ``S``, between 1 and :data:`MAX_MICRO_STEPS`.
      mode: ``"both"``, ``"vel-only"`` or ``"weight-only"``.
      alpha_min, alpha_max: optional clamps of α (e.g. ``alpha_max=1`` never amplifies).
      eps: floor ``ε`` of the norm product.
      dampening: weight the gradient by ``1 − m``.

    Reference: Venigalla et al. (2020), eq. 2 and Algorithm 10.
    """
    if mode not in MODES:
        raise NqmError(f"unknown AB mode {mode!r}; choose one of {', '.join(MODES)}")
    micro_steps = count(micro_steps, "micro_steps", high=MAX_MICRO_STEPS)
    sgdm = heavy_ball(dampening=dampening)
    plain = braked(sgdm, group=group, eps=eps, alpha_min=alpha_min, alpha_max=alpha_max)
    config = plain.config + (("micro_steps", micro_steps), ("mode", mode))
    if micro_steps == 1 and mode == "both":
        return plain._replace(config=config)
    checked_clamps(alpha_min, alpha_max)
    _, cosine = grouping(group)

    def step(hyper, state, w, g, ctx):
        del ctx
        c = momentum_coefficient(hyper.momentum, dampening)
        v = state.velocity
        heavy = hyper.momentum * v
        u, reference, alphas, cosines = heavy, v, [], []
        for _ in range(micro_steps):
            alpha, cos = factor(g, reference, hyper.rho, cosine, eps, alpha_min, alpha_max)
            u = u + (c * alpha / micro_steps) * g
            reference = u
            alphas.append(alpha), cosines.append(cos)
        v_next, direction = {"both": (u, u), "vel-only": (u, heavy + c * g), "weight-only": (heavy + c * g, u)}[mode]
        # The first micro-step's α (mean over parameters) and cos(g, v) of each group, per parameter.
        info = {"alpha": jnp.mean(alphas[0]), "cosine": jnp.broadcast_to(cosines[0], g.shape)}
        return w - hyper.lr * direction, VelocityState(v_next), info

    return plain._replace(step=step, config=config)
