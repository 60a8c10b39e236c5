"""Stability thresholds of delayed SGD / momentum on a quadratic (Giladi et al. 2020).

Linearised mean dynamics of one curvature ``a`` with step ``η``; everything depends on
``x = a·η`` only. Every method is a linear recurrence ``w_{t+1} = Σ_k (β_k + x γ_k) w_{t-k}``
whose characteristic polynomial is affine in x: ``P(z; x) = A(z) + x B(z)``. Polynomials are
coefficient arrays, highest power first (``np.polyval`` order), batched over leading axes.

Thresholds use the boundary locus: a root lies on ``|z| = 1`` exactly when
``x = -A(e^{iθ}) / B(e^{iθ})`` is real, so the crossings are the zeros in θ of
``Im(A conj B)``. All roots are inside the unit circle for small x > 0 (the root z = 1 of
``A`` moves inwards), so the first positive crossing is the threshold x*, whether or not the
stable set is an interval. This is exact up to the θ grid (16 points per unit of degree) and
costs O(degree) per grid point, instead of one eigenvalue problem per grid point in x.

Numpy/scipy only, float64. Never imports jax or the engine.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from nqm import results
from nqm.conventions import convention_of, family
from nqm.delays import coordinate
from nqm.pmfs import validate_pmf
from nqm.errors import NqmError
from nqm.validate import BOUNDS

__all__ = ["METHODS", "char_poly", "fit_inverse_threshold", "lr_threshold", "mean_delay", "roots", "schur_cohn_stable", "sgd_inverse_threshold_approx", "sgd_threshold_closed_form", "spectral_radius", "table_line", "threshold", "threshold_dataset"]

METHODS = ("sgd", "sgdm", "shifted")


# ----------------------------------------------------------------------------- validation


def _array(values, name, *, integer=False, low=0.0, high=np.inf):
    """Float64 1-D (or 0-D) array of finite values in [low, high); NqmError otherwise."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise NqmError(f"{name} must be numeric, got {values!r}") from None
    if arr.ndim > 1 or arr.size == 0:
        raise NqmError(f"{name} must be a number or a non-empty 1-D list, got {values!r}")
    if not np.all(np.isfinite(arr)):
        raise NqmError(f"{name} must be finite (no NaN/inf), got {values!r}")
    if integer and np.any(arr != np.round(arr)):
        raise NqmError(f"{name} must be whole numbers, got {values!r}")
    if np.any(arr < low) or np.any(arr >= high):
        bound = f"in [{low:g}, {high:g})" if np.isfinite(high) else f">= {low:g}"
        if integer and np.isfinite(high):
            bound = f"between {low:,.0f} and {high - 1:,.0f}"
        raise NqmError(f"{name} must be {bound}, got {values!r}")
    return arr.astype(np.int64) if integer else arr


def _distinct(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` if no value repeats (a repeated one would be a duplicate row of a table)."""
    if np.unique(values).size != values.size:
        raise NqmError(f"{name} has repeated values: give each value once")
    return values


def mean_delay(pmf) -> float:
    """Expected delay ``E[τ] = Σ_k k p_k`` of a pmf over k = 0..K.

    Args:
      pmf: the weights ``p_k = P(τ = k)`` (normalised by :func:`nqm.delays.validate_pmf`).

    Returns:
      ``E[τ]`` in steps.
    """
    p = validate_pmf(pmf)
    return float(np.arange(p.size) @ p)


# ----------------------------------------------------------------------------- polynomials


def _affine_poly(method, pmf, m, dampening):
    """(A, B) with ``P(z; x) = A(z) + x B(z)``, one row per momentum, highest power first.

    Lags of ``w_{t+1} = Σ_k (β_k + x γ_k) w_{t-k}`` with delay pmf p_k and c = 1 or 1 - m:
      sgd/sgdm: β_0 = 1 + m, β_1 = -m, γ_k = -c p_k;
      shifted:  β_0 = 1, β_k += m p_k, β_{k+1} -= m p_k, γ_k = -c p_k
                (worker's own velocity: ``v_{t+1} = m v_{t-τ} + g(w_{t-τ})``).
    ``P(z) = z^{L+1} - Σ_k (β_k + x γ_k) z^{L-k}``; τ = 0 gets L = 1, i.e. P is multiplied by z.
    """
    m = np.asarray(m, dtype=np.float64).reshape(-1, 1)
    K = pmf.size - 1
    lags = K + 2 if method == "shifted" else max(K, 1) + 1
    beta, gamma = np.zeros((m.size, lags)), np.zeros((m.size, lags))
    gamma[:, : K + 1] = -(1.0 - m if dampening else 1.0) * pmf
    if method == "shifted":
        beta[:, 0] = 1.0
        beta[:, : K + 1] += m * pmf
        beta[:, 1 : K + 2] -= m * pmf
    else:
        beta[:, 0], beta[:, 1] = 1.0 + m[:, 0], -m[:, 0]
    ones, zeros = np.ones((m.size, 1)), np.zeros((m.size, 1))
    return np.hstack([ones, -beta]), np.hstack([zeros, -gamma])


def char_poly(x, method="sgd", delay=None, momentum=0.0, *, dampening=False, pmf=None) -> np.ndarray:
    """Characteristic polynomial of the linearised delayed dynamics, highest power first.

    SGD (eq. 5): ``z^{τ+1} - z^τ + x``; momentum (eq. 26): ``z^{τ+1} - (1+m) z^τ + m z^{τ-1} + c x``
    (times z when τ = 0); shifted momentum (eq. 11): ``z^{τ+2} - z^{τ+1} + (c x - m) z + m``;
    stochastic delay (eq. 19): ``τ``-terms replaced by ``Σ_k p_k z^{-k}``. ``c = 1`` undampened,
    ``c = 1 - m`` dampened. Reference: Giladi et al. 2020.

    Args:
      x: ``a·η`` (curvature times learning rate), scalar or array.
      method: "sgd", "sgdm" or "shifted".
      delay: constant delay τ >= 0 (default 0; leave out when ``pmf`` is given).
      momentum: m in [0, 1).
      dampening: use ``v = m v + (1-m) g`` (Giladi) instead of ``v = m v + g``.
      pmf: delay pmf over k = 0..K for a stochastic delay.

    Returns:
      coefficients of shape ``np.shape(x) + (degree + 1,)``.
    """
    m = float(_array(momentum, "momentum", high=1.0))
    pmfs, _ = _pmfs(method, delay, pmf, m)
    if len(pmfs) != 1:
        raise NqmError(f"char_poly takes one delay or one pmf, got {len(pmfs)}; call it once per delay")
    A, B = _affine_poly(method, pmfs[0], m, dampening)
    x = _array(x, "x", low=-np.inf)[..., None]
    return A[0] + x * B[0]


def roots(coeffs) -> np.ndarray:
    """Roots of polynomials, batched, from companion-matrix eigenvalues.

    Args:
      coeffs: ``(..., n + 1)`` coefficients, highest power first, non-zero leading coefficient.

    Returns:
      ``(..., n)`` complex roots, in no particular order.
    """
    try:
        c = np.asarray(coeffs, dtype=np.float64)
    except (TypeError, ValueError):
        c = None
    if c is None or c.ndim == 0 or c.shape[-1] == 0:
        raise NqmError(f"coeffs must be polynomial coefficients, highest power first (…, n + 1), got {coeffs!r}")
    n = c.shape[-1] - 1
    if n == 0:
        return np.zeros(c.shape[:-1] + (0,), complex)
    companion = np.zeros(c.shape[:-1] + (n, n))
    companion[..., 0, :] = -c[..., 1:] / c[..., :1]
    companion[..., np.arange(1, n), np.arange(n - 1)] = 1.0
    return np.linalg.eigvals(companion)


def spectral_radius(coeffs) -> np.ndarray:
    """Largest root modulus of polynomials (0 for constants); ``coeffs`` as in :func:`roots`.

    Args:
      coeffs: ``(..., n + 1)`` coefficients, highest power first.

    Returns:
      ``(...)`` largest root moduli.
    """
    return np.abs(roots(coeffs)).max(-1, initial=0.0)


def schur_cohn_stable(coeffs) -> np.ndarray:
    """Root-free test that all roots lie strictly inside the unit circle (Schur–Cohn / Jury).

    With ``p = a_n z^n + … + a_0`` and its reversal ``p*``, all roots are inside iff
    ``|a_n| > |a_0|`` and ``(a_n p - a_0 p*) / z`` (degree n - 1) has all roots inside (Rouché).

    Args:
      coeffs: ``(..., n + 1)`` real coefficients, highest power first.

    Returns:
      boolean array ``(...)``.
    """
    p = np.array(coeffs, dtype=np.float64)
    stable = np.ones(p.shape[:-1], dtype=bool)
    while p.shape[-1] > 1:
        lead, const = p[..., :1], p[..., -1:]
        stable &= np.abs(lead[..., 0]) > np.abs(const[..., 0])
        p = (lead * p - const * p[..., ::-1])[..., :-1]
        p /= np.maximum(np.abs(p).max(-1, keepdims=True), np.finfo(float).tiny)  # no overflow
    return stable


# ----------------------------------------------------------------------------- thresholds


MAX_GRID_WORK = 5 * 10**9  # grid points × (delay terms + momenta) that a threshold may take (minutes)


def _first_crossing(A, B, *, per_degree=16, iters=60):
    """Smallest x > 0 at which a root of ``A + x B`` reaches |z| = 1, per row (inf if none)."""
    n = A.shape[1] - 1
    cols = np.flatnonzero((A != 0).any(0) | (B != 0).any(0))  # the families are sparse
    powers, A, B = n - cols, A[:, cols], B[:, cols]

    def locus(e, rows=slice(None)):  # A, B at z = e and f = Im(A conj B)
        a, b = (A[rows] * e).sum(-1), (B[rows] * e).sum(-1)
        return a, b, (a * b.conj()).imag

    # Midpoint grid on (0, π): f vanishes trivially at θ = 0 (x = 0) and θ = π (handled below).
    # Geometric near θ = 0: as m -> 1 the roots 1 and m of A merge and the first crossing's angle
    # shrinks like sqrt(1 - m). A's other roots move inwards as x grows, so need no refinement.
    size = per_degree * n + 64
    if size * (cols.size + A.shape[0]) > MAX_GRID_WORK:
        raise NqmError(f"this threshold needs a {size:,}-point grid over {cols.size:,} delay terms, more than nqm "
                       "evaluates; use a smaller delay or a delay distribution with a smaller support")
    head = np.geomspace(1e-9, 0.5, 400, endpoint=False)

    def grid(i):  # the grid's points i (an index array), made a slice at a time
        return np.where(i < head.size, head[np.minimum(i, head.size - 1)], i - head.size + 0.5) * np.pi / size

    # Brackets of f's sign changes; a crossing at x > 0 has Re x > 0 next to it on so fine a grid.
    # The grid in slices, each overlapping the last by one point: memory bounded whatever the delay.
    found = []
    step = max(2, 2**20 // cols.size)
    for start in range(0, head.size + size - 1, step - 1):
        points = grid(np.arange(start, min(start + step, head.size + size)))
        e = np.exp(1j * points[:, None] * powers)
        a, b = np.einsum("rc,gc->rg", A, e), np.einsum("rc,gc->rg", B, e)  # no BLAS threads: tiny sums
        with np.errstate(divide="ignore", invalid="ignore"):
            f, x = (a * b.conj()).imag, -(a * b.conj()).real / np.abs(b) ** 2
        row, j = np.nonzero((f[:, :-1] * f[:, 1:] <= 0) & (np.maximum(x[:, :-1], x[:, 1:]) > 0))
        found.append((row, points[j], points[j + 1], f[row, j], f[row, j + 1]))
    row, lo, hi, f_lo, f_hi = (np.concatenate(parts) for parts in zip(*found))
    for _ in range(iters):  # vectorised Illinois (regula falsi) keeps every bracket
        width = f_hi - f_lo
        mid = np.where(width != 0, hi - f_hi * (hi - lo) / np.where(width != 0, width, 1), lo)
        f_mid = locus(np.exp(1j * mid[:, None] * powers), row)[2]
        flip = f_mid * f_hi < 0
        lo, f_lo = np.where(flip, hi, lo), np.where(flip, f_hi, 0.5 * f_lo)
        step, hi, f_hi = np.abs(mid - hi), mid, f_mid
        if np.all((step <= 4e-16 * np.pi) | (f_mid == 0)):
            break
    a, b, _ = locus(np.exp(1j * hi[:, None] * powers), row)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = -(a * b.conj()).real / np.abs(b) ** 2
        sign = (-1.0) ** powers  # θ = π: z = -1
        x_pi = -(A * sign).sum(1) / (B * sign).sum(1)
    x_star = np.where((x_pi > 0) & np.isfinite(x_pi), x_pi, np.inf)
    ok = (x > 0) & (x < 1e12)  # x -> inf where B(e^{iθ}) = 0: no crossing there
    np.minimum.at(x_star, row[ok], x[ok])
    return x_star


def _pmfs(method, delay, pmf, m):
    """List of pmfs (constant delay = one-hot) and the leading output shape; checks the method."""
    if method not in METHODS:
        raise NqmError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    family(method, m)  # sgd: momentum 0
    if pmf is not None:
        if delay is not None:
            raise NqmError("give either delay (constant) or pmf (stochastic), not both")
        many = np.ndim(pmf[0]) > 0 if len(pmf) else False
        pmfs = [validate_pmf(p) for p in (pmf if many else [pmf])]
        return pmfs, ((len(pmfs),) if many else ())
    tau = _array(0 if delay is None else delay, "delay", integer=True, high=BOUNDS["delay"] + 1)
    return [_one_hot(t) for t in tau.ravel()], tau.shape


def _one_hot(t: int) -> np.ndarray:
    """The pmf of a constant delay t (one entry: memory linear in the delay)."""
    p = np.zeros(t + 1)
    p[t] = 1.0
    return p


def threshold(method="sgd", delay=None, momentum=0.0, *, dampening=False, pmf=None) -> np.ndarray:
    """Stability threshold ``x* = a·η*``: the first x > 0 where the spectral radius reaches 1.

    The linearised mean dynamics are stable for ``0 < a·η < x*`` (Giladi et al. 2020, Def. 1;
    eqs. 5, 19, 26, 11). Crossings are located on the boundary locus (see module docstring).

    Args:
      method: "sgd", "sgdm" (heavy ball, gradient delayed) or "shifted" (velocity delayed too).
      delay: constant delay τ >= 0, scalar or 1-D (default 0).
      momentum: m in [0, 1), scalar or 1-D.
      dampening: Giladi's ``v = m v + (1-m) g``; default is ``v = m v + g``.
      pmf: instead of ``delay``, one delay pmf (1-D) or a list of pmfs.

    Returns:
      x*, shape ``np.shape(delay) + np.shape(momentum)`` (``(len(pmfs),) + …`` for a list).

    Raises:
      NqmError: a method without a characteristic polynomial here, or an invalid delay, pmf or
        momentum, in one line.

    Examples:
      SGD's threshold at delays 0, 1 and 4 is ``2 sin(π/(4τ + 2))``; momentum lowers it under delay:

      >>> import numpy as np
      >>> from nqm.thresholds import polynomials
      >>> polynomials.threshold("sgd", delay=[0, 1, 4]).round(4).tolist()
      [2.0, 1.0, 0.3473]
      >>> (2 * np.sin(np.pi / (4 * np.array([0, 1, 4]) + 2))).round(4).tolist()
      [2.0, 1.0, 0.3473]
      >>> polynomials.threshold("sgdm", delay=4, momentum=[0.0, 0.5]).round(4).tolist()
      [0.3473, 0.1559]
    """
    m = _array(momentum, "momentum", high=1.0)
    pmfs, lead = _pmfs(method, delay, pmf, m)
    rows = [_first_crossing(*_affine_poly(method, p, m, dampening)) for p in pmfs]
    return np.reshape(rows, lead + m.shape)


def sgd_threshold_closed_form(tau) -> np.ndarray:
    """Exact SGD threshold ``x* = 2 sin(π / (4τ + 2))`` (Giladi et al. 2020, eq. 6).

    Args:
      tau: delay(s) τ >= 0.

    Returns:
      x*, same shape as ``tau`` (τ = 0 gives 2).
    """
    return 2.0 * np.sin(np.pi / (4.0 * _array(tau, "delay", integer=True) + 2.0))


def sgd_inverse_threshold_approx(tau) -> np.ndarray:
    """Asymptote ``1/x* ≈ (2τ + 1)/π`` of the SGD threshold (Giladi et al. 2020, eq. 7).

    Args:
      tau: delay(s) τ (or mean delays), any shape.

    Returns:
      ``(2τ + 1)/π``, same shape (float64).
    """
    return (2.0 * np.asarray(tau, dtype=np.float64) + 1.0) / np.pi


def fit_inverse_threshold(delay, x_star) -> tuple[float, float]:
    """Least-squares line ``1/x* ≈ slope·τ + intercept`` (eq. 7 predicts 2/π and 1/π for SGD).

    Args:
      delay: delays (or mean delays) τ.
      x_star: thresholds at those delays.

    Returns:
      (slope, intercept).
    """
    slope, intercept = np.polyfit(np.asarray(delay, float), 1.0 / np.asarray(x_star, float), 1)
    return float(slope), float(intercept)


def lr_threshold(x_star, lam_max) -> np.ndarray:
    """Largest stable learning rate ``η* = x*/λ_max`` for a problem with top curvature λ_max.

    Args:
      x_star: threshold(s) ``x* = η* λ_max``.
      lam_max: the largest eigenvalue ``λ_max`` > 0.

    Returns:
      ``η*``, broadcast shape (float64).
    """
    lam = _array(lam_max, "lam_max", low=np.finfo(float).tiny)
    return np.asarray(x_star, dtype=np.float64) / lam


def threshold_dataset(method, delays=None, momenta=(0.0,), dampening=False) -> xr.Dataset:
    """Table of thresholds x* = a·η* over delay × momentum, from Giladi et al.'s characteristic
    polynomials (the check of :func:`nqm.thresholds.derived.threshold_table`, which derives any linear method's).

    Args:
      method: "sgd", "sgdm" or "shifted" ("sgdm" with m = 0 is SGD).
      delays: constant delays and/or iid delay specs of :mod:`nqm.delays` (default 0..64), e.g.
        ``[f"uniform:1:{b}" for b in range(1, 65)]``.
      momenta: momentum values in [0, 1).
      dampening: Giladi's ``v = m v + (1-m) g`` instead of ``v = m v + g``.

    Returns:
      Dataset with variable ``threshold`` over (``delay``, ``momentum``) — integers when every delay
      is constant, else the specs — coordinate ``mean_delay``, attrs method, convention.
    """

    m = _distinct(_array(momenta, "momenta", high=1.0).reshape(-1), "momenta")
    labels, chosen = coordinate(np.arange(65) if delays is None else delays)
    pmfs = [p.pmf() for p in chosen]
    if any(p is None for p in pmfs):
        raise NqmError("a worker pool has no delay pmf, so no characteristic polynomial; give constant or iid delays")
    x = threshold(method, None, m, dampening=dampening, pmf=pmfs)
    return results.threshold_table(
        {"threshold": x}, {"threshold": "stability threshold x* = a*eta*"}, labels, chosen, m, {},
        {"method": method, "criterion": "mean", "convention": convention_of(method, bool(dampening)),
         "reference": "Giladi et al. 2020, At Stability's Edge"},
    )


def table_line(table: xr.Dataset, key: dict, momenta) -> np.ndarray:
    """``x*`` at ``momenta`` from a threshold ``table`` (over delay × momentum × …, interpolated in
    m) for the panel ``key`` (its delay and any swept hyperparameter).

    Args:
      table: a threshold table (variable ``threshold``).
      key: the panel's ``{dimension: value}``.
      momenta: the momenta to read ``x*`` at.

    Returns:
      ``x*`` per momentum (constant if the table has one momentum).

    Raises:
      NqmError: the table has other dimensions ``key`` does not select.
    """
    chosen = {k: v for k, v in key.items() if k in table.threshold.dims}
    line = table.threshold.sel(chosen)
    if set(line.dims) != {"momentum"}:
        raise NqmError(f"the threshold table has no single line for panel {key}: select its other dimensions")
    if line.momentum.size == 1:
        return np.full(np.size(momenta), float(line.values.ravel()[0]))
    return np.interp(momenta, line.momentum.values, line.values)
