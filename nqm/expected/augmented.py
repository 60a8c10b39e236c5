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
from nqm.expected import second_moment
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
    values = {"momentum": momentum, **(hyper or {})}
    keys = np.stack([np.broadcast_to(np.asarray(v, np.float64), np.shape(lr)) for v in values.values()], -1)
    distinct, row = np.unique(keys.reshape(-1, len(values)), axis=0, return_inverse=True)
    row = row.reshape(-1)
    rows = tuple(tuple((k, float(x)) for k, x in zip(values, combo)) for combo in distinct)
    built = {lam: matrices.systems(name, chosen, process, lam, rows) for lam in (1.0, 2.0, 0.5)}
    if any(s.A1 is None or s.period != 1 for s in built[1.0]):
        raise NqmError(f"method {method!r} has no time-invariant affine transition matrices under delay "
                       f"{process.label}; simulate it with nqm sweep")
    at = lambda lam, part: np.stack([getattr(s, part) for s in built[lam]])[row][:, 0]  # noqa: E731 (cells, k, …)
    P0, P1 = 2 * at(1.0, "A0") - at(2.0, "A0"), 2 * at(1.0, "A1") - at(2.0, "A1")
    Q0, Q1 = at(2.0, "A0") - at(1.0, "A0"), at(2.0, "A1") - at(1.0, "A1")
    scale = max(1.0, np.abs(at(2.0, "A0")).max(), np.abs(at(2.0, "A1")).max())
    off = lambda lam, part, P, Q: np.abs(P + lam * Q - at(lam, part)).max()  # noqa: E731
    if max(off(0.5, "A0", P0, Q0), off(0.5, "A1", P1, Q1)) > 1e-12 * scale or \
            max(np.abs(at(2.0, p) - at(1.0, p)).max() for p in ("B0", "B1")) > 1e-12 * scale:
        raise NqmError(f"method {method!r} is not affine in the curvature; simulate it with nqm sweep")
    first = built[1.0][0]
    layout = first.layout
    raw = layout.slots if layout.sent else 0  # w_t's entry: the newest of the history, unless that holds what is sent
    B0, B1, s0 = at(1.0, "B0"), at(1.0, "B1"), np.asarray(first.initial, np.float64)
    lr = np.asarray(lr, np.float64).reshape(-1)
    if ema is None:
        return Parts(P0, Q0, P1, Q1, B0, B1, first.pmf, s0, raw, False, lr)
    gamma = np.asarray(ema, np.float64).reshape(-1)
    return Parts(*(_front(M, gamma, raw, k == 0) for k, M in enumerate((P0, Q0, P1, Q1))),
                 *(np.concatenate([(1 - gamma)[:, None, None] * b[..., raw:raw + 1], b], -1) for b in (B0, B1)),
                 first.pmf, np.concatenate([s0[raw:raw + 1], s0]), raw + 1, True, lr)


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
    return "impulse" if schedule is None or schedule.constant else "constant"


def _moments(mode: str, raw, fixed, state, factor):
    """One step of a batch's moments (the mode's ``state``) at the schedule's ``factor``: the new
    state and, per cell, component and reading (ŵ, w), the mean's and the noise's second moments."""
    lam = fixed["lam"]
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


@functools.partial(jax.jit, static_argnames=("mode", "averaged"))
def _advance(mode: str, averaged: bool, raw, fixed, state, factors, t, status, done_at, loss, curve, weights, sigma2,
             limits, length):
    """Up to ``length`` steps of a batch (cells, components, …) from step ``t``, step ``t + k`` at the
    factor ``factors[k]``: the moments ``state`` (mode's), each noise level's status, end and loss
    (cells, levels), and the traced curve (cells, levels, L) of the target's expected loss."""
    target, bound, max_steps = limits
    mean_weight, noise_weight = weights  # ½ λ weight (× u₀²), ½ λ weight: (components,)
    trace = curve.shape[-1]

    def body(carry):
        k, state, t, status, done_at, loss, curve = carry
        state, means, noises = _moments(mode, raw, fixed, state, factors[k])
        # (cells, 2 readings, levels): ŵ's expected loss and w's
        parts = jnp.einsum("cpr,p->cr", means, mean_weight)[..., None] + \
            jnp.einsum("cpr,p->cr", noises, noise_weight)[..., None] * sigma2
        value, raw_value = parts[:, 0], parts[:, 1]
        step = t + 1
        live = status == RUNNING
        diverged = ~(raw_value <= bound)
        reached = value < target
        if averaged:  # a raw iterate that diverged has diverged, whatever its average (as the engine reads it)
            reached = reached & ~diverged
        ended = live & (reached | diverged | (step >= max_steps))
        now = jnp.where(reached, REACHED, jnp.where(diverged, DIVERGED, BUDGET)).astype(jnp.int8)
        if trace:
            at = jnp.minimum(t, trace - 1)
            curve = jnp.where(t < trace, jax.lax.dynamic_update_slice_in_dim(curve, value[..., None], at, 2), curve)
        return (k + 1, state, step, jnp.where(ended, now, status), jnp.where(ended, step, done_at),
                jnp.where(live, value, loss), curve)

    def going(carry):
        k, _, t, status, *_ = carry
        return (k < length) & (jnp.any(status == RUNNING) | (t < trace))

    return jax.lax.while_loop(going, body, (0, state, t, status, done_at, loss, curve))[1:]


def run(method: str, process, lr, momentum, dampening: bool, lam, weight, sigma, *, ema=None, schedule=None, target,
        bound, max_steps, initial=None, trace_steps=0, hyper=None, options=None, read: str = "target"):
    """``(steps, status, loss, curve, parts)`` of the flat arrays ``lr``, ``momentum`` (and ``ema``,
    ``hyper``) under the constant or iid delay ``process`` with the learning-rate ``schedule`` (a
    :class:`nqm.schedules.Schedule` or ``None``), against every noise level in ``sigma``, as
    :func:`nqm.expected.second_moment.run` gives them (``initial``: each component's squared initial
    weight); the status and loss read on ŵ where the cells average. ``read="raw"``: on w instead,
    every cell stepped to ``max_steps`` when ``target`` < 0 and ``bound`` = ∞ (a frozen run's level)."""
    process = delays.process(process)
    pt = parts(method, process, lr, momentum, dampening, ema, hyper, options)
    if read == "raw":  # the raw iterate in front: the target and the loss read on it
        pt = pt._replace(raw=0) if not pt.averaged else _raw_in_front(pt)
    lam, weight = np.asarray(lam, np.float64), np.asarray(weight, np.float64)
    mode = _mode(pt, schedule)
    cells, comps, n, levels = pt.P.shape[0], lam.size, pt.P.shape[-1], np.size(sigma)
    sigma2 = np.asarray(sigma, np.float64).reshape(-1) ** 2
    steps, status = np.zeros((cells, levels), np.int64), np.zeros((cells, levels), np.int8)
    loss, curve = np.zeros((cells, levels)), np.full((cells, levels, trace_steps), np.nan)
    initial = np.ones(comps) if initial is None else np.asarray(initial, np.float64)
    weights = (0.5 * lam * weight * initial, 0.5 * lam * weight)
    per_cell = comps * pt.pmf.size * n * n
    size = max(1, min(cells, BATCH_ENTRIES // per_cell))
    size = 1 << (size - 1).bit_length() if size < cells else cells  # a few shapes: a few compilations
    limits = (np.float64(target), np.float64(bound), np.int64(max_steps))
    bar = progress_bar(total=cells, desc=f"exact mode ({mode}), {process.label}", unit="cell")
    for start in range(0, cells, size):
        take = np.minimum(np.arange(start, start + size), cells - 1)
        real = np.arange(start, start + size) < cells
        fixed, state = _batch(pt, take, lam, mode)
        carry = (state, np.int64(0), np.broadcast_to(np.where(real[:, None], RUNNING, BUDGET), (size, levels))
                 .astype(np.int8), np.zeros((size, levels), np.int64), np.zeros((size, levels)),
                 np.zeros((size, levels, trace_steps)))
        t = 0
        with jax.enable_x64(True):
            while True:
                factors = np.ones(CHUNK) if schedule is None else schedule.factors(t, CHUNK)
                state, t, st, done_at, ls, cv = _advance(mode, pt.averaged, pt.raw, fixed, carry[0], factors,
                                                         *carry[1:], weights, sigma2, limits, np.int64(CHUNK))
                t = int(t)
                carry = (state, np.int64(t), st, done_at, ls, cv)
                bar.set_postfix_str(f"step {t:,} of at most {max_steps:,}", refresh=False)
                if not (np.asarray(st) == RUNNING).any() and t >= trace_steps:
                    break
        keep = take[real]
        steps[keep], status[keep], loss[keep], curve[keep] = (np.asarray(x)[real] for x in (done_at, st, ls, cv))
        bar.update(int(real.sum()))
    bar.close()
    return steps, status, loss, curve, pt


def _raw_in_front(pt: Parts) -> Parts:
    """``pt`` with w's entry swapped to the front (the average behind it): what reads the raw iterate."""
    order = np.arange(pt.P.shape[-1])
    order[[0, pt.raw]] = order[[pt.raw, 0]]
    perm = lambda M: M[..., order, :][..., order]  # noqa: E731
    return pt._replace(P=perm(pt.P), Q=perm(pt.Q), R=perm(pt.R), S=perm(pt.S), B0=pt.B0[..., order],
                       B1=pt.B1[..., order], s0=pt.s0[order], raw=pt.raw, averaged=False)


def _batch(pt: Parts, take, lam, mode: str):
    """What a batch of cells ``take`` holds fixed and its moments at step 0, as the mode steps them."""
    size, comps, n = take.size, lam.size, pt.P.shape[-1]
    fixed = {"lam": lam, "lr": pt.lr[take], "pmf": pt.pmf}
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
