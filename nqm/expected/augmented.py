"""Iterate averaging and learning-rate schedules in the exact mode: the state with the average in
front, stepped with each step's own coefficients.

A linear method's eigencomponent follows ``s_{t+1} = A_d(λ, η_t) s_t + b_d(η_t) σ√λ z_t`` (the state
of :mod:`nqm.thresholds.derived`; d the delay of step t), affine in λ and in the step's learning rate
``η_t = lr · f(t)`` (``f``: the schedule, :mod:`nqm.schedules`)::

    A_d = P_d + λ Q_d + η_t (R_d + λ S_d),    b_d = B0_d + η_t B1_d.

The iterate average ``ŵ_{t+1} = γ ŵ_t + (1 − γ) w_{t+1}`` is a linear filter of the state, so it is one
more entry in front, ``s' = (ŵ, s)``, with ``A' = [[γ, (1 − γ) a₀ᵀ], [0, A]]`` and ``b' = ((1 − γ) b₀, b)``
(``a₀ᵀ`` the row of A that makes ``w_{t+1}``): every moment recursion of the exact mode holds for s' as it
holds for s. ``E[L(ŵ_t)] = ½ Σ_j λ_j E[s'_0²]`` is the expected loss the target is read on; ``E[L(w_t)]``,
read at w's entry, judges divergence, as the engine does.

Stepped exactly, in float64, one of three ways:

- **impulse** — a constant delay without a schedule (time-invariant): DESIGN §7's two noiseless
  trajectories, now of s', the mean ``μ`` from ``s'_0`` and the response ``h`` to one unit kick (from
  ``√λ b'``), and the running sums of ``h``'s squared entries at ŵ and at w: their filtered
  counterparts. O(n²) per component and step;
- **constant** — a constant delay with a schedule: the mean ``μ`` and the noise's covariance
  ``X ← A X Aᵀ + λ b bᵀ`` (the response of one kick is no longer a shift of another's once the
  coefficients change);
- **iid** — iid delays: the second moment's two parts, ``D`` from ``s'_0 s'_0ᵀ`` and ``N`` from 0, by
  ``X ↦ Σ_d p_d A_d X A_dᵀ`` (+ ``λ Σ_d p_d b_d b_dᵀ`` for N): one more block in the second-moment map.

Without a schedule or averaging the exact mode keeps its own evaluators (:mod:`nqm.expected.autoregression`,
:mod:`nqm.expected.second_moment`), whose numbers these equal (tested). The steady state is the final
regime's: the state's stationary second moment at the schedule's last factor (in closed form by
:func:`nqm.expected.second_moment.steady_from`), or, where the schedule ends at 0, the run stops moving
at its last breakpoint S and its level is ``E[L(w_S)]`` (ŵ tends to w_S).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nqm import delays
from nqm.conventions import family
from nqm.errors import NqmError
from nqm.expected import forward, second_moment
from nqm.expected.recursion import METHODS, Recursion, recursion
from nqm.progress import bar as progress_bar
from nqm.status import BUDGET, DIVERGED, REACHED, RUNNING
from nqm.thresholds import matrices
from nqm.validate import BOUNDS, format_bytes

BATCH_ENTRIES = 2**22  # cells × components × k × n² held per step: about 32 MiB for each of A and a moment
CHUNK = 1000  # steps per compiled call (the schedule's factors travel with it)


class Parts(NamedTuple):
    """One cell per row: ``A_d = P + λQ + η(R + λS)``, ``b_d = B0 + η B1`` ((cells, k, n, n) and (cells,
    k, n)), the pmf of the k delays, ``s_0`` (n,), the entry of ``w_t`` (``raw``; the target reads
    entry 0: ŵ where ``averaged``, else w) and the cells' learning rates ``lr``."""

    P: np.ndarray
    Q: np.ndarray
    R: np.ndarray
    S: np.ndarray
    B0: np.ndarray
    B1: np.ndarray
    pmf: np.ndarray
    s0: np.ndarray
    raw: int
    averaged: bool
    lr: np.ndarray
    ring: Recursion | None = None  # the autoregression of a method written out, under a constant delay
    gamma: np.ndarray | None = None  # each cell's γ (0 where it does not average)

    def at(self, eta):
        """``(P + ηR, Q + ηS, B0 + ηB1)`` at each cell's learning rate ``eta`` (cells,): ``A = P + λQ``."""
        e = np.asarray(eta, np.float64)[:, None, None, None]
        return self.P + e * self.R, self.Q + e * self.S, self.B0 + e[..., 0] * self.B1


def parts(method: str, process, lr, momentum, dampening: bool, ema=None, hyper=None, options=None) -> Parts:
    """The :class:`Parts` of ``method`` under the constant or iid delay ``process`` for the cells of the
    flat arrays ``lr``, ``momentum``, ``ema`` (γ per cell, or ``None``: no average) and ``hyper`` (the
    method's own hyperparameters by name); ``options``: its own options.

    Raises:
      NqmError: a method without time-invariant matrices affine in λ and η.
    """
    name = family(method)
    chosen = tuple(sorted(second_moment.optimizer_options(name, dampening, options).items()))
    process = delays.process(process)
    rows, row = _distinct_rows({"momentum": momentum, **(hyper or {})}, np.shape(lr))
    built = {lam: matrices.systems(name, chosen, process, lam, rows) for lam in (1.0, 2.0, 0.5)}
    if any(s.A1 is None or s.period != 1 for s in built[1.0]):
        raise NqmError(f"method {method!r} has no time-invariant affine transition matrices under delay "
                       f"{process.label}; simulate it with nqm sweep")
    P0, Q0, P1, Q1, B0, B1 = _affine(method, built, row)
    first = built[1.0][0]
    layout = first.layout
    raw = layout.slots if layout.sent else 0  # w_t's entry: the newest of the history, unless that holds what is sent
    s0 = np.asarray(first.initial, np.float64)
    lr = np.asarray(lr, np.float64).reshape(-1)
    gamma = np.zeros(lr.size) if ema is None else np.asarray(ema, np.float64).reshape(-1)
    written = name in METHODS and first.pmf.size == 1 and not hyper  # its scalar autoregression is known
    ring = recursion(name, int(delays.pmf(process).size - 1), lr, momentum, dampening) if written else None
    if ema is None:
        return Parts(P0, Q0, P1, Q1, B0, B1, first.pmf, s0, raw, False, lr, ring, gamma)
    return Parts(*(_front(M, gamma, raw, k == 0) for k, M in enumerate((P0, Q0, P1, Q1))),
                 *(np.concatenate([(1 - gamma)[:, None, None] * b[..., raw:raw + 1], b], -1) for b in (B0, B1)),
                 first.pmf, np.concatenate([s0[raw:raw + 1], s0]), raw + 1, True, lr, ring, gamma)


def _distinct_rows(values: dict, shape):
    """The distinct combinations of the hyperparameters ``values`` (by name, each broadcast to the cells'
    ``shape``), as rows of ``(name, value)`` pairs, and each cell's row."""
    keys = np.stack([np.broadcast_to(np.asarray(v, np.float64), shape) for v in values.values()], -1)
    distinct, row = np.unique(keys.reshape(-1, len(values)), axis=0, return_inverse=True)
    rows = tuple(tuple((k, float(x)) for k, x in zip(values, combo)) for combo in distinct)
    return rows, row.reshape(-1)


def _affine(method: str, built: dict, row):
    """Per cell, ``(P0, Q0, P1, Q1, B0, B1)`` from the systems ``built`` at λ = 1, 2 (``A = P + λQ``, for
    both of A's parts), checked at λ = ½, with b independent of λ.

    Raises:
      NqmError: the matrices are not affine in λ.
    """
    at = lambda lam, part: np.stack([getattr(s, part) for s in built[lam]])[row][:, 0]  # noqa: E731 (cells, k, …)
    P0, P1 = 2 * at(1.0, "A0") - at(2.0, "A0"), 2 * at(1.0, "A1") - at(2.0, "A1")
    Q0, Q1 = at(2.0, "A0") - at(1.0, "A0"), at(2.0, "A1") - at(1.0, "A1")
    scale = max(1.0, np.abs(at(2.0, "A0")).max(), np.abs(at(2.0, "A1")).max())
    off = max(np.abs(P + 0.5 * Q - at(0.5, part)).max() for part, P, Q in (("A0", P0, Q0), ("A1", P1, Q1)))
    moves = max(np.abs(at(2.0, p) - at(1.0, p)).max() for p in ("B0", "B1"))
    if max(off, moves) > 1e-12 * scale:
        raise NqmError(f"method {method!r} is not affine in the curvature; simulate it with nqm sweep")
    return P0, Q0, P1, Q1, at(1.0, "B0"), at(1.0, "B1")


def _front(M, gamma, raw: int, constant: bool):
    """``M`` with the average's row and column in front: ``[[γ·constant, (1 − γ) M_rawᵀ], [0, M]]``."""
    cells, k, n, _ = M.shape
    out = np.zeros((cells, k, n + 1, n + 1))
    out[..., 1:, 1:] = M
    out[..., 0, 1:] = (1 - gamma)[:, None, None] * M[..., raw, :]
    if constant:
        out[..., 0, 0] = gamma[:, None]
    return out


COPIES = 6  # arrays of a step's size held at once: A, its parts, the moments and their products


def check_size(method: str, process, dampening: bool, components: int, options: dict | None = None) -> None:
    """Refuse, before any work, a step whose batch of one cell would exceed the memory budget:
    ``components × k × n²`` entries for the k delays of the process and the n entries of the state
    (one more with the average), :data:`COPIES` times."""
    name = family(method)
    chosen = tuple(sorted(second_moment.optimizer_options(name, dampening, options).items()))
    process = delays.process(process)
    matrices.check_footprint(name, chosen, process)
    n = matrices.state_size(name, chosen, process) + 1
    need = COPIES * 8 * components * np.count_nonzero(process.pmf()) * n * n
    if need > BOUNDS["matrix_bytes"]:
        raise NqmError(f"the exact mode with an iterate average or a schedule under delay {process.label} needs "
                       f"{format_bytes(need)} for {components:,} components ({n} state entries), more than the "
                       f"{format_bytes(BOUNDS['matrix_bytes'])} budget; group the eigenvalues into bins (bins=B, --bins B)")


def _mode(parts: Parts, schedule) -> str:
    if parts.pmf.size > 1:
        return "iid"
    if schedule is not None and not schedule.constant:
        return "segments" if schedule.piecewise_constant else "constant"
    return "ring" if parts.ring is not None else "impulse"


def _moments(mode: str, raw, fixed, state, factor, t, lags):
    """One step of a batch's moments (the mode's ``state``) from step ``t`` at the schedule's ``factor``:
    the new state and, per cell, component and reading (ŵ, w), the mean's and the noise's second moments."""
    lam = fixed["lam"]
    if mode == "ring":
        return _ring_step(fixed, state, t, lags)
    if mode == "segments":
        return _segment_step(fixed, state, raw)
    if mode == "impulse":  # time-invariant: A fixed, the response's squares summed (at ŵ, and at w)
        mu, h, v = state
        A = fixed["A"]
        v = v + jnp.stack([h[..., 0] ** 2, h[..., raw] ** 2], -1)
        h, mu = jnp.einsum("cpij,cpj->cpi", A, h), jnp.einsum("cpij,cpj->cpi", A, mu)
        return (mu, h, v), jnp.stack([mu[..., 0] ** 2, mu[..., raw] ** 2], -1), v
    eta = fixed["lr"] * factor  # each cell's η_t; A (cells, comps, k, n, n), b (cells, k, n)
    curvature = lam[None, :, None, None, None]
    e = eta[:, None, None, None, None]
    A = fixed["P"][:, None] + curvature * fixed["Q"][:, None] + e * (fixed["R"][:, None] + curvature * fixed["S"][:, None])
    b = fixed["B0"] + eta[:, None, None] * fixed["B1"]
    if mode == "constant":
        mu, X = state
        A, b = A[:, :, 0], b[:, 0]
        mu = jnp.einsum("cpij,cpj->cpi", A, mu)
        X = A @ X @ jnp.swapaxes(A, -1, -2) + lam[None, :, None, None] * (b[:, None, :, None] * b[:, None, None, :])
        means = jnp.stack([mu[..., 0] ** 2, mu[..., raw] ** 2], -1)
        state = (mu, X)
    else:
        D, N = state
        ward = lambda X: jnp.einsum("d,cpdij->cpij", fixed["pmf"], A @ X[:, :, None] @ jnp.swapaxes(A, -1, -2))  # noqa: E731
        kick = jnp.einsum("d,cdi,cdj->cij", fixed["pmf"], b, b)
        D, X = ward(D), ward(N) + lam[None, :, None, None] * kick[:, None]
        means = jnp.stack([D[..., 0, 0], D[..., raw, raw]], -1)
        state = (D, X)
    return state, means, jnp.stack([X[..., 0, 0], X[..., raw, raw]], -1)


def _ring_step(fixed, state, t, lags: tuple):
    """One step of the ring mode: the scalar autoregression of the mean ``μ`` and the impulse response
    ``h`` on rings of their last p values (slot ``s mod p`` holds step s), the kick's response
    ``ψ_t = √λ (b₀ h_t + b₁ h_{t−1})`` and its filtered one ``φ_t = γ φ_{t−1} + (1 − γ) ψ_t``, whose squares
    sum to the noise parts of w and ŵ, and ``μ̂_{t+1} = γ μ̂_t + (1 − γ) μ_{t+1}``."""
    mu, h, mu_hat, phi, v = state
    p = mu.shape[1]  # rings: (cells, p, components)
    at = lambda ring, lag: jax.lax.dynamic_index_in_dim(ring, (t - lag) % p, 1, keepdims=False)  # noqa: E731
    a, gamma = fixed["a"], fixed["gamma"][:, None]
    new_mu = sum(a[..., k] * at(mu, k) for k in lags)
    new_mu = new_mu + jnp.where(t == 0, fixed["first"][:, None] * fixed["lam"][None, :], 0.0)  # Nesterov's v₀ = 0
    new_h = sum(a[..., k] * at(h, k) for k in lags)
    psi = jnp.sqrt(fixed["lam"])[None, :] * (fixed["b0"][:, None] * at(h, 0) + fixed["b1"][:, None] * at(h, 1))
    phi = gamma * phi + (1 - gamma) * psi
    v = v + jnp.stack([phi**2, psi**2], -1)
    mu_hat = gamma * mu_hat + (1 - gamma) * new_mu
    write = lambda ring, x: jax.lax.dynamic_update_index_in_dim(ring, x, (t + 1) % p, 1)  # noqa: E731
    return (write(mu, new_mu), write(h, new_h), mu_hat, phi, v), jnp.stack([mu_hat**2, new_mu**2], -1), v


def _segment_step(fixed, state, raw):
    """One step of the segments mode (a piecewise-constant schedule under a constant delay): within a
    segment from step S, A and b fixed, the reading e of the noise part is ``e A^u X_S A^uᵀ eᵀ`` (X_S the
    noise covariance at S) plus ``Σ_{j<u} (e A^j √λ b)²``, carried by the rows ``r = e A^u`` (at ŵ and at
    w); ``h`` and ``C = Σ h hᵀ`` carry the covariance to the next breakpoint (:func:`_next_segment`)."""
    mu, rows, sums, X, h, C = state
    A, kick = fixed["A"], fixed["kick"]
    sums = sums + jnp.einsum("cpen,cpn->cpe", rows, kick) ** 2
    C = C + h[..., :, None] * h[..., None, :]
    rows = jnp.einsum("cpen,cpnm->cpem", rows, A)
    mu, h = jnp.einsum("cpij,cpj->cpi", A, mu), jnp.einsum("cpij,cpj->cpi", A, h)
    noises = jnp.einsum("cpen,cpnm,cpem->cpe", rows, X, rows) + sums
    return (mu, rows, sums, X, h, C), jnp.stack([mu[..., 0] ** 2, mu[..., raw] ** 2], -1), noises


def _segment(fixed: dict, factor: float) -> dict:
    """``fixed`` with the segment's A and kick ``√λ b`` at the schedule's ``factor``."""
    lam, eta = fixed["lam"], fixed["lr"] * factor
    A = fixed["P"][:, None] + lam[None, :, None, None] * fixed["Q"][:, None] + eta[:, None, None, None] * (
        fixed["R"][:, None] + lam[None, :, None, None] * fixed["S"][:, None])
    kick = np.sqrt(lam)[None, :, None] * (fixed["B0"] + eta[:, None] * fixed["B1"])[:, None, :]
    return {**fixed, "A": A, "kick": kick}


def _next_segment(fixed: dict, state, length: int, factor: float, raw: int):
    """At a breakpoint, after ``length`` steps of the segment that ends: the noise covariance there
    (``A^L X_S A^Lᵀ + C``), the next segment's A and kick, and its rows, sums and response afresh."""
    mu, _, _, X, _, C = (np.asarray(x) for x in state)
    power = forward.power(fixed["A"], length)[0]
    X = power @ X @ np.swapaxes(power, -1, -2) + C
    fixed = _segment(fixed, factor)
    rows = np.zeros(mu.shape[:2] + (2, mu.shape[-1]))
    rows[..., 0, 0] = rows[..., 1, raw] = 1.0
    return fixed, (mu, rows, np.zeros(mu.shape[:2] + (2,)), X, np.array(fixed["kick"]), np.zeros_like(X))


@functools.partial(jax.jit, static_argnames=("mode", "averaged", "lags"))
def _advance(mode: str, averaged: bool, raw, fixed, state, factors, t, status, done_at, loss, curve, weights, sigma2,
             limits, length, lags=None):
    """Up to ``length`` steps of a batch (cells, components, …) from step ``t``, step ``t + k`` at the
    factor ``factors[k]``: the moments ``state`` (mode's), each noise level's status, end and loss
    (cells, levels), and the traced curve (cells, levels, L) of the target's expected loss."""
    mean_weight, noise_weight = weights  # ½ λ weight (× u₀²), ½ λ weight: (components,)

    def moments(k, state, t):
        state, means, noises = _moments(mode, raw, fixed, state, factors[k], t, lags)
        # (cells, 2 readings, levels): ŵ's expected loss and w's
        parts = jnp.einsum("cpr,p->cr", means, mean_weight)[..., None] + \
            jnp.einsum("cpr,p->cr", noises, noise_weight)[..., None] * sigma2
        return state, parts[:, 0], parts[:, 1]

    return second_moment.moments_loop(moments, state, t, status, done_at, loss, curve, limits, length, averaged)


def run(method: str, process, lr, momentum, dampening: bool, lam, weight, sigma, *, ema=None, schedule=None, target,
        bound, max_steps, initial=None, trace_steps=0, hyper=None, options=None, read: str = "target"):
    """``(steps, status, loss, curve, parts)`` of the flat arrays ``lr``, ``momentum`` (and ``ema``,
    ``hyper``) under the constant or iid delay ``process`` with the learning-rate ``schedule`` (a
    :class:`nqm.schedules.Schedule` or ``None``), against every noise level in ``sigma``, as
    :func:`nqm.expected.second_moment.run` gives them (``initial``: each component's squared initial
    weight); the status and loss read on ŵ where the cells average. ``read="raw"``: on w instead,
    every cell stepped to ``max_steps`` when ``target`` < 0 and ``bound`` = ∞ (a frozen run's level).

    Cells step in batches that shrink as their cells end (a batch steps all its cells); in the impulse
    mode a cell whose noise part alone has reached the target — it never decreases — is settled at
    once where its future provably stays below the divergence bound (:func:`nqm.expected.forward.end_unreachable`)."""
    process = delays.process(process)
    pt = parts(method, process, lr, momentum, dampening, ema, hyper, options)
    if read == "raw":  # the raw iterate in front: the target and the loss read on it
        pt = pt._replace(raw=0) if not pt.averaged else _raw_in_front(pt)
    lam, weight = np.asarray(lam, np.float64), np.asarray(weight, np.float64)
    mode = _mode(pt, schedule)
    cells, comps, n, levels = pt.P.shape[0], lam.size, pt.P.shape[-1], np.size(sigma)
    sigma2 = np.asarray(sigma, np.float64).reshape(-1) ** 2
    out = dict(steps=np.zeros((cells, levels), np.int64), status=np.zeros((cells, levels), np.int8),
               loss=np.zeros((cells, levels)), curve=np.full((cells, levels, trace_steps), np.nan))
    initial = np.ones(comps) if initial is None else np.asarray(initial, np.float64)
    weights = (0.5 * lam * weight * initial, 0.5 * lam * weight)
    limits = (np.float64(target), np.float64(bound), np.int64(max_steps))
    bar = progress_bar(total=cells, desc=f"exact mode ({mode}), {process.label}", unit="cell")
    for take, real in second_moment.batches(cells, BATCH_ENTRIES // (comps * pt.pmf.size * n * n)):
        size = take.size
        fixed, state = _batch(pt, take, lam, mode, pt.raw)
        status = np.broadcast_to(np.where(real[:, None], RUNNING, BUDGET), (size, levels)).astype(np.int8)
        carry = [state, np.int64(0), status, np.zeros((size, levels), np.int64), np.zeros((size, levels)),
                 np.zeros((size, levels, trace_steps))]
        owner = np.where(real, take, -1)  # the cell in each slot (-1: none)
        with jax.enable_x64(True):
            while owner.size:
                t = int(carry[1])
                factors = np.ones(CHUNK) if schedule is None else schedule.factors(t, CHUNK)
                length = min(CHUNK, _next_break(schedule, t) - t) if mode == "segments" else CHUNK
                carry = [np.array(x) if i else jax.tree.map(np.asarray, x) for i, x in enumerate(_advance(
                    mode, pt.averaged, pt.raw, fixed, carry[0], factors, *carry[1:], weights, sigma2, limits,
                    np.int64(length), pt.ring.lags if mode == "ring" else None))]
                if mode == "segments" and int(carry[1]) == _next_break(schedule, t) == t + length:
                    begun = max(b for b in (0, *_breaks(schedule)) if b <= t)
                    fixed, carry[0] = _next_segment(fixed, carry[0], t + length - begun,
                                                    float(schedule.factors(t + length, 1)[0]), pt.raw)
                if mode == "impulse":
                    forward.end_unreachable(fixed["A"], carry, pt.raw, weights, sigma2, limits)
                ended = ~(carry[2] == RUNNING).any(1) & (int(carry[1]) >= trace_steps)
                for cell in np.flatnonzero(ended & (owner >= 0)):
                    for name, x in zip(("status", "steps", "loss", "curve"), carry[2:]):
                        out[name][owner[cell]] = x[cell]
                    bar.update(1)
                owner = np.where(ended, -1, owner)
                fixed, carry, owner = _shrunk(fixed, carry, owner)
                bar.set_postfix_str(f"step {int(carry[1]):,} of at most {max_steps:,}", refresh=False)
    bar.close()
    return out["steps"], out["status"], out["loss"], out["curve"], pt


def _breaks(schedule) -> tuple:
    """The steps at which a piecewise-constant schedule's factor changes."""
    return () if schedule is None or schedule.constant else (schedule.regime(0)[0],)


def _next_break(schedule, t: int) -> int:
    """The first breakpoint after step ``t`` (a large number where none is left)."""
    return min((b for b in _breaks(schedule) if b > t), default=2**62)


SMALLEST = 8  # a batch shrinks no further (each size compiles once)


def _shrunk(fixed: dict, carry: list, owner):
    """The batch without its ended cells once at most half of it runs (a power of two, at least
    :data:`SMALLEST` slots, padded with ended copies), or as it is."""
    keep = np.flatnonzero(owner >= 0)
    if keep.size == 0:
        return fixed, carry, owner[:0]
    size = max(SMALLEST, 1 << (keep.size - 1).bit_length())
    if size * 2 > owner.size:
        return fixed, carry, owner
    rows = np.concatenate([keep, np.full(size - keep.size, keep[0])])
    pick = lambda x: x[rows] if np.ndim(x) and np.shape(x)[0] == owner.size else x  # noqa: E731
    fixed = {k: (v if k in ("lam", "pmf") else pick(v)) for k, v in fixed.items()}
    status = pick(carry[2]).copy()
    status[keep.size:] = BUDGET  # the padding has ended
    carry = [jax.tree.map(pick, carry[0]), carry[1], status, *(pick(x) for x in carry[3:])]
    return fixed, carry, np.concatenate([owner[keep], np.full(size - keep.size, -1)])


def _raw_in_front(pt: Parts) -> Parts:
    """``pt`` with w's entry swapped to the front (the average behind it): what reads the raw iterate."""
    order = np.arange(pt.P.shape[-1])
    order[[0, pt.raw]] = order[[pt.raw, 0]]
    perm = lambda M: M[..., order, :][..., order]  # noqa: E731
    return pt._replace(P=perm(pt.P), Q=perm(pt.Q), R=perm(pt.R), S=perm(pt.S), B0=pt.B0[..., order],
                       B1=pt.B1[..., order], s0=pt.s0[order], raw=pt.raw, averaged=False)


def _batch(pt: Parts, take, lam, mode: str, raw: int):
    """What a batch of cells ``take`` holds fixed and its moments at step 0, as the mode steps them."""
    size, comps, n = take.size, lam.size, pt.P.shape[-1]
    fixed = {"lam": lam, "lr": pt.lr[take], "pmf": pt.pmf}
    if mode == "segments":  # from the first segment, at factor 1 (no noise yet: X = 0)
        fixed.update({k: getattr(pt, k)[take][:, 0] for k in ("P", "Q", "R", "S", "B0", "B1")})
        mu = np.broadcast_to(pt.s0, (size, comps, n))
        fixed, state = _next_segment({**_segment(fixed, 1.0)}, (mu, None, None, np.zeros((size, comps, n, n)), None,
                                                                   np.zeros((size, comps, n, n))), 0, 1.0, raw)
        return fixed, state
    if mode == "ring":
        rec = pt.ring
        fixed.update(a=rec.coefficients(take, lam), first=rec.first[take], b0=rec.noise[take, 0],
                     b1=rec.noise[take, 1], gamma=pt.gamma[take])
        mu = np.ones((size, rec.order, comps))  # w_{s≤0} = 1
        h = np.zeros((size, rec.order, comps))
        h[:, 0] = 1.0  # the response at step 0
        return fixed, (mu, h, np.ones((size, comps)), np.zeros((size, comps)), np.zeros((size, comps, 2)))
    if mode == "impulse":
        P, Q, b = (x[:, 0] for x in _at(pt, take))
        fixed["A"] = P[:, None] + lam[None, :, None, None] * Q[:, None]
        mu = np.broadcast_to(pt.s0, (size, comps, n))
        h = np.sqrt(lam)[None, :, None] * b[:, None, :]  # the response to one kick of variance λ
        return fixed, (mu, np.broadcast_to(h, (size, comps, n)), np.zeros((size, comps, 2)))
    fixed.update(P=pt.P[take], Q=pt.Q[take], R=pt.R[take], S=pt.S[take], B0=pt.B0[take], B1=pt.B1[take])
    if mode == "constant":
        return fixed, (np.broadcast_to(pt.s0, (size, comps, n)), np.zeros((size, comps, n, n)))
    return fixed, (np.broadcast_to(np.outer(pt.s0, pt.s0), (size, comps, n, n)), np.zeros((size, comps, n, n)))


def _at(pt: Parts, take):
    """``(P + ηR, Q + ηS, B0 + ηB1)`` of the cells ``take`` at their own learning rates."""
    sub = pt._replace(P=pt.P[take], Q=pt.Q[take], R=pt.R[take], S=pt.S[take], B0=pt.B0[take], B1=pt.B1[take])
    return sub.at(pt.lr[take])


def steady(pt: Parts, lam, weight, factor: float = 1.0, level=None) -> np.ndarray:
    """``V_∞`` per cell at the learning rates ``lr · factor`` (``E[L_∞] = σ² V_∞`` of the target's
    reading), ∞ where the final regime is unstable (:func:`nqm.expected.second_moment.steady_from`)."""
    P, Q, b = pt.at(pt.lr * factor)
    return second_moment.steady_from(P, Q, b, pt.pmf, lam, weight, level)
