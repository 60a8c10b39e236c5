"""A search's setup, checked before any work (:func:`nqm.best`): its settings, its box, its evaluator
and the regime its result records.

* :func:`settings` — the objective, seeds, nudge δ, tolerance, width, patience and noise;
* :func:`box` — each parameter fixed or searched (an :class:`Axis`), every value the search can
  reach held by the run's precision, and the coarse grid within the cell budget;
* :func:`evaluator` — the exact expected loss or the engine, as one function of a round's points;
* :func:`regime` — the attributes that say what was searched and how.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple

import jax
import numpy as np

import nqm.expected
from nqm import __version__, delays, engine, jobs, optimizers, sweeps
from nqm.optimizers.base import domains
from nqm.config import RunConfig, checked_config
from nqm.conventions import BATCH_NOISE, DECAYS, batch_noise, family
from nqm.search.refine import Axis
from nqm.errors import NqmError
from nqm.grids import batch_sizes
from nqm.results import attribute
from nqm.schedules import EMA
from nqm.settling import choose
from nqm.status import REACHED, SKIPPED, TRANSIENT
from nqm.validate import BOUNDS, MAX_CELLS, coordinates, count, flag, representable

COARSE = {1: 16, 2: 8, 3: 5}  # default coarse points per axis for k searched axes (else 4)
# power: precond's p, one value (the exact mode takes it fixed, not searched)
EXPECTED_OPTIONS = ("bins", "dampening", "target", "max_steps", "diverge_factor", "first_passage", "progress", "power")


@dataclasses.dataclass(frozen=True)
class Request:
    """What :func:`nqm.best` is asked: its arguments as given (``options``: the rest of them, those
    given as ``None`` left out), checked by :func:`settings`, :func:`box` and :func:`evaluator`."""

    method: str
    lr: float | tuple
    momentum: float | tuple | None
    delay: object  # one constant delay or delay process
    noise: float
    batch_size: int | None
    seeds: int
    seed: int
    robust: float | None
    tol: float
    max_cells: int
    expected: bool
    problem: object  # a quadratic, or None for the default
    coarse: int | None
    width: int
    patience: int
    objective: str
    ema: float | tuple | None
    schedule: object  # one schedule, or None
    options: dict


class Settings(NamedTuple):
    """What a search is asked beside its box: the T it ranks by, its seeds, nudge, stopping rule,
    the noise of its runs and whether it shows progress."""

    objective: str
    seeds: np.ndarray
    delta: float | None
    tol: float
    width: int
    patience: int
    noise: float
    progress: bool


class Box(NamedTuple):
    """Every parameter of the method by name (``names``): the fixed ones (``fixed``) and the
    searched ones (``axes``), and the coarse grid's points per axis (``coarse``) within ``max_cells``."""

    names: tuple
    fixed: dict
    axes: tuple
    coarse: int
    max_cells: int
    parsed: dict


class Evaluator(NamedTuple):
    """How the points are evaluated: ``evaluate(points, names)`` → ``(steps, status, loss)`` each
    ``(seeds, P)``, with the run settings it holds and what the regime records of it."""

    evaluate: Callable
    config: RunConfig
    given: dict  # lr, momentum and the method's hyperparameters, as given (values or pairs)
    dtype: str
    noise_mode: str
    delay: str
    method_config: list


def settings(request: Request) -> Settings:
    """The search's settings, each checked (one-line errors)."""
    objective, seed, robust, tol = request.objective, request.seed, request.robust, request.tol
    flag(request.expected, "expected")
    if objective not in ("first", "stay"):
        raise NqmError(f"objective must be 'first' (the first passage) or 'stay' (the step after which the loss "
                       f"stays below the target), got {objective!r}")
    seeds = count(request.seeds, "seeds", high=BOUNDS["seeds"])  # before the seeds are laid out, one array entry each
    if np.ndim(seed) != 0:
        raise NqmError("seed is the first seed, one integer: give seeds=K for seeds seed … seed+K-1")
    seed = int(coordinates(seed=seed)["seed"][0])
    if robust is not None and not (_real(robust) and 0 < robust < 1):
        raise NqmError(f"robust must be a nudge δ with 0 < δ < 1 (e.g. 0.05 for ±5 %), got {robust!r}")
    if not (_real(tol) and np.isfinite(tol) and tol > 0):
        raise NqmError(f"tol must be a relative improvement > 0 (e.g. 0.01), got {tol!r}")
    if np.ndim(request.noise) != 0:
        raise NqmError("noise takes one value in nqm.best (it is not searched); call it once per value")
    noise = float(coordinates(noise=request.noise)["noise"][0])
    if objective == "stay" and not request.expected and noise != 0:
        raise NqmError("objective='stay' is defined for noiseless runs of the engine (a single noisy run keeps "
                       "crossing the target of its stationary level) and for the exact mode: give noise=0, "
                       "expected=True, or objective='first'")
    return Settings(objective, coordinates(seed=np.arange(seed, seed + seeds))["seed"],
                    None if robust is None else float(robust), float(tol), count(request.width, "width"),
                    count(request.patience, "patience"), noise, bool(request.options.get("progress", True)))


def box(method: str, given: dict, delta: float | None, dtype: str, coarse, max_cells, seeds: int) -> Box:
    """Each parameter fixed or searched, every value the search can evaluate held by ``dtype``."""
    known = {**domains(method), "ema": EMA}
    parsed = {name: _parameter(name, v, known) for name, v in given.items()}
    axes = tuple(v for v in parsed.values() if isinstance(v, Axis))
    if not axes:
        raise NqmError("nothing to search: give at least one parameter as a pair (lo, hi), e.g. lr=(0.01, 2)")
    _held(parsed, delta, dtype)
    momentum = parsed["momentum"]
    family(method, [momentum.lo, momentum.hi] if isinstance(momentum, Axis) else momentum)  # sgd: momentum 0
    coarse = count(COARSE.get(len(axes), 4) if coarse is None else coarse, "coarse", low=2)
    max_cells = count(max_cells, "max_cells", high=MAX_CELLS)  # a search's work, bounded as a sweep's
    if coarse ** len(axes) * seeds > max_cells:
        raise NqmError(f"max_cells={max_cells} is too small for the coarse grid ({coarse}^{len(axes)} points x "
                       f"{seeds} seed(s) = {coarse ** len(axes) * seeds} cells); raise it or lower coarse")
    fixed = {n: v for n, v in parsed.items() if not isinstance(v, Axis)}
    return Box(tuple(parsed), fixed, axes, coarse, max_cells, parsed)


def evaluator(request: Request, settings: Settings, batch: dict) -> Evaluator:
    """The exact expected loss (``request.expected``) or the engine, evaluating a round's points
    (``request`` with its problem, momentum and schedule checked; its ``ema``: the averaging rate, a
    value or a box, or ``None``; its ``schedule``: one schedule, or ``None``)."""
    method, problem, ema, schedule = request.method, request.problem, request.ema, request.schedule
    run_noise = settings.noise if not batch else float(batch_noise(settings.noise, batch["batch_size"]))
    ranked = _ranking(settings.objective)
    averaging = {} if ema is None else {"ema": ema}
    if (ema is not None or schedule is not None) and settings.objective == "stay":
        raise NqmError("objective='stay' is not computed with an iterate average or a schedule: use objective='first'")
    if request.expected:
        return _exact(request, settings, run_noise, ranked, averaging)
    process = delays.process(request.delay)
    grids, opt_options, run_settings = jobs.split(method, request.options)
    config = checked_config(**run_settings)
    optimizer = optimizers.make(method, delay=process, problem=problem, **opt_options)
    engine.check(problem, optimizer)
    run, task = {**opt_options, **run_settings}, jobs.Job(method, opt_options, problem, config, schedule)
    test = choose(task, process)  # the job is checked and its settled test chosen once, for every round

    def evaluate(points, names):
        # A method without momentum (Adam) has momentum 0 fixed here and takes none in evaluate.
        hyper = {n: points[:, i] for i, n in enumerate(names) if n in optimizer.hyper._fields or n == "ema"}
        # Points known not to settle are not run (a linear method's exact test, or what it ends as).
        skip = test.cannot_settle({**hyper, "momentum": points[:, names.index("momentum")],
                                   "noise": np.full(len(points), run_noise)})
        steps = np.zeros((settings.seeds.size, len(points)), np.int64)
        status, loss = np.full(steps.shape, SKIPPED, np.int8), np.full(steps.shape, np.nan)
        ran = np.flatnonzero(~skip)
        if ran.size:
            given = {n: v[ran] for n, v in hyper.items()}
            layout = _layout(ran.size, run)
            this = task._replace(config=dataclasses.replace(config, **layout)) if layout else task
            values = sweeps.points(this, {k: given.get(k, v) for k, v in grids.items()}, lr=given["lr"],
                                   momentum=jobs.momentum_of(method, given.get("momentum")), noise=run_noise,
                                   ema=given.get("ema"))
            ds = sweeps.evaluate_job(this, process, test, values, settings.seeds, stay=settings.objective == "stay")
            (steps[:, ran], status[:, ran]), loss[:, ran] = ranked(ds), ds.loss.values
        return steps, status, loss

    return Evaluator(evaluate, config, {"lr": request.lr, "momentum": request.momentum, **grids, **averaging},
                     "float64" if config.x64 else "float32",
                     "independent per cell" if config.independent_noise else "common random numbers", process.label,
                     [(k, v) for k, v in optimizer.config if k != "workers"] + _scheduled(schedule, config.max_steps))


def batch_of(batch_size, noise: float, dtype: str) -> dict:
    """``{}``, or a batch size's attributes: the points then run with the batch's noise σ/√B."""
    if batch_size is None:
        return {}
    if np.ndim(batch_size) != 0:
        raise NqmError("batch_size takes one value in nqm.best (it is not searched); call it once per value")
    return {"batch_size": int(batch_sizes(batch_size, np.array([noise]), dtype)[0]), "batch_noise": BATCH_NOISE}


def regime(method: str, problem, settings: Settings, grid: Box, how: Evaluator, batch: dict) -> dict:
    """The attributes of a search's result that say what was searched and how."""
    config, seeds = how.config, settings.seeds
    return {"method": method, "delay": how.delay, "noise": settings.noise, **batch, **problem.describe(),
            "target": config.target, "max_steps": config.max_steps, "diverge_factor": config.diverge_factor,
            "first_passage": int(config.first_passage), "objective": settings.objective,
            "dtype": how.dtype, "noise_mode": how.noise_mode, "seeds": int(seeds.size), "seed": int(seeds[0]),
            "robust": "none" if settings.delta is None else settings.delta, "tol": settings.tol,
            "max_cells": grid.max_cells, "coarse": grid.coarse, "width": settings.width, "patience": settings.patience,
            "parameters": ",".join(grid.names), "searched": ",".join(a.name for a in grid.axes),
            "box": ", ".join(f"{n}={v.lo:g}:{v.hi:g}" if isinstance(v, Axis) else f"{n}={v:g}"
                             for n, v in grid.parsed.items()),
            **{k: attribute(v) for k, v in how.method_config}, "nqm_version": __version__}


def _scheduled(schedule, horizon: int) -> list:
    """A search's schedule among its regime's attributes (none without one; a custom one by its
    factors over the budget ``horizon``)."""
    return [] if schedule is None else [("schedule", schedule.identity(horizon))]


def _exact(request: Request, settings: Settings, run_noise: float, ranked, averaging: dict) -> Evaluator:
    """The exact expected loss as the evaluator (a linear method, one constant or iid delay, one seed)."""
    method, delay, options, schedule = request.method, request.delay, request.options, request.schedule
    if method not in nqm.expected.methods():
        raise NqmError(f"expected=True needs a linear method ({', '.join(nqm.expected.methods())}), not {method!r}; "
                       "drop expected=True to search it with the engine")
    if np.ndim(delay) != 0 or delays.pmf(delay) is None:
        raise NqmError(f"expected=True needs one constant or iid delay (one with a pmf), got {delay!r}; "
                       "drop expected=True to search under a worker pool")
    if settings.seeds.size != 1:
        raise NqmError("expected=True has no seeds (the expectation is exact): use seeds=1")
    unknown = sorted(set(options) - set(EXPECTED_OPTIONS))
    if unknown:
        raise NqmError(f"option(s) {', '.join(unknown)} do not apply with expected=True; "
                       f"it takes {', '.join(EXPECTED_OPTIONS)}")
    process = delays.process(delay)
    delay = int(process.delay) if isinstance(process, delays.Constant) else process.label
    run = {k: v for k, v in options.items() if k != "progress"}
    config = checked_config(**{k: v for k, v in run.items() if k in ("target", "max_steps", "diverge_factor",
                                                                     "first_passage")})
    if run.get("bins") is not None:
        count(run["bins"], "bins")

    def evaluate(points, names):
        ema = {"ema": points[:, names.index("ema")]} if "ema" in names else {}
        ds = nqm.expected.evaluate(method, lr=points[:, 0], momentum=points[:, 1], delay=delay, noise=run_noise,
                                   problem=request.problem, stay=settings.objective == "stay", schedule=schedule,
                                   **ema, **run)
        steps, status = ranked(ds)
        return steps[None], status[None], ds.loss.values[None]

    method_config = [("dampening", bool(run.get("dampening", False))), ("bins", run.get("bins"))] + \
        ([("power", run["power"])] if "power" in run else []) + _scheduled(schedule, config.max_steps)
    return Evaluator(evaluate, config, {"lr": request.lr, "momentum": request.momentum, **averaging}, "float64",
                     "exact expected loss", process.label, method_config)


def _ranking(objective: str) -> Callable:
    """``ranked(ds) -> (T, status)``: the T a point is ranked by, and its status."""
    def ranked(ds):
        if objective == "first":
            return ds.steps.values, ds.status.values
        stay = ds.steps_stay.values
        # a settled run with no step after which it stays (its loss keeps coming back) does not count
        status = np.where((ds.status.values == REACHED) & np.isnan(stay), TRANSIENT, ds.status.values)
        return np.where(np.isfinite(stay), stay, ds.steps.values).astype(np.int64), status.astype(np.int8)

    return ranked


def _held(parsed: dict, delta: float | None, dtype: str) -> None:
    """Refuse, before any work, a value the search would evaluate that the run's precision does not
    hold: a fixed value, a box's ends and, with a nudge δ, the ends' nudges (outside the box: the
    farthest any point's nudge reaches), and a δ so small that a nudge rounds to its point."""
    for name, given in parsed.items():
        below = 1.0 if name == "momentum" else None
        for end in (given.lo, given.hi) if isinstance(given, Axis) else (given,):
            representable(end, name, dtype, below=below)
            for nudge in given.nudged(end, delta) if isinstance(given, Axis) and delta is not None else ():
                _nudge_held(name, end, nudge, delta, dtype, below)


def _nudge_held(name: str, end: float, nudge: float, delta: float, dtype: str, below) -> None:
    hint = "" if dtype == "float64" else ", or run in float64 (x64=True, --x64)"
    try:
        representable(nudge, name, dtype, below=below)
    except NqmError:
        raise NqmError(f"the nudge by 1 ± δ (δ = {delta:g}) of the box end {name}={end!r} is {nudge!r}, which "
                       f"{dtype} (the run's precision) does not hold: narrow the box or take a smaller δ{hint}") from None
    if nudge != 0 and np.dtype(dtype).type(nudge) == np.dtype(dtype).type(end):  # 0: m = 0 nudged down
        raise NqmError(f"the nudge δ = {delta:g} is too small: {name}={end!r} nudged by 1 ± δ is {name}={end!r} "
                       f"again in {dtype} (the run's precision); take a larger δ (e.g. 0.05){hint}")


def _real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _parameter(name: str, given, known: dict):
    """One value (fixed) or an :class:`Axis` from a pair ``(lo, hi)``, in its domain (``known``:
    the method's hyperparameters' domains; a box may not touch an open end)."""
    if isinstance(given, (tuple, list, np.ndarray)) and np.ndim(given) == 1:
        if len(given) != 2:
            raise NqmError(f"{name}: give one value (fixed) or a pair (lo, hi) (searched), got {len(given)} values")
        lo, hi = (float(v) for v in coordinates(distinct=False, domains=known, **{name: given})[name])
        if not lo < hi:
            raise NqmError(f"the {name} box ({lo:g}, {hi:g}) is empty: give lo < hi")
        if name not in DECAYS and lo <= 0:
            raise NqmError(f"{name} is searched on a log scale: its box must lie above 0, got lo={lo:g}")
        return Axis(name, lo, hi)
    if np.ndim(given) != 0:
        raise NqmError(f"{name}: give one value (fixed) or a pair (lo, hi) (searched)")
    return float(coordinates(domains=known, **{name: given})[name][0])


def _layout(points: int, run: dict) -> dict:
    """Layout settings that keep a search to a few compiled shapes (results do not depend on them).
    On CPU the engine's block is fixed but a batch holds min(cells, 64): batches of 16 cells (whole
    blocks per device) give one shape for every round of 16 points or more. On accelerators the
    block holds a device's whole share: a power of two gives one shape per octave of round sizes."""
    if run.get("block_cells") or run.get("batch_cells"):
        return {}
    if jax.default_backend() == "cpu":
        return {"batch_cells": 16}
    devices = run.get("devices") or jax.device_count()
    return {"block_cells": 1 << (max(1, math.ceil(points / devices)) - 1).bit_length()}
