"""The smallest T over a box of hyperparameters, by successive refinement (``nqm.best``).

A parameter given one value is fixed; given a pair ``(lo, hi)`` (a tuple or list of two numbers)
it is searched over that closed interval: ``lr`` and the method's own hyperparameters (AB's ρ,
DC-ASGD's λ_dc) on a log scale, ``momentum`` on ``log(1 − m)``. Each searched axis is mapped onto
``[0, 1]`` and the box onto an integer lattice: ``coarse`` points per axis, each gap halvable
``nqm.search.refine.LEVELS`` times. Every search point is a lattice point, so its values are exact and
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
import math
from typing import NamedTuple

import numpy as np
import xarray as xr

import nqm.expected
from nqm import delays, engine, jobs, optimizers, sweeps
from nqm.checkpoint import checked, discard_checkpoint, resume_search
from nqm.config import checked_config
from nqm.conventions import BATCH_NOISE, DECAYS, batch_noise, family
from nqm.errors import NqmError
from nqm.io import lock, save
from nqm.results import attribute
from nqm.search.refine import Refinement
from nqm.settling import cannot_settle
from nqm.status import REACHED, SKIPPED, SKIPPED_MEANING, TRANSIENT, meaning
from nqm.validate import coordinates, count, representable

COARSE = {1: 16, 2: 8, 3: 5}  # default coarse points per axis for k searched axes (else 4)
# power: precond's p, one value (the exact mode takes it fixed, not searched)
_EXPECTED_OPTIONS = ("bins", "dampening", "target", "max_steps", "diverge_factor", "first_passage", "progress", "power")



class Axis(NamedTuple):
    """A searched parameter and its box ``[lo, hi]`` (log scale; ``log(1 − x)`` for a decay rate such
    as momentum)."""

    name: str
    lo: float
    hi: float

    def at(self, q: int, size: int) -> float:
        """The value at lattice coordinate ``q`` of ``0 … size`` (the box's ends exactly)."""
        if q in (0, size):
            return self.lo if q == 0 else self.hi
        z = q / size
        if self.name in DECAYS:
            return 1.0 - math.exp(math.log1p(-self.lo) * (1 - z) + math.log1p(-self.hi) * z)
        return math.exp(math.log(self.lo) * (1 - z) + math.log(self.hi) * z)

    def nudged(self, value: float, delta: float) -> tuple[float, float]:
        """The two nudges of ``value``: ``v(1 ± δ)``, or ``1 − (1 − x)(1 ± δ)`` ≥ 0 for a decay rate."""
        if self.name in DECAYS:
            return tuple(max(0.0, 1.0 - (1.0 - value) * (1.0 + s * delta)) for s in (-1, 1))
        return tuple(value * (1.0 + s * delta) for s in (-1, 1))


def best(method: str = "sgdm", *, lr, momentum=None, delay=0, noise=0.0, batch_size=None, seeds: int = 1, seed: int = 0,
         robust: float | None = None, tol: float = 0.01, max_cells: int = 2000, expected: bool = False,
         problem=None, coarse: int | None = None, width: int = 1, patience: int = 3, checkpoint=None,
         restart: bool = False, objective: str = "first", **options) -> xr.Dataset:
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
        :func:`nqm.settling.stay_steps` for noiseless runs of the engine; with ``expected=True``,
        of the expected loss, with or without noise); a settled run that has none (its loss keeps
        coming back) counts as transient.
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
    search = _Search.create(method, lr, momentum, delay, noise, seeds, seed, robust, tol, max_cells, expected,
                            problem, coarse, width, patience, options, objective, batch_size)
    checked(checkpoint, restart)
    with contextlib.ExitStack() as stack:
        if checkpoint is not None:
            stack.enter_context(lock(checkpoint))  # one search per checkpoint (and CLI output)
            if restart:
                discard_checkpoint(checkpoint)
        return search.run(checkpoint)


@dataclasses.dataclass
class _Search:
    method: str
    names: tuple  # every parameter of the method: lr, momentum, its hyperparameters
    fixed: dict  # name -> value of the fixed ones
    axes: tuple  # the searched ones (Axis)
    seeds: np.ndarray
    delta: float | None
    tol: float
    max_cells: int
    coarse: int
    width: int
    patience: int
    evaluate: object  # values (P, len(names)) -> (steps, status, loss), each (seeds, P)
    attrs: dict
    progress: bool

    @classmethod
    def create(cls, method, lr, momentum, delay, noise, seeds, seed, robust, tol, max_cells, expected, problem,
               coarse, width, patience, options, objective="first", batch_size=None):
        """Check every argument (one-line errors, before any work) and set the evaluator up."""
        if objective not in ("first", "stay"):
            raise NqmError(f"objective must be 'first' (the first passage) or 'stay' (the step after which the loss "
                           f"stays below the target), got {objective!r}")
        seeds = count(seeds, "seeds")
        if np.ndim(seed) != 0:
            raise NqmError("seed is the first seed, one integer: give seeds=K for seeds seed … seed+K-1")
        seed = int(coordinates(seed=seed)["seed"][0])
        if robust is not None and not (_real(robust) and 0 < robust < 1):
            raise NqmError(f"robust must be a nudge δ with 0 < δ < 1 (e.g. 0.05 for ±5 %), got {robust!r}")
        if not (_real(tol) and np.isfinite(tol) and tol > 0):
            raise NqmError(f"tol must be a relative improvement > 0 (e.g. 0.01), got {tol!r}")
        width, patience = count(width, "width"), count(patience, "patience")
        if np.ndim(noise) != 0:
            raise NqmError("noise takes one value in nqm.best (it is not searched); call it once per value")
        noise = float(coordinates(noise=noise)["noise"][0])
        problem = jobs.checked_problem(problem)
        momentum = jobs.momentum_of(method, momentum)
        settings = {k: v for k, v in options.items() if v is not None}
        progress = bool(settings.get("progress", True))
        if expected:
            if method not in nqm.expected.methods():
                raise NqmError(f"expected=True needs a linear method ({', '.join(nqm.expected.methods())}), not {method!r}; "
                               "drop expected=True to search it with the engine")
            if np.ndim(delay) != 0 or delays.pmf(delay) is None:
                raise NqmError(f"expected=True needs one constant or iid delay (one with a pmf), got {delay!r}; "
                               "drop expected=True to search under a worker pool")
            if seeds != 1:
                raise NqmError("expected=True has no seeds (the expectation is exact): use seeds=1")
            unknown = sorted(set(settings) - set(_EXPECTED_OPTIONS))
            if unknown:
                raise NqmError(f"option(s) {', '.join(unknown)} do not apply with expected=True; "
                               f"it takes {', '.join(_EXPECTED_OPTIONS)}")
            process = delays.process(delay)
            delay = int(process.delay) if isinstance(process, delays.Constant) else process.label
            run = {k: v for k, v in settings.items() if k != "progress"}
            config = checked_config(**{k: v for k, v in run.items()
                                       if k in ("target", "max_steps", "diverge_factor", "first_passage")})
            if run.get("bins") is not None:
                count(run["bins"], "bins")
            given = {"lr": lr, "momentum": momentum}
            dtype, noise_mode, label = "float64", "exact expected loss", process.label
            method_config = [("dampening", bool(run.get("dampening", False))), ("bins", run.get("bins"))] + \
                ([("power", run["power"])] if "power" in run else [])
        else:
            process = delays.process(delay)
            grids, opt_options, run_settings = jobs.split(method, settings)
            config = checked_config(**run_settings)
            optimizer = optimizers.make(method, delay=process, problem=problem, **opt_options)
            engine.check(problem, optimizer)
            method_config = [(k, v) for k, v in optimizer.config if k != "workers"]
            run = {**opt_options, **run_settings}
            given = {"lr": lr, "momentum": momentum, **grids}
            dtype = "float64" if config.x64 else "float32"
            noise_mode = "independent per cell" if config.independent_noise else "common random numbers"
            label = process.label
        batch = {}  # a batch size: the points run with the batch's noise σ/√B
        if batch_size is not None:
            if np.ndim(batch_size) != 0:
                raise NqmError("batch_size takes one value in nqm.best (it is not searched); call it once per value")
            size = int(jobs.batch_sizes(batch_size, np.array([noise]), dtype)[0])
            batch = {"batch_size": size, "batch_noise": BATCH_NOISE}
        run_noise = noise if batch_size is None else float(batch_noise(noise, batch["batch_size"]))
        parsed = {name: _parameter(name, v) for name, v in given.items()}
        axes = tuple(v for v in parsed.values() if isinstance(v, Axis))
        if not axes:
            raise NqmError("nothing to search: give at least one parameter as a pair (lo, hi), e.g. lr=(0.01, 2)")
        _held(parsed, None if robust is None else float(robust), dtype)
        box = parsed["momentum"]
        family(method, [box.lo, box.hi] if isinstance(box, Axis) else box)  # sgd: momentum 0
        coarse = count(COARSE.get(len(axes), 4) if coarse is None else coarse, "coarse", low=2)
        max_cells = count(max_cells, "max_cells")
        if coarse ** len(axes) * seeds > max_cells:
            raise NqmError(f"max_cells={max_cells} is too small for the coarse grid ({coarse}^{len(axes)} points x "
                           f"{seeds} seed(s) = {coarse ** len(axes) * seeds} cells); raise it or lower coarse")
        seed_list = coordinates(seed=np.arange(seed, seed + seeds))["seed"]
        names = tuple(parsed)

        if objective == "stay" and not expected and noise != 0:
            raise NqmError("objective='stay' is defined for noiseless runs of the engine (a single noisy run keeps "
                           "crossing the target of its stationary level) and for the exact mode: give noise=0, "
                           "expected=True, or objective='first'")

        def ranked(ds):  # the T a point is ranked by, and its status
            if objective == "first":
                return ds.steps.values, ds.status.values
            stay = ds.steps_stay.values
            # a settled run with no step after which it stays (its loss keeps coming back) does not count
            status = np.where((ds.status.values == REACHED) & np.isnan(stay), TRANSIENT, ds.status.values)
            return np.where(np.isfinite(stay), stay, ds.steps.values).astype(np.int64), status.astype(np.int8)

        if expected:
            def evaluate(points):
                ds = nqm.expected.evaluate(method, lr=points[:, 0], momentum=points[:, 1], delay=delay, noise=run_noise,
                                           problem=problem, stay=objective == "stay", **run)
                steps, status = ranked(ds)
                return steps[None], status[None], ds.loss.values[None]
        else:
            task = jobs.Job(method, opt_options, problem, config)

            def evaluate(points):
                # A method without momentum (Adam) has momentum 0 fixed here and takes none in evaluate.
                hyper = {n: points[:, i] for i, n in enumerate(names) if n in optimizer.hyper._fields}
                # Points known not to settle are not run (a linear method's exact test, or what it ends as).
                skip = cannot_settle(task, process, {"lr": hyper["lr"], "momentum": points[:, names.index("momentum")],
                                                     "noise": np.full(len(points), run_noise)})
                steps = np.zeros((seed_list.size, len(points)), np.int64)
                status = np.full(steps.shape, SKIPPED, np.int8)
                loss = np.full(steps.shape, np.nan)
                run_points = np.flatnonzero(~skip)
                if run_points.size:
                    ds = sweeps.evaluate(method, delay=process, noise=run_noise, seed=seed_list, problem=problem,
                                         stay=objective == "stay", **{n: v[run_points] for n, v in hyper.items()},
                                         **run, **_layout(run_points.size, run))
                    (steps[:, run_points], status[:, run_points]), loss[:, run_points] = ranked(ds), ds.loss.values
                return steps, status, loss

        attrs = {"method": method, "delay": label, "noise": noise, **batch, **problem.describe(),
                 "target": config.target, "max_steps": config.max_steps, "diverge_factor": config.diverge_factor,
                 "first_passage": int(config.first_passage), "objective": objective,
                 "dtype": dtype, "noise_mode": noise_mode, "seeds": seeds, "seed": seed,
                 "robust": "none" if robust is None else float(robust), "tol": float(tol), "max_cells": max_cells,
                 "coarse": coarse, "width": width, "patience": patience, "parameters": ",".join(names),
                 "searched": ",".join(a.name for a in axes),
                 "box": ", ".join(f"{n}={v.lo:g}:{v.hi:g}" if isinstance(v, Axis) else f"{n}={v:g}"
                                  for n, v in parsed.items()),
                 **{k: attribute(v) for k, v in method_config},
                 "nqm_version": nqm.__version__}
        return cls(method, names, {n: v for n, v in parsed.items() if not isinstance(v, Axis)}, axes, seed_list,
                   None if robust is None else float(robust), float(tol), max_cells, coarse, width, patience,
                   evaluate, attrs, progress)

    def run(self, checkpoint=None) -> xr.Dataset:
        from tqdm import tqdm

        refine = Refinement(self)
        kept = self._kept(checkpoint)
        # One bar over the evaluated cells (disable=None: none when stderr is not a terminal).
        bar = tqdm(desc=f"best {self.method}", unit="cell", dynamic_ncols=True,
                   disable=None if self.progress else True)
        with bar:
            points, nudges = refine.coarse_grid(), None
            while points:
                steps, status, loss = self._evaluated(points, kept)
                refine.store(points, nudges, steps, status, loss)
                if checkpoint is not None:
                    try:
                        save(self._dataset(refine), checkpoint)
                    except NqmError:  # keep searching: the points are in memory, the final save says what failed
                        pass
                points, nudges = refine.next_round()
                bar.update(len(refine.book.rows) * self.seeds.size - bar.n)
                bar.set_postfix_str(refine.describe(), refresh=False)
        return self._dataset(refine)

    def _kept(self, checkpoint) -> dict:
        """``{point: (steps, status, loss) per seed}`` of every point the checkpoint holds (none without one)."""
        saved = None if checkpoint is None else resume_search(self.attrs, checkpoint)
        if saved is None:
            return {}
        saved = saved.transpose("seed", "point")
        rows = zip(*(saved[n].values.tolist() for n in self.names))
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
        values = np.array(store.rows, np.float64).reshape(-1, len(self.names))
        coords = {"seed": self.seeds, **{n: ("point", values[:, i]) for i, n in enumerate(self.names)},
                  "round_number": ("point", np.array(store.round, np.int32)),
                  "nudge": ("point", np.array(store.nudge, np.int8))}
        data = {
            "steps": (("seed", "point"), np.stack(store.steps, 1).astype(np.int32),
                      {"long_name": "steps to target (T)"}),
            "status": (("seed", "point"), np.stack(store.status, 1).astype(np.int8),
                       {"meaning": meaning(bool(self.attrs["first_passage"]))
                        + ("" if self.attrs["first_passage"] else ", " + SKIPPED_MEANING)}),
            "loss": (("seed", "point"), np.stack(store.loss, 1), {"long_name": "loss at the last step"}),
            "median_steps": ("point", np.array(store.t),
                             {"long_name": "T: the median over seeds of the steps to target "
                                           "(inf: a seed did not settle)"}),
        }
        if self.delta is not None:
            data["robust_steps"] = ("point", np.array([np.nan if (r := refine.robust_t(x)) is None else r
                                                       for x in store.rows]),
                                    {"long_name": f"robust T: the largest T over the ±{self.delta:g} neighbourhood "
                                                  "(nan: not all of it evaluated)"})
        attrs = {**self.attrs, **refine.answer(), "cells": store.cells, "rounds": refine.rounds,
                 "stopped": refine.stopped}
        return xr.Dataset(data, coords=coords, attrs=attrs)


def _held(parsed: dict, delta: float | None, dtype: str) -> None:
    """Refuse, before any work, a value the search would evaluate that the run's precision does not
    hold: a fixed value, a box's ends and, with a nudge δ, the ends' nudges (outside the box: the
    farthest any point's nudge reaches), and a δ so small that a nudge rounds to its point."""
    for name, given in parsed.items():
        below = 1.0 if name == "momentum" else None
        for end in (given.lo, given.hi) if isinstance(given, Axis) else (given,):
            representable(end, name, dtype, below=below)
            for nudge in given.nudged(end, delta) if isinstance(given, Axis) and delta is not None else ():
                hint = "" if dtype == "float64" else ", or run in float64 (x64=True, --x64)"
                try:
                    representable(nudge, name, dtype, below=below)
                except NqmError:
                    raise NqmError(f"the nudge by 1 ± δ (δ = {delta:g}) of the box end {name}={end!r} is {nudge!r}, "
                                   f"which {dtype} (the run's precision) does not hold: narrow the box or take a "
                                   f"smaller δ{hint}") from None
                if nudge != 0 and np.dtype(dtype).type(nudge) == np.dtype(dtype).type(end):  # 0: m = 0 nudged down
                    raise NqmError(f"the nudge δ = {delta:g} is too small: {name}={end!r} nudged by 1 ± δ is "
                                   f"{name}={end!r} again in {dtype} (the run's precision); take a larger δ "
                                   f"(e.g. 0.05){hint}")


def _real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _parameter(name: str, given):
    """One value (fixed) or an :class:`Axis` from a pair ``(lo, hi)``."""
    if isinstance(given, (tuple, list, np.ndarray)) and np.ndim(given) == 1:
        if len(given) != 2:
            raise NqmError(f"{name}: give one value (fixed) or a pair (lo, hi) (searched), got {len(given)} values")
        lo, hi = (float(v) for v in coordinates(distinct=False, **{name: given})[name])
        if not lo < hi:
            raise NqmError(f"the {name} box ({lo:g}, {hi:g}) is empty: give lo < hi")
        if name not in DECAYS and lo <= 0:
            raise NqmError(f"{name} is searched on a log scale: its box must lie above 0, got lo={lo:g}")
        return Axis(name, lo, hi)
    if np.ndim(given) != 0:
        raise NqmError(f"{name}: give one value (fixed) or a pair (lo, hi) (searched)")
    return float(coordinates(**{name: given})[name][0])


def _layout(points: int, run: dict) -> dict:
    """Layout settings that keep a search to a few compiled shapes (results do not depend on them).
    On CPU the engine's block is fixed but a batch holds min(cells, 64): batches of 16 cells (whole
    blocks per device) give one shape for every round of 16 points or more. On accelerators the
    block holds a device's whole share: a power of two gives one shape per octave of round sizes."""
    import jax

    if run.get("block_cells") or run.get("batch_cells"):
        return {}
    if jax.default_backend() == "cpu":
        return {"batch_cells": 16}
    devices = run.get("devices") or jax.device_count()
    return {"block_cells": 1 << (max(1, math.ceil(points / devices)) - 1).bit_length()}
