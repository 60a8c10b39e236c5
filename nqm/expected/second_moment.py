"""The iid-delay evaluator: each component's second moment, stepped by the mean-square map.

Under iid delays ``τ_t ~ p`` the state of one eigencomponent (the ring of past weights and the
optimizer's state, as :mod:`nqm.thresholds.derived` lays it out) follows ``s_{t+1} = A_{τ_t} s_t + b_{τ_t} σ√λ z_t``,
``z_t`` standard normal, drawn at step t independently of ``τ_t`` and of ``s_t``. Its second moment
``X_t = E[s_t s_tᵀ]`` follows, exactly,

    X_{t+1} = T(X_t) + σ²λ Q,    T(X) = Σ_d p_d A_d X A_dᵀ,    Q = Σ_d p_d b_d b_dᵀ,

from ``X_0 = s_0 s_0ᵀ`` (``w_{s≤0} = 1``), and ``E[L_t] = ½ Σ_j λ_j (X_t)_{00}`` (``w_t`` is the state's
first entry). Being linear in σ², ``X_t = D_t + σ² N_t``: ``D`` from ``X_0`` without noise, ``N`` from
0 with it, so every noise level shares one run, as in the constant-delay evaluator. ``T`` acts on
symmetric matrices, so both run on their m = n(n+1)/2 upper-triangle entries, where T is an m × m
matrix ``K`` (one per cell and component: ``A_d = P_d + λ Q_d``, read off the method's own update).

Stability and steady state, per component: solve ``(I − K) Y = I`` and ``(I − K) N_∞ = λ Q``. The map
is mean-square stable (ρ(T) < 1) iff Y is positive definite — if so ``Y = Σ_u T^u(I)``; conversely
``T(Y) = Y − I`` shrinks the cone that Y spans — and then ``E[L_∞] = σ² ½ Σ_j λ_j (N_∞)_{00}``.

Settled without stepping, exactly: a stable cell's ``N_t`` grows to ``N_∞`` (each ``T^u(λQ) ⪰ 0``), so a
noise level with ``σ² V_t ≥ target`` (``V_t = ½ Σ λ (N_t)_{00}``) never reaches the target; it never
diverges either when ``σ² V_∞ + ½ Σ λ zᵀ D_t ≤ bound``, ``z`` solving ``(I − K)ᵀ z = e_{00}`` (so that
``zᵀ D_t = Σ_{u≥0} (D_{t+u})_{00}`` bounds every future value). Its loss at the budget is then
``e_{00}ᵀ K^R`` applied to ``D_t`` and ``N_t − N_∞``, ``K^R`` by repeated squaring.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np

from nqm import delays
from nqm.progress import bar as progress_bar
from nqm.conventions import family
from nqm.errors import NqmError
from nqm.expected import forward
from nqm.optimizers import base
from nqm.thresholds import matrices
from nqm.validate import BOUNDS, format_bytes
from nqm.status import BUDGET, DIVERGED, REACHED, RUNNING

BATCH_ENTRIES = 2**24  # (cells × components × m²) per batch: about 128 MiB for each of K and its solve
COPIES = 6  # arrays of K's size a batch holds at once: K, the terms that build it, I − K and its solves


def optimizer_options(name: str, dampening: bool, options: dict | None = None) -> dict:
    """The optimizer options of the family ``name`` for the exact mode: its momentum convention, if
    it has one to choose (a family without ``dampening`` refuses ``dampening=True``), and the
    method's own ``options`` (checked by :func:`nqm.expected.reduced.own`)."""
    own = dict(options or {})
    if "dampening" in base.options(name):
        return {"dampening": bool(dampening), **own}
    if dampening:
        raise NqmError(f"method {name!r} has no dampened convention: drop dampening")
    return own


def check_size(method: str, process, dampening: bool, components: int, options: dict | None = None) -> None:
    """Refuse, before any work, a map whose batch of one cell would exceed the memory budget: K holds
    ``components × m²`` entries, m = n(n + 1)/2 for the n entries of the state, which grow with the
    largest delay (``options``: the method's own)."""
    name = family(method)
    options = tuple(sorted(optimizer_options(name, dampening, options).items()))
    process = delays.process(process)
    matrices.check_footprint(name, options, process)
    n = matrices.state_size(name, options, process)
    entry = COPIES * 8 * (n * (n + 1) // 2) ** 2  # bytes per component
    need, budget = max(BATCH_ENTRIES * COPIES * 8, components * entry), BOUNDS["matrix_bytes"]
    if need > budget:
        fits = budget // entry
        hint = (f"group the eigenvalues into at most {fits:,} bins (bins=B, --bins B)" if fits
                else "give a delay with a smaller support")
        raise NqmError(f"the exact mode's second-moment map under delay {process.label} needs {format_bytes(need)} "
                       f"for {components:,} components ({n} state entries), more than the {format_bytes(budget)} "
                       f"budget; {hint}")


def _matrices(method: str, process, lr, momentum, dampening: bool, hyper=None, options=None):
    """Per cell ``(P, Q, b)`` with ``A_d = P_d + λ Q_d`` (cells, k, n, n) and kicks ``b_d`` (cells, k, n),
    the pmf of the k delays and ``s_0``. Built at λ = 1 and 2 (affine in λ: checked at λ = ½) for
    each distinct momentum and value of the method's own hyperparameters (``hyper``: per-cell arrays
    by name), and at any η (affine in η), in the rotating frame (period 1); ``options``: the method's own."""
    name = family(method)
    options = tuple(sorted(optimizer_options(name, dampening, options).items()))
    values = {"momentum": momentum, **(hyper or {})}
    keys = np.stack([np.broadcast_to(np.asarray(v, np.float64), np.shape(momentum)) for v in values.values()], -1)
    distinct, row = np.unique(keys.reshape(-1, len(values)), axis=0, return_inverse=True)
    row = row.reshape(-1)
    rows = tuple(tuple((k, float(x)) for k, x in zip(values, combo)) for combo in distinct)
    built = {lam: matrices.systems(name, options, process, lam, rows) for lam in (1.0, 2.0, 0.5)}
    first = built[1.0][0]
    # A hyperparameter may make the step nonlinear in η or periodic at some values only: every row.
    if any(s.A1 is None or s.period != 1 for s in built[1.0]):
        raise NqmError(f"method {method!r} has no time-invariant affine transition matrices under delay "
                       f"{process.label}{_at(rows, built[1.0])}; simulate it with nqm sweep")
    at = lambda lam, part: np.stack([getattr(s, part) for s in built[lam]])[row]  # (cells, 1, k, ...)
    eta = np.asarray(lr, np.float64)[:, None, None, None, None]
    A = {lam: (at(lam, "A0") + eta * at(lam, "A1"))[:, 0] for lam in built}
    B = {lam: (at(lam, "B0") + eta[..., 0] * at(lam, "B1"))[:, 0] for lam in built}
    Q = A[2.0] - A[1.0]
    P = A[1.0] - Q
    scale = max(1.0, np.abs(A[2.0]).max())
    if np.abs(P + 0.5 * Q - A[0.5]).max() > 1e-12 * scale or np.abs(B[2.0] - B[1.0]).max() > 1e-12 * scale:
        raise NqmError(f"method {method!r} is not affine in the curvature; simulate it with nqm sweep")
    return P, Q, B[1.0], first.pmf, first.initial


def _at(rows, systems) -> str:
    """Where the first system without time-invariant affine matrices is, when it is not every row:
    `` at momentum=…, c=…`` (the values that put it there), else nothing."""
    bad = [s.A1 is None or s.period != 1 for s in systems]
    if all(bad):
        return ""
    return " at " + ", ".join(f"{k}={v:g}" for k, v in rows[bad.index(True)])


def _operators(P, Q, b, pmf, lam):
    """``K`` (cells, comps, m, m), the map T on upper-triangle entries at each curvature, and the
    noise ``Qn`` (cells, m) (times λ per component). T is quadratic in ``A = P + λ Q``, so it is
    ``K₀ + λ K₁ + λ² K₂`` with the three blocks built once per cell, not once per curvature."""
    n = P.shape[-1]
    i, j = np.triu_indices(n)
    off = (i != j).astype(np.float64)

    def pair(X, Y):  # (X ⊗ Y) on upper-triangle entries: (X S Yᵀ)_{ij} = Σ_{k≤l} (X_ik Y_jl + [k<l] X_il Y_jk) S_kl
        Xi, Yj = X[..., i, :], Y[..., j, :]
        return Xi[..., i] * Yj[..., j] + off * Xi[..., j] * Yj[..., i]

    blocks = [0.0, 0.0, 0.0]
    for d, p in enumerate(pmf):
        Pd, Qd = P[:, d], Q[:, d]
        blocks[0] = blocks[0] + p * pair(Pd, Pd)
        blocks[1] = blocks[1] + p * (pair(Pd, Qd) + pair(Qd, Pd))
        blocks[2] = blocks[2] + p * pair(Qd, Qd)
    lam = lam[None, :, None, None]
    K = blocks[0][:, None] + lam * blocks[1][:, None] + lam * lam * blocks[2][:, None]
    noise = np.einsum("d,cda,cda->ca", pmf, b[..., i], b[..., j])
    return K, noise


def _steady(K, noise, lam, weight, adjoint: bool = True):
    """``(stable, V_∞, N_∞, z)`` of a batch: per cell, whether every component is mean-square stable and
    ``V_∞`` (∞ if not); per component ``N_∞`` (m,) and ``z`` (m,) (see the module docstring; ``z`` is
    NaN without ``adjoint``, which halves the work)."""
    cells, comps, m, _ = K.shape
    n = int(round((np.sqrt(8 * m + 1) - 1) / 2))
    i, j = np.triu_indices(n)
    M = np.eye(m) - K.reshape(-1, m, m)
    rhs = np.stack([np.broadcast_to((i == j).astype(np.float64), (M.shape[0], m)),
                    (noise[:, None, :] * lam[None, :, None]).reshape(-1, m)], -1)
    e00 = np.broadcast_to(np.eye(m)[0], (M.shape[0], m))[..., None]
    with np.errstate(all="ignore"):
        try:
            y = np.linalg.solve(M, rhs)
            z = np.linalg.solve(np.swapaxes(M, 1, 2), e00)[..., 0] if adjoint else np.full(e00.shape[:-1], np.nan)
        except np.linalg.LinAlgError:  # a singular pair (ρ = 1 exactly): one at a time
            y, z = np.full(rhs.shape, np.nan), np.full(e00.shape[:-1], np.nan)
            for p in range(M.shape[0]):
                try:
                    y[p], z[p] = np.linalg.solve(M[p], rhs[p]), np.linalg.solve(M[p].T, e00[p])[:, 0]
                except np.linalg.LinAlgError:
                    pass
        Y = np.zeros((M.shape[0], n, n))
        Y[:, i, j] = Y[:, j, i] = y[..., 0]
        finite = np.isfinite(Y).all((1, 2))
        lowest = np.full(M.shape[0], -np.inf)
        lowest[finite] = np.linalg.eigvalsh(Y[finite])[:, 0]
        stable = (lowest > 0).reshape(cells, comps).all(1)
        unit = 0.5 * (y[:, 0, 1].reshape(cells, comps) * lam * weight).sum(1)
    return stable, np.where(stable, unit, np.inf), y[..., 1].reshape(cells, comps, m), z.reshape(cells, comps, m)


@jax.jit
def _advance(K, noise, x, t, status, done_at, loss, curve, mean_weight, sigma2, limits, length):
    """Up to ``length`` steps of a batch: ``x`` (cells, comps, m, 2) holds ``D`` and ``N``; status,
    ``done_at`` and loss (cells, levels); ``curve`` (cells, levels, L) the loss at steps 1 … L.
    Leaves early once no level is running and the curve is traced."""
    kick = jnp.stack([jnp.zeros_like(noise), noise], -1)

    def moments(k, x, t):
        x = jnp.einsum("cpab,cpbs->cpas", K, x) + kick
        parts = jnp.sum(x[:, :, 0, :] * mean_weight[:, None], axis=1)  # (cells, 2): ½ Σ λ w (D, N)_00
        values = parts[:, :1] + parts[:, 1:] * sigma2
        return x, values, values

    return moments_loop(moments, x, t, status, done_at, loss, curve, limits, length)


def batches(cells: int, fits: int):
    """The cells in batches of at most ``fits`` (at least 1), each batch's size a power of two unless it
    holds every cell (a few shapes: a few compilations): per batch, the cell in each slot ``take`` (the
    last cell repeated past the end) and whether the slot is ``real``."""
    size = max(1, min(cells, fits))
    size = 1 << (size - 1).bit_length() if size < cells else cells
    for start in range(0, cells, size):
        yield np.minimum(np.arange(start, start + size), cells - 1), np.arange(start, start + size) < cells


def moments_loop(moments, state, t, status, done_at, loss, curve, limits, length, averaged: bool = False):
    """The exact mode's compiled loop: up to ``length`` steps of ``moments(k, state, t) → (state, value,
    raw)`` from step ``t``, each noise level's ``value`` (the target's expected loss) and ``raw`` (w's,
    which judges divergence) read against the ``limits`` ``(target, bound, max_steps)``: the new state,
    status, end and loss (cells, levels), and ``curve`` (cells, levels, L) traced at steps 1 … L.
    Leaves early once no level is running and the curve is traced. ``averaged``: the target is read on
    an average, which cannot reach it for a raw iterate that diverged (as the engine reads it)."""
    target, bound, max_steps = limits
    trace = curve.shape[-1]

    def body(carry):
        k, state, t, status, done_at, loss, curve = carry
        state, value, raw = moments(k, state, t)
        step = t + 1
        live = status == RUNNING
        diverged = ~(raw <= bound)
        reached = value < target
        if averaged:
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


def _power_row(K, steps: int):
    """``e_{00}ᵀ K^steps`` per component (…, m), by repeated squaring."""
    row = np.broadcast_to(np.eye(K.shape[-1])[0], K.shape[:-1]).copy()
    power = K
    while steps:
        if steps & 1:
            row = np.einsum("...a,...ab->...b", row, power)
        steps >>= 1
        if steps:
            power = power @ power
    return row


def _settle(K, x, t, status, loss, sigma2, stable, unit, n_inf, z, mean_weight, target, bound, max_steps):
    """Settle in place, exactly, the running levels of stable cells that provably end in BUDGET (see
    the module docstring) where fast-forwarding costs less than stepping; returns whether any did."""
    remaining, m = max_steps - t, K.shape[-1]
    if remaining <= 0 or m * max(1, remaining.bit_length()) >= remaining:
        return False
    D, N = x[..., 0], x[..., 1]
    noise_now = (N[:, :, 0] * mean_weight).sum(1)
    with np.errstate(invalid="ignore"):  # ∞ · 0 where unstable and noiseless: never settled
        future = unit[:, None] * sigma2 + (np.einsum("cpa,cpa->cp", z, D) * mean_weight).sum(1)[:, None]
        settle = (status == RUNNING) & stable[:, None] & (noise_now[:, None] * sigma2 >= target) & (future <= bound)
    cells = np.flatnonzero(settle.any(1))
    if not cells.size:
        return False
    row = _power_row(K[cells], remaining)
    deterministic = (np.einsum("cpa,cpa->cp", row, D[cells]) * mean_weight).sum(1)
    noise = (unit[cells] - (np.einsum("cpa,cpa->cp", row, n_inf[cells] - N[cells]) * mean_weight).sum(1))
    final = deterministic[:, None] + noise[:, None] * sigma2
    ours = settle[cells]
    status[cells] = np.where(ours, BUDGET, status[cells])
    loss[cells] = np.where(ours, final, loss[cells])
    return True


def run(method: str, process, lr, momentum, dampening: bool, lam, weight, sigma, *, target, bound, max_steps,
        initial=None, trace_steps=0, chunk_steps=1000, hyper=None, options=None):
    """``(steps, status, loss, curve, unit)`` of the flat arrays ``lr`` and ``momentum`` (and ``hyper``:
    the method's own hyperparameters, flat arrays by name) under the iid delay ``process`` against
    every noise level in ``sigma``, as :func:`nqm.expected.autoregression.run` gives them for a
    constant delay (``initial`` too); ``options``: the method's own."""
    process = delays.process(process)
    P, Q, b, pmf, s0 = _matrices(method, process, lr, momentum, dampening, hyper, options)
    lam, weight = np.asarray(lam, np.float64), np.asarray(weight, np.float64)
    cells, comps, n, levels = P.shape[0], lam.size, P.shape[-1], np.size(sigma)
    m = n * (n + 1) // 2
    sigma2 = np.asarray(sigma, np.float64).reshape(-1) ** 2
    steps, status = np.zeros((cells, levels), np.int64), np.zeros((cells, levels), np.int8)
    loss, curve, unit = np.zeros((cells, levels)), np.full((cells, levels, trace_steps), np.nan), np.zeros(cells)
    i, j = np.triu_indices(n)
    x0 = np.stack([s0[i] * s0[j], np.zeros(m)], -1)
    mean_weight = 0.5 * lam * weight
    limits = (np.float64(target), np.float64(bound), np.int64(max_steps))
    # A bar over the cells, its postfix the step: one cell may run 10⁸ steps.
    bar = progress_bar(total=cells, desc=f"exact mode, {process.label}", unit="cell")
    for take, real in batches(cells, BATCH_ENTRIES // (comps * m * m)):
        size = take.size
        K, noise = _operators(P[take], Q[take], b[take], pmf, lam)
        stable, v_inf, n_inf, z = _steady(K, noise, lam, weight)
        kick = noise[:, None, :] * lam[None, :, None]
        # The deterministic part starts from s₀ s₀ᵀ times each component's squared initial weight.
        first = x0 if initial is None else x0 * np.stack([np.asarray(initial, np.float64), np.ones(comps)], -1)[:, None, :]
        state = (np.broadcast_to(first, (size, comps, m, 2)), np.int64(0),
                 np.broadcast_to(np.where(real[:, None], RUNNING, BUDGET), (size, levels)).astype(np.int8), np.zeros((size, levels), np.int64),
                 np.zeros((size, levels)), np.zeros((size, levels, trace_steps)))
        with jax.enable_x64(True):
            while True:
                x, t, st, done_at, ls, cv = (np.array(v) for v in _advance(
                    K, kick, *state, mean_weight, sigma2, limits, np.int64(chunk_steps)))
                t = int(t)
                if _settle(K, x, t, st, ls, sigma2, stable & real, v_inf, n_inf, z, mean_weight, target, bound,
                           max_steps):
                    done_at = np.where((st == BUDGET) & (done_at == 0), max_steps, done_at)
                state = (x, np.int64(t), st, done_at, ls, cv)
                bar.set_postfix_str(f"step {t:,} of at most {max_steps:,}", refresh=True)
                if not (st == RUNNING).any() and t >= trace_steps:
                    break
        keep = take[real]
        steps[keep], status[keep], loss[keep], curve[keep], unit[keep] = done_at[real], st[real], ls[real], \
            cv[real], v_inf[real]
        bar.update(int(real.sum()))
    bar.close()
    return steps, status, loss, curve, unit


def steady_state(method: str, process, lr, momentum, dampening: bool, lam, weight, level=None, hyper=None,
                 options=None) -> np.ndarray:
    """``V_∞`` per cell (``E[L_∞] = σ² V_∞``), ∞ where the mean-square map is not stable; under a
    constant delay, cells where ``level`` (a mask) is False get only their stability (0 or ∞);
    ``hyper`` and ``options``: the method's own, as in :func:`run`."""
    P, Q, b, pmf, _ = _matrices(method, delays.process(process), lr, momentum, dampening, hyper, options)
    return steady_from(P, Q, b, pmf, lam, weight, level)


def steady_from(P, Q, b, pmf, lam, weight, level=None) -> np.ndarray:
    """``V_∞`` per cell of the steps ``A_d = P_d + λ Q_d`` with kicks ``b_d`` ((cells, k, n, n) and
    (cells, k, n), pmf ``(k,)``), read on the state's first entry: :func:`steady_state` of matrices
    built elsewhere (a state with an iterate average in front, :mod:`nqm.expected.augmented`)."""
    lam, weight = np.asarray(lam, np.float64), np.asarray(weight, np.float64)
    if pmf.size == 1:
        level = np.ones(P.shape[0], bool) if level is None else np.asarray(level, bool)
        return _lyapunov(P[:, 0], Q[:, 0], b[:, 0], lam, weight, level)
    m = P.shape[-1] * (P.shape[-1] + 1) // 2
    size = max(1, BATCH_ENTRIES // (lam.size * m * m))
    parts = [_steady(*_operators(P[s:s + size], Q[s:s + size], b[s:s + size], pmf, lam), lam, weight, adjoint=False)[1]
             for s in range(0, P.shape[0], size)]
    return np.concatenate(parts)


def _lyapunov(P, Q, b, lam, weight, level) -> np.ndarray:
    """``V_∞`` per cell under one constant delay, where the map is ``X ↦ A X Aᵀ``: stable iff the
    spectral radius of every component's ``A = P + λ Q`` is below 1, and then ``N_∞ = Σ_u A^u λ b bᵀ
    A^uᵀ`` by doubling (``N ← N + A N Aᵀ``, ``A ← A²``) on the n × n state instead of the m × m map
    — exact, and small enough for every eigenvalue of a large spectrum."""
    n = P.shape[-1]
    size = max(1, BATCH_ENTRIES // (8 * lam.size * n * n))
    out = np.full(P.shape[0], np.inf)
    for s in range(0, P.shape[0], size):
        A = P[s:s + size, None] + lam[None, :, None, None] * Q[s:s + size, None]  # (cells, comps, n, n)
        stable = (np.abs(np.linalg.eigvals(A)).max(-1) < 1).all(1)
        out[s:s + size][stable] = 0.0
        stable &= level[s:s + size]
        A = A[stable]
        N = lam[None, :, None, None] * b[s:s + size][stable][:, None, :, None] * b[s:s + size][stable][:, None, None, :]
        N = forward.series(A, N)
        out[s:s + size][stable] = 0.5 * (N[..., 0, 0] * lam * weight).sum(1)
    return out
