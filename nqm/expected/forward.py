"""A state's future in closed form: sums and powers of its transition matrix ``A`` by doubling (float64,
numpy), and the exact mode's early end of a cell whose target is out of reach."""
from __future__ import annotations

import numpy as np

from nqm.status import BUDGET, RUNNING

DOUBLINGS = 64  # squarings of A: sums over 2^64 steps, every contraction a float64 can tell from 1


def series(A, X, transposed: bool = False):
    """``Σ_{u≥0} A^u X (A^u)ᵀ`` (``transposed``: ``Σ (A^u)ᵀ X A^u``) per leading index, by doubling
    (``X ← X + A X Aᵀ``, ``A ← A²``) until ``A`` vanishes; diverges where ``A`` is not stable."""
    with np.errstate(all="ignore"):
        for _ in range(DOUBLINGS):
            X = X + (np.swapaxes(A, -1, -2) @ X @ A if transposed else A @ X @ np.swapaxes(A, -1, -2))
            A = A @ A
            if not np.abs(A).max(initial=0.0) > 1e-300:
                break
    return X


def gramian(A, index: int):
    """``Σ_{u≥0} (A^u)ᵀ e eᵀ A^u`` (e: the unit vector at ``index``) per cell and component, by doubling;
    NaN where A is not stable (the sum does not converge)."""
    G = np.zeros(A.shape)
    G[..., index, index] = 1.0
    if not A.shape[-1]:
        return G
    stable = np.abs(np.linalg.eigvals(A)).max(-1) < 1
    return np.where(stable[..., None, None], series(A, G, transposed=True), np.nan)


def power(A, steps: int):
    """``(A^steps, Σ_{u<steps} (A^u)ᵀ e₀ e₀ᵀ A^u)`` per cell and component, by repeated squaring."""
    eye = np.broadcast_to(np.eye(A.shape[-1]), A.shape)
    taken, partial = eye.copy(), np.zeros(A.shape)  # A^k, G_k of the steps taken so far
    square, doubled = A.copy(), np.zeros(A.shape)  # A^m, G_m for m = 2^j
    doubled[..., 0, 0] = 1.0
    with np.errstate(all="ignore"):
        while steps:
            if steps & 1:  # k → k + m: G_{k+m} = G_k + (A^k)ᵀ G_m A^k
                partial = partial + np.swapaxes(taken, -1, -2) @ doubled @ taken
                taken = square @ taken
            steps >>= 1
            if steps:
                doubled = doubled + np.swapaxes(square, -1, -2) @ doubled @ square
                square = square @ square
    return taken, partial


def end_unreachable(A, carry: list, raw: int, weights, sigma2, limits) -> None:
    """Settle in ``carry``, exactly, the running levels that can never reach the target: in the impulse
    mode ŵ's noise part ``σ² V̂_t`` never decreases, so once it is at the target the cell ends in the
    budget — where its raw loss provably stays below the divergence bound (a stable A: the mean's
    future squares and the response's remaining ones summed by the observability Gramian), its loss
    at ``max_steps`` read by powers of A (repeated squaring). Others step on (they diverge, or stay unproven)."""
    (mu, h, v), t, status, done_at, loss = carry[0], int(carry[1]), carry[2], carry[3], carry[4]
    target, bound, max_steps = limits
    mean_weight, noise_weight = weights
    noise = (v[..., 0] * noise_weight).sum(1)[:, None] * sigma2  # (cells, levels)
    doomed = (status == RUNNING) & (noise >= target)
    cells = np.flatnonzero(doomed.any(1))
    if cells.size == 0 or t >= max_steps:
        return
    A, mu, h, v = A[cells], mu[cells], h[cells], v[cells]
    gram = gramian(A, raw)  # Σ_u (A^u)ᵀ e eᵀ A^u at w's entry, NaN where A is not stable
    with np.errstate(over="ignore", invalid="ignore"):
        future = lambda x: np.einsum("cpi,cpij,cpj->cp", x, gram, x)  # noqa: E731
        worst = ((future(mu) * mean_weight).sum(1)[:, None]
                 + ((v[..., 1] + future(h)) * noise_weight).sum(1)[:, None] * sigma2)
        safe = np.isfinite(worst) & (worst <= bound)
        at_end, partial = power(A, max_steps - t)
        value = ((np.einsum("cpij,cpj->cpi", at_end, mu)[..., 0] ** 2 * mean_weight).sum(1)[:, None]
                 + ((v[..., 0] + np.einsum("cpi,cpij,cpj->cp", h, partial, h)) * noise_weight).sum(1)[:, None] * sigma2)
    settle = doomed[cells] & safe
    rows = cells[settle.any(1)]
    status[rows] = np.where(settle[settle.any(1)], BUDGET, status[rows])
    done_at[rows] = np.where(settle[settle.any(1)], max_steps, done_at[rows])
    loss[rows] = np.where(settle[settle.any(1)], value[settle.any(1)], loss[rows])
