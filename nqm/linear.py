"""Stability of every linear method, derived from its own update: no characteristic polynomial is
written per method, so a new linear method gets its thresholds for free.

One eigencomponent of curvature λ (thresholds are in ``x = λη``; ``η* = x*/λ_max``). The state
stacks what the update reads (the engine's layout, with N = 1):

    s_t = (h_t, h_{t−1}, …, h_{t−S+1},  [w_t],  the optimizer state, leaf by leaf)

``h`` is what workers receive (``w`` itself, or what ``optimizer.sent`` makes of it — DANA's
look-ahead — in which case ``w_t`` follows the history), ``S`` = largest delay + 1, ``h_{s<0} = w_0``;
a per-worker leaf is flattened worker by worker. When the gradient applied at step t is d steps
old (``g = λ h_{t−d}``), one noiseless step is ``s_{t+1} = A_{t mod P, d} s_t``, and a unit kick in
that gradient adds ``B_{t mod P, d}``. A and B are read off the optimizer's own ``init``/``step``/
``sent``: the basis vectors ride along the component axis (as N eigencomponents would), one jitted
step gives every column. They are affine in η (checked): built at two learning rates, exact at any.

The map cycles with round-robin workers (worker ``k_t = (t − d) mod W``) and OrMo's groups: its
period P is 1 when every phase gives the same matrices, else the worker count W. When the phases
only relabel the workers (per-worker velocities), the *rotating frame* ``s'_t = Π^{−t} s_t`` (Π
rolls the worker axis) makes it time-invariant, ``A'_d = Πᵀ A_{0,d}``, with the same w.

Criteria, d iid with pmf ``p_d`` (Giladi et al. 2020, §2.3 for the mean), over one period:
  mean         E[s] evolves by ``Σ_d p_d A_d``: rate ``ρ(Π_p Σ_d p_d A_{p,d})^{1/P}``;
  mean-square  E[s sᵀ] evolves by ``X ↦ Σ_d p_d A_d X A_dᵀ``: rate ``ρ(that map over a period)^{1/2P}``;
  almost-sure  the top Lyapunov exponent of ``A_{d_T} ⋯ A_{d_1}`` over a drawn schedule: rate ``e^L``.
Mean-square stability implies the other two. With a constant delay all three coincide.
The threshold is the first x > 0 at which the rate reaches 1 (the stable set need not be an interval).
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg
import xarray as xr
from scipy.optimize import brentq

import nqm._devices  # noqa: F401  (before any JAX computation)
from nqm import delays as _delays
from nqm.errors import NqmError
from nqm.optimizers import make
from nqm.optimizers.base import StepContext, hyperparameters, options as _options
from nqm.validate import coordinates, count

CRITERIA = ("mean", "mean-square", "almost-sure")
RTOL = 1e-12  # relative tolerance of a threshold
STEPS, BURN, BATCHES = 100_000, 2_000, 50  # the almost-sure schedule: measured steps, burn-in, batches
DENSE_MEAN_SQUARE = 16  # states up to which the mean-square map is a dense Kronecker matrix


class Transitions(NamedTuple):
    """One step of a linear method per eigencomponent: ``s_{t+1} = A[t mod P, j] s_t + B[t mod P, j] ξ``
    when the gradient applied at t is ``delays[j]`` steps old (probability ``pmf[j]``), ξ the
    gradient's noise (variance ``σ²λ``). ``w_t = readout @ s_t``; ``initial`` is ``s_0`` for ``w_0 = 1``;
    ``labels`` name the state's entries; ``rotating``: the matrices are in the rotating frame."""

    A: np.ndarray  # (P, k, n, n)
    B: np.ndarray  # (P, k, n)
    delays: np.ndarray  # (k,) the delays of positive probability
    pmf: np.ndarray  # (k,)
    period: int
    readout: np.ndarray  # (n,)
    initial: np.ndarray  # (n,)
    labels: tuple
    rotating: bool


# ----------------------------------------------------------------------------- the update as matrices


class _Layout(NamedTuple):
    slots: int
    sent: bool  # the history holds what the optimizer sends, and w_t follows it
    shapes: tuple  # per optimizer-state leaf, its shape without the component axis
    treedef: object
    labels: tuple

    @property
    def n(self) -> int:
        return len(self.labels)

    def split(self, x):
        """``(n, N)`` rows → (history, w or None, optimizer state) with N components."""
        sizes = [self.slots, int(self.sent)] + [int(np.prod(s)) for s in self.shapes]
        parts = np.split(x, np.cumsum(sizes)[:-1])
        leaves = [p.reshape(s + x.shape[1:]) for p, s in zip(parts[2:], self.shapes)]
        return parts[0], parts[1][0] if self.sent else None, jax.tree.unflatten(self.treedef, leaves)

    def join(self, history, w, state):
        rows = [history] + ([w[None]] if self.sent else []) + [np.reshape(v, (-1, history.shape[1]))
                                                              for v in jax.tree.leaves(state)]
        return np.concatenate(rows)


def _layout(optimizer, slots: int) -> _Layout:
    with jax.enable_x64(True):
        paths, treedef = jax.tree_util.tree_flatten_with_path(optimizer.init(jnp.zeros(1)))
    shapes = tuple(leaf.shape[:-1] for _, leaf in paths)
    h = "sent" if optimizer.sent is not None else "w"
    labels = [f"{h}[t]"] + [f"{h}[t-{j}]" for j in range(1, slots)] + (["w[t]"] if optimizer.sent else [])
    for (path, _), shape in zip(paths, shapes):
        name = jax.tree_util.keystr(path).lstrip(".")
        labels += [name + "".join(f"[{i}]" for i in index) for index in np.ndindex(*shape)]
    return _Layout(slots, optimizer.sent is not None, shapes, treedef, tuple(labels))


@functools.lru_cache(maxsize=64)
def _stepper(optimizer):
    def step(hyper, state, w, g, t, delay, worker, stale):
        w_next, state, _ = optimizer.step(hyper, state, w, g, StepContext(t, delay, worker, stale))
        return w_next, state, w_next if optimizer.sent is None else optimizer.sent(hyper, state, w_next)

    return jax.jit(step)


def _columns(optimizer, layout: _Layout, rows: dict, lam: float, times, lags, workers: int):
    """A ``(M, P, k, n, n)`` and B ``(M, P, k, n)`` at each step t of ``times`` and delay of ``lags``,
    for M hyperparameter rows (``rows``: field → (M,)): one step of every basis vector and kick."""
    n, count = layout.n, len(next(iter(rows.values())))
    width = n + 1  # n basis vectors and a kick per row
    size = max(8, 1 << (count * width - 1).bit_length())  # a few sizes, a few compilations
    basis = np.zeros((n, size))
    basis[np.tile(np.arange(n), count), (np.arange(count)[:, None] * width + np.arange(n)).ravel()] = 1.0
    kick = np.zeros(size)
    kick[np.arange(count) * width + n] = 1.0
    hyper = optimizer.hyper(**{k: np.pad(np.repeat(np.asarray(v, float), width), (0, size - count * width),
                                         mode="edge") for k, v in rows.items()})
    history, w, state = layout.split(basis)
    step, out = _stepper(optimizer), np.empty((len(times), len(lags), n, size))
    with jax.enable_x64(True):
        for (i, t), (j, d) in itertools.product(enumerate(times), enumerate(lags)):
            stale = history[d]
            ints = (np.int32(t), np.int32(d), np.int32((t - d) % workers))
            w_next, state_next, sent = step(hyper, state, history[0] if w is None else w, lam * stale + kick, *ints, stale)
            out[i, j] = layout.join(np.concatenate([np.asarray(sent)[None], history[:-1]]), np.asarray(w_next),
                                    jax.tree.map(np.asarray, state_next))
    blocks = out[..., : count * width].reshape(len(times), len(lags), n, count, width)
    return blocks[..., :n].transpose(3, 0, 1, 2, 4), blocks[..., n].transpose(3, 0, 1, 2)


class _System(NamedTuple):
    """Per-step matrices ``A = A0 + η A1`` (``(P, k, n, n)``; ``A1 = None``: not affine in η, and
    ``build(η)`` gives them), B likewise, the delays' pmf, and the readout of w."""

    A0: np.ndarray
    A1: np.ndarray | None
    B0: np.ndarray
    B1: np.ndarray | None
    build: object
    lags: np.ndarray
    pmf: np.ndarray
    rotating: bool
    layout: _Layout
    initial: np.ndarray

    @property
    def period(self) -> int:
        return self.A0.shape[0]

    def pieces(self, xs):
        """``[(A0, A1, B0, B1, xs)]`` affine in x over the given xs (one piece per x if not affine)."""
        xs = np.atleast_1d(np.asarray(xs, float))
        if self.A1 is not None:
            return [(self.A0, self.A1, self.B0, self.B1, xs)]
        return [(A, np.zeros_like(A), B, np.zeros_like(B), np.array([x])) for x in xs for A, B in [self.build(x)]]


def _close(a, b) -> bool:
    return a.shape == b.shape and bool(np.abs(a - b).max(initial=0.0) <= 1e-12 * max(1.0, np.abs(a).max(initial=0.0)))


def _rotation(A, B, layout: _Layout, workers: int):
    """The permutation Π (``perm``: ``(Π s)_i = s_perm[i]``) that rolls every per-worker leaf by one
    worker and maps each phase to the next, ``A_{p+1} = Π A_p Πᵀ`` (A: ``(P, k, n, n)``), or None."""
    if A.shape[0] < 2:
        return None
    following = np.roll(np.arange(A.shape[0]), -1)
    for shift in (1, -1):
        perm, start = np.arange(layout.n), layout.slots + layout.sent
        for shape in layout.shapes:
            size = int(np.prod(shape))
            if shape and shape[0] == workers:
                perm[start:start + size] = start + np.roll(np.arange(size).reshape(workers, -1), -shift, 0).ravel()
            start += size
        if _close(A[following], A[:, :, perm][:, :, :, perm]) and _close(B[following], B[:, :, perm]):
            return perm
    return None


@functools.lru_cache(maxsize=256)
def _systems(name: str, options: tuple, process, lam: float, rows: tuple, rotate: bool = True) -> tuple:
    """One :class:`_System` per hyperparameter row (``rows``: tuples of (field, value), lr excluded)."""
    optimizer = make(name, delay=process, **dict(options))
    if optimizer.workers is None:  # no per-worker state: one optimizer (and compilation) for every delay
        optimizer = make(name, **dict(options))
    pmf, workers = _delays.pmf(process), process.workers
    lags = np.flatnonzero(pmf)
    layout = _layout(optimizer, pmf.size)
    times = workers * -(-pmf.size // workers) + np.arange(workers)  # every phase, past the largest delay
    with jax.enable_x64(True):
        start = jax.tree.map(np.asarray, optimizer.init(jnp.ones(1)))
    initial = layout.join(np.ones((pmf.size, 1)), np.ones(1), start)[:, 0]  # w_0 = 1, h_{s<0} = w_0

    def build(lrs, fields):  # (A, B) at each learning rate, with the given other hyperparameters
        return _columns(optimizer, layout, {"lr": np.asarray(lrs, float), **fields}, lam, times, lags, workers)

    etas = np.array([1.0, 2.0, 0.5])  # A(2) − A(1) is the slope; A(0.5) checks that A is affine in η
    names = [k for k, _ in rows[0]]
    A, B = build(np.tile(etas, len(rows)), {k: np.repeat([dict(r)[k] for r in rows], 3) for k in names})
    out = []
    for i, row in enumerate(rows):
        a, b = A[3 * i:3 * i + 3], B[3 * i:3 * i + 3]
        A1, B1 = a[1] - a[0], b[1] - b[0]
        affine = _close(a[0] - 0.5 * A1, a[2]) and _close(b[0] - 0.5 * B1, b[2])
        same = all(_close(m, np.broadcast_to(m[:1], m.shape)) for m in (a[0], a[1], b[0], b[1]))
        perm = None if same or not rotate else _rotation(a[0], b[0], layout, workers)
        if perm is not None and _rotation(a[1], b[1], layout, workers) is None:
            perm = None
        inverse = None if perm is None else np.argsort(perm)

        def reduce(A, B, same=same, inverse=inverse):
            if same:
                return A[:1], B[:1]
            return (A, B) if inverse is None else (A[:1, :, inverse], B[:1, :, inverse])

        def one(x, row=row, reduce=reduce):
            A, B = build([x], {k: np.array([v]) for k, v in row})
            return reduce(A[0], B[0])

        A0, B0 = reduce(a[0] - A1, b[0] - B1) if affine else reduce(a[0], b[0])
        A1, B1 = reduce(A1, B1) if affine else (None, None)
        out.append(_System(A0, A1, B0, B1, one, lags, pmf[lags], perm is not None, layout, initial))
    return tuple(out)


# ----------------------------------------------------------------------------- per-step rates


def _radius(M0, M1, xs):
    """Per-step spectral radius ``ρ(Π_p (M0_p + x M1_p))^{1/P}`` at each x (``M``: ``(P, n, n)``)."""
    P, n = M0.shape[0], M0.shape[-1]
    if P == 1:
        M, log_scale = M0[0] + xs[:, None, None] * M1[0], 0.0
    else:  # the phases are sparse (mostly a shift register): a sparse product, kept from overflowing
        X, scale, log_scale = np.tile(np.eye(n), len(xs)), np.repeat(xs, n), np.zeros(len(xs))
        for m0, m1 in zip(M0, M1):
            X = scipy.sparse.csr_array(m0) @ X + (scipy.sparse.csr_array(m1) @ X) * scale
            size = np.abs(X).reshape(n, len(xs), n).max((0, 2))
            size = np.where((size > 0) & np.isfinite(size), size, 1.0)
            X, log_scale = X / np.repeat(size, n), log_scale + np.log(size)
        M = X.reshape(n, len(xs), n).transpose(1, 0, 2)
    with np.errstate(divide="ignore"):
        finite = np.isfinite(M).all((1, 2))
        logs = np.full(len(xs), np.inf)
        logs[finite] = np.log(np.abs(np.linalg.eigvals(M[finite])).max(-1)) + np.broadcast_to(log_scale, len(xs))[finite]
    return np.exp(logs / P)


def _mean_rate(system: _System, xs):
    out = [_radius(np.einsum("d,pdij->pij", system.pmf, A0), np.einsum("d,pdij->pij", system.pmf, A1), x)
           for A0, A1, _, _, x in system.pieces(xs)]
    return np.concatenate(out)


def _mean_square_radius(A0, A1, pmf, x) -> float:
    """Per-step rate ``ρ(T)^{1/2P}`` of ``T``, the map ``X ↦ Σ_d p_d A_d X A_dᵀ`` over one period at x.

    Small states: T as a dense Kronecker matrix. Larger: Arnoldi (ARPACK) on T as an operator,
    written ``Ā X Āᵀ + Σ_d p_d Δ_d X Δ_dᵀ`` (``A_d = Ā + Δ_d``, ``Σ_d p_d Δ_d = 0``) with each
    ``Δ_d(x) = U_d C_d(x) V_dᵀ`` in the fixed column and row spaces of ``[Δ_d(0), ∂_x Δ_d]`` (small
    rank: the delay moves one column, the worker a few rows), so an application costs
    O(n³ + n² Σ_d rank) instead of O(k n³)."""
    P, n = A0.shape[0], A0.shape[-1]
    A = A0 + x * A1
    scales = np.maximum(np.abs(A).max((1, 2, 3)), 1e-300) ** 2  # each phase's map scaled: no overflow
    if not np.isfinite(A).all():
        return np.inf
    if n <= DENSE_MEAN_SQUARE:
        K = np.eye(n * n)
        for a, c in zip(A, scales):
            K = np.einsum("d,dij,dkl->ikjl", pmf, a, a).reshape(n * n, n * n) @ K / c
        radius = np.abs(np.linalg.eigvals(K)).max()
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

        operator = scipy.sparse.linalg.LinearOperator((n * n, n * n), matvec=apply, dtype=float)
        values = scipy.sparse.linalg.eigs(operator, k=4, which="LM", v0=np.eye(n).ravel(), tol=1e-14,
                                          ncv=min(n * n - 1, 40), maxiter=100 * n * n, return_eigenvectors=False)
        radius = np.abs(values).max()
    with np.errstate(divide="ignore"):
        return float(np.exp((np.log(radius) + np.log(scales).sum()) / (2 * P)))


def _mean_square_rate(system: _System, xs):
    return np.array([_mean_square_radius(A0, A1, system.pmf, x) for A0, A1, _, _, xx in system.pieces(xs) for x in xx])


@jax.jit
def _growth(A0, A1, xs, phases, lags, v0):
    """``log ‖s_{t+1}‖ / ‖s_t‖`` along the schedule, at each x, renormalising every step: ``(T, G)``."""

    def step(V, index):
        a0, a1 = A0[index[0], index[1]], A1[index[0], index[1]]
        V = V @ a0.T + xs[:, None] * (V @ a1.T)
        norm = jnp.linalg.norm(V, axis=1)
        return V / norm[:, None], jnp.log(norm)

    return jax.lax.scan(step, jnp.broadcast_to(v0, (xs.size, v0.size)), (phases, lags))[1]


def _lyapunov(system: _System, xs, steps: int, seed: int):
    """Top Lyapunov exponent at each x along one drawn schedule (the same for every x: common random
    numbers make the estimate smooth in x), and its standard error from batch means."""
    rng = np.random.default_rng(seed)
    total = BURN + steps
    lags, n = rng.choice(len(system.pmf), size=total, p=system.pmf), system.layout.n
    v0 = rng.standard_normal(n)
    estimates = []
    for A0, A1, _, _, x in system.pieces(xs):
        with jax.enable_x64(True):
            logs = np.asarray(_growth(A0, A1, x, np.arange(total) % A0.shape[0], lags, v0 / np.linalg.norm(v0)))
        estimates.append(logs[BURN:].reshape(BATCHES, -1, len(x)).mean(1))
    batches = np.concatenate(estimates, axis=1)
    return batches.mean(0), batches.std(0, ddof=1) / np.sqrt(BATCHES)


def _rates(system: _System, xs, criterion: str, steps: int, seed: int):
    xs = np.atleast_1d(np.asarray(xs, float))
    if criterion == "mean" or (criterion == "almost-sure" and len(system.lags) == 1):
        return _mean_rate(system, xs)  # a constant delay: the product is deterministic
    if criterion == "mean-square":
        return _mean_square_rate(system, xs)
    return np.exp(_lyapunov(system, xs, steps, seed)[0])


# ----------------------------------------------------------------------------- thresholds


def _first_crossing(rate) -> float:
    """The first x > 0 at which ``rate(xs)`` reaches 1: every crossing is bracketed on log grids of
    ever finer steps (×16 over 2^±32, then ×√2 below the first unstable point, then ×2^{1/16} over
    the two octaves below that), the first is refined by Brent's method to ``RTOL``."""
    seen = {}

    def first(xs):
        for chunk in np.array_split(xs, max(1, len(xs) // 8)):
            rates = rate(chunk)
            seen.update(zip(chunk, rates))
            unstable = np.flatnonzero(~(rates < 1))
            if unstable.size:
                return chunk[unstable[0]]
        return None

    hi = first(2.0 ** np.arange(-32, 33, 4))
    if hi is None:
        return np.inf
    for grid in (np.arange(-8, 0) / 2, np.arange(-32, 0) / 16):
        hi = first(hi * 2.0 ** grid) or hi
    lo = max((x for x, r in seen.items() if x < hi and r < 1), default=None)
    if lo is None:
        return 0.0
    return brentq(lambda x: np.log(rate(np.array([x]))[0]), lo, hi, xtol=1e-300, rtol=RTOL)


def _threshold(system: _System, criterion: str, steps: int, seed: int) -> tuple[float, float]:
    """``(x*, its standard error)``; the error is that of the almost-sure exponent over its slope."""
    x = _first_crossing(lambda xs: _rates(system, xs, criterion, steps, seed))
    if criterion != "almost-sure" or len(system.lags) == 1 or not 0 < x < np.inf:
        return x, 0.0
    exponent, error = _lyapunov(system, x * np.array([1 - 1e-3, 1.0, 1 + 1e-3]), steps, seed)
    return x, float(error[1] / abs((exponent[2] - exponent[0]) / (2e-3 * x)))


# ----------------------------------------------------------------------------- public API


def _setup(method, momentum, delay, criterion, kw, *, distinct: bool):
    """Checked arguments: (registry name, options, processes, momenta, other hyperparameter grids)."""
    if criterion not in CRITERIA:
        raise NqmError(f"criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    name = "sgdm" if method == "sgd" else method
    fields = [f for f in hyperparameters(name)._fields if f not in ("lr", "momentum")]  # unknown method: NqmError
    momenta = coordinates(distinct, momentum=momentum)["momentum"]
    if method == "sgd" and np.any(momenta != 0):
        raise NqmError("method 'sgd' has no momentum; use method='sgdm' or momentum=0")
    unknown = sorted(set(kw) - set(fields) - set(_options(name)))
    if unknown:
        raise NqmError(f"{unknown[0]!r} is neither an option nor a hyperparameter of method {method!r}")
    options = tuple(sorted((k, v) for k, v in kw.items() if k not in fields and v is not None))
    optimizer = make(name, **dict(options))
    if not optimizer.linear:
        raise NqmError(f"method {method!r} is not linear, so it has no transition matrix; estimate its "
                       "threshold by simulation instead (nqm threshold --simulate)")
    defaults = hyperparameters(name)._field_defaults
    grids = coordinates(distinct, **{f: kw.get(f, defaults.get(f)) for f in fields})
    items = list(delay) if isinstance(delay, (list, tuple, range, np.ndarray)) else [delay]
    if not items:
        raise NqmError("delays is empty: give at least one delay (an integer or a spec such as uniform:1:8)")
    processes = [_delays.process(d) for d in items]
    for p in processes:
        if _delays.pmf(p) is None:
            raise NqmError(f"delay {p.label} is a worker pool, which has no delay pmf; give a constant delay "
                           "or an iid distribution (uniform:A:B, gaussian:MU, pmf:P0,P1,...)")
    return name, options, processes, momenta, grids, dict(optimizer.config).get("convention", "")


def _one(system: _System, lr):
    A, B = (system.A0 + lr * system.A1, system.B0 + lr * system.B1) if system.A1 is not None else system.build(lr)
    return A, B


def transitions(method: str, *, lr, momentum, delay=0, lam: float = 1.0, rotating: bool = False,
                **options_and_hyper) -> Transitions:
    """The transition matrices of one step of ``method`` at ``lr`` on one eigencomponent ``lam``.

    Args:
      method: a linear method (``"sgd"`` is ``"sgdm"`` at m = 0).
      lr, momentum: the learning rate η > 0 and momentum (OrMo's β) in [0, 1).
      delay: a constant delay D, an iid spec (``"uniform:1:8"``, ``"gaussian:4"``, ``"pmf:…"``) or process.
      lam: the curvature λ > 0 of the component.
      rotating: in the rotating frame (period 1) where the phases only relabel workers.
      options_and_hyper: the method's options (e.g. ``dampening=True``) and other hyperparameters.

    Returns:
      :class:`Transitions`; the state layout is in the module docstring and ``labels``.
    """
    name, options, (process,), (m,), grids, _ = _setup(method, momentum, delay, "mean", options_and_hyper, distinct=True)
    lr, lam = coordinates(lr=lr)["lr"], coordinates(lr=lam)["lr"]
    if lr.size != 1 or lam.size != 1 or any(v.size != 1 for v in grids.values()):
        raise NqmError("transitions are for one cell: give one value each of lr, momentum, lam, …")
    rows = ((("momentum", m),) + tuple((k, v[0]) for k, v in grids.items()),)
    system = _systems(name, options, process, float(lam[0]), rows, rotate=rotating)[0]
    A, B = _one(system, lr[0])
    readout = np.eye(system.layout.n)[system.layout.slots if system.layout.sent else 0]
    return Transitions(A, B, system.lags, system.pmf, A.shape[0], readout, system.initial, system.layout.labels,
                       system.rotating)


def spectral_radius(method: str, *, lr, momentum, delay=0, criterion: str = "mean", lam: float = 1.0,
                    steps: int = STEPS, seed: int = 0, **options_and_hyper):
    """Per-step rate of ``method`` at each ``lr``: ``ρ(mean map over a period)^{1/P}`` (mean),
    ``ρ(second-moment map over a period)^{1/2P}`` (mean-square) or ``e^L``, L the top Lyapunov
    exponent over ``steps`` steps of a schedule drawn from ``seed`` (almost-sure). Stable below 1.

    Args: as :func:`transitions`, with ``lr`` a value or a list, and ``criterion``.

    Returns:
      the rates, shaped like ``lr``.
    """
    name, options, (process,), (m,), grids, _ = _setup(method, momentum, delay, criterion, options_and_hyper, distinct=True)
    lr, lam = coordinates(distinct=False, lr=lr)["lr"], coordinates(lr=lam)["lr"]
    rows = ((("momentum", m),) + tuple((k, v[0]) for k, v in grids.items()),)
    system = _systems(name, options, process, float(lam[0]), rows)[0]
    return _rates(system, lr, criterion, _steps(steps), _seed(seed)).reshape(np.shape(lr) if np.ndim(lr) else ())


def _steps(steps) -> int:
    return -(-count(steps, "steps", low=BATCHES) // BATCHES) * BATCHES


def _seed(seed) -> int:
    return count(seed, "seed", low=0)


def threshold_table(method: str, *, delays=range(65), momenta=(0.0,), criterion: str = "mean",
                    dampening: bool = False, steps: int = STEPS, seed: int = 0, **options_and_hyper) -> xr.Dataset:
    """Thresholds ``x* = λ·η*`` of ``method`` over delays × momenta (× any other hyperparameter given
    as a list): the first x > 0 at which the per-step rate of ``criterion`` reaches 1.

    Args:
      method: a linear method (``"sgd"``, ``"sgdm"``, ``"nesterov"``, ``"shifted"``, ``"staleness"``,
        ``"dana"``, ``"ormo"``, ``"ormo-da"``); nonlinear ones are refused.
      delays: constant delays and/or iid specs (``"uniform:1:8"``, ``"gaussian:4"``, ``"pmf:…"``).
      momenta: momentum values in [0, 1).
      criterion: ``"mean"`` (Giladi et al.), ``"mean-square"`` or ``"almost-sure"``.
      dampening: the velocity takes ``(1 − m) g`` instead of ``g``.
      steps, seed: the almost-sure criterion's schedule (its error comes from batch means).
      options_and_hyper: the method's other options and hyperparameters.

    Returns:
      Dataset: ``threshold`` over (``delay``, ``momentum``, …), ``threshold_error`` (almost-sure: the
      exponent's standard error over its slope; else 0), coordinate ``mean_delay``; attributes
      method, criterion, convention.
    """
    if dampening:
        options_and_hyper["dampening"] = True
    name, options, processes, momenta, grids, convention = _setup(method, momenta, delays, criterion,
                                                                  options_and_hyper, distinct=True)
    steps, seed = _steps(steps), _seed(seed)
    combos = list(itertools.product(momenta, *grids.values()))
    rows = tuple(tuple(zip(("momentum", *grids), combo)) for combo in combos)
    values = np.array([[_threshold(s, criterion, steps, seed) for s in _systems(name, options, p, 1.0, rows)]
                       for p in processes])
    labels = [p.label for p in processes]
    if len(set(labels)) != len(labels):
        raise NqmError("delays has repeated values: give each once")
    dims, shape = ("delay", "momentum", *grids), (len(processes), len(momenta), *map(len, grids.values()))
    coordinate = np.array([p.delay for p in processes]) if all(isinstance(p, _delays.Constant) for p in processes) else np.array(labels)
    return xr.Dataset(
        {"threshold": (dims, values[..., 0].reshape(shape), {"long_name": "stability threshold x* = lam*eta*"}),
         "threshold_error": (dims, values[..., 1].reshape(shape), {"long_name": "standard error of x*"})},
        coords={"delay": coordinate, "momentum": momenta, **grids, "mean_delay": ("delay", [p.mean for p in processes])},
        attrs={"method": method, "criterion": criterion, "convention": "no momentum" if method == "sgd" else convention,
               "derived_from": "the method's own update (nqm.linear)", "reference": "Giladi et al. 2020, At Stability's Edge"},
    )


def threshold(method: str, *, momentum=0.0, delay=0, criterion: str = "mean", dampening: bool = False,
              with_error: bool = False, steps: int = STEPS, seed: int = 0, **options_and_hyper):
    """Thresholds ``x* = λ·η*`` as an array ``np.shape(delay) + np.shape(momentum)`` (+ the shapes of
    other hyperparameters): :func:`threshold_table` without labels. ``with_error``: also the errors."""
    table = threshold_table(method, delays=delay if np.ndim(delay) or isinstance(delay, range) else [delay],
                            momenta=momentum, criterion=criterion, dampening=dampening, steps=steps, seed=seed,
                            **options_and_hyper)
    keep = [d for d, given in zip(table.threshold.dims, [delay, momentum, *[options_and_hyper.get(k) for k in
                                                                              table.threshold.dims[2:]]])
            if np.ndim(given) or isinstance(given, range)]
    out = [table[v].squeeze([d for d in table[v].dims if d not in keep]).values for v in ("threshold", "threshold_error")]
    return tuple(out) if with_error else out[0]
