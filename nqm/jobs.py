"""What every entry point checks before any work, and the result it fills: a :class:`Job`.

A job is a method with its optimizer options, a problem and the run settings (:class:`RunConfig`),
checked once; :func:`job` makes one from an entry point's keyword arguments (:func:`split` tells the
method's hyperparameter grids, its options and the run settings apart), :func:`cell` from one cell's,
and :func:`Job.run` runs a job's cells on the engine (:mod:`nqm.grids` lays out the result they
fill). Sweeps, lists of points, traces, searches and simulated thresholds start here.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

from nqm import delays
from nqm.config import RUN_OPTIONS, RunConfig, checked_config
from nqm.conventions import ALIASES, batch_noise, family
from nqm.errors import NqmError
from nqm.grids import CHOICES, all_hyper_dims, hyper_dims
from nqm.optimizers import Optimizer, base, make, methods
from nqm.problem import Problem, zhang
from nqm.validate import coordinates, did_you_mean, representable


class Job(NamedTuple):
    """What a run needs besides its cells' values, checked once at the entry point: the method and
    its optimizer options, the problem and the run settings, and the learning-rate schedule of its
    cells (:mod:`nqm.schedules`; ``None``: none)."""

    method: str
    options: dict
    problem: Problem
    config: RunConfig
    schedule: object = None

    @property
    def dtype(self) -> str:
        """The run's float precision: values it cannot hold are refused, not silently changed."""
        return "float64" if self.config.x64 else "float32"

    def optimizer(self, process: delays.Process) -> Optimizer:
        return make(self.method, delay=process, problem=self.problem, **self.options)

    def run(self, process: delays.Process, values: dict, seed: int, observers=(), stop=None, start=None):
        """Run the cells ``values`` (per-cell arrays of lr, momentum, noise, the method's extra
        hyperparameters and maybe ``ema``, the averaging rate γ) under ``process`` with ``seed``, with
        ``observers`` and the stop rule ``stop`` (default: first passage), each from ``start`` (its
        initial weights; default w₀), with the job's schedule; returns the
        :class:`nqm.engine.Outcome`; see :func:`nqm.engine.simulate`."""
        from nqm import engine  # the JAX boundary: the exact mode lays out its results with a Job, never runs one

        stop = engine.FirstPassage() if stop is None else stop
        optimizer = self.optimizer(process)
        hyper = {name: values[name] for name in optimizer.hyper._fields}
        cells = engine.Cells(optimizer, hyper, values["noise"], process, int(seed), cell_uids(values), start,
                             values.get("ema"), self.schedule)
        return engine.simulate(self.problem, cells, self.config, observers, stop)


def job(method: str, problem: Problem | None, options: dict) -> tuple[Job, dict]:
    """Check ``method``, ``problem`` and ``options`` (hyperparameters, optimizer options and run
    settings, see :func:`sweep`) before any work; returns the job and the method's extra
    hyperparameter values (with their defaults).

    Args:
      method: the optimizer's registered name.
      problem: the problem, or ``None`` for :func:`nqm.zhang`.
      options: the entry point's other keyword arguments, by name (``None`` values are left out).

    Returns:
      ``(job, grids)``: the :class:`Job`, and the extra hyperparameters' values by name.

    Raises:
      NqmError: any of them invalid or misplaced.
    """
    if not isinstance(method, str):
        raise NqmError(f"method must be a name such as 'sgdm' (see nqm.optimizers.methods()), got {method!r}")
    grids, opt_options, settings = split(method, options)
    config = checked_config(**settings)
    representable(config.target, "target", "float64" if config.x64 else "float32")
    problem = checked_problem(problem)
    _held_spectrum(problem, "float64" if config.x64 else "float32")
    from nqm import engine  # the JAX boundary: an abstract trace of one step

    engine.check(problem, make(method, problem=problem, **opt_options))  # options, and how they fit the problem
    return Job(method, opt_options, problem, config), grids


def _held_spectrum(problem: Problem, dtype: str) -> None:
    """Refuse eigenvalues the run's precision holds only as subnormals or 0 (what a method that
    divides by them, precond's H^(-p), would turn into ∞ or NaN), with the precision that holds them."""
    tiny = np.finfo(dtype).tiny
    low = float(np.min(problem.eigenvalues))
    if 0 < low < tiny:
        hint = "" if dtype == "float64" else ", or run in float64 (x64=True, --x64)"
        raise NqmError(f"eigenvalue {low:g} is below the smallest normal {dtype} ({tiny:.3g}), which the run cannot "
                       f"hold: give eigenvalues above it{hint}")


def checked_problem(problem: Problem | None) -> Problem:
    """``problem``, or :func:`nqm.zhang` (N = 10⁴) when it is ``None``; anything else is refused.

    Args:
      problem: a :class:`Problem` or ``None``.

    Returns:
      The problem.

    Raises:
      NqmError: anything else.
    """
    problem = zhang() if problem is None else problem
    if not isinstance(problem, Problem):
        raise NqmError(f"problem must be an nqm Problem (nqm.zhang(N), nqm.loguniform(...), nqm.explicit([...])), "
                       f"got {problem!r}")
    return problem


def cell(method: str, *, lr, momentum=None, noise=0.0, seed=0, problem: Problem | None = None, x64: bool = False,
         **options) -> tuple[Job, dict]:
    """Check one cell's settings as :func:`sweep` does (same defaults, same noise identity; values
    checked in the precision ``x64`` says): returns its job and its values (each ``(1,)``: lr,
    momentum, noise, the extra hyperparameters).

    Args:
      method: the optimizer's registered name.
      lr, momentum, noise, seed: the cell's values, one each (no momentum for a method without one).
      problem: the problem, or ``None`` for :func:`nqm.zhang`.
      x64: check the values in float64 rather than float32.
      options: the method's extra hyperparameters and optimizer options (no run settings).

    Returns:
      ``(job, values)``.

    Raises:
      NqmError: a value is invalid, a run setting is given, or a grid has several values.
    """
    task, grids = job(method, problem, options)
    momentum = momentum_of(method, momentum)
    if any(k in RUN_OPTIONS for k in options):
        raise NqmError(f"option(s) {', '.join(sorted(k for k in options if k in RUN_OPTIONS))} do not apply to a "
                       "single cell")
    coords = coordinates(lr=lr, momentum=momentum, noise=noise, seed=seed, dtype="float64" if x64 else "float32",
                         domains=base.domains(method), **grids)
    if any(v.size != 1 for v in coords.values()):
        raise NqmError("a trajectory is one cell: give one value each of lr, momentum, noise, seed, …")
    return task, {k: v for k, v in coords.items() if k != "seed"}


def split(method: str, options: dict) -> tuple[dict, dict, dict]:
    """``options`` → (the method's extra hyperparameter grids with their defaults, its optimizer
    options, run settings); anything else is an error that says where it belongs.

    Args:
      method: the optimizer's registered name.
      options: the keyword arguments to sort (``None`` values are dropped).

    Returns:
      ``(grids, optimizer_options, run_settings)``, three dicts.

    Raises:
      NqmError: an option belongs to another method or to none.
    """
    extra = hyper_dims(method)
    given = {k: v for k, v in options.items() if v is not None}
    grids = {k: given.pop(k) for k in extra if k in given}
    _placed(method, given, extra)
    defaults = base.hyperparameters(method)._field_defaults
    settings = {k: v for k, v in given.items() if k in RUN_OPTIONS}
    opt_options = {k: v for k, v in given.items() if k not in RUN_OPTIONS}
    return {k: grids.get(k, defaults.get(k)) for k in extra}, opt_options, settings


def _placed(method: str, given: dict, extra: tuple) -> None:
    """Refuse (one line) an option of ``given`` that is another method's hyperparameter or option,
    or nobody's — naming the closest spelling the method takes ("did you mean")."""
    # A name may be one method's hyperparameter and another's option (adam's eps, ab's eps).
    misplaced = sorted(k for k in given if k in all_hyper_dims() and k not in base.options(method))
    if misplaced:
        raise NqmError(f"{misplaced[0]} is not a hyperparameter of method {method!r}; "
                       f"it has {', '.join(('lr', 'momentum') + extra)}")
    unknown = sorted(set(given) - set(base.options(method)) - set(RUN_OPTIONS))
    foreign = [k for k in unknown if any(k in base.options(m) for m in methods())]
    if foreign:
        owners = sorted(m for m in methods() if foreign[0] in base.options(m))
        raise NqmError(f"option(s) {', '.join(foreign)} do not apply to method {method!r} "
                       f"({foreign[0]} is an option of {', '.join(owners)})")
    if unknown:
        known = ("lr", "momentum", "noise", "delay", "seed", "problem", "batch_size", *extra,
                 *base.options(method), *RUN_OPTIONS)
        raise NqmError(f"unknown option(s) {', '.join(unknown)} for method {method!r}"
                       f"{did_you_mean(unknown[0], known)}; see help(nqm.sweep)")


def momentum_of(method: str, momentum):
    """The momentum an entry point runs ``method`` with: ``momentum`` as given for a method with a
    momentum axis (a field ``momentum`` of its hyperparameters, where it is required), the single
    value 0 for one without (Adam, Lion: the result's momentum axis is that one coordinate), which
    takes none.

    Args:
      method: the method's name (an alias or an unknown name is left to the other checks).
      momentum: the momentum given, or ``None``.

    Returns:
      ``momentum``, or 0.0 for a method without one.

    Raises:
      NqmError: a momentum given to a method that has none.
    """
    if method not in methods():
        return momentum
    if method in ALIASES:  # SGD: a momentum of 0 is its own, any other refused
        family(method, momentum)
        return 0.0
    if "momentum" in base.hyperparameters(method)._fields:
        if momentum is None:
            raise NqmError(f"method {method!r} needs a momentum: give one value or a list (--momentum)")
        return momentum
    if momentum is not None:
        raise NqmError(f"method {method!r} has no momentum: leave momentum (--momentum) out; its results have "
                       "the single momentum 0")
    return 0.0


def per_batch(values: dict) -> dict:
    """Per-cell values as the engine runs them: with a ``batch_size``, the noise becomes the
    batch's ``σ/√B`` (:func:`nqm.conventions.batch_noise`) and ``batch_size`` is dropped, so that a
    cell is the cell of that noise without a batch size — the same identity, noise and numbers.

    Args:
      values: per-cell arrays of lr, momentum, noise (σ, single-example), [batch_size,] and the
        extra hyperparameters.

    Returns:
      ``values`` itself without a ``batch_size``; else a new dict as above.
    """
    if "batch_size" not in values:
        return values
    out = {k: v for k, v in values.items() if k != "batch_size"}
    out["noise"] = batch_noise(values["noise"], values["batch_size"])
    return out


def cell_uids(values: dict) -> np.ndarray:
    """A cell's 64-bit identity (two uint32 words) from its hyperparameter values, not its position,
    for independent noise: two cells of a sweep collide with probability about n²/2⁶⁵. Its averaging
    rate and schedule are not part of it: they change how a run is read and stepped, not its noise,
    so a cell meets the same noise with and without them.

    Args:
      values: per-cell arrays (one value per cell) of lr, momentum, noise and the extra hyperparameters.

    Returns:
      A ``(cells, 2)`` uint32 array.
    """
    names = ["lr", "momentum", "noise"] + sorted(n for n in values if n not in ("lr", "momentum", "noise") + CHOICES)
    rows = np.stack([np.asarray(values[n], np.float64) for n in names], axis=1)
    digests = b"".join(hashlib.blake2b(row.tobytes(), digest_size=8).digest() for row in rows)
    return np.frombuffer(digests, dtype="<u4").reshape(-1, 2).copy()
