"""A stable cell's recursion in closed form, and what it proves before any stepping.

Over the roots ``z_r`` of a component's characteristic polynomial ``P``, for s ≥ 1,

    μ_s = Σ_r c_r z_r^(s−1),    h_s = Σ_r d_r z_r^(s−1),    ψ_u = Σ_r e_r z_r^(u−2)  (u ≥ 2),

with ``e_r = d_r (b_0 z_r + b_1)``, ``ψ_0 = b_0`` and ``ψ_1 = b_0 a_0 + b_1``. The coefficients are fitted
to ``μ_1 … μ_p`` and ``h_1 … h_p`` (the recursion run p steps from its initial history) by Lagrange
interpolation, ``c_r = Σ_i [x^i](P(x)/(x − z_r)) y_i / Π_{q≠r}(z_r − z_q)``: no linear solve. Fitting
after the first step rather than to the history keeps the fit's gain ``Σ_r |c_r| + |d_r|`` small
where a delay gives P a cluster of tiny roots, whose terms have all but vanished by then.

The roots of every component come from a few: companion-matrix eigenvalues at log-spaced
eigenvalues ``λ`` seed Aberth–Ehrlich iterations (Aberth, *Math. Comp.* 27, 1973) at each
component's ``λ`` (the roots move smoothly with λ); a root set whose product ``Π (x − z_r)`` is not
``P`` to ``BACKWARD`` (relative backward error) is replaced by companion eigenvalues.
"""

from __future__ import annotations

from typing import NamedTuple

import functools

import jax
import jax.numpy as jnp
import numpy as np

from nqm import stability
from nqm.expected.recursion import Recursion

GAIN = 1e3  # the largest closed-form gain (Σ|c_r| + |d_r|) a shortcut may rest on
FIT = 1e-9  # ... the largest relative misfit of the closed form at steps 1 … p
MARGIN = 1e-3  # ... and the relative margin by which its bounds must hold: rounding of z^s over 10⁵ steps
WINDOWS = 48  # log-spaced windows of the budget that the shortcut's bounds cover
SKIP = 100  # the least number of steps worth skipping (stepping from the start is bit-exact)
SEED_SPACING = 0.05  # log-λ spacing of the polynomials whose companion eigenvalues seed the others
POLISH = 4  # Aberth–Ehrlich iterations from the seeds: the roots move by ~1 % between seeds
BACKWARD = 1e-12  # largest accepted max_k |[x^k](Π (x − z_r) − P)| / Σ_k |P_k|
BATCH = 2**17  # (windows or root pairs) × components per call
SMALL = 512  # components up to which numpy analyses a cell: no compilation, which is what costs most then


class Shortcut(NamedTuple):
    """What a cell's closed form settles: the noise levels ``proven`` never to end before the budget
    (``final``: their E[L] there), and the step ``start`` before which no other level can end, with
    the state there (``ring``: (p, 2, components), ``ring[x]`` = ``(μ, h)`` at step ``start − x``;
    ``v``: ``V_start``)."""

    proven: np.ndarray
    final: np.ndarray
    start: int = 0
    ring: np.ndarray | None = None
    v: float = 0.0


def _chunk(p: int, components: int) -> int:
    """Components per call: each call holds p² and (windows + 1) values per component; a chunk that
    stays in cache is faster than a longer one."""
    return int(np.clip(BATCH // max(p * p, WINDOWS + 1), 16, components))


def _pieces(n: int, size: int):
    """Index arrays of ``size`` over ``range(n)``, the last padded with its final index (one shape)."""
    for start in range(0, n, size):
        yield np.minimum(np.arange(start, start + size), n - 1), min(size, n - start)


@jax.jit
def _polish(coefficients, real, imag):
    """Aberth–Ehrlich iterations on the roots ``real + i imag`` (p, K) of the monic polynomials with
    ``coefficients`` (p + 1, K), highest power first; also each root set's backward error. In real
    arithmetic: complex division is what an iteration costs."""
    p = real.shape[0]
    off = ~jnp.eye(p, dtype=bool)[:, :, None]

    def divide(ar, ai, br, bi):
        norm = br * br + bi * bi
        return (ar * br + ai * bi) / norm, (ai * br - ar * bi) / norm

    def iteration(_, z):
        zr, zi = z
        vr, vi, sr, si = jnp.ones_like(zr), jnp.zeros_like(zr), jnp.zeros_like(zr), jnp.zeros_like(zr)
        for k in range(1, p + 1):  # Horner: P and P' at every root
            sr, si = sr * zr - si * zi + vr, sr * zi + si * zr + vi
            vr, vi = vr * zr - vi * zi + coefficients[k], vr * zi + vi * zr
        nr, ni = divide(vr, vi, sr, si)  # the Newton step P/P'
        dr = jnp.where(off, zr[:, None] - zr[None], 1.0)
        di = jnp.where(off, zi[:, None] - zi[None], 0.0)
        norm = dr * dr + di * di
        rr, ri = jnp.where(off, dr / norm, 0.0).sum(1), jnp.where(off, -di / norm, 0.0).sum(1)  # Σ_q 1/(z_r − z_q)
        wr, wi = divide(nr, ni, 1.0 - (nr * rr - ni * ri), -(nr * ri + ni * rr))
        return zr - wr, zi - wi

    real, imag = jax.lax.fori_loop(0, POLISH, iteration, (real, imag))
    z = real + 1j * imag
    product = jnp.zeros((p + 1,) + z.shape[1:], z.dtype).at[0].set(1.0)
    for r in range(p):  # Π (x − z_r), highest power first
        product = product.at[1:].add(-z[r] * product[:-1])
    error = jnp.abs(product - coefficients).max(0) / jnp.abs(coefficients).sum(0)
    return real, imag, error


def roots(rec: Recursion, cell: int, lam) -> np.ndarray:
    """The roots of cell ``cell``'s characteristic polynomial at each eigenvalue: (components, p)."""
    polynomial = rec.polynomial(cell, lam)
    log = np.log(lam)
    seeds = max(2, int(np.ceil((log.max() - log.min()) / SEED_SPACING)) + 1)
    if lam.size <= 2 * seeds:
        return stability.roots(polynomial).astype(complex)
    grid = np.linspace(log.min(), log.max(), seeds)
    start = stability.roots(rec.polynomial(cell, np.exp(grid)))
    start = start[np.rint((log - grid[0]) / (grid[1] - grid[0])).astype(int)] * (1 + 1e-3j)  # off the real axis:
    # a conjugate-symmetric start stays so, and could not split into two real roots
    z = np.empty(start.shape, complex)
    size = _chunk(rec.order, lam.size)
    for take, n in _pieces(lam.size, size):
        real, imag, error = _polish(polynomial[take].T, start[take].real.T, start[take].imag.T)
        z[take[:n]] = (np.asarray(real) + 1j * np.asarray(imag)).T[:n]
        bad = take[:n][~(np.asarray(error)[:n] <= BACKWARD)]
        if bad.size:
            z[bad] = stability.roots(polynomial[bad])
    return z


def _power(z, n, xp=np):
    """``z^n`` (n ≥ 0) in polar form, as (real, imaginary) parts: 0⁰ = 1, and no NaN from log 0.
    Real arithmetic here and below: XLA's complex arithmetic on CPU is several times slower."""
    modulus = xp.abs(z) ** n
    return modulus * xp.cos(n * xp.angle(z)), modulus * xp.sin(n * xp.angle(z))


def _psi(d, z, a0, noise):
    """``e_r`` (p, K) and ``ψ_0² + ψ_1²`` (K,) of components with impulse-response coefficients ``d``."""
    b0, b1 = noise[0], noise[1]
    return d * (b0 * z + b1), b0**2 + (b0 * a0 + b1) ** 2


def _noise(e, z, psi01, steps, xp=np):
    """Σ_{u<s} ψ_u² per component at each s in ``steps`` (each ≥ 2) and at s = ∞, (len(steps) + 1,
    K): ``ψ_0² + ψ_1²`` plus ``Re Σ_rq e_r e_q* (1 − (z_r z_q*)^(s−2)) / (1 − z_r z_q*)``."""
    outer = lambda x, y: x[:, None] * y[None]
    er, ei, zr, zi = e.real, e.imag, z.real, z.imag
    pr, pi = outer(er, er) + outer(ei, ei), outer(ei, er) - outer(er, ei)  # e_r e_q*
    wr, wi = 1.0 - outer(zr, zr) - outer(zi, zi), outer(zr, zi) - outer(zi, zr)  # 1 − z_r z_q*
    norm = wr * wr + wi * wi
    pr, pi = (pr * wr + pi * wi) / norm, (pi * wr - pr * wi) / norm  # e_r e_q* / (1 − z_r z_q*)
    sums = []
    for s in steps:
        xr, xi = _power(z, s - 2, xp)  # (z_r z_q*)^n = z_r^n (z_q^n)*
        sums.append(xp.sum(pr * (outer(xr, xr) + outer(xi, xi)) - pi * (outer(xi, xr) - outer(xr, xi)), (0, 1)))
    at_infinity = psi01 + xp.sum(pr, (0, 1))
    return xp.stack([at_infinity - tail for tail in sums] + [at_infinity])


def _analyse(xp, a, first, lam, z, noise, mean_weight, noise_weight, edges, max_steps):
    """The closed form of components with coefficients ``a`` (p, K) and roots ``z`` (p, K), and what
    :func:`shortcut` rests on, summed over components: the per-window lower bounds of the mean part
    and of V, the upper bound's parts, the largest gain and misfit, and E[L]'s parts at the budget.
    ``xp``: numpy (small spectra: no compilation) or jax.numpy (jitted)."""
    p = a.shape[0]
    history = xp.stack([xp.ones((p,) + lam.shape), (xp.arange(p) == 0)[:, None] * xp.ones(lam.shape)])  # μ_{s≤0} = 1;
    # h_0 = 1, h_{s<0} = 0
    values = []  # y_i: (μ, h) at step i + 1
    for i in range(p):
        values.append(xp.sum(a * history, 1) + (xp.stack([first * lam, 0.0 * lam]) if i == 0 else 0.0))
        history = xp.concatenate([values[-1][:, None], history[:, :-1]], 1)
    q, numerator = xp.ones_like(z), 0.0
    for k in range(p):  # Lagrange: P(x)/(x − z_r) = Σ_k q_k x^(p−1−k), q_0 = 1, q_k = P_k + z_r q_{k−1}
        q = q if k == 0 else z * q - a[k - 1]
        numerator = numerator + q * values[p - 1 - k][:, None]
    off = ~xp.eye(p, dtype=bool)[:, :, None]
    c, d = numerator / xp.prod(xp.where(off, z[:, None] - z[None], 1.0), 1)  # ÷ P'(z_r) = Π_{q≠r} (z_r − z_q)
    misfit, terms = 0.0, xp.stack([c, d])  # Σ_r c_r z_r^i against y_i, i = 0 … p − 1
    for i in range(p):
        misfit = xp.maximum(misfit, xp.max(xp.abs(terms.sum(1) - values[i]) / (1.0 + xp.abs(terms).sum(1))))
        terms = terms * z

    # the mean part over each window [s_a, s_b]: from the two slowest roots k, l and the rest R,
    # |μ_s| ≥ |c_k||z_k|^(s_b−1) − |c_l||z_l|^(s_a−1) − Σ_R |c_r| ρ_R^(s_a−1): three exps per edge, whatever p
    size, modulus = xp.abs(c), xp.abs(z)
    rows = xp.arange(p)[:, None]
    first_ = rows == xp.argmax(modulus, 0)
    second = rows == xp.argmax(xp.where(first_, -1.0, modulus), 0)
    rest = ~(first_ | second)
    pick = lambda x, which: xp.sum(xp.where(which, x, 0.0), 0)
    n = (edges - 1)[:, None].astype(modulus.dtype)
    at = [coefficient * xp.exp(xp.where(n > 0, n * xp.log(root), 0.0))  # |c||z|^(s−1) at each edge: (edges, K)
          for coefficient, root in ((pick(size, first_), pick(modulus, first_)),
                                    (pick(size, second), pick(modulus, second)),
                                    (pick(size, rest), xp.max(xp.where(rest, modulus, 0.0), 0)))]
    low = xp.maximum(at[0][1:] - at[1][:-1] - at[2][:-1], at[1][1:] - at[0][:-1] - at[2][:-1])
    mean_low = xp.sum(mean_weight * xp.maximum(low, 0.0) ** 2, -1)
    # the noise part: V_s ≥ V_{s_a} ≥ V_∞ − Σ_{u ≥ s_a} ψ_u², the tail at most (Σ|e_r|)² ρ^(2(s_a−2)) / (1 − ρ²)
    e, psi01 = _psi(d, z, a[0], noise)
    v_last, steady = _noise(e, z, psi01, (max_steps,), xp)
    slowest = xp.max(modulus, 0)
    s_a = edges[:-1, None]
    decay = xp.exp(xp.where(s_a > 2, 2.0 * (s_a - 2) * xp.log(slowest), 0.0))
    to_come = xp.where(s_a >= 2, xp.sum(xp.abs(e), 0) ** 2 * decay / (1.0 - slowest**2), xp.inf)
    noise_low = xp.sum(noise_weight * xp.maximum(steady - to_come, 0.0), -1)
    gain = xp.max(xp.sum(xp.abs(c) + xp.abs(d), 0))
    power = _power(z, max_steps - 1, xp)
    mean_last = xp.sum(c.real * power[0] - c.imag * power[1], 0)
    return c, d, (mean_low, noise_low, xp.sum(mean_weight * xp.sum(size, 0) ** 2), xp.sum(noise_weight * steady),
                  xp.where(xp.isfinite(gain), gain, xp.inf), xp.where(xp.isfinite(misfit), misfit, xp.inf),
                  xp.sum(mean_weight * mean_last**2), xp.sum(noise_weight * v_last))


_analyse_jit = jax.jit(functools.partial(_analyse, jnp))


def _values(c, d, z, steps):
    """``μ_s`` and ``h_s`` at the steps ``steps`` (≥ 1): (steps, 2, K)."""
    pr, pi = _power(z[None], (steps - 1)[:, None, None])
    return np.stack([np.sum(c.real * pr - c.imag * pi, 1), np.sum(d.real * pr - d.imag * pi, 1)], 1)


def shortcut(rec: Recursion, cell: int, lam, weight, sigma2, target, bound, max_steps) -> Shortcut | None:
    """For a stable cell, what can be shown without stepping it (None: nothing).

    The proof covers the steps s = 1 … max_steps in log-spaced windows [s_a, s_b]: the mean part is
    at least ``½ Σ λ (|c_k||z_k|^(s_b−1) − Σ_{r≠k} |c_r||z_r|^(s_a−1))₊²`` for any root k (all |z| < 1),
    the noise part ``σ² V_s`` at least ``σ² V_{s_a}`` (V never decreases), and ``V_{s_a}`` at least
    ``V_∞`` less a geometric bound of what is still to come; from above, the expected loss is at
    most ``½ Σ λ (Σ_r |c_r|)² + σ² V_∞``. A level whose lower bound holds in every window (and upper
    bound below the divergence bound) never ends before the budget; the others cannot end before
    the first window where it fails, so their stepping starts there, from the closed-form state.
    Components whose closed form is ill-conditioned (gain > GAIN, or misfit > FIT) stop the
    shortcut, and a relative MARGIN covers its rounding, so nothing is settled that the recursion
    would not give."""
    p, comps = rec.order, lam.size
    z = roots(rec, cell, lam)
    if not np.abs(z).max() < 1.0:  # roots on the unit circle
        return None
    a = rec.coefficients(cell, lam)
    edges = np.unique(np.round(np.geomspace(1, max_steps, WINDOWS + 1)).astype(np.int64))
    edges = np.concatenate([edges, np.full(WINDOWS + 1 - edges.size, edges[-1])])  # one shape: one compilation
    mean_weight, noise_weight = 0.5 * weight * lam, 0.5 * weight * lam**2
    pieces, parts = [], []
    analyse = functools.partial(_analyse, np) if comps <= SMALL else _analyse_jit
    for take, n in _pieces(comps, _chunk(p, comps)):
        used = np.arange(take.size) < n  # the padding weighs nothing
        with np.errstate(all="ignore"):  # log 0 = −∞ and the like, as in jax.numpy
            c, d, out = analyse(a[take].T, rec.first[cell], lam[take], z[take].T, rec.noise[cell],
                                 mean_weight[take] * used, noise_weight[take] * used, edges, max(max_steps, 2))
        pieces.append((c, d, z[take].T, a[take, 0], noise_weight[take] * used, n))
        parts.append([np.asarray(x) for x in out])
    mean_low, noise_low, upper, steady, gain, misfit, mean_last, v_last = (np.stack(x) for x in zip(*parts))
    if not (gain.max() <= GAIN and misfit.max() <= FIT):
        return None
    mean_low, noise_low, upper, steady = mean_low.sum(0), noise_low.sum(0), upper.sum(), steady.sum()
    threshold = target * (1 + MARGIN)
    fails = mean_low[:, None] + noise_low[:, None] * sigma2 < threshold  # (windows, levels)
    safe = upper + sigma2 * steady <= bound * (1 - MARGIN)
    proven = safe & ~fails.any(0)
    final = np.where(proven, mean_last.sum() + sigma2 * v_last.sum(), 0.0)
    open_ = ~proven
    start = int(edges[np.argmax(fails[:, open_], 0)].min()) if open_.any() and safe[open_].all() else 0
    if start < max(SKIP, p + 1):
        return Shortcut(proven, final)
    positions = start - np.arange(p)  # ring[x]: the state at step start − x
    ring, v = [], 0.0
    for c, d, roots_, a0, weight_, n in pieces:
        c, d = np.asarray(c), np.asarray(d)
        ring.append(_values(c, d, roots_, positions)[..., :n])
        e, psi01 = _psi(d, roots_, a0, rec.noise[cell])
        v += float(weight_ @ _noise(e, roots_, psi01, (start,))[0])
    return Shortcut(proven, final, start, np.concatenate(ring, -1), v)
