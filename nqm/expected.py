"""Exact expected dynamics of the linear methods under constant delay and noise, at engine speed.

In the eigenbasis each component w of a linear method follows an autoregression driven by
independent Gaussian noise (the README's conventions, ``g_t = λ w_{t−D} + σ √λ z_t``, ``w_{s≤0} = 1``):

    sgdm      w_{t+1} = (1+m) w_t − m w_{t−1} − cηλ w_{t−D}                           − cη σ√λ z_t
    nesterov  w_{t+1} = (1+m) w_t − m w_{t−1} − cη(1+m)λ w_{t−D} + cηmλ w_{t−D−1}   − cη σ√λ ((1+m) z_t − m z_{t−1})
    shifted   w_{t+1} = w_t + (m − cηλ) w_{t−D} − m w_{t−D−1}                         − cη σ√λ z_t

(SGD is sgdm at m = 0; ``c = 1`` or ``1 − m`` dampened; Nesterov's first step has no ``g_{−1}``).
Write it ``w_{t+1} = Σ_k a_k w_{t−k} + σ√λ (b_0 z_t + b_1 z_{t−1})``. Being linear with independent
noise, ``w_t = μ_t + σ√λ Σ_{s<t} ψ_{t−1−s} z_s``: the mean ``μ`` runs the recursion without noise from
the initial weights, and ``ψ_u = b_0 h_u + b_1 h_{u−1}`` comes from the impulse response ``h`` of the
same recursion (``h_0 = 1``). Hence, exactly,

    E[L(w_t)] = ½ Σ_j λ_j μ_{j,t}² + σ² V_t,    V_t = ½ Σ_j λ_j² Σ_{u<t} ψ_{j,u}²,

two scalar recursions per component (a ring of their last p values, the history only shifts), with
``V_t`` shared by every noise level: a grid over σ costs one run. ``V_t`` never decreases. With σ = 0
this is the deterministic dynamics; the steady state ``σ² V_∞`` comes from the Yule–Walker equations
of the same autoregression (the discrete Lyapunov equation), ∞ where a component is unstable.

The recursion runs in JAX (float64, jitted, vectorised over cells and components, leaving its loop
when every cell is done), like the engine; the steady state in numpy. Before any stepping, each
stable cell's closed form (the roots of its characteristic polynomial) bounds its expected loss over
the budget: noise levels that provably never reach the target are settled unstepped, and the others
are stepped only from the first step at which they can end, from the closed-form state there. Steps
and status are those of stepping every cell from the start (tested); a settled cell's final loss
comes from the closed form (within ~1e-9 of stepping). Binning (``bins=B``) replaces the spectrum
by B log-spaced bins, each with its exact count and its mean eigenvalue.
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

import nqm
import nqm._devices  # noqa: F401  (one device per core, before any JAX computation)
from nqm.errors import NqmError
from nqm.problem import Problem
from nqm.status import BUDGET, DIVERGED, MEANING, REACHED, RUNNING
from nqm.validate import coordinates, grid_size, run_config

METHODS = ("sgd", "sgdm", "nesterov", "shifted")
DEFAULT_BINS = 100  # eigenvalue bins when binning is asked for without a count (README: the T error it causes)
GAIN = 1e3  # the largest closed-form gain (Σ|c_r|) a shortcut may rest on
MARGIN = 1e-3  # ... and the relative margin by which it must hold: rounding of z^s over 10⁵ steps
WINDOWS = 48  # log-spaced windows of the budget that the shortcut's bounds cover
SKIP = 100  # the least number of steps worth skipping (stepping from the start is bit-exact)


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
        """Ring length: every lag, and ``h_{t−1}`` for the noise."""
        return max(max(self.lags) + 1, 2)

    def coefficients(self, rows, lam) -> np.ndarray:
        """``a_k`` of cells ``rows`` (an index or a slice) at eigenvalues ``lam``: (…, components, p)."""
        return self.base[rows, None, :] + lam[:, None] * self.slope[rows, None, :]


def recursion(method: str, delay: int, lr, momentum, dampening: bool = False) -> Recursion:
    """The autoregression of ``method`` at constant ``delay``, one row per element of ``lr``/``momentum``."""
    if method not in METHODS:
        raise NqmError(f"exact expected dynamics exist for the linear methods {', '.join(METHODS)}, not {method!r}; "
                       f"use nqm sweep for the others")
    lr, m = np.broadcast_arrays(np.atleast_1d(np.asarray(lr, np.float64)), np.asarray(momentum, np.float64))
    if method == "sgd":
        m = np.zeros_like(m)
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


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _advance(p: int, lags: tuple, rounds: int, state, cells, lam, weight, sigma2, limits):
    """Up to ``rounds`` rounds of p steps of every slot (rows) and component (columns) from a step
    ``t ≡ 0 (mod p)``, leaving early once no slot is running at any noise level (and the curve, if
    one is kept, is traced).

    ``state = (t, ring, v, status, done_at, loss, curve)``: ``ring[s % p]`` holds ``(μ, h)`` at step
    s, a (2, slots, components) slab; ``v`` is each slot's ``V``; status and the rest are (slots,
    noise levels); ``curve`` (slots, levels, a multiple of p, maybe 0) the loss of slots that
    started at 0. ``cells = (a, noise, first, origin)`` describe the cell in each slot, which
    started at step ``origin ≡ 0 (mod p)``. A round is unrolled, so every ring position is static,
    and it ends in one status update for its p steps: few kernels per step, which is what a step
    costs when the slots are few."""
    target, bound, max_steps = limits
    a, noise, first, origin = cells
    mean_weight, noise_weight = 0.5 * weight * lam, 0.5 * weight * lam**2
    curve_length = state[6].shape[-1]

    def round_(carry):
        t, ring, v, status, done_at, loss, curve, n = carry
        local = t - origin  # each slot's own step at the round's start
        means, psis = [], []
        for i in range(p):  # step t + i; ring position (i − s) % p holds step t + i − s
            slabs = [ring[(i - s) % p] for s in range(p)]
            new = sum(a[k] * slabs[k] for k in lags)
            if i == 0:  # a slot's first step happens here
                new = new.at[0].add(jnp.where(local[:, None] == 0, first[:, None] * lam, 0.0))
            psis.append(noise[:, :1] * slabs[0][1] + noise[:, 1:] * slabs[1][1])
            means.append(new[0])
            ring = ring[:(i + 1) % p] + (new,) + ring[(i + 1) % p + 1:]
        # row reductions, not dots: the same bits whatever the number of slots
        noise_parts = jnp.sum(jnp.stack(psis) ** 2 * noise_weight, axis=-1)
        vs = []
        for i in range(p):
            v = v + noise_parts[i]
            vs.append(v)
        values = jnp.sum(jnp.stack(means) ** 2 * mean_weight, axis=-1)[..., None] + jnp.stack(vs)[..., None] * sigma2
        steps = local[None, :, None] + 1 + jnp.arange(p)[:, None, None]  # (p, slots, 1): the step of each value
        ends = (values < target) | ~(values <= bound) | (steps >= max_steps)
        first_end = jnp.argmax(ends, axis=0)  # (slots, levels)
        value = jnp.take_along_axis(values, first_end[None], 0)[0]
        live = status == RUNNING
        ended = live & ends.any(0)
        now = jnp.where(value < target, REACHED, jnp.where(~(value <= bound), DIVERGED, BUDGET))
        status = jnp.where(ended, now, status).astype(jnp.int8)
        done_at = jnp.where(ended, local[:, None] + 1 + first_end, done_at)
        loss = jnp.where(ended, value, jnp.where(live, values[-1], loss))
        if curve_length:
            updated = jax.lax.dynamic_update_slice_in_dim(curve, jnp.moveaxis(values, 0, -1),
                                                          jnp.minimum(t, curve_length - p), 2)
            curve = jnp.where(t < curve_length, updated, curve)
        return t + p, ring, v, status, done_at, loss, curve, n + 1

    def going(carry):  # a slot is running, or the curve is still being traced
        return (carry[-1] < rounds) & (jnp.any(carry[3] == RUNNING) | (carry[0] < curve_length))

    return jax.lax.while_loop(going, round_, (*state, 0))[:-1]


@jax.jit
def _start(state, starting, running, ring0, v0):
    """New cells in the slots marked ``starting``, at a step t ≡ 0 (mod p): ring ``ring0`` (p, 2,
    slots, components), V ``v0`` and the status ``running`` (per noise level: RUNNING, or BUDGET
    where it was settled unstepped). Masks, not indices: one shape, one compilation."""
    t, ring, v, status, done_at, loss, curve = state
    ring = tuple(jnp.where(starting[None, :, None], new, r) for new, r in zip(ring0, ring))
    return (t, ring, jnp.where(starting, v0, v), jnp.where(starting[:, None], running, status), done_at, loss, curve)


def _polynomial(rec: Recursion, rows, lam) -> np.ndarray:
    """Characteristic polynomials ``z^p − Σ_k a_k z^{p−1−k}`` of cells ``rows`` at eigenvalues ``lam``:
    (cells, components, p + 1), highest power first."""
    a = rec.coefficients(rows, lam)
    return np.concatenate([np.ones(a.shape[:-1] + (1,)), -a], -1)


def stable(rec: Recursion, lam) -> np.ndarray:
    """Whether each cell's recursion is stable at every eigenvalue (all roots inside the unit circle)."""
    from nqm import stability

    cells = rec.base.shape[0]
    rows = max(1, 2**20 // (lam.size * rec.order))  # cells per batch: ~8 MB of coefficients
    batch = lambda s: stability.schur_cohn_stable(_polynomial(rec, slice(s, s + rows), lam)).all(-1)
    return np.concatenate(_in_parallel(batch, range(0, cells, rows))) if cells else np.zeros(0, bool)


def _in_parallel(f, items) -> list:
    """``[f(x) for x in items]`` on a thread per device (one per core): numpy's batched linear
    algebra leaves the interpreter lock, so the cores share the work."""
    with ThreadPoolExecutor(len(jax.devices())) as pool:
        return list(pool.map(f, items))


def _closed_form(rec: Recursion, cell: int, lam):
    """Each component's solution in closed form, ``μ_s = Σ_r c_r z_r^(s+p−2)``, ``h_s = Σ_r d_r
    z_r^(s+p−2)`` and ``ψ_u = Σ_r e_r z_r^(u+p−3)`` (u ≥ 1) over the roots ``z_r`` of its
    characteristic polynomial, fitted to the values at s = 2−p … 1 (from s = 1 on the recursion
    holds, Nesterov's first step included). Also the gain ``Σ_r |c_r| + |d_r|`` of the fit: large
    where roots nearly coincide, which makes the closed form ill-conditioned."""
    from nqm import stability

    p = rec.base.shape[-1]
    a = rec.coefficients(cell, lam)
    z = stability.roots(_polynomial(rec, cell, lam))
    mu, h = np.ones((lam.size, p)), np.zeros((lam.size, p))
    mu[:, -1] = a.sum(1) + rec.first[cell] * lam  # μ_{s≤0} = 1, then the first step
    h[:, -2], h[:, -1] = 1.0, a[:, 0]  # the impulse response: h_0 = 1, h_1 = a_0
    vandermonde = z[:, None, :] ** np.arange(p)[None, :, None]
    with np.errstate(all="ignore"):
        fit = np.linalg.solve(vandermonde, np.stack([mu, h], -1).astype(complex))
    c, d = fit[..., 0], fit[..., 1]
    b0, b1 = rec.noise[cell]
    gain = np.abs(c).sum(1) + np.abs(d).sum(1)
    return z, c, d, d * (b0 * z + b1), np.where(np.isfinite(gain), gain, np.inf)


@dataclass
class _Shortcut:
    """What a cell's closed form settles before stepping: the noise levels ``proven`` out of reach
    (with ``final``, their E[L] at the budget), and the step ``start`` before which no level can
    end, with the state there (``ring``: (p, 2, components) in ring positions, ``v``: V)."""

    proven: np.ndarray
    final: np.ndarray
    start: int = 0
    ring: np.ndarray | None = None
    v: float = 0.0


def _shortcut(rec: Recursion, cell: int, lam, weight, sigma2, target, bound, max_steps) -> _Shortcut | None:
    """For a stable cell, what can be shown without stepping it (None: nothing).

    The proof covers the steps s = 1 … max_steps in log-spaced windows [s_a, s_b]: the mean part is
    at least ``½ Σ λ (|c_k||z_k|^s_b − Σ_{r≠k} |c_r||z_r|^s_a)₊²`` for any root k (all |z| < 1), the
    noise part ``σ² V_s`` at least ``σ² V_{s_a}`` (V never decreases), and ``V_{s_a}`` at least
    ``V_∞`` less a geometric bound of what is still to come; from above, the expected loss is at
    most ``½ Σ λ (Σ_r |c_r||z_r|)² + σ² V_∞``. A level whose lower bound holds in every window (and
    upper bound below the divergence bound) never ends before the budget; the others cannot end
    before the first window where it fails, so their stepping starts there, from the closed-form
    state. Components whose closed form is ill-conditioned (gain > GAIN) stop the shortcut, and a
    relative MARGIN covers its rounding, so nothing is settled that the recursion would not give."""
    z, c, d, e, gain = _closed_form(rec, cell, lam)
    modulus, size = np.abs(z), np.abs(c)
    if not (gain.max() <= GAIN and modulus.max() < 1.0):  # ill-conditioned, or roots on the unit circle
        return None
    p = rec.base.shape[-1]
    mean_weight, noise_weight = 0.5 * weight * lam, 0.5 * weight * lam**2
    pairs = z[:, :, None] * z[:, None, :].conj()
    first = rec.noise[cell, 0] ** 2  # ψ_0² = b_0²

    def noise(s):  # per component Σ_{u<s} ψ_u² = ψ_0² + Σ_{u≥1} …, geometric over root pairs
        with np.errstate(all="ignore"):
            sums = pairs ** (p - 2) * (1.0 if s == np.inf else 1.0 - pairs ** (s - 1)) / (1.0 - pairs)
        return first + np.einsum("jr,jq,jrq->j", e, e.conj(), sums).real

    # |c_r||z_r|^s at the window edges; each window [s_a, s_b] is bounded from below by its own k
    edges = np.unique(np.round(np.geomspace(1, max_steps, WINDOWS + 1)).astype(int))
    edges = edges if edges.size > 1 else np.array([1, 1])
    with np.errstate(divide="ignore"):
        at = np.exp(np.log(size)[..., None] + np.log(modulus)[..., None] * (edges + p - 2))  # (comps, roots, edges)
    early, late = at[..., :-1], at[..., 1:]
    mean = mean_weight @ np.clip((late - (early.sum(1, keepdims=True) - early)).max(1), 0.0, None) ** 2
    threshold = target * (1 + MARGIN)
    short = mean < threshold  # windows where the noise part has to make up for it: V_s ≥ V_∞ − Σ_{u≥s_a} ψ_u²
    steady, slowest = noise(np.inf), modulus.max(1)
    to_come = np.abs(e).sum(1, keepdims=True) ** 2 * slowest[:, None] ** (2 * (edges[:-1][short] + p - 3)) \
        / (1.0 - slowest[:, None] ** 2)
    noise_low = noise_weight @ np.clip(steady[:, None] - to_come, 0.0, None)
    fails = np.zeros((mean.size, sigma2.size), bool)  # (windows, levels)
    fails[short] = mean[short][:, None] + noise_low[:, None] * sigma2 < threshold
    safe = mean_weight @ (size * modulus ** (p - 1)).sum(1) ** 2 + sigma2 * (noise_weight @ steady) <= bound * (1 - MARGIN)
    proven = safe & ~fails.any(0)
    final = np.zeros(sigma2.shape)
    if proven.any():
        mean_last = (c * z ** (max_steps + p - 2)).sum(1).real
        final[:] = mean_last**2 @ mean_weight + sigma2 * (noise_weight @ noise(max_steps))
    open_ = ~proven
    start = int(edges[np.argmax(fails[:, open_], 0)].min()) if open_.any() and safe[open_].all() else 0
    if start < SKIP:
        return _Shortcut(proven, final)
    steps = start - (p - np.arange(p)) % p  # the step held in each ring position, t ≡ 0 (mod p)
    powers = z[:, None, :] ** (steps[None, :, None] + p - 2)  # (comps, positions, roots)
    ring = np.stack([np.einsum("jsr,jr->sj", powers, c).real, np.einsum("jsr,jr->sj", powers, d).real], 1)
    return _Shortcut(proven, final, start, ring, float(noise_weight @ noise(start)))


def _longest_first(rec: Recursion, lam, stable_cells) -> np.ndarray:
    """Cell order for the slots: the slowest stable cells first (spectral radius at the smallest
    eigenvalue closest to 1), unstable ones last, so that no long cell starts at the end."""
    from nqm import stability

    slow = stability.spectral_radius(_polynomial(rec, slice(None), np.array([lam.min()]))[:, 0])
    return np.lexsort((-slow, ~stable_cells))


def _run(problem, method, delay, lr, momentum, sigma, *, dampening, target, max_steps, diverge_factor, bins,
         trace_steps=0, slot_size=20_000, chunk_steps=1000):
    """``(steps, status, loss, curve)``, each (cells, noise levels), of the flat arrays ``lr`` and
    ``momentum`` against every noise level in ``sigma``, and each cell's ``V_∞`` (∞ if unstable).

    First each stable cell's closed form settles what it can (:func:`_shortcut`): the noise levels
    that provably never reach the target (most cells that exhaust the budget, which would otherwise
    cost all of it), and the steps before which the others cannot end. The rest is stepped: each
    device (one per core) runs a batch of slots, about ``slot_size`` (cell, component) pairs;
    every ``chunk_steps`` a slot whose cell is done takes the next cell, slowest first, so no slot
    idles while cells are waiting."""
    lam, weight = _bins(problem, bins)
    rec = recursion(method, delay, lr, momentum, dampening)
    p, cells, levels, comps = rec.order, lr.size, sigma.size, lam.size
    steps, status = np.zeros((cells, levels), np.int64), np.zeros((cells, levels), np.int8)
    loss, curve = np.zeros((cells, levels)), np.full((cells, levels, trace_steps), np.nan)
    bound = diverge_factor * 0.5 * float(weight @ lam)
    devices = jax.devices()
    stable_cells, open_levels, shortcuts = stable(rec, lam), np.ones((cells, levels), bool), {}

    def settle(c):
        cut = shortcuts[c] = _shortcut(rec, c, lam, weight, sigma**2, target, bound, max_steps)
        if cut is not None:
            steps[c, cut.proven], status[c, cut.proven], loss[c, cut.proven] = max_steps, BUDGET, cut.final[cut.proven]
            open_levels[c] = ~cut.proven

    if not trace_steps:  # (a traced curve needs every step)
        _in_parallel(settle, np.flatnonzero(stable_cells))
    todo = [c for c in _longest_first(rec, lam, stable_cells) if open_levels[c].any()]
    # A power of two, at least 8: a few compiled shapes however many cells a run steps (the bits do
    # not depend on the slots), so that a search's many small lists of points compile a few times.
    slots = max(1, min(slot_size // comps, 1 << (max(8, -(-len(todo) // len(devices))) - 1).bit_length()))
    rounds = -(-chunk_steps // p)
    pending, lock = iter(todo), threading.Lock()

    def take():
        with lock:
            return next(pending, None)

    def worker(device):
        with jax.enable_x64(True), jax.default_device(device):
            owner = [None] * slots  # the cell in each slot
            a = {k: np.zeros((slots, comps)) for k in rec.lags}
            noise, first, origin = np.zeros((slots, 2)), np.zeros(slots), np.zeros(slots, np.int64)
            slot_levels = np.ones((slots, levels), bool)  # the noise levels each slot steps
            empty = jnp.zeros((2, slots, comps))  # every slot's ring is set by _start when it takes a cell
            state = (jnp.int64(0), (empty,) * p, jnp.zeros(slots), jnp.full((slots, levels), BUDGET, jnp.int8),
                     jnp.zeros((slots, levels), jnp.int64), jnp.zeros((slots, levels)),
                     jnp.zeros((slots, levels, -(-trace_steps // p) * p)))
            free = list(range(slots))
            limits = (jnp.float64(target), jnp.float64(bound), jnp.int64(max_steps))
            args = (jnp.asarray(lam), jnp.asarray(weight), jnp.asarray(sigma**2), limits)
            while True:
                t = state[0]
                start = []
                for i in free:
                    if (c := take()) is None:
                        break
                    start.append((i, c))
                    slot_levels[i] = open_levels[c]
                if start:  # a new cell in each free slot, starting now (t ≡ 0 mod p)
                    starting, v0 = np.zeros(slots, bool), np.zeros(slots)
                    ring0 = np.zeros((p, 2, slots, comps))
                    ring0[:, 0], ring0[0, 1] = 1.0, 1.0  # μ = 1 before and at step 0, h = 1 at it, 0 before
                    for i, c in start:
                        owner[i], starting[i] = c, True
                        coefficients = rec.coefficients(c, lam)
                        for k in rec.lags:
                            a[k][i] = coefficients[:, k]
                        noise[i], first[i], origin[i] = rec.noise[c], rec.first[c], int(t)
                        if (cut := shortcuts.get(c)) is not None and cut.start:  # from where the cell can first end
                            ring0[:, :, i], v0[i], origin[i] = cut.ring, cut.v, int(t) - cut.start
                    state = _start(state, starting, np.where(slot_levels, RUNNING, BUDGET).astype(np.int8), ring0, v0)
                elif all(c is None for c in owner):
                    return
                slot_cells = ({k: jnp.asarray(x) for k, x in a.items()}, jnp.asarray(noise), jnp.asarray(first),
                              jnp.asarray(origin))
                state = _advance(p, rec.lags, rounds, state, slot_cells, *args)
                t, status_now = int(state[0]), np.asarray(state[3])
                free = [i for i, c in enumerate(owner) if c is not None and (status_now[i] != RUNNING).all()
                        and t >= trace_steps]
                free += [i for i, c in enumerate(owner) if c is None]
                if free:
                    done = [i for i in free if owner[i] is not None]
                    fetched = [np.asarray(x) for x in state[4:7]]
                    for i in done:
                        c, o = owner[i], slot_levels[i]
                        steps[c, o], status[c, o], loss[c, o] = fetched[0][i, o], status_now[i, o], fetched[1][i, o]
                        if trace_steps:
                            curve[c] = fetched[2][i, :, :trace_steps]
                        owner[i] = None

    _in_parallel(worker, devices)
    return steps, status, loss, curve, _steady(rec, lam, weight, stable_cells)


def _steady(rec: Recursion, lam, weight, stable_cells) -> np.ndarray:
    """``V_∞`` per cell from each component's Yule–Walker equations, ∞ where it is unstable."""
    p = rec.base.shape[-1]

    def one(i):
        a = rec.coefficients(i, lam)
        # Autocovariances γ(0…p) of the recursion driven by unit white noise:
        # γ(h) − Σ_k a_k γ(|h−1−k|) = 0 (h ≥ 1), γ(0) − Σ_k a_k γ(k+1) = 1.
        system = np.zeros((lam.size, p + 1, p + 1))
        system[:, np.arange(p + 1), np.arange(p + 1)] = 1.0
        for k in range(p):
            system[:, 0, k + 1] -= a[:, k]
            for h in range(1, p + 1):
                system[:, h, abs(h - 1 - k)] -= a[:, k]
        rhs = np.zeros((lam.size, p + 1, 1))
        rhs[:, 0] = 1.0
        gamma = np.linalg.solve(system, rhs)[..., 0]
        (b0, b1) = rec.noise[i]
        psi_squares = (b0 * b0 + b1 * b1) * gamma[:, 0] + 2 * b0 * b1 * gamma[:, 1]  # Σ_u ψ_u²
        return 0.5 * float(weight @ (lam**2 * psi_squares))

    out = np.full(stable_cells.size, np.inf)
    out[stable_cells] = _in_parallel(one, np.flatnonzero(stable_cells))
    return out


def steady_state_loss(problem: Problem, method: str, delay: int, lr, momentum, sigma, *, dampening=False,
                      bins=None) -> np.ndarray:
    """``E[L_∞]`` per cell (the elements of ``lr``, ``momentum``, ``sigma``, broadcast): ``σ² V_∞``
    from each component's Yule–Walker equations; ∞ where a component's recursion is unstable
    (a root of its characteristic polynomial on or outside the unit circle)."""
    lam, weight = _bins(problem, bins)
    lr, momentum, sigma = np.broadcast_arrays(*(np.atleast_1d(np.asarray(x, np.float64)) for x in (lr, momentum, sigma)))
    rec = recursion(method, delay, lr.ravel(), momentum.ravel(), dampening)
    unit = _steady(rec, lam, weight, stable(rec, lam))
    with np.errstate(invalid="ignore"):  # ∞ · 0 where unstable and noiseless: still ∞
        return np.where(np.isinf(unit), np.inf, unit * sigma.ravel() ** 2).reshape(lr.shape)


def expected_loss(problem: Problem, *, lr: float, momentum: float, delay: int = 0, noise: float = 0.0,
                  steps: int = 1000, method: str = "sgdm", dampening: bool = False, bins: int | None = None):
    """``E[L(w_t)]`` for ``t = 1 … steps`` (float64) of one cell."""
    _, _, _, curve, _ = _run(problem, method, int(delay), np.array([lr], float), np.array([momentum], float),
                          np.array([noise], float), dampening=dampening, target=-1.0, max_steps=steps,
                          diverge_factor=np.inf, bins=bins, trace_steps=steps)
    return curve[0, 0]


def evaluate(method: str = "sgdm", *, lr, momentum, delay: int = 0, noise: float = 0.0, problem: Problem | None = None,
             bins: int | None = None, dampening: bool = False, target: float = 0.01, max_steps: int = 100_000,
             diverge_factor: float = 1e6) -> xr.Dataset:
    """The exact expected twin of :func:`nqm.sweeps.evaluate`: ``steps``, ``status`` and ``loss`` of
    the expected loss at a list of points (element ``i`` of ``lr`` and ``momentum``; repeats
    allowed), each exactly what :func:`sweep` gives for the same cell."""
    run_config(dict(target=target, max_steps=max_steps, diverge_factor=diverge_factor, x64=True))
    try:
        lr, momentum = np.broadcast_arrays(np.atleast_1d(np.asarray(lr, np.float64)),
                                           np.atleast_1d(np.asarray(momentum, np.float64)))
    except (TypeError, ValueError):
        raise NqmError("the points' lr and momentum must be numbers of one length (or single values)") from None
    values = coordinates(distinct=False, lr=lr.ravel(), momentum=momentum.ravel())
    coords = coordinates(delay=delay, noise=noise)
    if coords["delay"].size != 1 or coords["noise"].size != 1:
        raise NqmError("evaluate takes one delay and one noise level; call it once per value")
    recursion(method, 0, 0.1, 0.0)  # the method, before any work
    problem = nqm.zhang() if problem is None else problem
    steps, status, loss, _, _ = _run(problem, method, int(coords["delay"][0]), values["lr"], values["momentum"],
                                     coords["noise"], dampening=dampening, target=target, max_steps=max_steps,
                                     diverge_factor=diverge_factor, bins=bins)
    data = {"steps": ("point", steps[:, 0]), "status": ("point", status[:, 0]), "loss": ("point", loss[:, 0])}
    return xr.Dataset(data, coords={k: ("point", v) for k, v in values.items()},
                      attrs={"method": method, "delay": int(coords["delay"][0]), "noise": float(coords["noise"][0]),
                             "mode": "exact expected dynamics"})


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
    recursion(method, 0, 0.1, 0.0)  # the method, before any work
    task = sweeps.Job("sgdm" if method == "sgd" else method, {"dampening": dampening} if method != "sgd" else {},
                      problem, config)
    result = sweeps.empty(task, coords, [nqm.delays.constant(int(d)) for d in coords["delay"]])
    result.attrs.update(method=method, mode="exact expected dynamics", bins=-1 if bins is None else int(bins))
    steady = np.empty(result.steps.shape)
    m, lr_ = (x.ravel() for x in np.meshgrid(coords["momentum"], coords["lr"], indexing="ij"))
    sigma = np.asarray(coords["noise"], np.float64)
    shape = (coords["momentum"].size, coords["lr"].size, sigma.size)
    order = lambda x: np.moveaxis(x.reshape(shape), 2, 0)[:, None]  # → noise, seed, momentum, lr
    for i, d in enumerate(coords["delay"]):
        steps, status, loss, _, unit = _run(problem, method, int(d), lr_, m, sigma, dampening=dampening, target=target,
                                            max_steps=max_steps, diverge_factor=diverge_factor, bins=bins)
        result.steps.values[i], result.status.values[i], result.loss.values[i] = order(steps), order(status), order(loss)
        with np.errstate(invalid="ignore"):  # ∞ · 0 where unstable and noiseless: still ∞
            steady[i] = order(np.where(np.isinf(unit)[:, None], np.inf, unit[:, None] * sigma**2))
    result["steady_state_loss"] = (result.steps.dims, steady, {"long_name": "E[L] as t → ∞ (inf: unstable)"})
    result["reachable"] = (result.steps.dims, (steady < target).astype(np.int8),
                           {"meaning": "1: E[L_inf] < target; 0: the expected loss can never reach the target"})
    result.status.attrs["meaning"] = MEANING
    return result


