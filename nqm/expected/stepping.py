"""The stepping loop: slots of cells advance their mean and impulse response together.

Each device (one per core) holds a batch of *slots*, about ``slot_size`` (cell, component) pairs;
a slot steps one cell's ``μ`` and ``h`` for every component on a ring of their last p values,
accumulates ``V_t`` and checks every noise level against the target and the divergence bound.
Every ``chunk_steps`` a slot whose cell is done takes the next cell from a shared queue (slowest
first; the last device takes from its end), so no slot idles while cells are waiting. Results are
the same bits whatever the number of slots and however they are refilled (tested).

Compiling that loop takes about a second, more than many grids need: most unstable cells diverge
within a few hundred steps, and the closed form settles most stable ones. So where the spectrum is
small (``SMALL`` components, e.g. binned), every cell first takes a *head start* in numpy, all
cells at once, for as long as that stays cheap (``HEAD_WORK``); only the cells still running then
enter the compiled loop, from where they are. A cell's numbers do not depend on the other cells in
either loop; the two differ only in the rounding of the sums over components.
"""

from __future__ import annotations

import collections
import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nqm.expected.steady import SMALL
from nqm.status import BUDGET, DIVERGED, REACHED, RUNNING

ONE_DEVICE = 2**20  # (cells × components) below which one device steps them all
UNROLL = 8  # steps per round, at most: rounds of all p steps would make long delays slow to compile
HEAD_WORK = 2 * 10**7  # (cells × components) steps of the numpy head start: about a fifth of the compilation


class Loop(NamedTuple):
    """The slots' state at the step ``t`` that they share.

    ``ring[x]`` holds ``(μ, h)`` at step t − x (x < p), a (2, slots, components) slab; ``v`` is each
    slot's ``V_t``; ``status``, ``done_at`` (the step it ended) and ``loss`` are (slots, noise
    levels); ``curve`` (slots, levels, a multiple of the round, maybe 0) the loss of slots that
    started at t = 0."""

    t: jax.Array
    ring: tuple
    v: jax.Array
    status: jax.Array
    done_at: jax.Array
    loss: jax.Array
    curve: jax.Array


class Cells(NamedTuple):
    """The cell in each slot: its coefficients ``a`` (one (slots, components) array per lag of the
    recursion), ``noise`` (slots, 2): ``b_0, b_1``, ``first`` (slots,) and ``origin``, the step t at
    which the cell was at its own step 0 (it may have started from a later step)."""

    a: tuple
    noise: jax.Array
    first: jax.Array
    origin: jax.Array


class Limits(NamedTuple):
    """When a noise level ends: its expected loss below ``target`` (reached), above ``bound`` or not
    finite (diverged), or at ``max_steps`` (budget)."""

    target: jax.Array
    bound: jax.Array
    max_steps: jax.Array


class Starts(NamedTuple):
    """Cells that start in the slots marked ``mask`` (slots,): ring ``ring`` (p, 2, slots,
    components), newest first, V ``v`` and ``status`` per noise level (RUNNING, or BUDGET where it
    was settled unstepped). Masks, not indices: one shape, one compilation."""

    mask: np.ndarray
    ring: np.ndarray
    v: np.ndarray
    status: np.ndarray


class Entry(NamedTuple):
    """A cell ready to step: the noise ``levels`` it steps, and where ``start`` > 0, its state at that
    step: ``ring`` (p, 2, components), ``ring[x]`` = ``(μ, h)`` at step ``start − x``, and ``V_start``."""

    levels: np.ndarray
    start: int = 0
    ring: np.ndarray | None = None
    v: float = 0.0


@functools.partial(jax.jit, static_argnums=(0, 1))
def _advance(lags: tuple, rounds: int, loop: Loop, cells: Cells, starts: Starts, lam, weight, initial, sigma2,
             limits: Limits) -> Loop:
    """New cells in the slots that ``starts``, then up to ``rounds`` rounds of u = min(p, UNROLL)
    steps of every slot (rows) and component (columns), leaving early once no slot is running at
    any noise level (and the curve, if one is kept, is traced).

    A round is unrolled, so every slab it reads is a static element of the ring, and it ends in one
    status update for its u steps: few kernels per step, which is what a step costs when the slots
    are few. After a round the ring's p − u oldest slabs that remain move down by u (copies, where
    p > UNROLL); unrolling all p steps instead would make long delays slow to compile."""
    p = len(loop.ring)
    u = min(p, UNROLL)
    ring = tuple(jnp.where(starts.mask[:, None], new, old) for new, old in zip(starts.ring, loop.ring))
    loop = loop._replace(ring=ring, v=jnp.where(starts.mask, starts.v, loop.v),
                         status=jnp.where(starts.mask[:, None], starts.status, loop.status))
    mean_weight, noise_weight = 0.5 * weight * lam * initial, 0.5 * weight * lam**2
    curve_length = loop.curve.shape[-1]
    b0, b1 = cells.noise[:, :1], cells.noise[:, 1:]
    mean_row = (jnp.arange(2) == 0)[:, None, None]

    def round_(carry):
        loop, n = carry
        t, ring, v = loop.t, loop.ring, loop.v
        local = t - cells.origin  # each slot's own step at the round's start
        news, psis = [], []
        for i in range(u):  # the value at step t + i + 1 from those at t + i − j
            at = lambda j: news[i - 1 - j] if j < i else ring[j - i]
            new = sum(a * at(k) for k, a in zip(lags, cells.a))
            if i == 0:  # a slot's first step happens here
                new = new + jnp.where((local[:, None] == 0) & mean_row, cells.first[:, None] * lam, 0.0)
            psis.append(b0 * at(0)[1] + b1 * at(1)[1])
            news.append(new)
        # row reductions, not dots: the same bits whatever the number of slots
        noise_parts = jnp.sum(jnp.stack(psis) ** 2 * noise_weight, axis=-1)
        vs = []
        for i in range(u):
            v = v + noise_parts[i]
            vs.append(v)
        means = jnp.stack([new[0] for new in news])
        values = jnp.sum(means**2 * mean_weight, axis=-1)[..., None] + jnp.stack(vs)[..., None] * sigma2
        steps = local[None, :, None] + 1 + jnp.arange(u)[:, None, None]  # (u, slots, 1): the step of each value
        ends = (values < limits.target) | ~(values <= limits.bound) | (steps >= limits.max_steps)
        first_end = jnp.argmax(ends, axis=0)  # (slots, levels)
        value = jnp.take_along_axis(values, first_end[None], 0)[0]
        live = loop.status == RUNNING
        ended = live & ends.any(0)
        now = jnp.where(value < limits.target, REACHED, jnp.where(~(value <= limits.bound), DIVERGED, BUDGET))
        curve = loop.curve
        if curve_length:
            updated = jax.lax.dynamic_update_slice_in_dim(curve, jnp.moveaxis(values, 0, -1),
                                                          jnp.minimum(t, curve_length - u), 2)
            curve = jnp.where(t < curve_length, updated, curve)
        ring = tuple(news[::-1]) + ring[: p - u]  # newest first
        return Loop(t + u, ring, v, jnp.where(ended, now, loop.status).astype(jnp.int8),
                    jnp.where(ended, local[:, None] + 1 + first_end, loop.done_at),
                    jnp.where(ended, value, jnp.where(live, values[-1], loop.loss)), curve), n + 1

    def going(carry):  # a slot is running, or the curve is still being traced
        loop, n = carry
        return (n < rounds) & (jnp.any(loop.status == RUNNING) | (loop.t < curve_length))

    return jax.lax.while_loop(going, round_, (loop, 0))[0]


def head_start(lags: tuple, coefficients: Callable, entries: list, record: Callable, *, lam, weight, initial, sigma2,
               limits: tuple, work: int) -> list:
    """Step the ``(cell, Entry)`` pairs of ``entries`` in numpy, all at once, as the compiled loop
    would one step a round, until each noise level has ended or ``work`` (cells × components) steps
    are spent; ``record`` as :func:`step`. Returns the pairs still running, each with the
    :class:`Entry` from which the compiled loop goes on."""
    p, comps = max(max(lags) + 1, 2), lam.size
    target, bound, max_steps = limits
    n = len(entries)
    if not n:
        return []
    cells = np.array([c for c, _ in entries])
    a, noise, first = np.zeros((len(lags), n, comps)), np.zeros((n, 2)), np.zeros(n)
    ring, v = np.zeros((p, 2, n, comps)), np.zeros(n)  # ring[x]: (μ, h) at step local − x
    local = np.array([e.start for _, e in entries], np.int64)
    status = np.where([e.levels for _, e in entries], RUNNING, BUDGET).astype(np.int8)
    done_at, loss = np.zeros(status.shape, np.int64), np.zeros(status.shape)
    for i, (c, entry) in enumerate(entries):
        a_c, noise[i], first[i] = coefficients(c)
        a[:, i] = a_c[:, list(lags)].T
        if entry.start:
            ring[:, :, i], v[i] = entry.ring, entry.v
        else:  # μ = 1 before and at step 0, h = 1 at it, 0 before
            ring[:, 0, i], ring[0, 1, i] = 1.0, 1.0
    ring = list(ring)  # a list: a step moves references, not the ring
    levels = status == RUNNING  # the levels each cell steps
    mean_weight, noise_weight = 0.5 * weight * lam * initial, 0.5 * weight * lam**2
    b0, b1 = noise[:, :1], noise[:, 1:]

    def settle(i, o):  # the levels o of the i-th cell still here have ended: record them
        record(cells[i], o, done_at[i, o], status[i, o], loss[i, o], np.zeros((o.size, 0)))

    while n and work > 0:
        work -= n * comps
        psi = b0 * ring[0][1] + b1 * ring[1][1]  # as the compiled round, term for term
        new = sum(a_k * ring[k] for k, a_k in zip(lags, a))
        new[0] = new[0] + np.where((local == 0)[:, None], first[:, None] * lam, 0.0)
        v = v + np.sum(psi**2 * noise_weight, axis=-1)
        value = np.sum(new[0] ** 2 * mean_weight, axis=-1)[:, None] + v[:, None] * sigma2
        local = local + 1
        live = status == RUNNING
        ended = live & ((value < target) | ~(value <= bound) | (local >= max_steps)[:, None])
        now = np.where(value < target, REACHED, np.where(~(value <= bound), DIVERGED, BUDGET))
        status = np.where(ended, now, status).astype(np.int8)
        done_at = np.where(ended, local[:, None], done_at)
        loss = np.where(ended | live, value, loss)
        ring = [new] + ring[:-1]
        finished = ~(status == RUNNING).any(1)
        if finished.any():
            for i in np.flatnonzero(finished):
                settle(i, levels[i])
            keep = ~finished
            a, ring = a[:, keep], [slab[:, keep] for slab in ring]
            cells, b0, b1, first, v, local, status, done_at, loss, levels = (
                x[keep] for x in (cells, b0, b1, first, v, local, status, done_at, loss, levels))
            n = cells.size
    going = []
    for i, c in enumerate(cells):  # the levels that ended here are recorded; the compiled loop steps the rest
        running = status[i] == RUNNING
        if (ended := levels[i] & ~running).any():
            settle(i, ended)
        going.append((c, Entry(running, int(local[i]), np.stack([slab[:, i] for slab in ring]), float(v[i]))))
    return going


def step(lags: tuple, coefficients: Callable, cells: list, admit: Callable, record: Callable, *, lam, weight,
         initial, sigma2, limits: tuple, trace_steps: int = 0, slot_size: int = 20_000, chunk_steps: int = 1000) -> None:
    """Step the cells in ``cells`` (taken in that order) until each noise level has ended.

    ``coefficients(c)`` gives cell c's ``(a (components, p), noise (2,), first)``; ``admit(c)`` an
    :class:`Entry` for it, or None where nothing is left to step (it runs as a slot takes the cell);
    ``record(c, levels, steps, status, loss, curve)`` receives a finished cell's results at the
    levels it stepped. Small work runs on one device: a second would cost a second compilation.
    A small spectrum takes the numpy :func:`head_start` first (module docstring)."""
    if lam.size <= SMALL and not trace_steps:
        entries = [(c, entry) for c in cells if (entry := admit(c)) is not None]
        going = head_start(lags, coefficients, entries, record, lam=lam, weight=weight, initial=initial, sigma2=sigma2,
                           limits=limits, work=HEAD_WORK)
        if not going:
            return
        cells, admit = [c for c, _ in going], dict(going).get
    comps = lam.size
    devices = jax.devices()[: 1 if len(cells) * comps < ONE_DEVICE else None]
    # A power of two, at least 8: a few compiled shapes however many cells a run steps (the bits do
    # not depend on the slots), so that a search's many small lists of points compile a few times.
    slots = max(1, min(slot_size // comps, 1 << (max(8, -(-len(cells) // len(devices))) - 1).bit_length()))
    if trace_steps:  # a curve is traced from the loop's step 0: every cell starts then, in a slot of its own
        slots = 1 << (max(8, len(cells)) - 1).bit_length()
    shared = _Shared(lags, coefficients, admit, record, (lam, weight, initial, sigma2, limits), trace_steps,
                     chunk_steps, slots, collections.deque(cells), threading.Lock(), threading.Event())
    with ThreadPoolExecutor(len(devices)) as pool:
        try:
            # The last device takes the queue from its end, where cells need no closed form (unstable
            # ones, in a run of ``nqm expected``): it compiles the loop while the others compile and
            # run the closed form, rather than all of them compiling the loop after it.
            list(pool.map(lambda d: _Worker(shared, d, len(devices) > 1 and d == devices[-1]).run(), devices))
        except BaseException:  # Ctrl-C: the workers leave at their next chunk, not after every cell
            shared.stop.set()
            raise


class _Shared(NamedTuple):
    """What the devices' workers share: the recursion, the queue of cells and how to stop."""

    lags: tuple
    coefficients: Callable
    admit: Callable
    record: Callable
    spectrum: tuple  # lam, weight, initial, sigma2, limits
    trace_steps: int
    chunk_steps: int
    slots: int
    queue: collections.deque
    lock: threading.Lock
    stop: threading.Event


class _Worker:
    """One device's slots: which cell each holds, their coefficients, and the loop they step."""

    def __init__(self, shared: _Shared, device, from_back: bool):
        self.shared, self.device, self.from_back = shared, device, from_back
        lam, sigma2 = shared.spectrum[0], shared.spectrum[3]
        slots, comps, levels = shared.slots, lam.size, sigma2.size
        self.p = max(max(shared.lags) + 1, 2)
        self.u = min(self.p, UNROLL)
        self.owner = [None] * slots  # the cell in each slot
        self.a = np.zeros((len(shared.lags), slots, comps))
        self.noise, self.first, self.origin = np.zeros((slots, 2)), np.zeros(slots), np.zeros(slots, np.int64)
        self.status = np.full((slots, levels), BUDGET, np.int8)  # of the slots that start
        self.levels = np.ones((slots, levels), bool)  # the noise levels each slot steps
        empty = np.zeros((2, slots, comps))  # a slot's ring is set as it takes a cell
        self.loop = Loop(np.int64(0), (empty,) * self.p, np.zeros(slots), self.status,
                         np.zeros((slots, levels), np.int64), np.zeros((slots, levels)),
                         np.zeros((slots, levels, -(-shared.trace_steps // self.u) * self.u)))

    def run(self) -> None:
        shared = self.shared
        lam, weight, initial, sigma2, limits = shared.spectrum
        args = (lam, weight, initial, sigma2, Limits(*(np.asarray(x) for x in limits)))
        with jax.enable_x64(True), jax.default_device(self.device):
            free, incoming, t = list(range(shared.slots)), self._take(), 0
            while not shared.stop.is_set():
                starts = self._fill(free, incoming, t)
                if not starts.mask.any() and all(c is None for c in self.owner):
                    return
                cells = Cells(tuple(self.a), self.noise, self.first, self.origin)
                self.loop = _advance(shared.lags, -(-shared.chunk_steps // self.u), self.loop, cells, starts, *args)
                t, free = int(self.loop.t), self._harvest()

    def _take(self) -> Iterator:
        shared = self.shared
        while True:
            with shared.lock:
                if not shared.queue:
                    return
                c = shared.queue.pop() if self.from_back else shared.queue.popleft()
            if (entry := shared.admit(c)) is not None:
                yield c, entry

    def _fill(self, free: list, incoming: Iterator, t: int) -> Starts:
        """A new cell in each free slot, from step ``t``: where it starts."""
        comps = self.shared.spectrum[0].size
        starts = Starts(np.zeros(self.shared.slots, bool), np.zeros((self.p, 2, self.shared.slots, comps)),
                        np.zeros(self.shared.slots), self.status)
        for i, (c, entry) in zip(free, incoming):
            self.owner[i], starts.mask[i], self.levels[i] = c, True, entry.levels
            a_c, self.noise[i], self.first[i] = self.shared.coefficients(c)
            self.a[:, i], self.origin[i] = a_c[:, list(self.shared.lags)].T, t - entry.start
            self.status[i] = np.where(entry.levels, RUNNING, BUDGET)
            if entry.start:  # from where the cell can first end
                starts.ring[:, :, i], starts.v[i] = entry.ring, entry.v
            else:  # μ = 1 before and at step 0, h = 1 at it, 0 before
                starts.ring[:, 0, i], starts.ring[0, 1, i] = 1.0, 1.0
        return starts

    def _harvest(self) -> list:
        """Record the cells whose every noise level ended (and whose curve is traced); their slots are free."""
        t, now, trace_steps = int(self.loop.t), np.asarray(self.loop.status), self.shared.trace_steps
        free = [i for i, c in enumerate(self.owner) if c is None or ((now[i] != RUNNING).all() and t >= trace_steps)]
        done = [i for i in free if self.owner[i] is not None]
        if done:
            done_at, loss, curve = (np.asarray(x) for x in (self.loop.done_at, self.loop.loss, self.loop.curve))
            for i in done:
                o = self.levels[i]
                self.shared.record(self.owner[i], o, done_at[i, o], now[i, o], loss[i, o], curve[i, :, :trace_steps])
                self.owner[i] = None
        return free
