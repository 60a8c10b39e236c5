"""The autoregression that each eigencomponent of a linear method follows under constant delay.

    sgdm      w_{t+1} = (1+m) w_t − m w_{t−1} − cηλ w_{t−D}                           − cη σ√λ z_t
    nesterov  w_{t+1} = (1+m) w_t − m w_{t−1} − cη(1+m)λ w_{t−D} + cηmλ w_{t−D−1}   − cη σ√λ ((1+m) z_t − m z_{t−1})
    shifted   w_{t+1} = w_t + (m − cηλ) w_{t−D} − m w_{t−D−1}                         − cη σ√λ z_t

(SGD is sgdm at m = 0, :func:`nqm.conventions.family`; ``c = 1`` or ``1 − m`` dampened; Nesterov's first step has no ``g_{−1}``),
written ``w_{t+1} = Σ_k a_k w_{t−k} + σ√λ (b_0 z_t + b_1 z_{t−1})`` with ``a_k = base_k + λ slope_k``.
Its characteristic polynomial is ``z^p − Σ_k a_k z^{p−1−k}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nqm.conventions import family
from nqm.errors import NqmError

# The methods written out here: under a constant delay they take the closed-form path. Any other
# linear method takes the second-moment map built from its own update (tests/expected/test_expected.py
# holds these rows against that map for every method here).
METHODS = ("sgdm", "nesterov", "shifted")


@dataclass(frozen=True)
class Recursion:
    """``w_{t+1} = Σ_k a_k w_{t−k} + σ√λ (b_0 z_t + b_1 z_{t−1})`` per cell (rows) and component.

    ``a_k = base[:, k] + λ slope[:, k]`` for the lags ``k`` in ``lags`` (the others are zero);
    ``noise[:, i] = b_i``; at t = 0 the mean's step also gets ``λ first`` (a term of the recursion
    that the optimizer's first step does not have)."""

    lags: tuple[int, ...]
    base: np.ndarray
    slope: np.ndarray
    noise: np.ndarray
    first: np.ndarray

    @property
    def order(self) -> int:
        """Ring length p: every lag, and ``h_{t−1}`` for the noise."""
        return max(max(self.lags) + 1, 2)

    @property
    def cells(self) -> int:
        return self.base.shape[0]

    def coefficients(self, rows, lam) -> np.ndarray:
        """``a_k`` of cells ``rows`` (an index or a slice) at eigenvalues ``lam``: (…, components, p)."""
        return self.base[rows, None, :] + lam[:, None] * self.slope[rows, None, :]

    def polynomial(self, rows, lam) -> np.ndarray:
        """Characteristic polynomials ``z^p − Σ_k a_k z^{p−1−k}`` of cells ``rows`` at eigenvalues
        ``lam``: (…, components, p + 1), highest power first."""
        a = self.coefficients(rows, lam)
        return np.concatenate([np.ones(a.shape[:-1] + (1,)), -a], -1)


def recursion(method: str, delay: int, lr, momentum, dampening: bool = False) -> Recursion:
    """The autoregression of ``method`` at constant ``delay``, one row per element of ``lr``/``momentum``.

    Args:
      method: ``"sgd"``, or a method of :data:`METHODS`.
      delay: the constant delay D in steps.
      lr, momentum: the cells' learning rates and momenta (broadcast together).
      dampening: the velocity takes ``(1 − m) g`` instead of ``g``.

    Returns:
      The :class:`Recursion`, one row per cell.

    Raises:
      NqmError: the method has no written-out autoregression.
    """
    if family(method) not in METHODS:
        raise NqmError(f"the autoregression is written out for {', '.join(METHODS)}, not {method!r}")
    method = family(method, momentum)  # sgd: sgdm at momentum 0
    lr, m = np.broadcast_arrays(np.atleast_1d(np.asarray(lr, np.float64)), np.asarray(momentum, np.float64))
    c = 1.0 - m if dampening else np.ones_like(m)
    lags = (0, delay, delay + 1) if method == "shifted" else (0, 1, delay) + ((delay + 1,) if method == "nesterov" else ())
    lags = tuple(sorted(set(lags)))
    p = max(lags) + 1
    base, slope = np.zeros(lr.shape + (p,)), np.zeros(lr.shape + (p,))
    noise, first = np.zeros(lr.shape + (2,)), np.zeros(lr.shape)
    if method == "shifted":
        base[..., 0] += 1.0
        base[..., delay] += m
        base[..., delay + 1] -= m
    else:
        base[..., 0] += 1.0 + m
        base[..., 1] -= m
    look = 1.0 + m if method == "nesterov" else 1.0  # Nesterov: the gradient twice, now and through v
    slope[..., delay] -= c * lr * look
    noise[..., 0] = -c * lr * look
    if method == "nesterov":
        slope[..., delay + 1] += c * lr * m
        noise[..., 1] = c * lr * m
        first[...] = -c * lr * m  # cancels the recursion's c η m g_{−1}: v_0 = 0
    return Recursion(lags, base, slope, noise, first)
