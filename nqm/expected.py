"""Exact expected loss of the linear methods (SGDM, shifted momentum) under delay and noise.

In the eigenbasis every component k evolves on its own as a linear system driven by Gaussian
noise, ``x_{t+1} = A_k x_t + b_k ξ_t`` with ``ξ_t ~ N(0, 1)``. Its mean and covariance follow
exactly: ``μ_{t+1} = A μ_t``, ``C_{t+1} = A C Aᵀ + b bᵀ``, and ``E[L(w_t)] = ½ Σ_k λ_k
(μ_{w,k}² + C_{ww,k})``. Independent of the engine: a reference for its Monte Carlo averages.
"""

from __future__ import annotations

import numpy as np

from nqm.errors import NqmError
from nqm.problem import Problem


def transition(lam: float, lr: float, momentum: float, delay: int, noise: float, method: str = "sgdm",
               dampening: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A, b, x0)`` of one eigencomponent with curvature ``lam``.

    The state is ``(w_t, w_{t−1}, …, w_{t−D}, v_t, v_{t−1}, …, v_{t−V+1})`` with ``V = 1`` for SGDM
    and ``V = D + 1`` for shifted momentum (whose step continues ``v_{t−D}``).
    """
    if method not in ("sgdm", "shifted"):
        raise NqmError(f"expected dynamics exist for the linear methods sgdm and shifted, not {method!r}")
    c = 1.0 - momentum if dampening else 1.0
    vs = delay + 1 if method == "shifted" else 1
    n = delay + 1 + vs
    v_old = delay + 1 + vs - 1  # index of the velocity the step continues (v_t, or v_{t−D})
    A, b = np.zeros((n, n)), np.zeros(n)
    # v_{t+1} = m v_old + c λ w_{t−D} + c σ √λ ξ
    v_row = np.zeros(n)
    v_row[v_old] += momentum
    v_row[delay] += c * lam
    v_noise = c * noise * np.sqrt(lam)
    # w_{t+1} = w_t − η v_{t+1}
    A[0] = -lr * v_row
    A[0, 0] += 1.0
    b[0] = -lr * v_noise
    A[1:delay + 1, :delay] = np.eye(delay)  # shift the weight history
    A[delay + 1] = v_row
    b[delay + 1] = v_noise
    A[delay + 2:, delay + 1:n - 1] = np.eye(vs - 1)  # shift the velocity history
    x0 = np.r_[np.ones(delay + 1), np.zeros(vs)]
    return A, b, x0


def expected_loss(problem: Problem, *, lr: float, momentum: float, delay: int = 0, noise: float = 0.0,
                  steps: int = 1000, method: str = "sgdm", dampening: bool = False) -> np.ndarray:
    """``E[L(w_t)]`` for ``t = 1 … steps`` (float64), exactly, by second moments per component."""
    total = np.zeros(steps)
    for lam in problem.eigenvalues:
        A, b, mean = transition(lam, lr, momentum, delay, noise, method, dampening)
        cov = np.zeros((mean.size, mean.size))
        for t in range(steps):
            mean, cov = A @ mean, A @ cov @ A.T + np.outer(b, b)
            total[t] += 0.5 * lam * (mean[0] ** 2 + cov[0, 0])
    return total
