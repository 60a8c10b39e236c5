"""Grids of hyperparameters → the engine → a labelled ``xarray.Dataset``.

A sweep is the Cartesian product of ``lr × momentum × delay × noise × [method hyperparameters] ×
seed``, the method's own hyperparameters being the fields of its ``hyper`` type beyond lr and
momentum (AB's ``rho``, DC-ASGD's ``lambda_dc``, …). Each value is a dimension coordinate of the
result (present even with a single value; schema in :mod:`nqm.results`). ``delay`` holds integers
for constant delays, or the spec strings of :mod:`nqm.delays` processes (with their long-run
``mean_delay``) when any is random; an integer still selects its constant there
(``ds.sel(delay=4)``). Checkpoints and resume are in :mod:`nqm.checkpoint`.

Every entry point (:func:`sweep`, :func:`evaluate`, :func:`nqm.diagnostics.trajectory`, the search
and the simulated thresholds) checks its settings once into a :class:`Job`, and a delay process,
parsed once, travels from there to the engine's step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import os
from typing import NamedTuple

import jax
import numpy as np
import xarray as xr

import nqm
from nqm import delays, engine, results
from nqm.checkpoint import Checkpointer, discard_checkpoint, resume
from nqm.config import RunConfig, checked_config
from nqm.errors import NqmError
from nqm.io import load, lock, save  # noqa: F401  (part of this API)
from nqm.optimizers import Optimizer, make, methods
from nqm.optimizers.base import hyperparameters, options as method_options, title
from nqm.problem import Problem, zhang
from nqm.status import t_star  # noqa: F401  (part of this API)
from nqm.validate import coordinates as _coordinates, grid_size, number, representable

BASE_HYPER = ("lr", "momentum")
_RUN_OPTIONS = tuple(f.name for f in dataclasses.fields(RunConfig))


class Job(NamedTuple):
    """What a run needs besides its cells' values, checked once at the entry point: the method and
    its optimizer options, the problem and the run settings."""

    method: str
    options: dict
    problem: Problem
    config: RunConfig

    @property
    def dtype(self) -> str:
        """The run's float precision: values it cannot hold are refused, not silently changed."""
        return "float64" if self.config.x64 else "float32"

    def optimizer(self, process: delays.Process) -> Optimizer:
        return make(self.method, delay=process, **self.options)

    def run(self, process: delays.Process, values: dict, seed: int, **engine_options) -> engine.Outcome:
        """Run the cells ``values`` (per-cell arrays of lr, momentum, noise and the method's extra
        hyperparameters) under ``process`` with ``seed``; see :func:`nqm.engine.simulate`."""
        optimizer = self.optimizer(process)
        hyper = {name: values[name] for name in optimizer.hyper._fields}
        return engine.simulate(self.problem, optimizer, hyper, values["noise"], delay=process, seed=int(seed),
                               uids=cell_uids(values), config=self.config, **engine_options)


def job(method: str, problem: Problem | None, options: dict) -> tuple[Job, dict]:
    """Check ``method``, ``problem`` and ``options`` (hyperparameters, optimizer options and run
    settings, see :func:`sweep`) before any work; returns the job and the method's extra
    hyperparameter values (with their defaults)."""
    if not isinstance(method, str):
        raise NqmError(f"method must be a name such as 'sgdm' (see nqm.optimizers.methods()), got {method!r}")
    grids, opt_options, settings = _split(method, options)
    config = checked_config(**settings)
    representable(config.target, "target", "float64" if config.x64 else "float32")
    problem = zhang() if problem is None else problem
    if not isinstance(problem, Problem):
        raise NqmError(f"problem must be an nqm Problem (nqm.zhang(N), nqm.loguniform(...), nqm.explicit([...])), "
                       f"got {problem!r}")
    engine.check(problem, make(method, **opt_options))  # options, and how they fit the problem
    return Job(method, opt_options, problem, config), grids


def sweep(
    method: str = "sgdm",
    *,
    lr,
    momentum,
    delay=0,
    noise=0.0,
    seed=0,
    problem: Problem | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: float = 30.0,
    restart: bool = False,
    **options,
) -> xr.Dataset:
    """Steps to the target loss for every cell of ``lr × momentum × delay × noise × … × seed``.

    Args:
      method: a name from :func:`nqm.optimizers.methods` (``"sgdm"``, ``"ab"``, ``"shifted"``, …).
      lr, momentum, noise, seed: a value or a list of values each.
      delay: a value or a list: constant delays ``D`` and/or delay processes (spec strings such as
        ``"uniform:1:8"`` or ``"workers:16:slow=0.25:4"``, see :mod:`nqm.delays`).
      problem: the quadratic (default :func:`nqm.zhang`, N = 10⁴).
      checkpoint: a netCDF path where finished cells are saved as the sweep goes; if it exists, the
        sweep resumes from it (same settings required) and computes only the missing cells.
      checkpoint_every: seconds between checkpoint writes.
      restart: discard the checkpoint (once every argument is checked) and start over.
      **options: the method's own hyperparameters as grids (e.g. ``rho`` for AB, default 0.5;
        see its ``hyper`` type), its options (the keyword parameters of its factory, e.g.
        ``dampening``, ``group``, ``micro_steps``), and run settings (fields of
        :class:`nqm.RunConfig`: ``target``, ``max_steps``, ``independent_noise``, ``x64``,
        ``chunk_steps``, ``devices``, ``memory_budget``, ``progress``, …).

    Returns:
      an ``xarray.Dataset`` with dims ``delay, noise, [hyperparameters,] seed, momentum, lr``.
    """
    task, grids = job(method, problem, options)
    coords = _coordinates(lr=lr, momentum=momentum, noise=noise, seed=seed, dtype=task.dtype, **grids)
    coords["delay"], processes = delays.coordinate(delay)
    grid_size(coords)
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise NqmError(f"checkpoint must be a file path, got {checkpoint!r}")
    if checkpoint is not None and os.path.isdir(checkpoint):
        raise NqmError(f"checkpoint {os.fspath(checkpoint)} is a directory; give the path of a file (e.g. sweep.partial)")
    every = number(checkpoint_every, "checkpoint_every")
    if not (np.isfinite(every) and every >= 0):
        raise NqmError(f"checkpoint_every must be a number of seconds >= 0, got {checkpoint_every!r}")
    if not isinstance(restart, (bool, np.bool_)):
        raise NqmError(f"restart must be True or False, got {restart!r}")
    result = empty(task, coords, processes)
    with contextlib.ExitStack() as stack:
        if checkpoint is not None:
            stack.enter_context(lock(checkpoint))  # one sweep per checkpoint (and CLI output)
            if restart:
                discard_checkpoint(checkpoint)
            result = resume(result, checkpoint)
        _run(task, result, coords, processes, Checkpointer(result, checkpoint, every))
    return result


def _run(task: Job, result, coords, processes, writer: Checkpointer):
    from tqdm import tqdm

    todo = int((result.status.values == results.NOT_RUN).sum())
    # One bar over every cell of the sweep (disable=None: none when stderr is not a terminal).
    bar = tqdm(total=todo, desc=task.method, unit="cell", dynamic_ncols=True,
               disable=None if task.config.progress else True)
    with bar, writer.interruptible():
        for (delay_value, process), seed_value in itertools.product(zip(coords["delay"], processes), coords["seed"]):
            _run_part(task, result, coords, delay_value, process, seed_value, writer, bar)
            writer.flush(force=False)
    writer.flush(force=True)


def _run_part(task: Job, result, coords, delay_value, process, seed_value, writer: Checkpointer, bar):
    """Run the unfinished cells of one (delay, seed), continuing mid-cell from a checkpoint."""
    cell_dims = [d for d in result.steps.dims if d not in ("delay", "seed")]
    grid = result.status.sel(delay=delay_value, seed=seed_value).transpose(*cell_dims)
    todo = np.flatnonzero(grid.values.reshape(-1) == results.NOT_RUN)
    if todo.size == 0:
        return
    key = f"{delay_value}|{seed_value}"
    values = {d: v.reshape(-1)[todo] for d, v in zip(cell_dims, np.meshgrid(*(coords[d] for d in cell_dims), indexing="ij"))}

    def store(ids, outcome):
        writer.store(cell_dims, np.unravel_index(todo[ids], grid.shape), delay_value, seed_value, outcome)

    task.run(process, values, seed_value, on_finished=store,
             between_chunks=functools.partial(writer.between_chunks, key, todo),
             resume=writer.resume_point(key, todo), description=f"D={delay_value} seed={seed_value}", bar=bar)
    writer.done(key)


def evaluate(method: str = "sgdm", *, lr, momentum, delay=0, noise=0.0, seed=0, problem: Problem | None = None,
             **options) -> xr.Dataset:
    """Steps to the target of a list of cells — points, not a grid — in one engine run per seed.

    Point ``i`` takes element ``i`` of ``lr``, ``momentum``, ``noise`` and of each method
    hyperparameter in ``options`` (arrays of one length; scalars are broadcast). Each point gives
    exactly what :func:`sweep` gives for the same values, delay and seed, whatever the other points
    (search rounds and threshold bisections rely on this).

    Args:
      method, problem, options: as :func:`sweep` (hyperparameters as arrays over points).
      lr, momentum, noise: per-point values (repeats allowed).
      delay: one constant delay or delay process.
      seed: one seed or a list (a ``seed`` dimension).

    Returns:
      an ``xarray.Dataset`` with ``steps``, ``status`` and ``loss`` over ``(seed, point)`` and the
      points' values as coordinates over ``point``.
    """
    task, grids = job(method, problem, options)
    seeds = _coordinates(seed=seed)["seed"]
    given = dict(lr=lr, momentum=momentum, noise=noise, **grids)
    try:
        shaped = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in given.values()))
    except (TypeError, ValueError):
        raise NqmError("the points' lr, momentum, noise and hyperparameters must be numbers of one length "
                       f"(or single values): got lengths {[np.size(v) for v in given.values()]}") from None
    values = _coordinates(distinct=False, dtype=task.dtype, **{k: v.ravel() for k, v in zip(given, shaped)})
    grid_size({"point": values["lr"], "seed": seeds})
    process = delays.process(delay)
    outcomes = [task.run(process, values, s, description=f"{method} seed={s}") for s in seeds]
    data = {name: (("seed", "point"), np.stack([getattr(o, name) for o in outcomes])) for name in ("steps", "status", "loss")}
    coords = {"seed": seeds, **{k: ("point", v) for k, v in values.items()}}
    return xr.Dataset(data, coords=coords, attrs={"method": method, "delay": process.label})


def cell(method: str, *, lr, momentum, noise=0.0, seed=0, problem: Problem | None = None, x64: bool = False,
         **options) -> tuple[Job, dict]:
    """Check one cell's settings as :func:`sweep` does (same defaults, same noise identity; values
    checked in the precision ``x64`` says): returns its job and its values (each ``(1,)``: lr,
    momentum, noise, the extra hyperparameters)."""
    task, grids = job(method, problem, options)
    if any(k in _RUN_OPTIONS for k in options):
        raise NqmError(f"option(s) {', '.join(sorted(k for k in options if k in _RUN_OPTIONS))} do not apply to a "
                       "single cell")
    coords = _coordinates(lr=lr, momentum=momentum, noise=noise, seed=seed, dtype="float64" if x64 else "float32",
                          **grids)
    if any(v.size != 1 for v in coords.values()):
        raise NqmError("a trajectory is one cell: give one value each of lr, momentum, noise, seed, …")
    return task, {k: v for k, v in coords.items() if k != "seed"}


def _split(method: str, options: dict) -> tuple[dict, dict, dict]:
    """``options`` → (the method's extra hyperparameter grids with their defaults, its optimizer
    options, run settings); anything else is an error that says where it belongs."""
    extra = hyper_dims(method)
    given = {k: v for k, v in options.items() if v is not None}
    grids = {k: given.pop(k) for k in extra if k in given}
    misplaced = sorted(k for k in given if k in all_hyper_dims())
    if misplaced:
        raise NqmError(f"{misplaced[0]} is not a hyperparameter of method {method!r}; "
                       f"it has {', '.join(('lr', 'momentum') + extra)}")
    unknown = sorted(set(given) - set(method_options(method)) - set(_RUN_OPTIONS))
    foreign = [k for k in unknown if any(k in method_options(m) for m in methods())]
    if foreign:
        owners = sorted(m for m in methods() if foreign[0] in method_options(m))
        raise NqmError(f"option(s) {', '.join(foreign)} do not apply to method {method!r} "
                       f"({foreign[0]} is an option of {', '.join(owners)})")
    if unknown:
        raise NqmError(f"unknown option(s) {', '.join(unknown)} for method {method!r}; see help(nqm.sweep)")
    defaults = hyperparameters(method)._field_defaults
    settings = {k: v for k, v in given.items() if k in _RUN_OPTIONS}
    opt_options = {k: v for k, v in given.items() if k not in _RUN_OPTIONS}
    return {k: grids.get(k, defaults.get(k)) for k in extra}, opt_options, settings


def hyper_dims(method: str) -> tuple[str, ...]:
    """The method's swept hyperparameters beyond lr and momentum (e.g. ``("rho",)`` for AB)."""
    return tuple(f for f in hyperparameters(method)._fields if f not in BASE_HYPER)


def all_hyper_dims() -> tuple[str, ...]:
    """Every registered method's extra hyperparameters, each once, in registry order."""
    return tuple(dict.fromkeys(f for m in methods() for f in hyper_dims(m)))


def cell_uids(values: dict) -> np.ndarray:
    """A cell's 64-bit identity (two uint32 words) from its hyperparameter values, not its position,
    for independent noise: two cells of a sweep collide with probability about n²/2⁶⁵."""
    names = ["lr", "momentum", "noise"] + sorted(n for n in values if n not in ("lr", "momentum", "noise"))
    rows = np.stack([np.asarray(values[n], np.float64) for n in names], axis=1)
    digests = b"".join(hashlib.blake2b(row.tobytes(), digest_size=8).digest() for row in rows)
    return np.frombuffer(digests, dtype="<u4").reshape(-1, 2).copy()


def empty(task: Job, coords: dict, processes: list) -> xr.Dataset:
    """The result of ``task`` over ``coords`` with every cell still to run, its attributes recording
    every setting (:mod:`nqm.results`)."""
    config, optimizer = task.config, make(task.method, **task.options)
    attrs = {
        "method": task.method,
        "method_title": title(task.method),
        **{k: v for k, v in optimizer.config if k != "workers"},
        **task.problem.describe(),
        "target": config.target,
        "max_steps": config.max_steps,
        "diverge_factor": config.diverge_factor,
        "noise_mode": "independent per cell" if config.independent_noise else "common random numbers",
        "dtype": "float64" if config.x64 else "float32",
        "seed": ",".join(str(s) for s in coords["seed"]),
        "delay_processes": ", ".join(p.label for p in processes),
        # Each process to the last bit (a pmf's label rounds its weights): what a checkpoint compares.
        "delay_sha256": hashlib.sha256("\n".join(delays.identity(p) for p in processes).encode()).hexdigest(),
        "nqm_version": nqm.__version__,
        "jax_version": jax.__version__,
    }
    return results.empty(coords, hyper_dims(task.method), attrs, [p.mean for p in processes])
