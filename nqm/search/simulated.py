"""Simulated stability boundaries: the largest learning rate whose run is stable, found by
bisection with the engine — for any method (linear or not) and any delay process.

For every case (delay, momentum, the method's other hyperparameters, seed) a bracket
``lo < η* ≤ hi`` — ``lo`` observed stable, ``hi`` observed unstable — is first found on a geometric
scan, then halved (geometrically) until ``hi / lo ≤ 1 + tol``. Each round advances every bracket of
a delay and seed in one engine call over all of them (a case is a cell as ``nqm sweep`` runs it,
same noise and delays), so a round compiles once.

A run is unstable when its loss is not finite (it runs in float64 with no divergence factor;
``diverge_factor`` and ``x64`` given by the caller restore the engine's rule) or when its loss
grows: the envelope of its loss over the second half of ``steps`` (the largest traced loss of each
of :data:`BLOCKS` blocks) has a positive log-slope beyond two standard errors
(:func:`nqm.status.grows`, the growth test of the settled runs). Just above a threshold a run
grows too slowly to diverge within any reasonable budget, but its growth shows: for the linear methods the simulated thresholds lie within 0.1 % of the derived ones at
20,000 steps (tests), where "not diverged within the budget" read about 1 % high.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np
import xarray as xr

from nqm import delays, jobs, results
from nqm.errors import NqmError
from nqm.problem import Problem, explicit
from nqm.engine import Progress, Trace, record
from nqm.status import DIVERGED, grows
from nqm.validate import BOUNDS, coordinates, count, number

# The first brackets: x = λ_max · η from 6e-5 to 16, a factor 4 apart, off the special points of the
# simplest dynamics (x = 1 sends an undelayed SGD component to 0 in one step, x = 2 is neutral).
SCAN = 4.0 ** (np.arange(-7, 4) + 0.01)
TRACE_POINTS = 512  # traced losses of a run (every steps // 512 steps)
BLOCKS = 16  # blocks of the second half whose largest losses trace the envelope


__all__ = ["simulated_threshold"]


def simulated_threshold(method: str = "sgdm", *, momentum=None, delay=0, seeds: int = 1, seed: int = 0,
                        steps: int = 20_000, tol: float = 1e-3, problem: Problem | None = None, noise: float = 0.0,
                        progress: bool = False, **hyper_and_options) -> xr.Dataset:
    """``x* = λ_max · η*``, the largest stable learning rate found by simulation, per case.

    Args:
      method: any registered method.
      momentum: momenta (a value or a list; none for a method without a momentum).
      delay: constant delays and/or delay processes (a value or a list), as in :func:`nqm.sweep`.
      seeds, seed: seeds ``seed … seed + seeds − 1`` (noise and random delays); min, median and max reported.
      steps: the budget of each run; its second half is where growth is read.
      tol: the relative width ``hi / lo − 1`` at which bisection stops.
      problem: the quadratic (default: one eigenvalue, λ = 1, so that x* = η*).
      noise: the gradient-noise scale σ.
      progress: show the runs' progress bar (the run setting of :func:`nqm.sweep`).
      hyper_and_options: the method's other hyperparameters as lists (e.g. ``rho=[0.5, 1, 2]``) and
        its options (e.g. ``dampening=True``), as in :func:`nqm.sweep`.

    Returns:
      a Dataset with ``threshold`` (the median over seeds of x*), ``threshold_min``,
      ``threshold_max`` and ``threshold_hi`` (the median upper end of the final brackets) over
      ``delay × momentum × [hyperparameters]``; NaN where even the smallest scanned rate diverged,
      ∞ where none diverged.

    Raises:
      NqmError: an invalid value (steps, seeds, tol, seed, noise), a ``target`` or ``max_steps``
        (a threshold run never stops at a target), or a delay never below the budget, in one line.

    Examples:
      The bisection finds the derived thresholds of SGDM (one eigenvalue λ = 1, so ``x* = η*``):

      >>> import numpy as np
      >>> from nqm.thresholds.derived import threshold
      >>> from nqm.search.simulated import simulated_threshold
      >>> found = simulated_threshold("sgdm", momentum=[0.0, 0.5], delay=[0, 4], steps=2000, tol=1e-2)
      >>> found.threshold.dims
      ('delay', 'momentum')
      >>> bool(np.allclose(found.threshold, threshold("sgdm", momentum=[0.0, 0.5], delay=[0, 4]), rtol=0.02))
      True
    """
    problem = explicit([1.0]) if problem is None else problem
    steps, seeds, seed = _checked(steps, seeds, tol, seed, hyper_and_options)
    task, grids = jobs.job(method, problem, dict(hyper_and_options, max_steps=steps, progress=progress))
    # Never stop at a target; unstable means growing, so a stable run's excursions (large under random
    # delays: its log-loss is a random walk) must not count as divergence — only a non-finite loss
    # does, in float64's range, unless the caller sets the rule.
    rule = {name: value for name, value in {"diverge_factor": np.inf, "x64": True}.items()
            if name not in hyper_and_options}
    task = task._replace(config=dataclasses.replace(task.config, target=-1.0, **rule))
    coords = coordinates(momentum=jobs.momentum_of(method, momentum), noise=noise, seed=np.arange(seed, seed + seeds),
                         **grids)
    if coords["noise"].size != 1:
        raise NqmError("noise takes one value for a threshold; call it once per noise level")
    coords["delay"], processes = delays.coordinate(delay)
    _below_budget(processes, steps)
    extra = list(grids)
    cases = [dict(zip(["momentum", *extra], combo)) for combo in
             itertools.product(coords["momentum"], *(coords[name] for name in extra))]
    unstable = _Instability(task, method, cases, coords["noise"][0], steps)
    shape = (coords["delay"].size, len(cases), seeds)
    lo, hi = np.full(shape, np.nan), np.full(shape, np.nan)
    for d, (i, s) in itertools.product(range(len(processes)), enumerate(coords["seed"])):
        lo[d, :, i], hi[d, :, i] = _bracketed(functools.partial(unstable, processes[d], s), len(cases),
                                              problem.lam_max, tol)
    return _dataset(lo, hi, coords, extra, processes, problem, task,
                    {"method": method, "criterion": "simulated", "steps": steps, "tol": tol, "seeds": seeds,
                     "seed": seed})


def _dataset(lo, hi, coords: dict, extra: list, processes, problem, task, attrs: dict) -> xr.Dataset:
    """The thresholds x* (median, min and max over seeds) and the brackets' upper ends, over the grid."""
    grid_shape = (coords["delay"].size, coords["momentum"].size, *(coords[name].size for name in extra))
    x = lo * problem.lam_max
    with np.errstate(invalid="ignore"):
        data = {"threshold": np.median(x, -1).reshape(grid_shape), "threshold_min": x.min(-1).reshape(grid_shape),
                "threshold_max": x.max(-1).reshape(grid_shape),
                "threshold_hi": np.median(hi * problem.lam_max, -1).reshape(grid_shape)}
    about = {"threshold": "simulated x* = lam_max * eta*",
             "threshold_hi": "upper end of the final bracket (unstable there)"}
    return results.threshold_table(
        data, about, coords["delay"], processes, coords["momentum"], {n: coords[n] for n in extra},
        {**attrs, "noise": float(coords["noise"][0]), **problem.describe(), "diverge_factor": task.config.diverge_factor,
         "delay_processes": ", ".join(p.label for p in processes),
         **{k: int(v) if isinstance(v, bool) else v for k, v in task.options.items() if np.isscalar(v)}},
    )


def _checked(steps, seeds, tol, seed, hyper_and_options: dict) -> tuple[int, int, int]:
    """The budget, the number of seeds and the first seed (one-line errors)."""
    steps = count(steps, "steps", high=10**8)
    seeds = count(seeds, "seeds", high=BOUNDS["seeds"])
    if not (np.isfinite(number(tol, "tol")) and 0 < tol < 1):
        raise NqmError(f"tol must be a number in (0, 1), got {tol}")
    if np.ndim(seed) != 0:
        raise NqmError("seed is the first seed, one integer: give seeds=K for seeds seed … seed+K-1")
    # Every case runs its whole budget `steps` and never stops at a target: these would be ignored.
    ignored = sorted({"target", "max_steps"} & set(hyper_and_options))
    if ignored:
        raise NqmError(f"simulated_threshold takes no {' or '.join(ignored)}: each run goes on for steps=N steps "
                       "(give steps) and never stops at a target")
    return steps, seeds, int(coordinates(seed=seed)["seed"][0])


def _below_budget(processes, steps: int) -> None:
    """Refuse a delay never below the budget: every gradient would be taken at w₀, nothing could diverge."""
    for process in processes:
        support = np.flatnonzero(process.pmf()) if process.pmf() is not None else np.zeros(1, int)
        if support[0] >= steps:
            raise NqmError(f"delay {process.label} is never below the budget of {steps:,} steps, so every gradient "
                           f"would be taken at w0 and no run could diverge; give more steps than the delay "
                           f"(steps=, --steps), several times it")


class _Instability:
    """Whether cases are unstable at a rate: they diverged, or their loss's envelope grows over the
    second half of the budget (one engine run per call, whatever the cases)."""

    def __init__(self, task, method: str, cases: list, noise: float, steps: int):
        self.task, self.method, self.cases, self.noise = task, method, cases, noise
        self.stride = max(1, steps // TRACE_POINTS)
        self.t = self.stride * np.arange(1, steps // self.stride + 1)
        self.window = self.t > steps / 2

    def __call__(self, process, seed, lr, which) -> np.ndarray:
        values = {name: np.array([self.cases[c][name] for c in which]) for name in self.cases[0]}
        values.update(lr=np.asarray(lr, np.float64), noise=np.full(len(which), self.noise))
        coordinates(distinct=False, lr=values["lr"])
        observers = [Progress(f"{self.method} threshold", enabled=self.task.config.progress),
                     Trace({"loss": record.loss}, self.stride)]
        out = self.task.run(process, values, seed, observers)
        growing = [grows(row[self.window], self.t[self.window], blocks=BLOCKS) for row in out.trace["loss"]]
        return (out.status == DIVERGED) | np.array(growing, bool)


def _bracketed(unstable, cases: int, lam_max: float, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Each case's bracket ``(lo, hi)`` of the stable rate: the scan, in one call (the first diverging
    rate and the one below it), then bisection to ``hi / lo ≤ 1 + tol``; ``lo`` ∞ where no scanned
    rate diverged, NaN where the smallest did."""
    lo, hi, every = np.full(cases, np.nan), np.full(cases, np.nan), np.arange(cases)
    scan = unstable(np.repeat(SCAN / lam_max, cases), np.tile(every, SCAN.size)).reshape(SCAN.size, -1)
    first = np.where(scan.any(0), scan.argmax(0), SCAN.size)
    inside = (first > 0) & (first < SCAN.size)
    lo[inside], hi[inside] = SCAN[first[inside] - 1] / lam_max, SCAN[first[inside]] / lam_max
    lo[first == SCAN.size] = np.inf
    open_ = np.flatnonzero(inside)
    while open_.size:
        mid = np.sqrt(lo[open_] * hi[open_])
        grew = unstable(mid, open_)
        hi[open_[grew]], lo[open_[~grew]] = mid[grew], mid[~grew]
        open_ = open_[hi[open_] / lo[open_] > 1 + tol]
    return lo, hi
