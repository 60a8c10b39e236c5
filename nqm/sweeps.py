"""Grids of hyperparameters → the engine → a labelled ``xarray.Dataset``.

A sweep is the Cartesian product of ``lr × momentum × delay × noise × [batch_size] × [method
hyperparameters] × [schedule] × [ema] × seed``, the method's own hyperparameters being the fields of its ``hyper`` type beyond lr and
momentum (AB's ``rho``, DC-ASGD's ``lambda_dc``, …). Each value is a dimension coordinate of the
result (present even with a single value; schema in :mod:`nqm.results`). ``delay`` holds integers
for constant delays, or the spec strings of :mod:`nqm.delays` processes (with their long-run
``mean_delay``) when any is random; an integer still selects its constant there
(``ds.sel(delay=4)``). Checkpoints and resume are in :mod:`nqm.checkpoint`.

Both check their settings once into a :class:`nqm.jobs.Job` (as every entry point does), and a
delay process, parsed once, travels from there to the engine's step.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os

import numpy as np
import xarray as xr

from nqm import delays, results, schedules
from nqm.progress import bar as progress_bar
from nqm.checkpoint import Checkpointer, checked, discard_checkpoint, resume
from nqm.errors import NqmError
from nqm.io import lock
from nqm.grids import batch_sizes, empty
from nqm.jobs import Job, job, momentum_of, per_batch
from nqm.optimizers.base import domains
from nqm.engine import Checkpoint, Outcome, Progress
from nqm.problem import Problem
from nqm.settling import choose
from nqm.status import SKIPPED, STAY, meaning
from nqm.validate import coordinates, flag, floats, grid_size, number


def sweep(
    method: str = "sgdm",
    *,
    lr,
    momentum=None,
    delay=0,
    noise=0.0,
    seed=0,
    batch_size=None,
    problem: Problem | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: float = 30.0,
    restart: bool = False,
    stay: bool = False,
    ema=None,
    schedule=None,
    **options,
) -> xr.Dataset:
    """Steps to the target loss for every cell of ``lr × momentum × delay × noise × … × seed``.

    Args:
      method: a name from :func:`nqm.optimizers.methods` (``"sgdm"``, ``"ab"``, ``"shifted"``, …).
      lr, momentum, noise, seed: a value or a list of values each; a method without a momentum
        (``adam``, ``lion``) takes none, and its result has the single momentum 0.
      delay: a value or a list: constant delays ``D`` and/or delay processes (spec strings such as
        ``"uniform:1:8"`` or ``"workers:16:slow=0.25:4"``, see :mod:`nqm.delays`).
      batch_size: ``None`` (no batch sizes: ``noise`` is each cell's σ), or batch sizes B (integers
        >= 1, a value or a list): a ``batch_size`` dimension after ``noise``, ``noise`` being then the
        single-example scale σ and a batch of B running with ``σ/√B`` — bit for bit the cell of
        ``noise=σ/√B`` without a batch size.
      problem: the quadratic (default :func:`nqm.zhang`, N = 10⁴).
      checkpoint: a netCDF path where finished cells are saved as the sweep goes; if it exists, the
        sweep resumes from it (same settings required) and computes only the missing cells.
      checkpoint_every: seconds between checkpoint writes.
      restart: discard the checkpoint (once every argument is checked) and start over.
      stay: also give ``steps_stay``, the first step after which the loss stays below the target
        (settled noiseless cells; NaN elsewhere: :func:`nqm.settling.stay.stay_steps`), once every cell has run.
      ema: iterate averaging's rates γ in [0, 1) (a value or a list: an ``ema`` dimension), or ``None``
        (no dimension, no average): each cell keeps ``ŵ_{t+1} = γ ŵ_t + (1 − γ) w_{t+1}`` (ŵ₀ = w₀), its
        target, T, status and loss read on ŵ, its divergence on w (γ = 0: the cell without averaging).
      schedule: learning-rate schedules (a spec — ``constant``, ``step:S:R``, ``warmup:S``,
        ``cosine:S`` — or a list of them: a ``schedule`` dimension; or one optax schedule with
        ``init_value`` 1), or ``None`` (:mod:`nqm.schedules`): step t runs with ``lr · f(t)``; a cell is
        judged settled in the schedule's final regime (docs/conventions.md).
      **options: the method's own hyperparameters as grids (e.g. ``rho`` for AB, default 0.5;
        see its ``hyper`` type), its options (the keyword parameters of its factory, e.g.
        ``dampening``, ``group``, ``micro_steps``), and run settings (fields of
        :class:`nqm.RunConfig`: ``target``, ``max_steps``, ``independent_noise``, ``x64``,
        ``chunk_steps``, ``devices``, ``memory_budget``, ``progress``, …).

    Returns:
      an ``xarray.Dataset`` with dims ``delay, noise, [batch_size,] [hyperparameters,] seed, momentum, lr``.

    Raises:
      NqmError: a value nqm cannot run (a negative or NaN learning rate, momentum ≥ 1, an unknown
        method, an empty grid, a checkpoint of other settings, …), in one line that says how to fix it,
        before any work; a checkpoint or saved result is left as it was.

    Examples:
      A 3 × 2 grid on a 10-dimensional problem: ``steps`` is T (where the run stopped when it did
      not reach the target), ``status`` 1 settled, −1 diverged.

      >>> import nqm
      >>> ds = nqm.sweep("sgdm", lr=[0.1, 0.5, 2.5], momentum=[0.0, 0.5], problem=nqm.zhang(10),
      ...                max_steps=500, progress=False)
      >>> ds.steps.dims
      ('delay', 'noise', 'seed', 'momentum', 'lr')
      >>> ds.steps.sel(delay=0, noise=0.0, seed=0).values.tolist()
      [[140, 28, 19], [69, 13, 7]]
      >>> ds.status.sel(delay=0, noise=0.0, seed=0).values.tolist()
      [[1, 1, -1], [1, 1, 1]]
    """
    task, grids = job(method, problem, options)
    stay = flag(stay, "stay")
    momentum = momentum_of(method, momentum)
    coords = coordinates(lr=lr, momentum=momentum, noise=noise, seed=seed, dtype=task.dtype, domains=domains(method),
                         **grids)
    if batch_size is not None:
        coords["batch_size"] = batch_sizes(batch_size, coords["noise"], task.dtype)
    coords["delay"], processes = delays.coordinate(delay)
    plans = _choices(coords, ema, schedule, task.dtype, stay)
    grid_size(coords)
    checked(checkpoint, restart)
    every = number(checkpoint_every, "checkpoint_every")
    if not (np.isfinite(every) and every >= 0):
        raise NqmError(f"checkpoint_every must be a number of seconds >= 0, got {checkpoint_every!r}")
    result = empty(task.method, task.options, task.problem, task.config, coords, processes,
                   None if schedule is None else plans)
    # The settled test, decided once per delay (and schedule): {schedule label or None: test} per delay.
    tests = [{None if plan is None else plan.label: choose(task._replace(schedule=plan), p) for plan in plans}
             for p in processes]
    result.attrs["settled_test"] = "; ".join(f"{p.label}{'' if label is None else f' {label}'}: {test.description}"
                                             for p, row in zip(processes, tests) for label, test in row.items())
    with contextlib.ExitStack() as stack:
        if checkpoint is not None:
            stack.enter_context(lock(checkpoint))  # one sweep per checkpoint (and CLI output)
            if restart:
                discard_checkpoint(checkpoint)
            result = resume(result, checkpoint)
        _run(task, result, coords, tests, Checkpointer(result, checkpoint, every))
    if stay:
        result["steps_stay"] = _stay(result, coords, tests)
    return result


def _choices(coords: dict, ema, schedule, dtype, stay: bool) -> list:
    """Add the ``schedule`` and ``ema`` dimensions to ``coords`` where given (checked) and return the
    schedules, one engine run each (``[None]``: no schedule dimension)."""
    plans = [None]
    if schedule is not None:
        coords["schedule"], plans = schedules.coordinate(schedule)
    if ema is not None:
        coords["ema"] = coordinates(ema=ema, dtype=dtype, domains={"ema": schedules.EMA})["ema"]
    if stay and (ema is not None or schedule is not None):
        raise NqmError("steps_stay is not computed with an iterate average or a schedule: leave stay out")
    return plans


def _stay(result, coords, tests) -> xr.DataArray:
    """``steps_stay`` of every cell of a finished sweep (:func:`nqm.settling.stay.stay_steps`), part by part."""
    out = xr.full_like(result.steps, np.nan, dtype=np.float64).assign_attrs(long_name=STAY)
    cell_dims, values = _cells(result, coords)
    values = per_batch(values)
    tests = [row[None] for row in tests]  # no schedule here: one test per delay
    for (delay_value, test), seed_value in itertools.product(zip(coords["delay"], tests), coords["seed"]):
        part = result.sel(delay=delay_value, seed=seed_value).transpose(*cell_dims)
        stays = test.stay_steps(values, seed_value, part.steps.values.reshape(-1), part.status.values.reshape(-1))
        out.loc[{"delay": delay_value, "seed": seed_value}] = xr.DataArray(
            stays.reshape(part.steps.shape), dims=cell_dims).transpose(*[d for d in out.dims if d in cell_dims])
    return out


def _run(task: Job, result, coords, tests, writer: Checkpointer):
    todo = int((result.status.values == results.NOT_RUN).sum())
    bar = progress_bar(task.config.progress, total=todo, desc=task.method, unit="cell")  # over every cell
    with bar, writer.interruptible():
        for (delay_value, test), seed_value in itertools.product(zip(coords["delay"], tests), coords["seed"]):
            _run_part(test, result, coords, delay_value, seed_value, writer, bar)
            writer.flush(force=False)
    writer.flush(force=True)


def _cells(result, coords) -> tuple[list, dict]:
    """The dimensions of a (delay, seed) part's cells, and every cell's values over them (flat, in
    the part's order)."""
    cell_dims = [d for d in result.steps.dims if d not in ("delay", "seed")]
    grids = np.meshgrid(*(coords[d] for d in cell_dims), indexing="ij")
    return cell_dims, {d: v.reshape(-1) for d, v in zip(cell_dims, grids)}


def _run_part(tests: dict, result, coords, delay_value, seed_value, writer: Checkpointer, bar):
    """Run the unfinished cells of one (delay, seed), one engine run per schedule (``tests``: its
    settled test by schedule label, or under ``None`` alone), continuing mid-cell from a checkpoint."""
    cell_dims, every = _cells(result, coords)
    grid = result.status.sel(delay=delay_value, seed=seed_value).transpose(*cell_dims)
    unfinished = np.flatnonzero(grid.values.reshape(-1) == results.NOT_RUN)
    for label, test in tests.items():
        todo = unfinished if label is None else unfinished[every["schedule"][unfinished] == label]
        key = f"{delay_value}|{seed_value}" if label is None else f"{delay_value}|{label}|{seed_value}"
        _run_schedule(test, grid, cell_dims, every, todo, key, delay_value, seed_value, writer, bar)


def _run_schedule(test, grid, cell_dims, every, todo, key, delay_value, seed_value, writer: Checkpointer, bar):
    """Run the cells ``todo`` (positions in the part's flat grid ``every``) of one (delay, schedule, seed)."""
    task, process = test.task, test.process
    if todo.size == 0:
        return
    # A batch runs as the cell of its noise σ/√B; the schedule is the run's (its job's), not a cell's value.
    values = per_batch({d: v[todo] for d, v in every.items() if d != "schedule"})
    if task.config.skip_decided:
        todo, values = _skip_decided(test, todo, values, grid.shape, cell_dims, delay_value, seed_value, writer, bar)
        if todo.size == 0:
            return
    rule = test.rule(values)
    limit = test.limit if rule.continues else None
    test.prepare(values)

    def store(ids, outcome):
        cells = {k: v[ids] for k, v in values.items()}
        probe = Progress(f"D={delay_value} seed={seed_value} floor probe", bar, count=False, limit=test.limit)
        outcome = outcome._replace(status=test.decide(cells, outcome, seed_value, functools.partial(
            writer.nested, f"{key}|probe", observers=(probe,))))
        writer.store(cell_dims, np.unravel_index(todo[ids], grid.shape), delay_value, seed_value, outcome)

    task.run(process, values, seed_value, [
        Checkpoint(store, functools.partial(writer.between_chunks, key, todo), writer.resume_point(key, todo)),
        Progress(f"D={delay_value} seed={seed_value}", bar, label=rule.label, limit=limit)], stop=rule)
    writer.done(key)


def _skip_decided(test, todo, values: dict, shape, cell_dims, delay_value, seed_value, writer: Checkpointer, bar):
    """Store the cells of ``todo`` known not to settle as :data:`~nqm.status.SKIPPED` (steps 0, loss
    NaN: nothing ran) and return the rest, with their values."""
    skip = test.cannot_settle(values)
    if skip.any():
        count = int(skip.sum())
        writer.store(cell_dims, np.unravel_index(todo[skip], shape), delay_value, seed_value,
                     Outcome(np.zeros(count, np.int32), np.full(count, SKIPPED, np.int8), np.full(count, np.nan)))
        bar.update(count)
    return todo[~skip], {k: v[~skip] for k, v in values.items()}


def evaluate(method: str = "sgdm", *, lr, momentum=None, delay=0, noise=0.0, seed=0, problem: Problem | None = None,
             stay: bool = False, ema=None, schedule=None, **options) -> xr.Dataset:
    """Steps to the target of a list of cells — points, not a grid — in one engine run per seed.

    Point ``i`` takes element ``i`` of ``lr``, ``momentum``, ``noise`` and of each method
    hyperparameter in ``options`` (arrays of one length; scalars are broadcast). Each point gives
    exactly what :func:`sweep` gives for the same values, delay and seed, whatever the other points
    (search rounds and threshold bisections rely on this).

    Args:
      method, problem, options: as :func:`sweep` (hyperparameters as arrays over points).
      lr, momentum, noise: per-point values (repeats allowed; no momentum for a method without one).
      delay: one constant delay or delay process.
      seed: one seed or a list (a ``seed`` dimension).
      stay: also give ``steps_stay``, the first step after which the loss stays below the target
        (settled noiseless points; NaN elsewhere: :func:`nqm.settling.stay.stay_steps`).
      ema: the points' iterate-averaging rates γ (per point, as ``lr``), or ``None``: as :func:`sweep`.
      schedule: one learning-rate schedule for every point (:mod:`nqm.schedules`), or ``None``.

    Returns:
      an ``xarray.Dataset`` with ``steps``, ``status`` and ``loss`` (and ``steps_stay``) over
      ``(seed, point)`` and the points' values as coordinates over ``point``.
    """
    stay = flag(stay, "stay")
    task, grids = job(method, problem, options)
    momentum = momentum_of(method, momentum)
    seeds = coordinates(seed=seed)["seed"]
    plan = schedules.one(schedule)
    if stay and (ema is not None or plan is not None):
        raise NqmError("steps_stay is not computed with an iterate average or a schedule: leave stay out")
    task = task._replace(schedule=plan)
    values = points(task, grids, lr=lr, momentum=momentum, noise=noise, ema=ema)
    grid_size({"point": values["lr"], "seed": seeds})
    process = delays.process(delay)
    return evaluate_job(task, process, choose(task, process), values, seeds, stay)  # the settled test, decided once


def points(task: Job, grids: dict, *, lr, momentum, noise, ema=None) -> dict:
    """The checked per-point values of :func:`evaluate`, broadcast to one length and in the run's precision.

    Args:
      task: the checked job (its method's domains and its precision).
      grids: the method's extra hyperparameters by name, per point or one value.
      lr, momentum, noise: per-point values or one value.
      ema: the points' averaging rates, or ``None``.

    Returns:
      ``{name: array}``, one value per point.

    Raises:
      NqmError: values that are not numbers of one length, or outside their domains.
    """
    given = dict(lr=lr, momentum=momentum, noise=noise, **grids, **({} if ema is None else {"ema": ema}))
    arrays = [floats(v, k) for k, v in given.items()]  # numbers: float64 would read "0.1" as 0.1
    try:
        shaped = np.broadcast_arrays(*arrays)
    except ValueError:
        raise NqmError("the points' lr, momentum, noise and hyperparameters must be numbers of one length "
                       f"(or single values): got lengths {[np.size(v) for v in given.values()]}") from None
    return coordinates(distinct=False, dtype=task.dtype, domains={**domains(task.method), "ema": schedules.EMA},
                       **{k: v.ravel() for k, v in zip(given, shaped)})


def evaluate_job(task: Job, process, test, values: dict, seeds, stay: bool = False) -> xr.Dataset:
    """:func:`evaluate` of checked points. A search builds its job and test once and evaluates each
    round's points here.

    Args:
      task: the checked job.
      process: the delay process.
      test: its settled test (:func:`nqm.settling.choose`).
      values: per-point arrays by name, as :func:`points` gives them.
      seeds: the checked seeds.
      stay: also give ``steps_stay``.

    Returns:
      As :func:`evaluate`.
    """
    rule = test.rule(values)
    test.prepare(values)
    outcomes = [task.run(process, values, s, [Progress(f"{task.method} seed={s}", enabled=task.config.progress,
                                                        label=rule.label)], stop=rule) for s in seeds]
    outcomes = [o._replace(status=test.decide(values, o, s)) for s, o in zip(seeds, outcomes)]
    data = results.outcomes(("seed", "point"), *(np.stack([getattr(o, name) for o in outcomes])
                                                  for name in ("steps", "status", "loss")),
                            meaning(task.config.first_passage))
    coords = {"seed": seeds, **{k: ("point", v) for k, v in values.items()}}
    plan = task.schedule
    result = xr.Dataset(data, coords=coords, attrs={"method": task.method, "delay": process.label,
                                                   "settled_test": test.description,
                                                   **({} if plan is None else {"schedule": plan.label})})
    if stay:
        result["steps_stay"] = (("seed", "point"), np.stack([test.stay_steps(values, s, o.steps, o.status)
                                                             for s, o in zip(seeds, outcomes)]), {"long_name": STAY})
    return result
