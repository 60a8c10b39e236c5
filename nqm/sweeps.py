"""Grids of hyperparameters → the engine → a labelled ``xarray.Dataset``; save, load and resume.

A sweep is the Cartesian product of ``lr × momentum × delay × noise × [method hyperparameters] ×
seed``, the method's own hyperparameters being the fields of its ``hyper`` type beyond lr and
momentum (AB's ``rho``, DC-ASGD's ``lambda_dc``, …). Each value is a dimension coordinate of the
result (present even with a single value). ``delay`` holds integers for constant delays, or the
spec strings of :mod:`nqm.delays` processes (with their long-run ``mean_delay``) when any is random.
Data variables are ``steps`` (T, or where the run stopped), ``status`` (1 reached the target,
0 budget exhausted, −1 diverged) and ``loss`` (the loss at ``steps``). Attributes record every
setting needed to reproduce it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import os
import signal
import threading
import time
from typing import NamedTuple

import jax
import numpy as np
import xarray as xr

import nqm
from nqm import delays, engine
from nqm.errors import NqmError
from nqm.io import atomic_write, check_writable, load, lock, save  # noqa: F401  (part of this API)
from nqm.validate import coordinates as _coordinates, grid_size, run_config as _run_config
from nqm.status import MEANING as STATUS_MEANING, t_star  # noqa: F401  (t_star is part of this API)
from nqm.optimizers import make, methods
from nqm.optimizers.base import hyperparameters, options as method_options
from nqm.problem import Problem, zhang

DIMS = ("delay", "noise", "rho", "seed", "momentum", "lr")  # the order of dims (with AB's rho)
BASE_HYPER = ("lr", "momentum")
_NOT_RUN = engine.RUNNING  # status of cells a checkpoint has not finished yet
_RUN_OPTIONS = tuple(f.name for f in dataclasses.fields(engine.RunConfig))


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
      **options: the method's own hyperparameters as grids (e.g. ``rho`` for AB, default 0.5;
        see its ``hyper`` type), its options (the keyword parameters of its factory, e.g.
        ``dampening``, ``group``, ``micro_steps``), and run settings (fields of
        :class:`nqm.engine.RunConfig`: ``target``, ``max_steps``, ``independent_noise``, ``x64``,
        ``chunk_steps``, ``devices``, ``memory_budget``, ``progress``, …).

    Returns:
      an ``xarray.Dataset`` with dims ``delay, noise, [hyperparameters,] seed, momentum, lr``.
    """
    grids, opt_options, settings = _split(method, options)
    config = _run_config(settings)
    coords = _coordinates(lr=lr, momentum=momentum, noise=noise, seed=seed, **grids)
    coords["delay"], processes = _delay_coordinate(delay)
    grid_size(coords)
    problem = zhang() if problem is None else problem
    engine.check(problem, make(method, **opt_options))  # options, and how they fit the problem, before any work
    result = _empty(method, coords, problem, config, opt_options, processes)
    with contextlib.ExitStack() as stack:
        if checkpoint is not None:
            stack.enter_context(lock(checkpoint))  # one sweep per checkpoint (and CLI output)
            result = _resume(result, checkpoint)
        _run(method, result, coords, processes, problem, config, opt_options, checkpoint, checkpoint_every)
    return result


def _run(method, result, coords, processes, problem, config, opt_options, checkpoint, checkpoint_every):
    from tqdm import tqdm

    writer = _Checkpointer(result, checkpoint, checkpoint_every)
    dims = list(result.steps.dims)
    todo = int((result.status.values == _NOT_RUN).sum())
    # One bar over every cell of the sweep (disable=None: none when stderr is not a terminal).
    bar = tqdm(total=todo, desc=method, unit="cell", dynamic_ncols=True, disable=None if config.progress else True)
    with bar, writer.interruptible():
        for (delay_value, process), seed_value in itertools.product(zip(coords["delay"], processes), coords["seed"]):
            _run_part(method, result, coords, dims, delay_value, process, seed_value, problem, config, opt_options,
                      writer, bar)
            writer.flush(force=False)
    writer.flush(force=True)


def _run_part(method, result, coords, dims, delay_value, process, seed_value, problem, config, opt_options, writer, bar):
    """Run the unfinished cells of one (delay, seed), continuing mid-cell from a checkpoint."""
    part = result.sel(delay=delay_value, seed=seed_value)
    cell_dims = [d for d in dims if d not in ("delay", "seed")]
    grid = part.status.transpose(*cell_dims)
    todo = np.flatnonzero(grid.values.reshape(-1) == _NOT_RUN)
    if todo.size == 0:
        return
    key = f"{delay_value}|{seed_value}"
    values = {d: v.reshape(-1)[todo] for d, v in zip(cell_dims, np.meshgrid(*(coords[d] for d in cell_dims), indexing="ij"))}
    optimizer = make(method, delay=process, **opt_options)
    hyper = {name: values[name] for name in optimizer.hyper._fields}

    def store(ids, outcome):
        index = np.unravel_index(todo[ids], grid.shape)
        writer.store(cell_dims, index, delay_value, seed_value, outcome)

    engine.simulate(
        problem, optimizer, hyper, values["noise"],
        delay=process, seed=int(seed_value), uids=_cell_uids(values), config=config,
        on_finished=store, between_chunks=functools.partial(writer.between_chunks, key, todo),
        resume=writer.resume_point(key, todo), description=f"D={delay_value} seed={seed_value}", bar=bar,
    )
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
    grids, opt_options, settings = _split(method, options)
    config = _run_config(settings)
    seeds = _coordinates(seed=seed)["seed"]
    given = dict(lr=lr, momentum=momentum, noise=noise, **grids)
    try:
        shaped = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in given.values()))
    except (TypeError, ValueError):
        raise NqmError("the points' lr, momentum, noise and hyperparameters must be numbers of one length "
                       f"(or single values): got lengths {[np.size(v) for v in given.values()]}") from None
    values = _coordinates(distinct=False, **{k: v.ravel() for k, v in zip(given, shaped)})
    grid_size({"point": values["lr"], "seed": seeds})
    problem = zhang() if problem is None else problem
    process = delays.process(delay)
    optimizer = make(method, delay=process, **opt_options)
    engine.check(problem, optimizer)
    hyper = {name: values[name] for name in optimizer.hyper._fields}
    uids = _cell_uids(values)
    outcomes = [engine.simulate(problem, optimizer, hyper, values["noise"], delay=process, seed=int(s), uids=uids,
                                config=config, description=f"{method} seed={s}") for s in seeds]
    data = {name: (("seed", "point"), np.stack([getattr(o, name) for o in outcomes])) for name in ("steps", "status", "loss")}
    coords = {"seed": seeds, **{k: ("point", v) for k, v in values.items()}}
    return xr.Dataset(data, coords=coords, attrs={"method": method, "delay": process.label})


class Cell(NamedTuple):
    """One validated cell: its hyperparameters (each ``(1,)``), optimizer options and noise identity."""

    hyper: dict
    options: dict
    uid: np.ndarray


def cell(method: str, *, lr, momentum, noise=0.0, seed=0, **options) -> Cell:
    """Check one cell's settings as :func:`sweep` does (same defaults, same noise identity)."""
    grids, opt_options, settings = _split(method, options)
    if settings:
        raise NqmError(f"option(s) {', '.join(sorted(settings))} do not apply to a single cell")
    coords = _coordinates(lr=lr, momentum=momentum, noise=noise, seed=seed, **grids)
    if any(v.size != 1 for v in coords.values()):
        raise NqmError("a trajectory is one cell: give one value each of lr, momentum, noise, seed, …")
    make(method, **opt_options)
    values = {k: v for k, v in coords.items() if k != "seed"}
    return Cell({k: values[k] for k in hyperparameters(method)._fields}, opt_options, _cell_uids(values))


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


def dims(ds: xr.Dataset) -> tuple[str, ...]:
    """The dimensions that index panels of a result: all but seed, momentum and lr."""
    return tuple(d for d in ds.steps.dims if d not in ("seed", "momentum", "lr"))


def _delay_coordinate(values) -> tuple[np.ndarray, list]:
    """The ``delay`` coordinate and its processes: integers when every delay is constant, else the
    processes' spec strings."""
    items = list(values) if isinstance(values, (list, tuple, np.ndarray)) else [values]
    if all(not isinstance(v, (str, delays.Iid, delays.Workers, delays.Constant)) for v in items):
        coord = _coordinates(delay=items)["delay"]
        return coord, [delays.constant(int(d)) for d in coord]
    if not items:
        raise NqmError("delay is empty: give at least one value")
    processes = [delays.process(v) for v in items]
    labels = np.array([p.label for p in processes])
    if np.unique(labels).size != labels.size:
        raise NqmError("delay has repeated processes: give each once")
    return labels, processes


def _cell_uids(values: dict) -> np.ndarray:
    """A cell's 64-bit identity (two uint32 words) from its hyperparameter values, not its position,
    for independent noise: two cells of a sweep collide with probability about n²/2⁶⁵."""
    names = ["lr", "momentum", "noise"] + sorted(n for n in values if n not in ("lr", "momentum", "noise"))
    rows = np.stack([np.asarray(values[n], np.float64) for n in names], axis=1)
    digests = b"".join(hashlib.blake2b(row.tobytes(), digest_size=8).digest() for row in rows)
    return np.frombuffer(digests, dtype="<u4").reshape(-1, 2).copy()


# --------------------------------------------------------------------------- result bookkeeping


def _empty(method, coords, problem, config, opt_options, processes) -> xr.Dataset:
    dims = ["delay", "noise", *hyper_dims(method), "seed", "momentum", "lr"]
    shape = tuple(coords[d].size for d in dims)
    optimizer = make(method, **opt_options)
    attrs = {
        "method": method,
        **{k: v for k, v in optimizer.config if k != "workers"},
        **problem.describe(),
        "target": config.target,
        "max_steps": config.max_steps,
        "diverge_factor": config.diverge_factor,
        "noise_mode": "independent per cell" if config.independent_noise else "common random numbers",
        "dtype": "float64" if config.x64 else "float32",
        "seed": ",".join(str(s) for s in coords["seed"]),
        "delay_processes": ", ".join(p.label for p in processes),
        "nqm_version": nqm.__version__,
        "jax_version": jax.__version__,
    }
    status = xr.Variable(dims, np.full(shape, _NOT_RUN, np.int8), {"meaning": STATUS_MEANING})
    return xr.Dataset(
        {
            "steps": xr.Variable(dims, np.zeros(shape, np.int32), {"long_name": "steps to target (T)"}),
            "status": status,
            "loss": xr.Variable(dims, np.full(shape, np.nan), {"long_name": "loss at the last step"}),
        },
        coords={**{d: coords[d] for d in dims}, "mean_delay": ("delay", [p.mean for p in processes])},
        attrs={k: _attr(v) for k, v in attrs.items()},
    )


def _attr(value):
    """netCDF attributes hold numbers and strings only."""
    if value is None:
        return "none"
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    return value


def _resume(result: xr.Dataset, path) -> xr.Dataset:
    if not os.path.exists(path):
        check_writable(path)
        return result
    try:
        saved = load(path)
    except NqmError as exc:
        raise NqmError(f"checkpoint {path} is damaged ({exc}); run again with --restart (or delete it) to start over") from None
    same = all(np.array_equal(saved[d].values, result[d].values) for d in result.dims if d in saved.dims)
    same &= set(saved.dims) == set(result.dims)
    changed = [k for k, v in result.attrs.items() if k not in ("nqm_version", "jax_version") and str(saved.attrs.get(k)) != str(v)]
    if not same or changed:
        what = "grid" if not same else "setting " + changed[0]
        raise NqmError(f"checkpoint {path} is from a different sweep ({what} differs); delete it or choose another path")
    return saved.transpose(*result.steps.dims)


class _Checkpointer:
    """Writes finished cells into the result, and the result to disk every so often, with the
    running cells' state (``<path>.cells.npz``) so that a resumed sweep continues mid-cell. On
    SIGINT/SIGTERM it saves at the next chunk boundary and stops (a second signal stops at once)."""

    def __init__(self, result: xr.Dataset, path, every: float):
        self.result, self.path, self.every = result, path, every
        # The first save comes a couple of seconds in, not only after `every`.
        self.last, self.dirty, self.stop = time.monotonic() - max(0.0, every - 2.0), False, False
        self.running = {} if path is None else _load_running(path)
        self.failed = None  # why the last checkpoint could not be written, if it could not

    @contextlib.contextmanager
    def interruptible(self):
        if self.path is None or threading.current_thread() is not threading.main_thread():
            yield
            return
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = [signal.getsignal(s) for s in signals]

        def request_stop(signum, frame):
            if self.stop:  # a second signal: stop now
                raise KeyboardInterrupt
            self.stop = True

        for s in signals:
            signal.signal(s, request_stop)
        try:
            yield
        finally:
            for s, handler in zip(signals, previous):
                signal.signal(s, handler)
        if self.stop:
            raise KeyboardInterrupt

    def resume_point(self, key, todo) -> engine.Snapshot | None:
        """The saved running cells of part ``key`` that are still to do, as positions in ``todo``."""
        if key not in self.running:
            return None
        t, where, leaves = self.running[key]
        keep = np.isin(where, todo)  # cells that finished after the snapshot are done already
        return engine.Snapshot(t, np.searchsorted(todo, where[keep]), [x[keep] for x in leaves])

    def between_chunks(self, key, todo, snapshot):
        if self.path is None or not (self.stop or time.monotonic() - self.last >= self.every):
            return
        snap = snapshot()
        self.running[key] = (snap.t, todo[snap.index], jax.tree.leaves(snap.cells))
        self.dirty = True
        self.flush(force=True)
        if self.stop:
            raise KeyboardInterrupt

    def done(self, key):
        self.running.pop(key, None)

    def store(self, cell_dims, index, delay, seed, outcome: engine.Outcome):
        full = {"delay": np.full(len(outcome.steps), list(self.result.delay.values).index(delay)),
                "seed": np.full(len(outcome.steps), list(self.result.seed.values).index(seed))}
        full.update(zip(cell_dims, index))
        where = tuple(full[d] for d in self.result.steps.dims)
        for name in ("steps", "status", "loss"):
            self.result[name].values[where] = getattr(outcome, name)
        self.dirty = True
        self.flush(force=False)

    def flush(self, force: bool):
        if self.path is None or not self.dirty:
            return
        if force or time.monotonic() - self.last >= self.every:
            try:
                save(self.result, self.path)
                _save_running(self.running, self.path)
                self.failed = None
            except NqmError as exc:  # keep computing: the cells are in memory, the caller saves them
                self.failed = str(exc)
            self.last, self.dirty = time.monotonic(), False


def _save_running(running: dict, path) -> None:
    """The running cells' state beside the checkpoint, written atomically (removed when none)."""
    target = os.fspath(path) + ".cells.npz"
    if not running:
        if os.path.exists(target):
            os.remove(target)
        return
    arrays = {"keys": np.array(list(running))}
    for i, (t, where, leaves) in enumerate(running.values()):
        arrays.update({f"{i}_t": np.asarray(t), f"{i}_where": where, **{f"{i}_{j}": x for j, x in enumerate(leaves)}})
    with atomic_write(target, "wb") as f:
        np.savez(f, **arrays)


def _load_running(path) -> dict:
    target = os.fspath(path) + ".cells.npz"
    if not (os.path.exists(target) and os.path.exists(path)):
        return {}
    try:
        with np.load(target) as f:
            running = {}
            for i, key in enumerate(f["keys"]):
                count = sum(1 for name in f.files if name.startswith(f"{i}_") and name[len(f"{i}_"):].isdigit())
                running[str(key)] = (int(f[f"{i}_t"]), f[f"{i}_where"], [f[f"{i}_{j}"] for j in range(count)])
            return running
    except Exception:  # a damaged file: numpy and zipfile raise many types
        raise NqmError(f"cannot read the checkpoint's running cells {target}; run again with --restart "
                       "(or delete it) to start those cells over") from None


def threshold_of(ds: xr.Dataset, method: str, delay) -> np.ndarray:
    """``x*(m)`` over the result's momenta for one delay (constant or iid; NaN for worker pools)."""
    from nqm import stability

    pmf = delays.pmf(delays.process(delay))
    if pmf is None:
        return np.full(ds.momentum.size, np.nan)
    return stability.threshold(method, momentum=ds.momentum.values, dampening=bool(ds.attrs.get("dampening", 0)), pmf=pmf)


def linear_stability_agreement(ds: xr.Dataset, band: float = 0.03) -> dict:
    """How often the simulation agrees with the linear stability threshold (DESIGN.md §3).

    For every cell with ``lr`` outside ``η*(D, m)·[1 − band, 1 + band]`` the linear theory
    predicts convergence (below) or divergence (above); a cell agrees when its status is not −1
    below, and −1 above. ``η* = x*/λ_max`` for the sweep's method (SGDM or shifted momentum;
    AB is compared with SGDM's threshold) and momentum convention; iid delays use their pmf
    (Giladi et al.'s mean dynamics), worker pools are not compared.

    Returns:
      ``{"fraction": agreeing / compared, "compared": …, "in_band": …, "stable": …, "unstable": …}``.
    """
    method = "shifted" if ds.attrs.get("method") == "shifted" else "sgdm"
    eta = np.stack([threshold_of(ds, method, d) for d in ds.delay.values])
    eta_star = xr.DataArray(eta / float(ds.attrs["lam_max"]), coords={"delay": ds.delay, "momentum": ds.momentum})
    ratio = ds.lr / eta_star
    stable, unstable = ratio < 1 - band, ratio > 1 + band
    diverged = ds.status == engine.DIVERGED
    agree = (stable & ~diverged) | (unstable & diverged)
    compared = int((stable | unstable).sum())
    return {
        "fraction": float(agree.sum()) / compared if compared else float("nan"),
        "compared": compared,
        "in_band": int(ds.status.size - compared),
        "stable": int(stable.broadcast_like(ds.status).sum()),
        "unstable": int(unstable.broadcast_like(ds.status).sum()),
    }
