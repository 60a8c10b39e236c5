"""Per-step rates of a linear system under iid delays: mean, mean-square, almost-sure.

Each takes a :class:`nqm.thresholds.matrices.System` (``A_{p,d} = A0 + x A1`` per phase p and delay d,
pmf ``p_d``) and a batch of xs, and returns the per-step rate at each x (stable below 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg

from nqm.errors import NqmError
from nqm.thresholds.matrices import System

BURN, BATCHES = 2_000, 50  # the almost-sure schedule: burn-in steps, batches of the measured steps
XS = 16  # xs per pass over the schedule
DENSE_MEAN_SQUARE = 6  # states up to which the mean-square map is a dense Kronecker matrix
DENSE_FALLBACK = 50**2  # ... and, where ARPACK fails, up to which size n² of the map (a 20 MB matrix)
POWER_ITERATIONS = 20_000  # beyond that, power iterations


def _radius(phases, xs):
    """Per-step spectral radius ``ρ(Π_p (M0_p + x M1_p))^{1/P}`` at each x (``phases``: sparse pairs)."""
    P, n = len(phases), phases[0][0].shape[0]
    if P == 1:
        M, log_scale = phases[0][0].toarray() + xs[:, None, None] * phases[0][1].toarray(), np.zeros(len(xs))
    else:  # mostly a shift register: a sparse product, renormalised so that it never overflows
        X, scale, log_scale = np.tile(np.eye(n), len(xs)), np.repeat(xs, n), np.zeros(len(xs))
        for m0, m1 in phases:
            X = m0 @ X + (m1 @ X) * scale
            size = np.abs(X).reshape(n, len(xs), n).max((0, 2))
            size = np.where((size > 0) & np.isfinite(size), size, 1.0)
            X, log_scale = X / np.repeat(size, n), log_scale + np.log(size)
        M = X.reshape(n, len(xs), n).transpose(1, 0, 2)
    logs, finite = np.full(len(xs), np.inf), np.isfinite(M).all((1, 2))
    with np.errstate(divide="ignore"):
        logs[finite] = np.log(np.abs(np.linalg.eigvals(M[finite])).max(-1)) + log_scale[finite]
    return np.exp(logs / P)


def mean_rate(system: System, xs):
    """``ρ(Π_p Σ_d p_d A_{p,d})^{1/P}``: the rate of E[s] (Giladi et al. 2020, App. C)."""
    if system.means is not None:
        return _radius(system.means, xs)
    sparse = scipy.sparse.csr_array
    return np.concatenate([_radius([(sparse(np.einsum("d,dij->ij", system.pmf, a)), sparse(a[0] * 0)) for a in A0], x)
                           for A0, _, _, _, x in system.pieces(xs)])


def _dense_radius(A, pmf, scales) -> float:
    """``ρ(T)`` of the scaled map over a period as a dense ``n² × n²`` Kronecker matrix."""
    n = A.shape[-1]
    K = np.eye(n * n)
    for a, c in zip(A, scales):
        K = np.einsum("d,dij,dkl->ikjl", pmf, a, a).reshape(n * n, n * n) @ K / c
    return float(np.abs(np.linalg.eigvals(K)).max())


def _power_radius(apply, n, x, iterations=POWER_ITERATIONS) -> float:
    """``ρ(T)`` by power iteration from the identity: T keeps the PSD cone, so the trace ratio
    ``tr T(X_k) / tr X_k`` of ``X_k ∝ T^k(I)`` tends to ρ (Krein–Rutman), until it settles."""
    X, ratio = np.eye(n).ravel(), np.nan
    diagonal = np.arange(n) * (n + 1)
    for _ in range(iterations):
        Y = apply(X)
        trace, previous = Y[diagonal].sum(), ratio
        if trace == 0:  # T^k(I) = 0: the map is nilpotent
            return 0.0
        ratio = trace / X[diagonal].sum()
        if not np.isfinite(ratio):
            raise NqmError(f"the mean-square spectral radius could not be computed at x = {x:g}; "
                           "try the mean or almost-sure criterion")
        X = Y / trace
        if abs(ratio - previous) <= 1e-14 * ratio:
            break
    return float(ratio)


def _mean_square_radius(A0, A1, pmf, x) -> float:
    """Per-step rate ``ρ(T)^{1/2P}`` of ``T``, the map ``X ↦ Σ_d p_d A_d X A_dᵀ`` over one period at x.

    Small states: T as a dense Kronecker matrix. Larger: Arnoldi (ARPACK) on T as an operator,
    written ``Ā X Āᵀ + Σ_d p_d Δ_d X Δ_dᵀ`` (``A_d = Ā + Δ_d``, ``Σ_d p_d Δ_d = 0``) with each
    ``Δ_d(x) = U_d C_d(x) V_dᵀ`` in the fixed column and row spaces of ``[Δ_d(0), ∂_x Δ_d]`` (small
    rank: the delay moves one column, the worker a few rows), so an application costs
    O(n³ + n² Σ_d rank) instead of O(k n³). Where ARPACK fails (its error 3 where the Krylov space
    is exhausted, as for maps with many zero eigenvalues), the dense matrix, or power iterations."""
    P, n = A0.shape[0], A0.shape[-1]
    A = A0 + x * A1
    if not np.isfinite(A).all():
        return np.inf
    scales = np.maximum(np.abs(A).max((1, 2, 3)), 1e-300) ** 2  # each phase's map scaled: no overflow
    if n <= DENSE_MEAN_SQUARE:
        radius = _dense_radius(A, pmf, scales)
    else:
        phases = []
        for a0, a1, a, c in zip(A0, A1, A, scales):
            mean, e0, e1 = np.einsum("d,dij->ij", pmf, a), a0 - np.einsum("d,dij->ij", pmf, a0), a1 - np.einsum("d,dij->ij", pmf, a1)
            U, V, C, W = [np.zeros((n, 0))], [np.zeros((n, 0))], [], []
            for p, f0, f1 in zip(pmf, e0, e1):
                u, v = scipy.linalg.orth(np.hstack([f0, f1])), scipy.linalg.orth(np.hstack([f0.T, f1.T]))
                U.append(u), V.append(v), C.append(u.T @ (f0 + x * f1) @ v), W.append(np.full((v.shape[1],) * 2, p))
            phases.append((mean / np.sqrt(c), np.hstack(U), np.hstack(V), scipy.linalg.block_diag(*C) / np.sqrt(c),
                           scipy.linalg.block_diag(*W)))

        def apply(v):
            X = v.reshape(n, n)
            for mean, U, V, C, W in phases:
                Y = mean @ X @ mean.T
                X = Y + U @ (C @ ((V.T @ X @ V) * W) @ C.T) @ U.T if U.shape[1] else Y
            return X.ravel()

        # T maps PSD matrices to PSD matrices: its spectral radius is an eigenvalue with a PSD
        # eigenvector (Krein–Rutman), which the identity overlaps.
        operator = scipy.sparse.linalg.LinearOperator((n * n, n * n), matvec=apply, dtype=float)
        try:
            values = scipy.sparse.linalg.eigs(operator, k=4, which="LM", v0=np.eye(n).ravel(), tol=1e-14,
                                              ncv=min(n * n - 1, 40), maxiter=100 * n * n, return_eigenvectors=False)
        except scipy.sparse.linalg.ArpackNoConvergence as error:
            values = error.eigenvalues
        except scipy.sparse.linalg.ArpackError:  # e.g. error 3, no shifts: the Krylov space is exhausted
            values = []
        if len(values):
            radius = np.abs(values).max()
        elif n * n <= DENSE_FALLBACK:
            radius = _dense_radius(A, pmf, scales)
        else:
            radius = _power_radius(apply, n, x)
    with np.errstate(divide="ignore"):
        return float(np.exp((np.log(radius) + np.log(scales).sum()) / (2 * P)))


def mean_square_rate(system: System, xs):
    """``ρ(T)^{1/2P}``, T the map ``X ↦ Σ_d p_d A_d X A_dᵀ`` of E[s sᵀ] over one period."""
    return np.array([_mean_square_radius(A0, A1, system.pmf, x) for A0, A1, _, _, xx in system.pieces(xs) for x in xx])


@jax.jit
def _growth(A0, A1, xs, phases, lags, v0):
    """``log ‖s_{t+1}‖ / ‖s_t‖`` along the schedule (phase and delay index per step), at each x,
    from ``v0`` renormalised every step: ``(T, G)``."""

    def step(V, index):
        a0, a1 = A0[index[0], index[1]], A1[index[0], index[1]]
        V = V @ a0.T + xs[:, None] * (V @ a1.T)
        norm = jnp.linalg.norm(V, axis=1)
        # A state that became exactly 0 stays 0: a contraction (log 0 = −inf), never 0/0 = NaN.
        return V / jnp.where(norm > 0, norm, 1.0)[:, None], jnp.log(norm)

    return jax.lax.scan(step, jnp.broadcast_to(v0, (xs.size, v0.size)), (phases, lags))[1]


def lyapunov(system: System, xs, steps: int, seed: int):
    """The top Lyapunov exponent ``L = lim (1/T) log ‖A_{d_T} ⋯ A_{d_1} v‖`` at each x, over ``steps``
    steps (after ``BURN``) of a delay schedule drawn with numpy from ``seed`` — the same schedule and
    v for every x (common random numbers make the estimate smooth in x) — and its standard error
    from ``BATCHES`` batch means. Returns ``(L, error)``, each ``(len(xs),)``."""
    rng = np.random.default_rng(seed)
    total = BURN + steps
    lags, n = rng.choice(len(system.pmf), size=total, p=system.pmf), system.layout.n
    v0 = rng.standard_normal(n)
    estimates = []
    for A0, A1, _, _, x in system.pieces(xs):
        for start in range(0, len(x), XS):  # XS xs at a time, padded: one compilation per system shape
            block = np.pad(x[start:start + XS], (0, XS - len(x[start:start + XS])), mode="edge")
            with jax.enable_x64(True):
                logs = np.asarray(_growth(A0, A1, block, np.arange(total) % A0.shape[0], lags, v0 / np.linalg.norm(v0)))
            estimates.append(logs[BURN:, :len(x) - start].reshape(BATCHES, -1, min(XS, len(x) - start)).mean(1))
    batches = np.concatenate(estimates, axis=1)
    collapsed = np.isneginf(batches).any(0)  # the product sent v to exactly 0: L = −inf, no doubt about it
    with np.errstate(invalid="ignore"):
        mean, error = batches.mean(0), batches.std(0, ddof=1) / np.sqrt(BATCHES)
    return np.where(collapsed, -np.inf, mean), np.where(collapsed, 0.0, error)


def per_step(system: System, xs, criterion: str, steps: int, seed: int, with_error: bool = False):
    """Per-step rate of ``criterion`` at each x (stable below 1); ``with_error``: ``(rate, error)``,
    the error of ``log rate`` (the Lyapunov exponent's standard error; 0 for the others). With one
    delay the three agree: the mean's is exact (``ρ(A ⊗ A) = ρ(A)²``)."""
    xs = np.atleast_1d(np.asarray(xs, float))
    error = np.zeros(len(xs))
    if criterion == "mean" or len(system.lags) == 1:
        rate = mean_rate(system, xs)  # a constant delay: the product is deterministic
    elif criterion == "mean-square":
        rate = mean_square_rate(system, xs)
    else:
        exponent, error = lyapunov(system, xs, steps, seed)
        rate = np.exp(exponent)
    return (rate, error) if with_error else rate
