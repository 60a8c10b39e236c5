"""A real model's NQM: the Hessian's spectrum at a point, the model's initial error along it, and the
gradient noise.

For a loss ``loss(params, batch)`` — a plain JAX function of a parameter pytree and a batch (a
pytree whose leaves share a leading example axis), averaging over the batch — and a dataset at the
parameters ``params`` (``w₀``), with ``g₀`` the gradient of the mean loss there:

* **exactly**, for a model of at most :data:`EXACT` parameters (a few thousand): the dense Hessian
  (one Hessian-vector product per parameter, forward over reverse mode) and its full
  eigendecomposition. Every eigenvalue is itself, the initial error along each eigenvector ``u_k``
  is the Newton step's, ``(u_k · g₀) / λ_k`` (where the model is a quadratic, exactly ``u_k · (w₀ −
  w*)``), and the noise is measured along every eigenvector: a model that is an NQM is measured as
  itself, to rounding.
* **by Lanczos**, for a larger model: the top eigenvalues and eigenvectors by scipy's ``eigsh``
  (ARPACK's implicitly restarted Lanczos) on exact Hessian-vector products, each with its residual
  ``‖H u − λ u‖`` (a bound on its error); the rest — the bulk — by stochastic Lanczos quadrature
  (Ubaru, Chen and Saad, SIAM J. Matrix Anal. Appl. 38, 2017) on the Hessian with the top
  eigenvectors projected out (so that no top eigenvalue reappears in the bulk): per Rademacher
  probe, ``steps`` fully reorthogonalised Lanczos steps give a Gauss quadrature of the probe's
  spectral measure; the spectral distribution function is the mean of the probes' (each linear
  between its nodes), and the bulk's eigenvalues are its quantiles, each with two standard errors
  of the probes' spread (:attr:`Measured.uncertainty`). The initial error in the bulk is one more
  Gauss quadrature, of the measure that the projected gradient puts on the spectrum, weighted by
  ``1/λ²``: each bulk eigenvalue takes the error of the share of the spectrum it stands for.
* **the gradient noise**: the NQM's noise is ``σ ξ`` with ``ξ ~ N(0, H)`` per example, covariance
  ``σ² H``; the model's per-example gradients have a covariance ``C``. ``σ² = tr C / tr H`` over the
  kept curvature (the λ-weighted mean of the per-direction ``σ_k² = Var_k / λ_k``, whatever ``top``;
  per example: a batch of B has ``σ/√B``, nqm's ``batch_size``), ``tr C`` from the per-example
  gradients and ``tr H`` from the spectrum. ``Var_k``, the variance of the per-example gradients
  projected on an eigenvector, is measured along every eigenvector exactly and along the top ones by
  Lanczos; σ's spread is the λ-weighted standard deviation of those ``σ_k`` about σ: how far the
  model's noise is from the NQM's ``σ² H``, direction by direction.

The NQM needs positive curvature: eigenvalues at or below ``floor × λ_max`` are dropped, and what
was dropped is said (:attr:`Measured.how`: how many, their sum, the most negative, and the share of
the gradient along them).

Accuracy of the bulk (``tests/transfer/test_transfer.py``): on least-squares models with a known spectrum of
5,000 parameters, at the defaults (16 probes, 64 steps), every quantile of a spectrum spread over
1.5 decades is within 1.2 % of the true eigenvalue and 95 % of them within their stated uncertainty;
the quadrature's nodes are spread evenly in λ, not in log λ, so over three decades the smallest
fraction of a percent of the spectrum is resolved only to tens of percent.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, LinearOperator, eigsh

from nqm.errors import NqmError
from nqm.problem import Problem, explicit
from nqm.validate import BOUNDS, count, flag, number
from nqm.transfer import checked

EXACT = 4096  # parameters up to which the Hessian is formed whole (n products and one n × n eigh)
MOST_EXACT = 20_000  # the largest dense Hessian measure takes when asked: 3.2 GB in float64
GHOST = 1e-10  # a Ritz value weighted below this share of its probe is rounding, not spectrum
CHUNK = 128  # Hessian-vector products, or examples, per jitted call


class Measured(NamedTuple):
    """What :func:`measure` found at one point of one model.

    Attributes:
      eigenvalues: the spectrum the NQM takes, descending: the top ones, then the bulk (positive,
        above ``floor × λ_max``, only).
      initial: the model's initial error along each of them (the NQM's ``u₀``, the same order).
      uncertainty: the relative uncertainty of each eigenvalue: 0 where measured exactly, a top
        one's Lanczos residual ``‖H u − λ u‖ / λ``, a bulk quantile's two standard errors over the
        probes.
      top: the top eigenvalues as found (descending; may hold non-positive ones).
      vectors: their unit eigenvectors, ``(parameters, top)``, in the flattened parameter order.
      variance: ``Var_k``, the per-example gradient variance along each eigenvector of
        ``eigenvalues`` (NaN where not measured: the bulk, by Lanczos).
      sigma_components: ``σ_k = √(Var_k / λ_k)`` along the same (NaN where not measured).
      sigma: the per-example noise scale σ of the NQM, ``√(tr C / tr H)`` over the kept curvature.
      sigma_spread: the λ-weighted standard deviation of the ``σ_k`` about ``σ``.
      how: how each part was estimated, and what was dropped (for a result's attributes).
    """

    eigenvalues: np.ndarray
    initial: np.ndarray
    uncertainty: np.ndarray
    top: np.ndarray
    vectors: np.ndarray
    variance: np.ndarray
    sigma_components: np.ndarray
    sigma: float
    sigma_spread: float
    how: dict

    def problem(self) -> Problem:
        """The NQM with the measured spectrum, starting from the model's initial error (``nqm.explicit``)."""
        return explicit(self.eigenvalues, initial=self.initial)


def measure(loss: Callable, params, data, *, top: int | None = None, dim: int | None = None, probes: int = 16,
            steps: int = 64, floor: float = 1e-6, seed: int = 0, exact: bool | None = None) -> Measured:
    """The NQM of ``loss`` at ``params`` on ``data``: spectrum, initial error and noise (see the
    module's docstring).

    Args:
      loss: ``loss(params, batch) -> scalar``, the mean over the batch's examples.
      params: the point (a pytree of floating-point arrays).
      data: the examples, a pytree of arrays with one leading example axis.
      top: how many top eigenvalues (and eigenvectors) to report; by Lanczos, those found by
        ``eigsh`` and the directions the noise is measured on (default: 16, or fewer parameters).
      dim: the NQM's dimension (default: the number of parameters, at most 10⁴): ``top`` eigenvalues
        and ``dim − top`` quantiles of the rest, each standing for an equal share of it.
      probes, steps: stochastic Lanczos quadrature's Rademacher probes and Lanczos steps each
        (at most the number of parameters).
      floor: eigenvalues at or below ``floor × λ_max`` are dropped.
      seed: the probes' and Lanczos' starting vectors.
      exact: the dense Hessian (``True``), Lanczos (``False``), or the dense one up to
        :data:`EXACT` parameters (``None``).

    Returns:
      The :class:`Measured` spectrum, initial error and noise.

    Raises:
      NqmError: a loss that is not a function, parameters that are not floating point, a loss that
        is not a finite scalar at ``params``, a gradient or Hessian that is not finite there, no
        positive curvature, data without a common example axis, or sizes out of range, in one line.
    """
    _function(loss)
    flat, unravel = _flat(params)
    n, examples = flat.size, checked.examples(data)
    exact = n <= EXACT if exact is None else flag(exact, "exact")
    if exact and n > MOST_EXACT:
        raise NqmError(f"exact=True needs a dense {n:,} × {n:,} Hessian; measure up to {MOST_EXACT:,} parameters "
                       "exactly, or leave exact out (Lanczos)")
    if not exact and n < 3:
        raise NqmError(f"Lanczos needs at least 3 parameters, the model has {n}: measure it exactly (exact=True)")
    most = n if exact else n - 2  # ARPACK finds fewer than n − 1
    top = count(min(16, most) if top is None else top, "top", high=most)
    dim = count(min(n, 10_000) if dim is None else dim, "dim", low=top, high=BOUNDS["dim"])
    probes, steps = count(probes, "probes", high=10_000), count(steps, "steps", high=10_000)
    steps = min(steps, n)  # a Krylov space holds at most n vectors
    floor = number(floor, "floor")
    if not 0.0 <= floor < 1.0:
        raise NqmError(f"floor must be in [0, 1) (a fraction of the largest eigenvalue), got {floor}")
    seed = count(seed, "seed", low=0, high=2**32 - 1)
    mean_loss = lambda w: loss(unravel(w), data)
    checked.loss_at(mean_loss, flat)
    gradient = np.asarray(jax.grad(mean_loss)(flat), np.float64)
    if not np.all(np.isfinite(gradient)):
        raise NqmError("the gradient of the loss is not finite at params: start the model where it is")
    if exact:
        parts = _exact_parts(*_dense(mean_loss, flat), gradient, top, dim, floor)
    else:
        parts = _lanczos_parts(_hvp(mean_loss, flat), gradient, n, top, dim, probes, steps, floor, seed)
    values = parts.eigenvalues
    along, total = _projected_variance(loss, unravel, flat, data, parts.directions, gradient, examples)
    measured = int(np.sum(parts.measured))  # their eigenvalues are the first of the spectrum
    variance = np.full(values.size, np.nan)
    variance[:measured] = along[parts.measured]
    sigma_components = np.sqrt(variance / values)
    # σ² = tr C / tr H over the kept curvature: the noise along the dropped directions measured is left out
    sigma = float(np.sqrt(max(total - np.sum(along[parts.dropped]), 0.0) / np.sum(parts.weights * values)))
    weights = values[:measured] / np.sum(values[:measured])
    spread = float(np.sqrt(np.sum(weights * (sigma_components[:measured] - sigma) ** 2)))
    how = {"parameters": n, "examples": examples, **parts.how,
           "noise": f"the per-example gradients' total variance over the kept curvature (σ² = tr C / tr H), and "
                    f"their variance along {measured} eigenvectors ({'every kept one' if exact else 'the top ones'}), "
                    f"over {examples} examples",
           "sigma_spread": spread, "floor": floor, "seed": seed}
    return Measured(values, parts.initial, parts.uncertainty, parts.top, parts.vectors, variance, sigma_components,
                    sigma, spread, how)


class _Parts(NamedTuple):
    """What one way of measuring finds: the NQM's eigenvalues with their initial error, uncertainty
    and weights (how many eigenvalues each stands for), the eigenvectors the noise is measured along,
    which of them are the NQM's own (in order, the first of ``eigenvalues``) and which have dropped
    curvature, the top eigenvalues and eigenvectors, and how."""

    eigenvalues: np.ndarray
    initial: np.ndarray
    uncertainty: np.ndarray
    weights: np.ndarray
    directions: np.ndarray
    measured: np.ndarray
    dropped: np.ndarray
    top: np.ndarray
    vectors: np.ndarray
    how: dict


def _function(loss) -> None:
    """Refuse a loss that is not a function."""
    if not callable(loss):
        raise NqmError(f"loss must be a function loss(params, batch) -> scalar (the batch's mean loss), got {loss!r}")


def _flat(params):
    """The parameters flattened, refused unless every leaf is a floating-point array."""
    leaves = jax.tree.leaves(params)
    if not leaves:
        raise NqmError("params holds no arrays: give the model's parameters (a pytree of floating-point arrays)")
    dtypes = [np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype for x in leaves]
    kinds = {dtype.name for dtype in dtypes if not jnp.issubdtype(dtype, jnp.floating)}
    if kinds:
        raise NqmError(f"params must be floating-point arrays (a gradient needs them), got {', '.join(sorted(kinds))}: "
                       "give float32 or float64 values")
    flat, unravel = ravel_pytree(params)
    if flat.size == 0:
        raise NqmError("params holds no parameters (every array is empty)")
    return flat, unravel


def _curved(largest: float) -> None:
    """Refuse a point without positive curvature: the NQM has none to take."""
    if not largest > 0:
        what = "no curvature" if largest == 0 else "only negative curvature"
        raise NqmError(f"the loss has {what} at params (its largest Hessian eigenvalue is {largest:.3g}): the NQM "
                       "needs a point where the loss curves upward; measure the model elsewhere")


def _hvp(f, w) -> Callable:
    """``v ↦ H v`` at ``w`` (float64 numpy in and out), forward over reverse mode, jitted once; a
    product that is not finite is one error line."""
    product = jax.jit(lambda v: jax.jvp(jax.grad(f), (w,), (v.astype(w.dtype),))[1])

    def hvp(v):
        out = np.array(product(jnp.asarray(v)), np.float64)
        if not np.all(np.isfinite(out)):
            raise NqmError("the Hessian of the loss is not finite at params (a Hessian-vector product holds NaN or ∞): "
                           "start the model where its loss is twice differentiable")
        return out

    return hvp


def _dense(f, w) -> tuple[np.ndarray, np.ndarray]:
    """The whole Hessian's eigenvalues (descending) and eigenvectors, from one product per
    parameter (``CHUNK`` at a time)."""
    n = w.size
    columns = jax.jit(jax.vmap(lambda v: jax.jvp(jax.grad(f), (w,), (v,))[1]))
    eye = np.eye(n, dtype=w.dtype)
    hessian = np.concatenate([np.asarray(columns(jnp.asarray(eye[i:i + CHUNK])), np.float64)
                              for i in range(0, n, CHUNK)])
    if not np.all(np.isfinite(hessian)):
        raise NqmError("the Hessian of the loss is not finite at params (it holds NaN or ∞): start the model where "
                       "its loss is twice differentiable")
    values, vectors = np.linalg.eigh(0.5 * (hessian + hessian.T))
    return values[::-1], vectors[:, ::-1]


def _exact_parts(spectrum, vectors, gradient, top, dim, floor) -> _Parts:
    """The NQM from the whole spectrum (descending) and its eigenvectors."""
    _curved(spectrum[0])
    n = spectrum.size
    kept = spectrum > floor * spectrum[0]
    error = (vectors.T @ gradient) / np.where(kept, spectrum, 1.0)  # the Newton step along each
    values, initial, weights, measured = spectrum[kept], error[kept], np.ones(np.sum(kept)), kept
    if dim != n:  # other than one component per parameter: the bulk's quantiles, each with its share's error
        bulk, energy = _shares(spectrum[top:], np.where(kept, error, 0.0)[top:] ** 2, dim - top)
        keep = bulk > floor * spectrum[0]
        values = np.concatenate([spectrum[:top][kept[:top]], bulk[keep]])
        initial = np.concatenate([error[:top][kept[:top]], np.sqrt(energy[keep])])
        weights = np.concatenate([np.ones(np.sum(kept[:top])), np.full(np.sum(keep), (n - top) / (dim - top))])
        measured = np.arange(n) < top  # the bulk's quantiles have no eigenvector of their own
        measured &= kept
    along = vectors[:, ~kept] @ (vectors[:, ~kept].T @ gradient)
    how = {"method": f"exact: the dense Hessian ({n} Hessian-vector products) and its eigendecomposition",
           "bulk": "exact" if dim == n else f"{dim - top} quantiles of the exact spectrum below the top {top}",
           **_dropped(np.sum(~kept), float(np.sum(spectrum[~kept])), float(spectrum[-1]), float(along @ along),
                      gradient, n)}
    # the noise along every eigenvector: the NQM's own first, the dropped ones to leave out of tr C
    order = np.concatenate([np.flatnonzero(measured), np.flatnonzero(~measured)])
    return _Parts(values, initial, np.zeros(values.size), weights, vectors[:, order], measured[order], ~kept[order],
                  spectrum[:top], vectors[:, :top], how)


def _shares(values, energy, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """``parts`` eigenvalues standing for the descending ``values`` in equal shares (each share's
    middle one) and the initial error energy ``Σ u²`` of each share."""
    edges = np.linspace(0, values.size, parts + 1)
    middle = np.minimum(((edges[:-1] + edges[1:]) / 2).astype(int), values.size - 1)
    cumulative = np.concatenate([[0.0], np.cumsum(energy)])
    at = lambda x: np.interp(x, np.arange(values.size + 1), cumulative)  # a share may split an eigenvalue
    return values[middle], np.diff(at(edges))


def _dropped(number_, curvature: float, lowest: float, along: float, gradient, n: int) -> dict:
    """What the NQM leaves out: how many eigenvalues (and their share of all), their sum, the lowest
    eigenvalue, and the share of ‖g₀‖² along them (``along``)."""
    total = float(gradient @ gradient)
    return {"dropped": int(round(float(number_))), "dropped_share": float(number_) / n, "dropped_curvature": curvature,
            "lowest_eigenvalue": lowest, "dropped_gradient_share": along / total if total > 0 else 0.0}


def _lanczos_parts(hvp, gradient, n, top, dim, probes, steps, floor, seed) -> _Parts:
    """The NQM by Lanczos and stochastic Lanczos quadrature (see the module's docstring)."""
    rng = np.random.default_rng(seed)
    start = rng.standard_normal(n)
    if not np.any(hvp(start)):  # ARPACK cannot start there
        _curved(0.0)
    top_values, vectors = _top(hvp, n, top, start)
    _curved(top_values[0])
    lowest = floor * top_values[0]
    residual = np.array([np.linalg.norm(hvp(vectors[:, k]) - top_values[k] * vectors[:, k]) for k in range(top)])
    project = lambda v: v - vectors @ (vectors.T @ v)
    deflated = lambda v: project(hvp(project(v)))
    rules = [_gauss(deflated, project(rng.choice([-1.0, 1.0], n)), steps) for _ in range(probes)]
    grid, cdf, each = _distribution(rules)
    parts, mass = dim - top, cdf[-1]
    levels = (np.arange(parts) + 0.5) / parts * mass
    bulk = np.interp(levels, cdf, grid)
    edges = np.interp(np.arange(1, parts) / parts * mass, cdf, grid)
    energy, below = _error_energy(deflated, project(gradient), steps, edges, lowest)
    if probes > 1:
        spread = np.std([np.interp(bulk, nodes, mid, left=0.0, right=mid[-1]) for nodes, mid in each], axis=0,
                        ddof=1) / np.sqrt(probes)
        uncertainty = 2 * spread / _slope(levels, cdf, grid, mass / parts) / np.abs(bulk)
    else:
        uncertainty = np.full(parts, np.inf)
    bulk, energy, uncertainty = bulk[::-1], energy[::-1], uncertainty[::-1]  # descending, as the top
    share = (n - top) / parts  # eigenvalues each quantile stands for
    head, keep = top_values > lowest, bulk > lowest
    newton = (vectors.T @ gradient) / np.where(head, top_values, 1.0)
    along = vectors[:, ~head] @ (vectors[:, ~head].T @ gradient)
    how = {"method": f"Lanczos: the top {top} by scipy eigsh on Hessian-vector products, the rest by stochastic "
                     f"Lanczos quadrature ({probes} Rademacher probes × {steps} steps) without them",
           "bulk": f"{parts} quantiles of the quadrature's spectral distribution (each standing for {share:.3g} "
                   f"eigenvalues), relative uncertainty up to {np.max(uncertainty[keep], initial=0):.2g}",
           **_dropped(np.sum(~head) + share * np.sum(~keep), float(np.sum(top_values[~head]) + share * np.sum(bulk[~keep])),
                      float(min(top_values[-1], grid[0])), float(along @ along) + below, gradient, n)}
    order = np.concatenate([np.flatnonzero(head), np.flatnonzero(~head)])
    return _Parts(np.concatenate([top_values[head], bulk[keep]]), np.concatenate([newton[head], np.sqrt(energy[keep])]),
                  np.concatenate([residual[head] / top_values[head], uncertainty[keep]]),
                  np.concatenate([np.ones(np.sum(head)), np.full(np.sum(keep), share)]), vectors[:, order], head[order],
                  ~head[order], top_values, vectors, how)


def _top(hvp, n: int, k: int, start) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (algebraic) eigenvalues, descending, and their eigenvectors ``(n, k)``."""
    try:
        values, vectors = eigsh(LinearOperator((n, n), matvec=hvp, dtype=np.float64), k=k, which="LA", v0=start)
    except (ArpackError, ArpackNoConvergence) as exc:
        raise NqmError(f"Lanczos (scipy eigsh) found no top eigenvalues: {' '.join(str(exc).split())}; try "
                       "exact=True or fewer top eigenvalues") from None
    order = np.argsort(values)[::-1]
    return values[order], vectors[:, order]


def _gauss(operator, start, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The Gauss quadrature of ``start``'s spectral measure (total mass ``‖start‖²``): ``steps``
    Lanczos steps' Ritz values and their weights, rounding's ghosts left out."""
    size = float(start @ start)
    if size == 0:
        return np.zeros(0), np.zeros(0)
    alpha, beta = _lanczos(operator, start / np.sqrt(size), steps)
    ritz, vectors = np.linalg.eigh(np.diag(alpha) + np.diag(beta, 1) + np.diag(beta, -1))
    weights = vectors[0] ** 2
    real = weights > GHOST
    return ritz[real], weights[real] * size


def _lanczos(operator, q, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The tridiagonal ``(α, β)`` of ``steps`` Lanczos steps from the unit vector ``q``, fully
    reorthogonalised (stopping early where the Krylov space is exhausted)."""
    basis, alpha, beta = np.zeros((steps, q.size)), np.zeros(steps), np.zeros(steps)
    basis[0] = q
    for j in range(steps):
        w = operator(basis[j])
        alpha[j] = basis[j] @ w
        done = basis[: j + 1]
        w -= done.T @ (done @ w)  # against every earlier vector, twice: rounding loses orthogonality
        w -= done.T @ (done @ w)
        size = float(np.linalg.norm(w))
        if j == steps - 1 or size < 1e-10 * max(1.0, abs(alpha[j])):
            return alpha[: j + 1], beta[:j]
        beta[j] = size
        basis[j + 1] = w / size
    return alpha, beta[: steps - 1]


def _distribution(rules) -> tuple[np.ndarray, np.ndarray, list]:
    """The spectral distribution function: the mean over the probes of each probe's (each Gauss
    node's mass half below and half above it, linear in between), on the union of the nodes (where
    the mean is piecewise linear); and each probe's ``(nodes, distribution at them)``."""
    each = []
    for nodes, weights in rules:
        order = np.argsort(nodes)
        each.append((nodes[order], np.cumsum(weights[order]) - weights[order] / 2))
    grid = np.unique(np.concatenate([nodes for nodes, _ in each]))
    cdf = np.mean([np.interp(grid, nodes, mid, left=0.0, right=mid[-1]) for nodes, mid in each], axis=0)
    top = np.mean([np.sum(weights) for _, weights in rules])  # past the last node: every probe's whole mass
    return np.append(grid, grid[-1]), np.append(np.maximum.accumulate(cdf), top), each


def _slope(levels, cdf, grid, width) -> np.ndarray:
    """The distribution function's slope (eigenvalues per unit λ) about each quantile's level, over
    ± two shares of the mass: what turns an error in mass into one in λ."""
    low, high = np.clip(levels - 2 * width, 0, cdf[-1]), np.clip(levels + 2 * width, 0, cdf[-1])
    span = np.interp(high, cdf, grid) - np.interp(low, cdf, grid)
    return np.where(span > 0, (high - low) / np.where(span > 0, span, 1.0), np.inf)


def _error_energy(deflated, gradient, steps, edges, lowest) -> tuple[np.ndarray, float]:
    """The initial error ``Σ u²`` of each of the bulk's shares (ascending, between ``edges``), and
    the mass of ``gradient`` on curvature at or below ``lowest`` (dropped): the Gauss quadrature of
    the gradient's spectral measure, each node's mass divided by its λ²."""
    nodes, weights = _gauss(deflated, gradient, steps)
    real = nodes > lowest
    order = np.argsort(nodes[real])
    nodes, energy = nodes[real][order], (weights[real] / nodes[real] ** 2)[order]
    if nodes.size == 0:
        return np.zeros(edges.size + 1), float(np.sum(weights))
    total = float(np.sum(energy))
    at = np.interp(edges, nodes, np.cumsum(energy) - energy / 2, left=0.0, right=total)
    return np.diff(np.concatenate([[0.0], at, [total]])), float(np.sum(weights[~real]))


def _projected_variance(loss, unravel, flat, data, vectors, gradient, examples: int) -> tuple[np.ndarray, float]:
    """Per eigenvector (a column of ``vectors``), the variance over the examples of their gradients
    projected on it; and their total variance, ``tr C`` (both about the mean gradient, so that sums
    do not cancel)."""
    one = lambda w, example: loss(unravel(w), jax.tree.map(lambda x: x[None], example))
    gradients = jax.jit(jax.vmap(lambda example: jax.grad(one)(flat, example)))
    total, squares = np.zeros(vectors.shape[1]), np.zeros(vectors.shape[1])
    deviation, trace = np.zeros(gradient.size), 0.0
    for i in range(0, examples, CHUNK):
        each = np.asarray(gradients(jax.tree.map(lambda x: x[i:i + CHUNK], data)), np.float64) - gradient
        projected = each @ vectors
        total += projected.sum(0)
        squares += (projected**2).sum(0)
        deviation += each.sum(0)
        trace += float(np.sum(each**2))
    along = np.maximum(squares / examples - (total / examples) ** 2, 0.0)
    return along, max(trace / examples - float(np.sum((deviation / examples) ** 2)), 0.0)
