"""Stability and steady state of each cell's recursion, from its reflection coefficients.

The step-down (reverse Levinson–Durbin) recursion turns the coefficients ``φ_1 … φ_p`` of the
autoregression ``x_t = Σ φ_k x_{t−k} + ε_t`` (here ``φ_{k+1} = a_k``) into its reflection
coefficients: ``κ_k = φ_{k,k}``, ``φ_{k−1,i} = (φ_{k,i} + κ_k φ_{k,k−i}) / (1 − κ_k²)``. All roots of
the characteristic polynomial lie strictly inside the unit circle iff every ``|κ_k| < 1`` (the
Schur–Cohn test), and then, driven by unit white noise, ``γ(0) = 1 / Π_k (1 − κ_k²)`` and
``γ(1) = κ_1 γ(0)`` (Box, Jenkins & Reinsel, *Time Series Analysis*, §3.2). With the noise
``b_0 z_t + b_1 z_{t−1}``, ``Σ_u ψ_u² = (b_0² + b_1²) γ(0) + 2 b_0 b_1 γ(1)``, and the steady state
``V_∞ = ½ Σ_j λ_j² Σ_u ψ_{j,u}²``. No linear solve, so no singular system: O(p²) per component.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from nqm.expected.recursion import Recursion

BATCH = 2**20  # (cells × components × p) per call
SMALL = 512  # components up to which numpy, not a compiled kernel, analyses a cell: compiling costs most then


def _levinson(xp, base, slope, noise, lam, weight):
    """``(stable, V_∞)`` of cells with rows ``base``, ``slope`` (cells, p), ``noise`` (cells, 2);
    ``xp``: numpy (small spectra: no compilation) or jax.numpy (jitted)."""
    p = base.shape[-1]
    phi = base.T[:, :, None] + slope.T[:, :, None] * lam  # (p, cells, components): φ_{k+1} = a_k
    stable = xp.ones(phi.shape[1:], bool)
    scale = xp.ones(phi.shape[1:])
    for k in range(p, 0, -1):
        kappa = phi[k - 1]
        stable &= xp.abs(kappa) < 1.0  # NaN (an earlier level overflowed) is unstable too
        room = 1.0 - kappa**2
        scale = scale * room
        phi = (phi[: k - 1] + kappa * phi[k - 2 :: -1] if k > 1 else phi[:0]) / room
    gamma0 = 1.0 / scale
    gamma1 = kappa * gamma0  # κ_1 = ρ(1), the lag-one autocorrelation
    b0, b1 = noise[:, :1], noise[:, 1:]
    psi_squares = (b0**2 + b1**2) * gamma0 + 2.0 * b0 * b1 * gamma1
    cell_stable = stable.all(-1)
    unit = 0.5 * xp.sum(xp.where(stable, psi_squares, 0.0) * weight * lam**2, -1)
    return cell_stable, xp.where(cell_stable, unit, xp.inf)


_levinson_jit = jax.jit(functools.partial(_levinson, jnp))


def analyse(rec: Recursion, lam, weight) -> tuple[np.ndarray, np.ndarray]:
    """Per cell: whether its recursion is stable at every eigenvalue, and ``V_∞`` (∞ if not)."""
    cells = rec.cells
    # Rows padded to a power of two: few shapes, few compilations, however many cells each call has.
    rows = max(1, min(1 << max(cells - 1, 0).bit_length(), BATCH // (lam.size * rec.order)))
    stable, unit = np.zeros(cells, bool), np.full(cells, np.inf)
    levinson = functools.partial(_levinson, np) if lam.size <= SMALL else _levinson_jit
    with jax.enable_x64(True), np.errstate(all="ignore"):  # overflow where unstable, as in jax.numpy
        for start in range(0, cells, rows):
            take = np.minimum(np.arange(start, start + rows), cells - 1)  # one shape: one compilation
            s, u = levinson(rec.base[take], rec.slope[take], rec.noise[take], lam, weight)
            n = min(rows, cells - start)
            stable[start:start + n], unit[start:start + n] = np.asarray(s)[:n], np.asarray(u)[:n]
    return stable, unit


def stable(rec: Recursion, lam) -> np.ndarray:
    """Whether each cell's recursion is stable at every eigenvalue (all roots inside the unit circle).

    Args:
      rec: the cells' :class:`Recursion`.
      lam: the problem's eigenvalues.

    Returns:
      One bool per cell.
    """
    return analyse(rec, np.asarray(lam, np.float64), np.ones(np.size(lam)))[0]
