"""A real model's NQM: the Hessian's spectrum at a point and the gradient noise along it.

For a loss ``loss(params, batch)`` — a plain JAX function of a parameter pytree and a batch (a
pytree whose leaves share a leading example axis), averaging over the batch — and a dataset at the
parameters ``params``:

* **the top eigenvalues** of the Hessian of the mean loss, with their eigenvectors, by Lanczos:
  scipy's ``eigsh`` (ARPACK's implicitly restarted Lanczos, which reorthogonalises and restarts as
  it should — no need to write that again) on exact Hessian-vector products (forward over reverse
  mode, jitted);
* **the bulk** by stochastic Lanczos quadrature (Ubaru, Chen and Saad, SIAM J. Matrix Anal. Appl.
  38, 2017): per Rademacher probe, ``steps`` Lanczos steps (fully reorthogonalised, written here:
  ARPACK returns no quadrature), whose Ritz values weighted by the squared first components of
  their vectors estimate the spectral density; its quantiles stand for the eigenvalues below the
  top ones;
* **the gradient noise** along each top eigenvector ``u_k``: the variance over the examples of the
  per-example gradients projected on it, ``Var_k``. The NQM's noise is ``σ ξ`` with ``ξ ~ N(0, H)``
  per example, so ``Var_k = σ² λ_k``: ``σ_k² = Var_k / λ_k`` per component and ``σ`` their
  λ-weighted root mean square (per example; a batch of B has ``σ/√B``, nqm's ``batch_size``).

The NQM needs positive curvature: eigenvalues at or below ``floor × λ_max`` are dropped, and their
number said (a non-convex point has negative ones).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.sparse.linalg import LinearOperator, eigsh

from nqm import jobs
from nqm.errors import NqmError
from nqm.problem import Problem, explicit
from nqm.validate import BOUNDS, count, number


class Measured(NamedTuple):
    """What :func:`measure` found at one point of one model.

    Attributes:
      eigenvalues: the spectrum the NQM takes, descending: the top ones, then the bulk's quantiles
        (positive only).
      top: the top eigenvalues as Lanczos found them (descending; may hold non-positive ones).
      vectors: their unit eigenvectors, ``(parameters, top)``, in the flattened parameter order.
      variance: ``Var_k``, the per-example gradient variance along each top eigenvector.
      sigma_components: ``σ_k = √(Var_k / λ_k)`` per positive top eigenvalue (NaN elsewhere).
      sigma: the per-example noise scale σ of the NQM (``Σ λ_k σ_k² / Σ λ_k`` over the positive
        top eigenvalues, square-rooted).
      how: how each part was estimated (for a result's attributes).
    """

    eigenvalues: np.ndarray
    top: np.ndarray
    vectors: np.ndarray
    variance: np.ndarray
    sigma_components: np.ndarray
    sigma: float
    how: dict

    def problem(self) -> Problem:
        """The NQM with the measured spectrum (``nqm.explicit``)."""
        return explicit(self.eigenvalues)


def measure(loss: Callable, params, data, *, top: int = 16, dim: int | None = None, probes: int = 8,
            steps: int = 64, floor: float = 1e-6, seed: int = 0) -> Measured:
    """The NQM of ``loss`` at ``params`` on ``data``: spectrum and noise (see the module's docstring).

    Args:
      loss: ``loss(params, batch) -> scalar``, the mean over the batch's examples.
      params: the point (a pytree of arrays).
      data: the examples, a pytree of arrays with one leading example axis.
      top: how many top eigenvalues Lanczos finds (and how many directions the noise is measured on).
      dim: the NQM's dimension (default: the number of parameters, at most 10⁴): ``top`` exact
        eigenvalues and ``dim − top`` quantiles of the bulk.
      probes, steps: stochastic Lanczos quadrature's Rademacher probes and Lanczos steps each
        (at most the number of parameters).
      floor: eigenvalues at or below ``floor × λ_max`` are dropped.
      seed: the probes' and Lanczos' starting vectors.

    Returns:
      The :class:`Measured` spectrum and noise.

    Raises:
      NqmError: a loss that is not a scalar or not finite at ``params``, data without a common
        example axis, or sizes out of range, in one line.
    """
    flat, unravel = ravel_pytree(params)
    n, examples = flat.size, jobs.examples(data)
    top = count(top, "top", high=max(1, n - 2))
    dim = count(min(n, 10_000) if dim is None else dim, "dim", low=top, high=BOUNDS["dim"])
    probes, steps = count(probes, "probes", high=10_000), count(steps, "steps", high=10_000)
    steps = min(steps, n)  # a Krylov space holds at most n vectors
    floor = number(floor, "floor")
    if not 0.0 <= floor < 1.0:
        raise NqmError(f"floor must be in [0, 1) (a fraction of the largest eigenvalue), got {floor}")
    mean_loss = lambda w: loss(unravel(w), data)
    jobs.loss_at(mean_loss, flat)
    hvp = _hvp(mean_loss, flat)
    top_values, vectors = _top(hvp, n, top, seed)
    nodes, weights = _quadrature(hvp, n, probes, steps, seed)
    bulk = _quantiles(nodes, weights, dim - top, below=top_values[-1])
    variance = _projected_variance(loss, unravel, flat, data, vectors, examples)
    positive = top_values > floor * top_values[0]
    sigma_components = np.where(positive, np.sqrt(variance / np.where(positive, top_values, 1.0)), np.nan)
    sigma = float(np.sqrt(np.sum(top_values[positive] * sigma_components[positive] ** 2) / np.sum(top_values[positive])))
    spectrum = np.concatenate([top_values, bulk])
    kept = spectrum[spectrum > floor * top_values[0]]
    how = {"parameters": n, "examples": examples, "top": f"{top} by Lanczos (scipy eigsh) on Hessian-vector products",
           "bulk": f"{dim - top} quantiles of stochastic Lanczos quadrature ({probes} Rademacher probes × {steps} steps)",
           "noise": f"per-example gradient variance along the top {top} eigenvectors, over {examples} examples",
           "dropped": int(spectrum.size - kept.size), "floor": floor, "seed": seed}
    return Measured(np.sort(kept)[::-1], top_values, vectors, variance, sigma_components, sigma, how)


def _hvp(f, w) -> Callable:
    """``v ↦ H v`` at ``w`` (float64 numpy in and out), forward over reverse mode, jitted once."""
    product = jax.jit(lambda v: jax.jvp(jax.grad(f), (w,), (v.astype(w.dtype),))[1])
    return lambda v: np.array(product(jnp.asarray(v)), np.float64)


def _top(hvp, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (algebraic) eigenvalues, descending, and their eigenvectors ``(n, k)``."""
    start = np.random.default_rng(seed).standard_normal(n)
    values, vectors = eigsh(LinearOperator((n, n), matvec=hvp, dtype=np.float64), k=k, which="LA", v0=start)
    order = np.argsort(values)[::-1]
    return values[order], vectors[:, order]


def _quadrature(hvp, n: int, probes: int, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (summing to 1) of the spectral density, from ``probes`` Lanczos runs."""
    rng = np.random.default_rng(seed + 1)
    nodes, weights = [], []
    for _ in range(probes):
        alpha, beta = _lanczos(hvp, rng.choice([-1.0, 1.0], n) / np.sqrt(n), steps)
        ritz, vectors = np.linalg.eigh(np.diag(alpha) + np.diag(beta, 1) + np.diag(beta, -1))
        nodes.append(ritz)
        weights.append(vectors[0] ** 2 / probes)
    return np.concatenate(nodes), np.concatenate(weights)


def _lanczos(hvp, q, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The tridiagonal ``(α, β)`` of ``steps`` Lanczos steps from the unit vector ``q``, fully
    reorthogonalised (stopping early where the Krylov space is exhausted)."""
    basis, alpha, beta = [q], [], []
    for j in range(steps):
        w = hvp(basis[j])
        alpha.append(float(basis[j] @ w))
        stack = np.array(basis)
        w -= stack.T @ (stack @ w)  # against every earlier vector, twice: rounding loses orthogonality
        w -= stack.T @ (stack @ w)
        size = float(np.linalg.norm(w))
        if j == steps - 1 or size < 1e-10 * max(1.0, abs(alpha[-1])):
            break
        beta.append(size)
        basis.append(w / size)
    return np.array(alpha), np.array(beta[: len(alpha) - 1])


def _quantiles(nodes, weights, count_: int, below: float) -> np.ndarray:
    """``count_`` eigenvalues standing for the density below the top ones: its quantiles at the
    midpoints of ``count_`` equal shares of the mass below ``below`` (descending)."""
    if count_ == 0:
        return np.zeros(0)
    keep = nodes < below
    if not keep.any():
        return np.full(count_, below)
    order = np.argsort(nodes[keep])
    x, cdf = nodes[keep][order], np.cumsum(weights[keep][order])
    levels = (np.arange(count_) + 0.5) / count_ * cdf[-1]
    return np.sort(x[np.minimum(np.searchsorted(cdf, levels), x.size - 1)])[::-1]


def _projected_variance(loss, unravel, flat, data, vectors, examples: int, chunk: int = 256) -> np.ndarray:
    """Per top eigenvector, the variance over the examples of their gradients projected on it."""
    one = lambda w, example: loss(unravel(w), jax.tree.map(lambda x: x[None], example))
    projected = jax.jit(jax.vmap(lambda example, u: jax.grad(one)(flat, example) @ u, in_axes=(0, None)))
    u = jnp.asarray(vectors, flat.dtype)
    rows = [np.asarray(projected(jax.tree.map(lambda x: x[i:i + chunk], data), u), np.float64)
            for i in range(0, examples, chunk)]
    return np.var(np.concatenate(rows), axis=0)

