"""Exact expected dynamics of the linear methods under constant delay and noise, at engine speed.

In the eigenbasis each component w of a linear method follows an autoregression driven by
independent Gaussian noise (DESIGN.md §1–2, ``g = λ w_{t−D} + σ √λ z``, ``w_{s≤0} = 1``):

    sgdm     w_{t+1} = (1+m) w_t − m w_{t−1} − cηλ w_{t−D} − cησ√λ z_t
    shifted  w_{t+1} = w_t + (m − cηλ) w_{t−D} − m w_{t−D−1} − cησ√λ z_t

(SGD is sgdm at m = 0; ``c = 1`` or ``1 − m`` dampened). Write it ``w_{t+1} = Σ_k a_k w_{t−k} + e_t``
with ``q = E[e_t²]``. The second moments ``R_t(j) = E[w_t w_{t−j}]`` (mean included) then obey

    R_{t+1}(j) = Σ_k a_k R_{t−min(k, j−1)}(|k − j + 1|)   (j ≥ 1),     R_{t+1}(0) = Σ_k a_k R_{t+1}(k+1) + q,

so a step computes one new vector ``R_{t+1}(0…p)`` from a ring of the last ``p`` ones: O(p · 3)
work per component — the history part of the state only shifts, and is never copied.
``E[L(w_t)] = ½ Σ_k λ_k R_t(0)``. With σ = 0 this is the deterministic dynamics; the steady state
solves the Yule–Walker equations of the same autoregression (the discrete Lyapunov equation).

The recursion runs in JAX (float64, jitted, vectorised over cells and components, leaving its loop
when every cell is done), like the engine; the steady state in numpy. Binning (``bins=B``) replaces
the spectrum by B log-spaced bins, each with its exact count and its mean eigenvalue.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

import nqm
from nqm.errors import NqmError
from nqm.problem import Problem
from nqm.status import BUDGET, DIVERGED, MEANING, REACHED, RUNNING
from nqm.validate import coordinates, grid_size, run_config

METHODS = ("sgd", "sgdm", "shifted")


def ar_coefficients(method: str, delay: int, lr, momentum, dampening: bool = False):
    """``(base, slope, q_over)``: ``a_k = base_k + λ slope_k`` (k = 0…p−1) and ``q = λ σ² q_over``,
    each with leading axes those of ``lr``/``momentum`` (broadcast)."""
    if method not in METHODS:
        raise NqmError(f"exact expected dynamics exist for {', '.join(METHODS)} (linear methods), not {method!r}")
    lr, m = np.broadcast_arrays(np.asarray(lr, np.float64), np.asarray(momentum, np.float64))
    if method == "sgd":
        m = np.zeros_like(m)
    c = 1.0 - m if dampening else np.ones_like(m)
    p = delay + 2 if method == "shifted" else max(delay, 1) + 1
    base, slope = np.zeros(lr.shape + (p,)), np.zeros(lr.shape + (p,))
    if method == "shifted":
        base[..., 0] += 1.0
        base[..., delay] += m
        base[..., delay + 1] -= m
    else:
        base[..., 0] += 1.0 + m
        base[..., 1] -= m
    slope[..., delay] -= c * lr
    return base, slope, (c * lr) ** 2


def _bins(problem: Problem, bins: int | None):
    """``(λ, weight)``: every eigenvalue with weight 1, or B log-spaced bins (count, mean λ)."""
    lam = problem.eigenvalues
    if bins is None:
        return lam, np.ones_like(lam)
    bins = int(bins)
    if bins < 1:
        raise NqmError(f"bins must be an integer >= 1, got {bins}")
    edges = np.geomspace(lam.min(), lam.max() * (1 + 1e-12), bins + 1)
    which = np.clip(np.searchsorted(edges, lam, side="right") - 1, 0, bins - 1)
    count = np.bincount(which, minlength=bins).astype(float)
    total = np.bincount(which, weights=lam, minlength=bins)
    keep = count > 0
    return total[keep] / count[keep], count[keep]


def support(method: str, delay: int) -> tuple[int, ...]:
    """The lags k with ``a_k ≠ 0`` (at most three: the recursion is sparse)."""
    return tuple(sorted({0, delay, delay + 1} if method == "shifted" else {0, 1, delay}))


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _advance(p: int, nz: tuple, rounds: int, state, lam, weight, base, slope, q, limits):
    """Up to ``rounds × p`` steps of every cell (rows) and component (columns) from a step ``t ≡ 0
    (mod p)``, leaving early once all cells are done. ``state = (t, ring, status, done_at, loss,
    curve)``; ``ring[s % p][j]`` = R_s(j), each a (cells, components) slab. The p steps of a round
    are unrolled, so every ring position is static: nothing is sliced or copied but the new slab."""
    target, bound, max_steps = limits
    a = base.T[:, :, None] + slope.T[:, :, None] * lam[None, None, :]  # (p, cells, comps)
    noise = q[:, None] * lam[None, :]

    def step(i, t, ring, status, done_at, loss, curve):  # t ≡ i (mod p)
        slabs = [ring[(i - s) % p] for s in range(p)]  # R_{t−s}
        new = [None] * (p + 1)
        for j in range(p, 0, -1):  # R_{t+1}(j) = Σ_k a_k R_{t−min(k, j−1)}(|k − j + 1|)
            new[j] = sum(a[k] * slabs[min(k, j - 1)][abs(k - j + 1)] for k in nz)
        new[0] = sum(a[k] * new[k + 1] for k in nz) + noise
        ring = ring[:(i + 1) % p] + (jnp.stack(new),) + ring[(i + 1) % p + 1:]
        value = 0.5 * (new[0] @ (weight * lam))
        live = status == RUNNING
        now = jnp.where(value < target, REACHED,
                        jnp.where(~(value <= bound), DIVERGED, jnp.where(t + 1 >= max_steps, BUDGET, RUNNING)))
        slot = jnp.minimum(t, curve.shape[1] - 1)  # steps past the curve (a round's tail) leave it alone
        kept = jax.lax.dynamic_index_in_dim(curve, slot, 1, keepdims=False)
        curve = jax.lax.dynamic_update_index_in_dim(curve, jnp.where(t < curve.shape[1], value, kept), slot, 1)
        return (t + 1, ring, jnp.where(live, now, status).astype(jnp.int8), jnp.where(live, t + 1, done_at),
                jnp.where(live, value, loss), curve)

    def round_(carry):
        *state, n = carry
        for i in range(p):
            state = step(i, *state)
        return (*state, n + 1)

    def going(carry):
        return (carry[-1] < rounds) & jnp.any(carry[2] == RUNNING)

    return jax.lax.while_loop(going, round_, (*state, 0))[:-1]


def _run(problem, method, delay, lr, momentum, sigma, *, dampening, target, max_steps, diverge_factor, bins,
         trace_steps=0, chunk_cells=2, chunk_steps=1000):
    """``(steps, status, loss, curve)`` per cell of the flat arrays ``lr``, ``momentum``, ``sigma``.

    Cells go in chunks of ``chunk_cells``, so that a chunk's ring stays in cache: the recursion is
    memory-bound (spreading chunks over devices by threads was measured slower)."""
    lam, weight = _bins(problem, bins)
    base, slope, q_over = ar_coefficients(method, delay, lr, momentum, dampening)
    p, nz = base.shape[-1], support(method, delay)
    cells = lr.size
    steps, status, loss = np.zeros(cells, np.int64), np.zeros(cells, np.int8), np.zeros(cells)
    curve = np.full((cells, trace_steps), np.nan)
    bound = diverge_factor * 0.5 * float(weight @ lam)
    q = q_over * sigma**2

    with jax.enable_x64(True):
        limits = (jnp.float64(target), jnp.float64(bound), jnp.int64(max_steps))
        for start in range(0, cells, chunk_cells):
            rows = slice(start, min(start + chunk_cells, cells))
            n = rows.stop - rows.start
            ring = tuple(jnp.ones((p + 1, n, lam.size)) for _ in range(p))  # R_s(j) = 1 for s <= 0: w_{s<=0} = 1
            state = (jnp.int64(0), ring, jnp.full(n, RUNNING, jnp.int8), jnp.zeros(n, jnp.int64), jnp.zeros(n),
                     jnp.zeros((n, max(trace_steps, 1))))
            args = (jnp.asarray(lam), jnp.asarray(weight), jnp.asarray(base[rows]), jnp.asarray(slope[rows]),
                    jnp.asarray(q[rows]), limits)
            while True:
                state = _advance(p, nz, -(-chunk_steps // p), state, *args)
                if not (np.asarray(state[2]) == RUNNING).any() and int(state[0]) >= trace_steps:
                    break
            steps[rows], status[rows], loss[rows] = np.asarray(state[3]), np.asarray(state[2]), np.asarray(state[4])
            if trace_steps:
                curve[rows] = np.asarray(state[5])[:, :trace_steps]
    return steps, status, loss, curve


def steady_state_loss(problem: Problem, method: str, delay: int, lr, momentum, sigma, *, dampening=False,
                      bins=None) -> np.ndarray:
    """``E[L_∞]`` per cell: ``½ Σ_k λ_k γ_k(0)`` from each component's Yule–Walker equations; ∞
    where the recursion is unstable (η λ_max beyond the stability threshold x*)."""
    from nqm import stability

    lam, weight = _bins(problem, bins)
    lr, momentum, sigma = (np.atleast_1d(np.asarray(x, np.float64)) for x in (lr, momentum, sigma))
    base, slope, q_over = ar_coefficients(method, delay, lr, momentum, dampening)
    p = base.shape[-1]
    out = np.empty(lr.size)
    family = "shifted" if method == "shifted" else "sgdm"
    x_star = np.array([stability.threshold(family, delay, 0.0 if method == "sgd" else m, dampening=dampening)
                       for m in momentum])
    for i in range(lr.size):
        if not lr[i] * lam.max() < x_star[i]:
            out[i] = np.inf
            continue
        a = base[i][None, :] + lam[:, None] * slope[i][None, :]  # (comps, p)
        # Unknowns γ(0…p): γ(h) − Σ_k a_k γ(|h−1−k|) = 0 (h ≥ 1), γ(0) − Σ_k a_k γ(k+1) = q.
        system = np.zeros((lam.size, p + 1, p + 1))
        system[:, np.arange(p + 1), np.arange(p + 1)] = 1.0
        for k in range(p):
            system[:, 0, k + 1] -= a[:, k]
            for h in range(1, p + 1):
                system[:, h, abs(h - 1 - k)] -= a[:, k]
        rhs = np.zeros((lam.size, p + 1))
        rhs[:, 0] = q_over[i] * sigma[i] ** 2 * lam
        gamma0 = np.linalg.solve(system, rhs[..., None])[:, 0, 0]
        out[i] = 0.5 * float(weight @ (lam * gamma0))
    return out


def expected_loss(problem: Problem, *, lr: float, momentum: float, delay: int = 0, noise: float = 0.0,
                  steps: int = 1000, method: str = "sgdm", dampening: bool = False, bins: int | None = None):
    """``E[L(w_t)]`` for ``t = 1 … steps`` (float64) of one cell."""
    _, _, _, curve = _run(problem, method, int(delay), np.array([lr], float), np.array([momentum], float),
                          np.array([noise], float), dampening=dampening, target=-1.0, max_steps=steps,
                          diverge_factor=np.inf, bins=bins, trace_steps=steps)
    return curve[0]


def sweep(method: str = "sgdm", *, lr, momentum, delay=0, noise=0.0, problem: Problem | None = None,
          bins: int | None = None, dampening: bool = False, target: float = 0.01, max_steps: int = 100_000,
          diverge_factor: float = 1e6) -> xr.Dataset:
    """The exact expected twin of :func:`nqm.sweep` for the linear methods: ``steps``, ``status``
    and ``loss`` of the *expected* loss, plus ``steady_state_loss`` (∞ where unstable) and
    ``reachable`` (whether ``E[L_∞] < target``: a cell that is not can never reach the target in
    expectation), with the same dimensions and attributes (one seed, 0)."""
    from nqm import sweeps

    config = run_config(dict(target=target, max_steps=max_steps, diverge_factor=diverge_factor, x64=True))
    coords = coordinates(lr=lr, momentum=momentum, delay=delay, noise=noise, seed=0)
    grid_size(coords)
    problem = nqm.zhang() if problem is None else problem
    ar_coefficients(method, 0, 0.1, 0.0)  # the method, before any work
    result = sweeps._empty("sgdm" if method == "sgd" else method, coords, problem, config,
                           {"dampening": dampening} if method != "sgd" else {},
                           [nqm.delays.constant(int(d)) for d in coords["delay"]])
    result.attrs.update(method=method, mode="exact expected dynamics", bins=-1 if bins is None else int(bins))
    steady = np.empty(result.steps.shape)
    for i, d in enumerate(coords["delay"]):
        m, s, lr_ = np.meshgrid(coords["momentum"], coords["noise"], coords["lr"], indexing="ij")
        steps, status, loss, _ = _run(problem, method, int(d), lr_.ravel(), m.ravel(), s.ravel(), dampening=dampening,
                                      target=target, max_steps=max_steps, diverge_factor=diverge_factor, bins=bins)
        shape = m.shape  # momentum, noise, lr
        order = lambda x: np.moveaxis(x.reshape(shape), 0, 1)[:, None]  # → noise, seed, momentum, lr
        result.steps.values[i], result.status.values[i], result.loss.values[i] = order(steps), order(status), order(loss)
        steady[i] = order(steady_state_loss(problem, method, int(d), lr_.ravel(), m.ravel(), s.ravel(),
                                            dampening=dampening, bins=bins))
    result["steady_state_loss"] = (result.steps.dims, steady, {"long_name": "E[L] as t → ∞ (inf: unstable)"})
    result["reachable"] = (result.steps.dims, (steady < target).astype(np.int8),
                           {"meaning": "1: E[L_inf] < target; 0: the expected loss can never reach the target"})
    result.status.attrs["meaning"] = MEANING
    return result


