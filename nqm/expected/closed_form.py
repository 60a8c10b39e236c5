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

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nqm.thresholds import polynomials
from nqm.expected.recursion import Recursion
from nqm.validate import MAX_STEPS
from nqm.expected.steady import SMALL  # components up to which numpy, not a compiled kernel, analyses a cell

GAIN = 1e3  # the largest closed-form gain (Σ|c_r| + |d_r|) a shortcut may rest on
FIT = 1e-9  # ... the largest relative misfit of the closed form at the steps it is fitted to
MARGIN = 1e-3  # ... and the relative margin by which its bounds must hold: rounding of z^s over 10⁵ steps
WINDOWS = 48  # log-spaced windows of the budget that the shortcut's bounds cover
SKIP = 100  # the least number of steps worth skipping (stepping from the start is bit-exact)
REFINE = 2  # times the first window where a level may end is split into WINDOWS finer ones
SEED_SPACING = 0.05  # log-λ spacing of the polynomials whose companion eigenvalues seed the others
POLISH = 3  # Aberth–Ehrlich iterations from the seeds: the roots move by ~1 % between seeds, and each
# iteration cubes the error (a fourth one fixed no root set that three left above BACKWARD)
BACKWARD = 1e-12  # largest accepted max_k |[x^k](Π (x − z_r) − P)| / Σ_k |P_k|
BATCH = 2**17  # (windows or root pairs) × components per call


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


def _float64(f):
    """``f`` run with JAX in float64, whoever calls it: the closed form's bounds rest on it."""
    @functools.wraps(f)
    def in_float64(*args, **kwargs):
        with jax.enable_x64(True):
            return f(*args, **kwargs)
    return in_float64


def _chunk(p: int, components: int) -> int:
    """Components per call: each call holds p² and (windows + 1) values per component; a chunk that
    stays in cache is faster than a longer one."""
    size = int(np.clip(BATCH // max(p * p, WINDOWS + 1), 16, components))
    return -(-components // -(-components // size))  # as many chunks, of equal sizes: less padding


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


def _seeds(lam) -> int:
    """How many seed polynomials span the log-spectrum of ``lam`` at :data:`SEED_SPACING`."""
    log = np.log(lam)
    return max(2, int(np.ceil((log.max() - log.min()) / SEED_SPACING)) + 1)


def eigenproblems(lam) -> int:
    """How many companion eigenvalue problems :func:`roots` solves for one cell, at most: one per
    seed, or one per component where there are few (a fallback for a root set that failed to
    polish is rare and not counted)."""
    seeds = _seeds(lam)
    return lam.size if lam.size <= 2 * seeds else seeds


@_float64
def roots(rec: Recursion, cell: int, lam) -> np.ndarray:
    """The roots of cell ``cell``'s characteristic polynomial at each eigenvalue: (components, p)."""
    polynomial = rec.polynomial(cell, lam)
    log = np.log(lam)
    seeds = _seeds(lam)
    if lam.size <= 2 * seeds:
        return polynomials.roots(polynomial).astype(complex)
    grid = np.linspace(log.min(), log.max(), seeds)
    start = polynomials.roots(rec.polynomial(cell, np.exp(grid)))
    nearest = np.clip(np.rint((log - grid[0]) / max(grid[1] - grid[0], 1e-300)), 0, seeds - 1).astype(int)
    start = start[nearest] * (1 + 1e-3j)  # off the real axis: a conjugate-symmetric start stays so, and
    # could not split into two real roots
    z = np.empty(start.shape, complex)
    size = _chunk(rec.order, lam.size)
    for take, n in _pieces(lam.size, size):
        real, imag, error = _polish(polynomial[take].T, start[take].real.T, start[take].imag.T)
        z[take[:n]] = (np.asarray(real) + 1j * np.asarray(imag)).T[:n]
        bad = take[:n][~(np.asarray(error)[:n] <= BACKWARD)]
        if bad.size:
            z[bad] = polynomials.roots(polynomial[bad])
    return z


def _power(z, n: int, xp=np):
    """``z^n`` (an integer n ≥ 0) by repeated squaring in real arithmetic: no arctangent, sine or
    cosine, which XLA's CPU code computes several times slower than the ~2 log₂ n products; the
    relative error, ~n ε, is the polar form's. 0⁰ = 1."""
    real, imag = xp.ones_like(z.real), xp.zeros_like(z.real)
    base_real, base_imag = z.real, z.imag
    while n:
        if n & 1:
            real, imag = real * base_real - imag * base_imag, real * base_imag + imag * base_real
        n >>= 1
        if n:
            base_real, base_imag = base_real * base_real - base_imag * base_imag, 2.0 * base_real * base_imag
    return real + 1j * imag


def _psi(d, z, a0, noise):
    """``e_r`` (p, K) and ``ψ_0² + ψ_1²`` (K,) of components with impulse-response coefficients ``d``."""
    b0, b1 = noise[0], noise[1]
    return d * (b0 * z + b1), b0**2 + (b0 * a0 + b1) ** 2


def _noise(e, z, psi01, steps, xp=np):
    """Σ_{u<s} ψ_u² per component at each s in ``steps`` (each ≥ 2) and at s = ∞, (len(steps) + 1,
    K): ``ψ_0² + ψ_1²`` plus ``Re Σ_rq e_r e_q* (1 − (z_r z_q*)^(s−2)) / (1 − z_r z_q*)``, a Hermitian
    form: the pairs r ≤ q, those off the diagonal twice. In real arithmetic: XLA's complex division
    on CPU is several times slower (and its gathers slower than the pairs r > q, weighted 0)."""
    p = z.shape[0]
    outer = lambda x, y: x[:, None] * y[None]
    conj = lambda x, y: (outer(x.real, y.real) + outer(x.imag, y.imag), outer(x.imag, y.real) - outer(x.real, y.imag))
    er, ei = conj(e, e)  # e_r e_q*
    wr, wi = conj(z, z)  # z_r z_q*
    wr = 1.0 - wr
    norm = np.triu(np.ones((p, p)) + np.triu(np.ones((p, p)), 1))[:, :, None] / (wr * wr + wi * wi)
    fr, fi = (er * wr - ei * wi) * norm, (ei * wr + er * wi) * norm  # e_r e_q* / (1 − z_r z_q*), counted twice off the diagonal
    at_infinity = psi01 + fr.sum((0, 1))
    tails = []
    for s in steps:
        xr, xi = conj(*(2 * [_power(z, s - 2, xp)]))  # (z_r z_q*)^n = z_r^n (z_q^n)*
        tails.append((fr * xr - fi * xi).sum((0, 1)))
    return xp.stack([at_infinity - tail for tail in tails] + [at_infinity])


class _Envelope(NamedTuple):
    """What the window bounds need of each component (K,): ``size`` and ``log_modulus`` (3, K) of its
    slowest root, its second slowest and the rest (Σ|c_r| and the largest |z_r| of those), ``steady``
    ``Σ_u ψ_u²`` and ``tail`` ``(Σ|e_r|)² / (1 − ρ²)`` (ρ = max |z_r|, the slowest root's)."""

    size: jax.Array
    log_modulus: jax.Array
    steady: jax.Array
    tail: jax.Array


def _fit(xp, a, first, lam, z, noise, max_steps):
    """The closed form ``c, d`` (p, K) of components with coefficients ``a`` (p, K) and roots ``z`` (p, K),
    its :class:`_Envelope`, its largest gain and misfit (at the first and last fitted steps), and
    the mean and V parts of E[L] at the budget per component. ``xp``: numpy (small spectra: no
    compilation) or jax.numpy (jitted)."""
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
    terms, last = xp.stack([c, d]), xp.ones_like(z)
    for _ in range(p - 1):
        last = last * z
    scale = 1.0 + xp.abs(terms).sum(1)  # Σ_r c_r z_r^i against y_i at i = 0 and p − 1
    misfit = xp.maximum(xp.max(xp.abs(terms.sum(1) - values[0]) / scale),
                        xp.max(xp.abs((terms * last).sum(1) - values[p - 1]) / scale))
    size, modulus = xp.abs(c), xp.abs(z)
    rows = xp.arange(p)[:, None]
    slowest = rows == xp.argmax(modulus, 0)
    second = rows == xp.argmax(xp.where(slowest, -1.0, modulus), 0)
    rest = ~(slowest | second)
    pick = lambda x, which: xp.sum(xp.where(which, x, 0.0), 0)
    e, psi01 = _psi(d, z, a[0], noise)
    v_last, steady = _noise(e, z, psi01, (max_steps,), xp)
    rho = xp.max(modulus, 0)
    envelope = _Envelope(xp.stack([pick(size, slowest), pick(size, second), pick(size, rest)]),
                         xp.log(xp.stack([pick(modulus, slowest), pick(modulus, second),
                                          xp.max(xp.where(rest, modulus, 0.0), 0)])),
                         steady, xp.sum(xp.abs(e), 0) ** 2 / (1.0 - rho**2))
    gain = xp.max(xp.sum(size + xp.abs(d), 0))
    mean_last = xp.sum(c * _power(z, max_steps - 1, xp), 0).real
    return (c, d, envelope, xp.where(xp.isfinite(gain), gain, xp.inf), xp.where(xp.isfinite(misfit), misfit, xp.inf),
            mean_last, v_last)


def _windows(xp, envelope: _Envelope, mean_weight, noise_weight, edges):
    """Lower bounds of the mean part and of V over each window [s_a, s_b] between ``edges``, summed
    over components: from the slowest root k, the second l and the rest R,
    ``|μ_s| ≥ |c_k||z_k|^(s_b−1) − |c_l||z_l|^(s_a−1) − Σ_R |c_r| ρ_R^(s_a−1)`` (or k and l swapped),
    three exps per edge whatever p; and ``V_s ≥ V_{s_a} ≥ V_∞ − Σ_{u ≥ s_a} ψ_u²``, the tail at most
    ``(Σ|e_r|)² ρ^(2(s_a−2)) / (1 − ρ²)``."""
    n = (edges - 1)[:, None, None].astype(envelope.size.dtype)
    power = xp.exp(xp.where(n > 0, n * envelope.log_modulus, 0.0))  # |z|^(s−1): (edges, 3, K)
    at = envelope.size * power
    low = xp.maximum(at[1:, 0] - at[:-1, 1] - at[:-1, 2], at[1:, 1] - at[:-1, 0] - at[:-1, 2])
    s_a = edges[:-1, None]
    rho = xp.exp(envelope.log_modulus[0])  # max |z|: ρ^(2(s_a−2)) = (ρ^(s_a−1) / ρ)², from the powers above
    decay = xp.where(s_a > 2, xp.where(rho > 0.0, (power[:-1, 0] / rho) ** 2, 0.0), 1.0)
    to_come = xp.where(s_a >= 2, envelope.tail * decay, xp.inf)
    return (xp.sum(mean_weight * xp.maximum(low, 0.0) ** 2, -1),
            xp.sum(noise_weight * xp.maximum(envelope.steady - to_come, 0.0), -1))


_fit_jit = jax.jit(functools.partial(_fit, jnp), static_argnums=5)  # the budget: its powers unrolled
_windows_jit = jax.jit(functools.partial(_windows, jnp))


def _values(c, d, z, last, count):
    """``μ_s`` and ``h_s`` at the steps ``s = last, last − 1, …`` (``count`` of them, all ≥ 1): (count, 2, K)."""
    power = _power(z, last - count - 1)  # z^(s−1) at the step s before the first
    out = []
    for _ in range(count):
        power = power * z
        out.append([np.sum(c * power, 0).real, np.sum(d * power, 0).real])
    return np.array(out[::-1])


@_float64
def stays_from(rec: Recursion, cell: int, lam, weight, initial, sigma2, target) -> int | None:
    """The first step S from which the closed form proves ``E[L_s] < target`` at every ``s ≥ S`` (None:
    it proves nothing — a root on the unit circle, an ill-conditioned component, a steady level not
    below the target, or no such S within :data:`nqm.validate.MAX_STEPS`).

    From above, ``μ_s² ≤ (Σ_r |c_r||z_r|^(s−1))²``, which never increases with s, and ``V_s ≤ V_∞``:
    the bound at S holds at every later step, so the last step with ``E[L] >= target`` lies before S
    (and a noiseless run's loss is its expected loss). A relative MARGIN covers the rounding."""
    p, comps = rec.order, lam.size
    z = roots(rec, cell, lam)
    if not np.abs(z).max() < 1.0:
        return None
    a = rec.coefficients(cell, lam)
    mean_weight, noise_weight = 0.5 * weight * lam * initial, 0.5 * weight * lam**2
    fit = functools.partial(_fit, np) if comps <= SMALL else _fit_jit
    size, steady, worst = [], [], 0.0
    for take, n in _pieces(comps, _chunk(p, comps)):
        with np.errstate(all="ignore"):
            c, _, envelope, gain, misfit, *_ = fit(a[take].T, rec.first[cell], lam[take], z[take].T, rec.noise[cell], 2)
        size.append(np.abs(np.asarray(c))[:, :n])
        steady.append(np.asarray(envelope.steady)[:n])
        worst = max(worst, float(gain) / GAIN, float(misfit) / FIT)
    size, level = np.concatenate(size, 1), float(noise_weight @ np.concatenate(steady)) * sigma2
    if not (worst <= 1.0 and level * (1 + MARGIN) < target):
        return None
    with np.errstate(divide="ignore"):
        log_modulus = np.log(np.abs(z)).T  # (p, K); a zero root: −∞, its term gone after step 1

    def above(s):  # whether the bound at step s does not yet prove E[L] below the target
        power = np.exp(np.where(np.isneginf(log_modulus), -np.inf, (s - 1) * log_modulus)) if s > 1 else 1.0
        return (1 + MARGIN) * (mean_weight @ np.sum(size * power, 0) ** 2 + level) >= target

    if not above(1):
        return 1
    high = 2
    while above(high):
        if high >= MAX_STEPS:
            return None
        high *= 2
    low = high // 2  # above(low), not above(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if above(middle) else (low, middle)
    return high


@_float64
def shortcut(rec: Recursion, cell: int, lam, weight, initial, sigma2, target, bound, max_steps) -> Shortcut | None:
    """For a stable cell, what can be shown without stepping it (None: nothing).

    The proof covers the steps s = 1 … max_steps in log-spaced windows [s_a, s_b]: the mean part is
    at least ``½ Σ λ (|c_k||z_k|^(s_b−1) − Σ_{r≠k} |c_r||z_r|^(s_a−1))₊²`` for k either of the two
    slowest roots (all |z| < 1; :func:`_windows`), the noise part ``σ² V_s`` at least ``σ² V_{s_a}``
    (V never decreases), and ``V_{s_a}`` at least ``V_∞`` less a geometric bound of what is still to
    come; from above, the expected loss is at most ``½ Σ λ (Σ_r |c_r|)² + σ² V_∞``. A level whose
    lower bound holds in every window (and upper bound below the divergence bound) never ends
    before the budget; the others cannot end before the first window where it fails, which is
    split REFINE times into finer windows, and their stepping starts at the first that fails, from
    the closed-form state there (tens of steps before the level ends, where the bound is tight).
    Components whose closed form is ill-conditioned (gain > GAIN, or misfit > FIT) stop the
    shortcut, and a relative MARGIN covers its rounding, so nothing is settled that the recursion
    would not give; a bound that is not a number proves nothing."""
    p, comps = rec.order, lam.size
    z = roots(rec, cell, lam)
    if not np.abs(z).max() < 1.0:  # roots on the unit circle
        return None
    a = rec.coefficients(cell, lam)
    mean_weight, noise_weight = 0.5 * weight * lam * initial, 0.5 * weight * lam**2
    fit, windows = ((functools.partial(_fit, np), functools.partial(_windows, np)) if comps <= SMALL
                    else (_fit_jit, _windows_jit))
    pieces, parts = [], []
    for take, n in _pieces(comps, _chunk(p, comps)):
        used = np.arange(take.size) < n  # the padding weighs nothing
        with np.errstate(all="ignore"):  # log 0 = −∞ and the like, as in jax.numpy
            c, d, envelope, *out = fit(a[take].T, rec.first[cell], lam[take], z[take].T, rec.noise[cell],
                                       max(max_steps, 2))
        pieces.append((c, d, z[take].T, a[take, 0], envelope, mean_weight[take] * used, noise_weight[take] * used, n))
        parts.append([np.asarray(x) for x in out])
    gain, misfit, mean_last, v_last = (np.stack(x) for x in zip(*parts))
    if not (gain.max() <= GAIN and misfit.max() <= FIT):
        return None

    def fails(edges):  # (windows, levels): where the lower bounds do not keep E[L] above the target
        edges = np.concatenate([edges, np.full(WINDOWS + 1 - edges.size, edges[-1])])  # one shape: one compilation
        with np.errstate(all="ignore"):
            low = np.sum([np.asarray(windows(envelope, mw, nw, edges)) for _, _, _, _, envelope, mw, nw, _ in pieces], 0)
        return edges, ~(low[0][:, None] + low[1][:, None] * sigma2 >= target * (1 + MARGIN))  # NaN proves nothing

    edges, fail = fails(np.unique(np.round(np.geomspace(1, max_steps, WINDOWS + 1)).astype(np.int64)))
    upper = sum(float(mw @ np.asarray(env.size).sum(0) ** 2) for _, _, _, _, env, mw, _, _ in pieces)
    steady = sum(float(nw @ np.asarray(env.steady)) for _, _, _, _, env, _, nw, _ in pieces)
    safe = upper + sigma2 * steady <= bound * (1 - MARGIN)
    proven = safe & ~fail.any(0)
    used_mean = np.concatenate([mw for *_, mw, _, _ in pieces])
    used_noise = np.concatenate([nw for *_, nw, _ in pieces])
    final = np.where(proven, used_mean @ mean_last.ravel() ** 2 + sigma2 * (used_noise @ v_last.ravel()), 0.0)
    open_ = ~proven
    if not (open_.any() and safe[open_].all()):
        return Shortcut(proven, final)
    window = int(np.argmax(fail[:, open_], 0).min())  # the first window where an open level may end
    start = int(edges[window])
    for _ in range(REFINE):  # the same bounds over finer windows of that one
        fine = np.unique(np.round(np.linspace(start, edges[window + 1], WINDOWS + 1)).astype(np.int64))
        if fine.size < 3:
            break
        edges, fail = fails(fine)
        if not fail[: fine.size - 1, open_].any():  # no open level can end before the window's end
            start = int(fine[-1])
            break
        window = int(np.argmax(fail[: fine.size - 1, open_], 0).min())
        start = int(edges[window])
    if start < max(SKIP, p + 1):
        return Shortcut(proven, final)
    ring, v = [], 0.0
    for c, d, roots_, a0, _, _, weight_, n in pieces:
        c, d = np.asarray(c), np.asarray(d)
        ring.append(_values(c, d, roots_, start, p)[..., :n])  # ring[x]: the state at step start − x
        e, psi01 = _psi(d, roots_, a0, rec.noise[cell])
        v += float(weight_ @ _noise(e, roots_, psi01, (start,))[0])
    return Shortcut(proven, final, start, np.concatenate(ring, -1), v)
