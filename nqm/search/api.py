"""The smallest T over a box of hyperparameters, by successive refinement (``nqm.best``).

A parameter given one value is fixed; given a pair ``(lo, hi)`` (a tuple or list of two numbers)
it is searched over that closed interval: ``lr`` and the method's own hyperparameters (AB's ρ,
DC-ASGD's λ_dc) on a log scale, ``momentum`` on ``log(1 − m)``. Each searched axis is mapped onto
``[0, 1]`` and the box onto an integer lattice: ``coarse`` points per axis, each gap halvable
``nqm.search.lattice.LEVELS`` times. Every search point is a lattice point, so its values are exact and
reproducible, and a point is never evaluated twice (the cache is keyed by its exact values).

Terms (kept apart from the grid statistic :func:`nqm.status.t_star`, a 1st percentile):

* a point's **T** is its own steps to the target, exactly what :func:`nqm.sweep` gives for the same
  values and seed; with K seeds, the median over the seeds where every seed settled, ∞ where one
  did not (an answer must hold for each draw of the noise);
* **T*_best** (``best_steps``) is the smallest T found;
* a point's **robust T** at nudge δ is the largest T over its neighbourhood: every combination of
  ``lr·(1 ± δ)``, ``1 − (1 − m)(1 ± δ)`` (clipped at 0) and ``p·(1 ± δ)`` for each other searched
  parameter ``p``, the point included (3^k points for k searched parameters; ∞ if any fails);
  with K seeds, the median over seeds of each seed's own largest steps there, ∞ unless the point
  itself settles in every seed; **robust T*_best** (``robust_best_steps``) is the smallest robust T found.

The refinement. Round 0 evaluates the coarse grid; every later round is ONE call of the evaluator
(:func:`nqm.sweeps.evaluate`, or :func:`nqm.expected.evaluate` with ``expected=True``) on all the
new points and seeds of the round, proposed by *tracks*, pattern searches on the lattice:

* a track polls the lattice points ``centre + h·s`` (``s ∈ {−1, 0, 1}^k``, not 0) at its step h and
  at h/2. When one beats its centre it moves there and doubles that step, so it travels along the
  stability edge where the best points sit (diagonal moves follow a curved edge); otherwise it
  shrinks its step four times: next to diverged points, where T drops, this bisects toward the
  edge. Among points that did not converge, a track prefers the smaller final loss: while no point
  has converged (a thin converging band between the coarse points that ran out of budget and those
  that diverged), tracks start at the points that came closest and walk toward the band. A track
  ends when its step is gone or it meets another;
* *edge tracks* poll along a line only (along lr; along momentum if lr is fixed): one on every
  coarse line locates the edge on every line, so the best stretch of the edge is found, not only
  the neighbourhood of the best coarse point; then each round ``width`` new lines split the gap
  between two neighbouring lines with the best edges (successive refinement along the edge);
* ``width`` free tracks start at the best points; an ended one is replaced at the best point at
  least a coarse gap from every centre held so far (an unexplored stretch; a robust one, from the
  running ones only, since the neighbourhoods evaluated each round keep finding robust points);
* with ``robust=δ``, ``width`` robust tracks search the robust T the same way (beyond two searched
  axes only at the 2k compass points, one step a round: each candidate brings its whole 3^k-point
  neighbourhood into the round, unless a known neighbour already rules it out); and each round
  the neighbourhoods of the most promising points without a known robust T are evaluated, by T,
  knife-edge suspects (a failed point inside their δ-box) last, twice as many each round until a
  first robust point is found. Only a point whose whole neighbourhood was evaluated and converged
  has a robust T, so a knife-edge point is never the robust answer.

The search stops once ``patience`` rounds in a row improve neither T*_best nor robust T*_best by
``tol`` (relative: a bisection toward the edge may improve nothing for a round or two, then a lot;
no round counts while no point, or no robust point, has been found yet),
when the next round does not fit in ``max_cells`` cells (points × seeds), or when no track has
anything left to try.

Pattern search: Hooke & Jeeves (1961), "Direct search solution of numerical and statistical
problems"; Torczon (1997), "On the convergence of pattern search algorithms".
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Callable

import numpy as np
import xarray as xr

from nqm import jobs, results, schedules
from nqm.progress import bar as progress_bar
from nqm.checkpoint import checked, discard_checkpoint, resume_search
from nqm.errors import NqmError
from nqm.io import lock, save
from nqm.search import setup
from nqm.search.refine import Refinement
from nqm.status import meaning

def best(method: str = "sgdm", *, lr, momentum=None, delay=0, noise=0.0, batch_size=None, seeds: int = 1, seed: int = 0,
         robust: float | None = None, tol: float = 0.01, max_cells: int = 2000, expected: bool = False,
         problem=None, coarse: int | None = None, width: int = 1, patience: int = 3, checkpoint=None,
         restart: bool = False, objective: str = "first", reuse: xr.Dataset | None = None, ema=None, schedule=None,
         **options) -> xr.Dataset:
    """The smallest T (steps to the target) over a box of hyperparameters, by successive refinement.

    Args:
      method: a name from :func:`nqm.optimizers.methods`; with ``expected=True`` one of
        ``sgd, sgdm, nesterov, shifted``.
      lr, momentum: one value (fixed) or a pair ``(lo, hi)`` (searched; lr on a log scale,
        momentum on ``log(1 − m)``; none for a method without a momentum). The method's
        hyperparameters in ``options`` (``rho``, ``lambda_dc``) likewise, on a log scale (``lo > 0``); left out, they take the sweep's default.
      delay: one constant delay or delay process.
      noise: one noise scale.
      batch_size: ``None``, or one batch size B (an integer >= 1): ``noise`` is then the
        single-example σ and every point runs with ``σ/√B`` (as :func:`nqm.sweep` with ``batch_size``);
        the result records ``batch_size`` and ``batch_noise``.
      seeds, seed: evaluate every point on seeds ``seed … seed + seeds − 1`` (exactly the cells of
        ``nqm.sweep(..., seed=s)``) and rank points by their median T.
      robust: the nudge δ in (0, 1): also search the smallest robust T (module docstring).
      tol: stop once ``patience`` rounds in a row improve no best T by this fraction.
      max_cells: the most cells (points × seeds) to evaluate, the coarse grid included.
      expected: evaluate the exact expected loss (:func:`nqm.expected.evaluate`; linear methods,
        constant or iid delay, one seed) instead of the Monte Carlo engine.
      problem: the quadratic (default :func:`nqm.zhang`, N = 10⁴).
      coarse: points per searched axis of the first grid (default 16, 8, 5 for 1, 2, 3 axes, else 4).
      width: free pattern-search tracks advanced each round, as many robust ones, and new edge
        lines started each round.
      patience: rounds in a row without an improvement of ``tol`` before stopping.
      checkpoint: a netCDF path where the search keeps every evaluated point after each round; if it
        exists, the search resumes from it (every setting the same, else one error line): the rounds
        it holds are replayed without evaluating them, so the answer is the uninterrupted one.
      restart: discard the checkpoint (once every argument is checked) and start over.
      objective: the T a point is ranked by: ``"first"``, the first passage (its steps), or
        ``"stay"``, the first step after which its loss stays below the target (``steps_stay``:
        :func:`nqm.settling.stay.stay_steps` for noiseless runs of the engine; with ``expected=True``,
        of the expected loss, with or without noise); a settled run that has none (its loss keeps
        coming back) counts as transient.
      reuse: a result of this same search run with fewer ``max_cells`` (every other setting the
        same, else one error line): its points are taken instead of evaluated again — the rounds
        are the same until its limit, so the answer is the one a fresh search gives
        (:func:`nqm.search.answered.answered_best` reruns a search that stopped at its cell limit
        this way).
      ema: iterate averaging's rate γ: one value (fixed) or a pair ``(lo, hi)`` (searched on
        ``log(1 − γ)``, as momentum), or ``None`` (no average): T read on ŵ, as :func:`nqm.sweep` reads it.
      schedule: one learning-rate schedule (:mod:`nqm.schedules`) for every point, or ``None``.
      **options: as :func:`nqm.sweep`: the method's hyperparameters and options and run settings
        (``target``, ``max_steps``, ``x64``, ``progress``, …); with ``expected=True``, ``bins``,
        ``dampening``, ``target``, ``max_steps``, ``diverge_factor``.

    Returns:
      an ``xarray.Dataset`` over ``(seed, point)``: every evaluated point (its values, the
      ``round_number`` it was evaluated in, whether it was only a ``nudge``), ``steps``, ``status``
      and ``loss`` per seed, its T ``median_steps`` and, where known, ``robust_steps``; the answer
      and the regime in attributes (``best_steps``, ``best_<param>``, ``robust_best_steps``,
      ``robust_<param>``, ``seeds_median/min/max``, ``cells``, ``rounds``, ``stopped``: ``tol``,
      ``max_cells`` or ``refined``; the method, ``box``, delay, noise, problem, target, budget, …;
      see :func:`answer`).

    Raises:
      NqmError: a box, value or option the search cannot run (checked for every value the search
        will evaluate, before any work), or a checkpoint of other settings, in one line.

    Examples:
      The fastest learning rate of SGDM at momentum 0.5 on a 10-dimensional problem:

      >>> import nqm
      >>> found = nqm.best("sgdm", lr=(0.01, 2.0), momentum=0.5, problem=nqm.zhang(10),
      ...                  max_steps=500, max_cells=40, progress=False)
      >>> int(found.attrs["best_steps"]), round(found.attrs["best_lr"], 2), found.attrs["stopped"]
      (6, 1.68, 'tol')
    """
    search = _Search.create(setup.Request(
        method, lr=lr, momentum=momentum, delay=delay, noise=noise, batch_size=batch_size, seeds=seeds, seed=seed,
        robust=robust, tol=tol, max_cells=max_cells, expected=expected, problem=problem, coarse=coarse, width=width,
        patience=patience, objective=objective, ema=ema, schedule=schedule,
        options={k: v for k, v in options.items() if v is not None}))  # an option given as None is not given
    checked(checkpoint, restart)
    known = search.reused(reuse)
    with contextlib.ExitStack() as stack:
        if checkpoint is not None:
            stack.enter_context(lock(checkpoint))  # one search per checkpoint (and CLI output)
            if restart:
                discard_checkpoint(checkpoint)
        return search.run(checkpoint, known)


@dataclasses.dataclass(frozen=True)
class _Search:
    method: str
    settings: setup.Settings
    box: setup.Box
    evaluate: Callable  # values (P, len(names)) -> (steps, status, loss), each (seeds, P)
    attrs: dict  # the regime: what the result and its checkpoint say was searched, and how

    @classmethod
    def create(cls, request: setup.Request) -> _Search:
        """Check every argument (one-line errors, before any work) and set the evaluator up
        (:mod:`nqm.search.setup`)."""
        method, options = request.method, request.options
        asked = setup.settings(request)
        request = dataclasses.replace(request, problem=jobs.checked_problem(request.problem),
                                      momentum=jobs.momentum_of(method, request.momentum))
        dtype = "float64" if request.expected or options.get("x64") is True else "float32"
        batch = setup.batch_of(request.batch_size, asked.noise, dtype)
        how = setup.evaluator(dataclasses.replace(request, schedule=schedules.one(request.schedule)), asked, batch)
        grid = setup.box(method, how.given, asked.delta, how.dtype, request.coarse, request.max_cells,
                         asked.seeds.size)
        attrs = setup.regime(method, request.problem, asked, grid, how, batch)
        return cls(method, asked, grid, functools.partial(_points, how.evaluate, grid.names), attrs)

    def run(self, checkpoint=None, known: dict | None = None) -> xr.Dataset:
        refine = Refinement.start(self.settings, self.box)
        kept = {**(known or {}), **self._kept(checkpoint)}
        bar = progress_bar(self.settings.progress, desc=f"best {self.method}", unit="cell")  # over the evaluated cells
        with bar:
            while refine.asked:
                refine = refine.stored(*self._evaluated(refine.asked, kept))
                if checkpoint is not None:
                    try:
                        save(self._dataset(refine), checkpoint)
                    except NqmError:  # keep searching: the points are in memory, the final save says what failed
                        pass
                refine = refine.next_round()
                bar.update(len(refine.book.rows) * self.settings.seeds.size - bar.n)
                bar.set_postfix_str(refine.describe(), refresh=False)
        return self._dataset(refine)

    def _kept(self, checkpoint) -> dict:
        """``{point: (steps, status, loss) per seed}`` of every point the checkpoint holds (none without one)."""
        saved = None if checkpoint is None else resume_search(self.attrs, checkpoint)
        return {} if saved is None else self._values(saved)

    def reused(self, result) -> dict:
        """The points of ``result`` — this search's own result with fewer cells — as :meth:`_kept`
        gives them (none for ``None``); its refinement runs the same rounds, so a rerun with more
        cells evaluates only what lies past the first one's limit. Anything else is refused."""
        if result is None:
            return {}
        mine = {k: v for k, v in self.attrs.items() if k != "max_cells"}
        different = results.difference(xr.Dataset(attrs={k: result.attrs.get(k) for k in mine}),
                                       xr.Dataset(attrs=mine))
        if different or "point" not in result.dims:
            raise NqmError(f"reuse= takes a result of the same search (only max_cells may differ): {different}")
        return self._values(result)

    def _values(self, saved: xr.Dataset) -> dict:
        """``{point: (steps, status, loss) per seed}`` of a search's result."""
        saved = saved.transpose("seed", "point")
        rows = zip(*(saved[n].values.tolist() for n in self.box.names))
        return {tuple(x): tuple(saved[v].values[:, j] for v in ("steps", "status", "loss")) for j, x in enumerate(rows)}

    def _evaluated(self, points, kept) -> tuple:
        """``(steps, status, loss)`` of a round's points, each (seeds, points): the checkpoint's where it
        holds them (a point's values do not depend on the others of its round), the others evaluated
        in one call."""
        new = [x for x in points if x not in kept]
        fresh = self.evaluate(np.array(new, np.float64)) if new else None
        column = {x: j for j, x in enumerate(new)}
        return tuple(np.stack([kept[x][i] if x in kept else fresh[i][:, column[x]] for x in points], 1)
                     for i in range(3))

    def _dataset(self, refine) -> xr.Dataset:
        store = refine.book
        names, delta = self.box.names, self.settings.delta
        values = np.array(store.rows, np.float64).reshape(-1, len(names))
        coords = {"seed": self.settings.seeds, **{n: ("point", values[:, i]) for i, n in enumerate(names)},
                  "round_number": ("point", np.array(store.round, np.int32)),
                  "nudge": ("point", np.array(store.nudge, np.int8))}
        data = {
            **results.outcomes(("seed", "point"), np.stack(store.steps, 1).astype(np.int32),
                               np.stack(store.status, 1).astype(np.int8), np.stack(store.loss, 1),
                               meaning(bool(self.attrs["first_passage"]), skipped=True)),
            "median_steps": ("point", np.array(store.t),
                             {"long_name": "T: the median over seeds of the steps to target "
                                           "(inf: a seed did not settle)"}),
        }
        if delta is not None:
            data["robust_steps"] = ("point", np.array([np.nan if (r := refine.robust_t(x)) is None else r
                                                       for x in store.rows]),
                                    {"long_name": f"robust T: the largest T over the ±{delta:g} neighbourhood "
                                                  "(nan: not all of it evaluated)"})
        attrs = {**self.attrs, **refine.answer(), "cells": store.cells, "rounds": refine.rounds,
                 "stopped": refine.stopped}
        return xr.Dataset(data, coords=coords, attrs=attrs)


def _points(evaluate, names, points):
    return evaluate(points, names)
