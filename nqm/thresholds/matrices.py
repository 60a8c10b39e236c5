"""Transition matrices of a linear method, read off its own ``init``/``step``/``sent``.

The state of one eigencomponent (``N = 1`` in the engine's layout) stacks what the update reads,
``s_t = (h_t, …, h_{t−S+1}, [w_t], optimizer state leaf by leaf)`` (see :mod:`nqm.thresholds.derived`). The
step is linear, so its matrix is the step applied to the basis vectors: they ride side by side on
the component axis (as N eigencomponents would), with one more column for a unit kick in the
gradient, and one jitted call gives every column at every phase. The matrices are affine in η
(checked): built at η = 1 and 2, exact at any η (η = 1/2 checks it).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nqm import delays
from nqm.errors import NqmError
from nqm.optimizers import make
from nqm.optimizers.base import StepContext, registry_cache
from nqm.validate import BOUNDS, format_bytes

COPIES = 3  # copies of the step's columns systems() holds at once: the columns, A and its affine parts


class Layout(NamedTuple):
    """Where each part of the update's inputs sits in the state vector s (length ``n``)."""

    slots: int  # S: the history h_t … h_{t−S+1}
    sent: bool  # the history holds what the optimizer sends, and w_t follows it
    shapes: tuple  # per optimizer-state leaf, its shape without the component axis
    treedef: object  # of the optimizer state
    labels: tuple  # a name per entry of s

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
        """(history, w, optimizer state) with N components → ``(n, N)`` rows."""
        rows = [history] + ([w[None]] if self.sent else []) + [np.reshape(v, (-1, history.shape[1]))
                                                              for v in jax.tree.leaves(state)]
        return np.concatenate(rows)


def state_layout(optimizer, slots: int) -> Layout:
    """The layout of ``optimizer``'s state with a history of ``slots`` entries."""
    with jax.enable_x64(True):  # shapes only: nothing is computed (or compiled)
        paths, treedef = jax.tree_util.tree_flatten_with_path(jax.eval_shape(optimizer.init, jnp.zeros(1)))
    shapes = tuple(leaf.shape[:-1] for _, leaf in paths)
    h = "sent" if optimizer.sent is not None else "w"
    labels = [f"{h}[t]"] + [f"{h}[t-{j}]" for j in range(1, slots)] + (["w[t]"] if optimizer.sent else [])
    for (path, _), shape in zip(paths, shapes):
        name = jax.tree_util.keystr(path).lstrip(".")
        labels += [name + "".join(f"[{i}]" for i in index) for index in np.ndindex(*shape)]
    return Layout(slots, optimizer.sent is not None, shapes, treedef, tuple(labels))


@functools.lru_cache(maxsize=64)
def _stepper(optimizer):
    """One step of N components at every phase (vmapped over t and the worker), and ``init``."""

    def step(hyper, state, w, g, t, delay, worker, stale):
        w_next, state, _ = optimizer.step(hyper, state, w, g, StepContext(t, delay, worker, stale))
        return w_next, state, w_next if optimizer.sent is None else optimizer.sent(hyper, state, w_next)

    phases = jax.vmap(step, in_axes=(None, None, None, None, 0, None, 0, None))
    # A handful of float64 operations: compiling them fast matters more than running them fast.
    return jax.jit(lambda *args: (phases(*args), optimizer.init(jnp.ones_like(args[2]))),
                   compiler_options={"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True})


def _widths(optimizer, layout: Layout, count: int, phases: int) -> tuple[int, int]:
    """``(size, padded)``: the component axis (n basis vectors and a kick per row) and the phases
    the step is evaluated at, padded to a few shapes where one optimizer serves every delay."""
    size, padded = count * (layout.n + 1), phases
    if optimizer.workers is None:  # the same optimizer for every delay: a few shapes, a few compilations
        size, padded = max(64, 1 << (size - 1).bit_length()), 1 << (phases - 1).bit_length()
    return size, padded


def _columns(optimizer, layout: Layout, rows: dict, lam: float, times, lags, workers: int, weights=None):
    """A ``(M, P, k, n, n)``, B ``(M, P, k, n)`` at each step t of ``times`` and delay of ``lags`` for
    M hyperparameter rows (``rows``: field → (M,)), and ``s_0``: one step of every basis vector and
    of a kick, side by side on the component axis. ``weights``: average over the delays (k = 1)."""
    n, count = layout.n, len(next(iter(rows.values())))
    width = n + 1  # n basis vectors and a kick per row
    phases = len(times)
    size, padded = _widths(optimizer, layout, count, phases)
    basis = np.zeros((n, size))
    basis[np.tile(np.arange(n), count), (np.arange(count)[:, None] * width + np.arange(n)).ravel()] = 1.0
    kick = np.zeros(size)
    kick[np.arange(count) * width + n] = 1.0
    hyper = optimizer.hyper(**{k: np.pad(np.repeat(np.asarray(v, float), width), (0, size - count * width),
                                         mode="edge") for k, v in rows.items()})
    history, w, state = layout.split(basis)
    times = np.pad(np.asarray(times, np.int32), (0, padded - phases), mode="edge")
    out = np.zeros((padded, 1 if weights is not None else len(lags), n, size))
    with jax.enable_x64(True):
        for j, d in enumerate(lags):
            stale = history[d]
            (w_next, state_next, sent), start = _stepper(optimizer)(
                hyper, state, history[0] if w is None else w, lam * stale + kick, times, np.int32(d),
                (times - d) % workers, stale)
            rows_next = [np.asarray(sent)[:, None], np.broadcast_to(history[:-1], (len(times),) + history[:-1].shape)]
            rows_next += [np.asarray(w_next)[:, None]] if layout.sent else []
            rows_next += [np.asarray(v).reshape(len(times), -1, size) for v in jax.tree.leaves(state_next)]
            if weights is None:
                out[:, j] = np.concatenate(rows_next, axis=1)
            else:
                out[:, 0] += weights[j] * np.concatenate(rows_next, axis=1)
    ones = np.ones((layout.slots, 1))
    initial = layout.join(ones, ones[0], jax.tree.map(lambda v: np.asarray(v)[..., :1], start))[:, 0]
    out = out[:phases]
    blocks = out[..., : count * width].reshape(out.shape[:3] + (count, width))
    return blocks[..., :n].transpose(3, 0, 1, 2, 4), blocks[..., n].transpose(3, 0, 1, 2), initial


class System(NamedTuple):
    """One linear system: per-step matrices ``A_{p,d} = A0 + η A1`` (``(P, k, n, n)``, P phases, k
    delays; ``A1 = None``: not affine in η, and ``build(η)`` gives ``(A, B)``), kicks B likewise,
    the delays of positive probability and their pmf (``lags = (−1,)``, ``pmf = (1,)``: already
    averaged over the delays, which is all the mean criterion needs), the state's layout and ``s_0``."""

    A0: np.ndarray
    A1: np.ndarray | None
    B0: np.ndarray
    B1: np.ndarray | None
    build: object
    lags: np.ndarray
    pmf: np.ndarray
    rotating: bool  # in the rotating frame (see nqm.thresholds.derived)
    layout: Layout
    initial: np.ndarray
    means: tuple | None  # affine: the pmf-averaged (M0, M1) per phase, as sparse matrices

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
    """Equal to rounding, relative to the largest entry."""
    return a.shape == b.shape and bool(np.abs(a - b).max(initial=0.0) <= 1e-12 * max(1.0, np.abs(a).max(initial=0.0)))


def _rotation(A, B, layout: Layout, workers: int):
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


def _optimizer(name: str, options: tuple, process):
    """The optimizer of ``name`` for ``process``: one for every delay unless it keeps per-worker state."""
    optimizer = make(name, delay=process, **dict(options))
    return make(name, **dict(options)) if optimizer.workers is None else optimizer


def state_size(name: str, options: tuple, process) -> int:
    """n, the entries of the state of one eigencomponent of method ``name`` under ``process``."""
    return state_layout(_optimizer(name, options, process), delays.pmf(process).size).n


def footprint(name: str, options: tuple, process, rows: int = 1, average: bool = False) -> int:
    """Bytes :func:`systems` holds at once for ``rows`` hyperparameter rows, known before any of it is
    built: the step's columns ``(phases, delays, n, 3 rows × (n + 1))`` in float64, ``COPIES`` times.
    Every phase of a constant delay D is a worker, so this grows like D³."""
    optimizer, pmf = _optimizer(name, options, process), delays.pmf(process)
    layout = state_layout(optimizer, pmf.size)
    size, padded = _widths(optimizer, layout, 3 * rows, process.workers)
    k = 1 if average else np.count_nonzero(pmf)
    return COPIES * 8 * int(padded) * int(k) * int(layout.n) * int(size)


def check_footprint(name: str, options: tuple, process, average: bool = False) -> None:
    """Refuse, in one line, a delay whose matrices for one row exceed the memory budget."""
    need = footprint(name, options, process, 1, average)
    if need > BOUNDS["matrix_bytes"]:
        raise NqmError(f"the transition matrices of {name} under delay {process.label} need {format_bytes(need)}, more "
                       f"than the {format_bytes(BOUNDS['matrix_bytes'])} budget; give a smaller delay (the matrices "
                       "grow like its cube, an iid delay's like its fourth power)")


@registry_cache(maxsize=16)
def systems(name: str, options: tuple, process, lam: float, rows: tuple, rotate: bool = True,
            average: bool = False) -> tuple:
    """One :class:`System` per hyperparameter row of method ``name`` (a registry name, with its
    ``options`` as sorted pairs) under a constant or iid delay ``process``, on curvature ``lam``.

    Args:
      rows: per row, ``(field, value)`` pairs of every hyperparameter but ``lr`` (momentum included).
      rotate: use the rotating frame where the phases only relabel workers.
      average: average the matrices over the delays as they are built (for the mean criterion).
    """
    import scipy.sparse  # here, not at the top: the exact mode's constant delays never need it (~0.15 s to import)

    check_footprint(name, options, process, average)
    if len(rows) > 1 and footprint(name, options, process, len(rows), average) > BOUNDS["matrix_bytes"]:
        half = len(rows) // 2  # the rows in groups that fit
        return systems(name, options, process, lam, rows[:half], rotate, average) + \
            systems(name, options, process, lam, rows[half:], rotate, average)
    optimizer = _optimizer(name, options, process)  # no per-worker state: one (and one compilation) for every delay
    pmf, workers = delays.pmf(process), process.workers
    lags = np.flatnonzero(pmf)
    layout = state_layout(optimizer, pmf.size)
    times = workers * -(-pmf.size // workers) + np.arange(workers)  # every phase, past the largest delay

    def build(lrs, fields):  # (A, B) at each learning rate, with the given other hyperparameters
        return _columns(optimizer, layout, {"lr": np.asarray(lrs, float), **fields}, lam, times, lags, workers,
                        pmf[lags] if average else None)

    etas = np.array([1.0, 2.0, 0.5])  # A(2) − A(1) is the slope; A(0.5) checks that A is affine in η
    names = [k for k, _ in rows[0]]
    A, B, initial = build(np.tile(etas, len(rows)), {k: np.repeat([dict(r)[k] for r in rows], 3) for k in names})
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
            A, B, _ = build([x], {k: np.array([v]) for k, v in row})
            return reduce(A[0], B[0])

        A0, B0 = reduce(a[0] - A1, b[0] - B1) if affine else reduce(a[0], b[0])
        A1, B1 = reduce(A1, B1) if affine else (None, None)
        weights = np.ones(1) if average else pmf[lags]
        mean = lambda m: scipy.sparse.csr_array(np.einsum("d,dij->ij", weights, m))  # noqa: E731
        means = None if A1 is None else [(mean(m0), mean(m1)) for m0, m1 in zip(A0, A1)]
        out.append(System(A0, A1, B0, B1, one, np.array([-1]) if average else lags, weights, perm is not None,
                          layout, initial, means))
    return tuple(out)
