"""Delay distributions as probability mass functions ``p_k = P(τ = k)``, ``k = 0…K``: checked and
normalised, and the two families of Giladi et al. (2020) — uniform and discretised Gaussian.
Plain numpy: the delay processes (:mod:`nqm.delays`) and the papers' polynomials
(:mod:`nqm.thresholds.polynomials`) both read them.
"""

from __future__ import annotations

import math

import numpy as np

from nqm import validate
from nqm.errors import NqmError


def validate_pmf(pmf) -> np.ndarray:
    """A delay pmf ``p_k = P(τ = k)``, ``k = 0…K``, checked and normalised (trailing zeros dropped,
    so K is the largest delay).

    Args:
      pmf: the weights, a 1-D sequence of finite numbers ≥ 0 with a positive sum.

    Returns:
      The normalised pmf (float64), ending at its last positive weight.

    Raises:
      NqmError: the weights are not such a list, or reach beyond the delay bound.
    """
    try:
        p = np.asarray(pmf, dtype=np.float64)
    except (TypeError, ValueError):
        raise NqmError(f"a delay pmf must be a list of numbers, got {pmf!r}") from None
    if p.ndim != 1 or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or not np.any(p > 0):
        raise NqmError(f"a delay pmf must be a 1-D list of finite weights >= 0 with a positive sum, got {pmf!r}")
    with np.errstate(over="ignore"):
        total = p.sum()
    if not (np.isfinite(total) and total >= np.finfo(float).tiny):
        # Weights whose sum overflows (1e308 + 1e308) or is subnormal: scaled by the largest first,
        # so the sum is in [1, size]. Ordinary weights skip this and keep their bits.
        p = p / p.max()
        total = p.sum()
    p = p / total
    last = np.flatnonzero(p)[-1]  # after normalising: a weight may underflow to 0 there
    if last + 1 > validate.BOUNDS["pmf"]:
        raise NqmError(f"a delay pmf may reach a delay of at most {validate.BOUNDS['delay']:,}, this one reaches "
                       f"{last:,}")
    return p[: last + 1]


def uniform_pmf(a: int, b: int) -> np.ndarray:
    """``τ ~ unif{a..b}`` (Giladi et al. 2020, eq. 20), over k = 0..b.

    Args:
      a, b: the smallest and largest delay, integers with ``0 ≤ a ≤ b``.

    Returns:
      The pmf, length ``b + 1``.

    Raises:
      NqmError: ``a > b`` or either is out of range.
    """
    a = validate.count(a, "the smallest uniform delay", low=0, high=validate.BOUNDS["delay"])
    b = validate.count(b, "the largest uniform delay", low=0, high=validate.BOUNDS["delay"])
    if a > b:
        raise NqmError(f"a uniform delay needs A <= B, got uniform:{a}:{b}")
    return np.where(np.arange(b + 1) >= a, 1.0 / (b - a + 1), 0.0)


def gaussian_pmf(mu: int) -> np.ndarray:
    """Discretised Gaussian delay (Giladi et al. 2020, App. C): ``P(τ = k) ∝ P(k − ½ ≤ z ≤ k + ½)``,
    ``z ~ N(μ, 1)``, k = 1..2μ, renormalised. E[τ] = μ only once the tails vanish (μ ≥ 4): k = 0 is
    cut but k = 2μ kept.

    Args:
      mu: the centre ``μ``, an integer ≥ 1.

    Returns:
      The pmf, length ``2μ + 1`` (``P(τ = 0) = 0``).
    """
    # Its support reaches 2μ: the delay bound applies to that.
    mu = validate.count(mu, "the mean of a gaussian delay", low=1, high=validate.BOUNDS["delay"] // 2)
    d = np.abs(np.arange(2 * mu + 1) - mu)  # by symmetry, so both tails keep full precision
    cdf = lambda x: 0.5 * np.vectorize(math.erfc)(-np.asarray(x, float) / math.sqrt(2.0))  # no scipy.stats import
    return validate_pmf(np.r_[0.0, (cdf(0.5 - d) - cdf(-0.5 - d))[1:]])
