"""Ordered momentum for asynchronous SGD (OrMo; Shi et al. 2024, Algorithm 2) and its
delay-adaptive variant (OrMo-DA)."""

from __future__ import annotations

import jax.numpy as jnp

from nqm.optimizers.base import MomentumHyper, Optimizer, register
from nqm.optimizers.momentum import VelocityState, velocity


def _ormo(workers: int, adaptive: bool) -> Optimizer:
    """OrMo with K = ``workers`` workers and β = the ``momentum`` hyperparameter.

    Gradient groups: the gradient applied at step t was computed at iteration s = max(0, t − τ_t);
    it belongs to group k = ⌈s / K⌉ (group 0 holds w₀'s gradients, group k ≥ 1 iterations
    (k−1)K+1 … kK). The newest weights sent have index t, so the latest group is I_t = ⌈t / K⌉.
    The momentum ``u`` (kept as ``v = u / η``) weights group k by β^{I−k}. Each step:

    1. if I_t > I_{t−1} (weights of a newer group were sent): ``w ← w − β u``, ``u ← β u``;
    2. ``u ← u + β^{I−k} η_t g``;  ``w ← w − ((1 − β^{I−k+1}) / (1 − β)) η_t g`` — the gradient
       enters the momentum with its group's weight and moves the weights at once by the steps
       it has missed compared with synchronous SGDM.

    β = 0 is ASGD (delayed SGD); with one worker and no delay (K = 1, I − k = 0, an advance every
    step) it is SGDM: ``w_{t+1} = w_t − η (β v_t + g_t)``. OrMo-DA uses the delay-adaptive rate
    ``η_t = η · min(1, K / τ_t)``: gradients staler than the number of workers count less (with
    round-robin workers τ = K − 1 < K, so it equals OrMo).
    """
    k_workers = int(workers)

    def init(w0):
        return VelocityState(jnp.zeros_like(w0))

    def step(hyper, state, w, g, ctx):
        beta, dtype = hyper.momentum, w.dtype
        latest = (ctx.t + k_workers - 1) // k_workers  # ⌈t / K⌉
        advanced = latest > (ctx.t + k_workers - 2) // k_workers  # ⌈(t−1)/K⌉ < ⌈t/K⌉
        group = (jnp.maximum(ctx.t - ctx.delay, 0) + k_workers - 1) // k_workers
        lag = (latest - group).astype(dtype)
        rate = hyper.lr
        if adaptive:
            rate = rate * jnp.minimum(1.0, k_workers / jnp.maximum(ctx.delay, 1).astype(dtype))
        v = jnp.where(advanced, beta * state.velocity, state.velocity)
        w = jnp.where(advanced, w - hyper.lr * beta * state.velocity, w)
        v = v + beta**lag * (rate / hyper.lr) * g
        w = w - ((1 - beta ** (lag + 1)) / (1 - beta)) * rate * g
        return w, VelocityState(v), {}

    config = (("workers", k_workers), ("convention", "ordered momentum: u = eta v, beta = momentum"))
    return Optimizer(MomentumHyper, init, step, config, velocity=velocity, workers=k_workers, linear=True)


@register("ormo", title="OrMo", reductions=[({}, "sgdm", {}, 0), ({"momentum": 0.0}, "sgdm", {"momentum": 0.0}, 3)])
def ormo(*, workers: int = 1) -> Optimizer:
    """Ordered momentum (OrMo paper, Algorithm 2): see :func:`_ormo` for the exact rules.

    Args:
      workers: K, the number of workers of the delay process (D + 1 with a constant delay D).
    """
    return _ormo(workers, adaptive=False)


@register("ormo-da", title="OrMo-DA", reductions=[({}, "ormo", {}, 3)])
def ormo_da(*, workers: int = 1) -> Optimizer:
    """OrMo with the delay-adaptive learning rate ``η_t = η · min(1, K / τ_t)`` (OrMo-DA).

    Args:
      workers: K, the number of workers of the delay process (D + 1 with a constant delay D).
    """
    return _ormo(workers, adaptive=True)
