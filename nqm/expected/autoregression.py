"""The constant-delay evaluator: each component's autoregression, settled in closed form where it
can be and stepped where it must be.

First every cell's stability and steady state come from its reflection coefficients
(:mod:`nqm.expected.steady`). Then the cells go through the slots of :mod:`nqm.expected.stepping`,
slowest first; as a slot takes a stable cell, its closed form (:mod:`nqm.expected.closed_form`)
settles the noise levels that provably never reach the target (most cells that exhaust the budget,
which would otherwise cost all of it) and the step before which the others cannot end, from which
they are stepped. Steps and status are exactly those of stepping every cell from the start.
"""

from __future__ import annotations

import threading

import jax
import numpy as np

from nqm.thresholds import polynomials
from nqm.expected import closed_form, steady, stepping
from nqm.expected.recursion import Recursion, recursion
from nqm.status import BUDGET


SORTED_ORDER = 128  # the longest recursion whose cells are ordered by their spectral radius


def _longest_first(rec: Recursion, lam, stable_cells) -> np.ndarray:
    """Cell order for the slots, longest first, so that no long cell starts at the end and cells of
    like lengths share a batch: stable cells by their spectral radius at the smallest eigenvalue
    (the closer to 1, the slower), then unstable ones by their spectral radius at the largest (the
    closer to 1, the later they diverge). Past ``SORTED_ORDER`` the cells keep their order: two
    companion eigenvalue problems per cell would cost more than the batching saves."""
    if rec.order > SORTED_ORDER:
        return np.lexsort((~stable_cells,))
    radius = lambda x: polynomials.spectral_radius(rec.polynomial(slice(None), np.array([x]))[:, 0])
    return np.lexsort((-np.where(stable_cells, radius(lam.min()), -radius(lam.max())), ~stable_cells))


EIGEN_OPS = 10  # × p³: one companion eigenvalue problem of order p (Hessenberg reduction, QR sweeps)
STEP_DOWN_OPS = 3  # × p² per component: the step-down recursion (steady.py)


def cost(method: str, delay: int, lam, cells: int, steady_only: bool = False) -> tuple[float, int]:
    """``(operations, bytes)`` that :func:`run` spends on ``cells`` cells before it steps any, at
    most: the step-down recursion of every component, and per cell the companion eigenvalue
    problems that order it (short recursions only) and those of its closed form's roots (every
    cell counted as stable: those take a closed form); ``bytes``: a companion matrix of order p
    and its workspace.
    ``steady_only``: the steady state alone (:func:`nqm.expected.steady.analyse`), no roots."""
    p = recursion(method, delay, 0.1, 0.0).order
    ops = cells * STEP_DOWN_OPS * float(lam.size) * p**2
    if steady_only:
        return ops, 0
    problems = closed_form.eigenproblems(lam) + (2 if p <= SORTED_ORDER else 0)
    return ops + cells * EIGEN_OPS * float(p) ** 3 * problems, 3 * 8 * p * p


def run(method: str, delay: int, lr, momentum, dampening: bool, lam, weight, sigma, *, target, bound, max_steps,
        initial=None, trace_steps=0, slot_size=20_000, chunk_steps=1000):
    """``(steps, status, loss, curve, unit)`` of the flat arrays ``lr`` and ``momentum`` against every
    noise level in ``sigma``: the first three (cells, levels), ``curve`` (cells, levels, trace_steps)
    the expected loss at steps 1 … trace_steps, and ``unit`` each cell's ``V_∞`` (∞ if unstable).
    ``initial``: each component's squared initial weight (``None``: 1, the model's ``w₀``), a factor of
    its mean part. With ``trace_steps`` every cell is stepped from the start (a curve needs every step)."""
    initial = np.ones_like(lam) if initial is None else initial
    rec = recursion(method, delay, lr, momentum, dampening)
    cells, levels, sigma2 = rec.cells, sigma.size, np.asarray(sigma, np.float64) ** 2
    steps, status = np.zeros((cells, levels), np.int64), np.zeros((cells, levels), np.int8)
    loss, curve = np.zeros((cells, levels)), np.full((cells, levels, trace_steps), np.nan)
    stable, unit = steady.analyse(rec, lam, weight)
    every, lock = np.ones(levels, bool), threading.Lock()

    def admit(c):
        if trace_steps or not stable[c]:
            return stepping.Entry(every)
        with jax.default_device(jax.devices()[0]):  # whichever worker asks: one compilation, not one per device
            cut = closed_form.shortcut(rec, c, lam, weight, initial, sigma2, target, bound, max_steps)
        if cut is None:
            return stepping.Entry(every)
        with lock:
            steps[c, cut.proven], status[c, cut.proven], loss[c, cut.proven] = max_steps, BUDGET, cut.final[cut.proven]
        return stepping.Entry(~cut.proven, cut.start, cut.ring, cut.v) if not cut.proven.all() else None

    def record(c, o, done_at, ended, last, traced):
        with lock:
            steps[c, o], status[c, o], loss[c, o] = done_at, ended, last
            curve[c] = traced

    stepping.step(rec.lags, lambda c: (rec.coefficients(c, lam), rec.noise[c], rec.first[c]),
                  list(_longest_first(rec, lam, stable)), admit, record,
                  lam=lam, weight=weight, initial=initial, sigma2=sigma2, limits=(target, bound, max_steps),
                  trace_steps=trace_steps, slot_size=slot_size, chunk_steps=chunk_steps)
    return steps, status, loss, curve, unit


def stays_from(method: str, delay: int, lr, momentum, dampening: bool, lam, weight, sigma, *, target,
               initial=None) -> np.ndarray:
    """Per cell (rows) and noise level (columns), the step from which each one's closed form proves
    its expected loss below the target for good (:func:`closed_form.stays_from`; 0 where it proves
    nothing)."""
    initial = np.ones_like(lam) if initial is None else initial
    rec = recursion(method, delay, lr, momentum, dampening)
    out = np.zeros((rec.cells, np.size(sigma)), np.int64)
    for c in range(rec.cells):
        for level, sigma2 in enumerate(np.asarray(sigma, np.float64) ** 2):
            out[c, level] = closed_form.stays_from(rec, c, lam, weight, initial, sigma2, target) or 0
    return out
