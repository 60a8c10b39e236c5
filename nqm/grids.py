"""A grid's result before any cell has run: its dimensions — lr, momentum, the method's extra
hyperparameters (:func:`hyper_dims`), batch sizes (:func:`batch_sizes`), a schedule and an averaging
rate — and every setting that changes a cell, in its attributes (:func:`empty`, on
:func:`nqm.results.empty`'s schema). The sweeps and the exact mode lay out their results here: no
job and no engine is needed to say what a result will hold.
"""

from __future__ import annotations

import hashlib

import jax
import numpy as np
import xarray as xr

from nqm import __version__, delays, machine, results
from nqm.config import RunConfig
from nqm.conventions import BATCH_NOISE, batch_noise
from nqm.optimizers import base, make, methods
from nqm.problem import Problem
from nqm.validate import coordinates, representable

BASE_HYPER = ("lr", "momentum")
CHOICES = ("schedule", "ema")  # a result's dimensions for the schedule and the averaging rate, when given


def hyper_dims(method: str) -> tuple[str, ...]:
    """The method's swept hyperparameters beyond lr and momentum (e.g. ``("rho",)`` for AB).

    Args:
      method: the optimizer's registered name.

    Returns:
      The names, in the order of its hyperparameters.
    """
    return tuple(f for f in base.hyperparameters(method)._fields if f not in BASE_HYPER)


def all_hyper_dims() -> tuple[str, ...]:
    """Every registered method's extra hyperparameters, each once, in registry order."""
    return tuple(dict.fromkeys(f for m in methods() for f in hyper_dims(m)))


def batch_sizes(batch_size, noise: np.ndarray, dtype: str) -> np.ndarray:
    """The checked batch sizes of a grid: integers >= 1, each value once, and every batch's noise
    ``σ/√B`` (``noise`` the single-example scales σ) a number the run's precision holds.

    Args:
      batch_size: one batch size or a list.
      noise: the grid's single-example noise scales σ (checked already).
      dtype: the run's float precision.

    Returns:
      The batch sizes, an int64 array.

    Raises:
      NqmError: a batch size that is not an integer >= 1 (0, 2.5, NaN, a string, …), a repeated one,
        or a batch noise the precision does not hold.
    """
    sizes = coordinates(batch_size=batch_size)["batch_size"]
    for sigma in batch_noise(noise[:, None], sizes[None, :]).ravel():
        representable(sigma, "noise/sqrt(batch_size)", dtype)
    return sizes


def empty(method: str, options: dict, problem: Problem, config: RunConfig, coords: dict, processes: list,
          schedules: list | None = None) -> xr.Dataset:
    """The result of ``method`` with its optimizer ``options`` on ``problem`` under ``config`` over
    ``coords``, with every cell still to run, its attributes recording every setting
    (:mod:`nqm.results`).

    Args:
      method, options, problem, config: the checked method, its optimizer options, the problem and the
        run settings (:class:`nqm.jobs.Job`'s fields; the exact mode gives its own).
      coords: one 1-D array per dimension of the result (delay as :func:`nqm.delays.coordinate` gives
        it; a ``batch_size`` adds its dimension and the ``batch_noise`` attribute).
      processes: the delay processes, in the order of ``coords["delay"]``.
      schedules: the learning-rate schedules, in the order of ``coords["schedule"]`` (``None``: no
        schedule dimension; an ``ema`` coordinate adds the averaging rate's).

    Returns:
      The empty result (:func:`nqm.results.empty`).
    """
    optimizer = make(method, problem=problem, **options)
    attrs = {
        "method": method,
        "method_title": base.title(method),
        **{k: v for k, v in optimizer.config if k != "workers"},
        **problem.describe(),
        "target": config.target,
        "max_steps": config.max_steps,
        "diverge_factor": config.diverge_factor,
        "noise_mode": "independent per cell" if config.independent_noise else "common random numbers",
        "dtype": "float64" if config.x64 else "float32",
        "first_passage": config.first_passage,
        "work_limit": config.work_limit,
        "seed": ",".join(str(s) for s in coords["seed"]),
        "delay_processes": ", ".join(p.label for p in processes),
        # Each process to the last bit (a pmf's label rounds its weights): what a checkpoint compares.
        "delay_sha256": hashlib.sha256("\n".join(delays.identity(p) for p in processes).encode()).hexdigest(),
        "nqm_version": __version__,
        "jax_version": jax.__version__,
        "platform": machine.platform_line(jax.devices()),  # what the last bits depend on (not the identity)
    }
    if "batch_size" in coords:  # only then: a result without batch sizes keeps its attributes
        attrs["batch_noise"] = BATCH_NOISE
    if config.skip_decided:  # likewise: status −2 exists only then
        attrs["skip_decided"] = 1
    if schedules:  # each schedule to the last factor (a custom one by digest): what a checkpoint compares
        attrs["schedule_identity"] = "; ".join(s.identity(config.max_steps) for s in schedules)
    extra = hyper_dims(method) + tuple(d for d in CHOICES if d in coords)
    return results.empty(coords, extra, attrs, [p.mean for p in processes])
