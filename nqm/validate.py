"""Every argument of every entry point, checked in one place before any work.

The API (:func:`nqm.sweep`, :func:`nqm.diagnostics.trajectory`, …) and the CLI share these
checks; each failure is one :class:`NqmError` line that says what is wrong and how to fix it.
"""

from __future__ import annotations

import numbers

import numpy as np

from nqm.errors import NqmError

MAX_STEPS = 10**8  # the delay schedule holds 8 bytes per step of the budget
MAX_DELAY = 10**6  # the weight ring holds delay + 1 copies of w per cell
MAX_VALUES = 10**6  # values in one grid axis
MAX_CELLS = 10**8  # cells in one sweep

_RULES = {
    "lr": ("a learning rate > 0", lambda x: x > 0, float),
    "momentum": ("a momentum in [0, 1)", lambda x: (x >= 0) & (x < 1), float),
    "delay": (f"an integer delay between 0 and {MAX_DELAY:,}", lambda x: (x >= 0) & (x == np.round(x)) & (x <= MAX_DELAY), int),
    "noise": ("a noise scale >= 0", lambda x: x >= 0, float),
    "seed": ("an integer seed >= 0", lambda x: (x >= 0) & (x == np.round(x)) & (x < 2**32), int),
}
_HYPER_RULE = ("a number >= 0", lambda x: x >= 0, float)  # ρ, λ_dc, …


def coordinates(distinct: bool = True, **grids) -> dict[str, np.ndarray]:
    """Each grid as a 1-D array of valid values (lr, momentum, delay, noise, seed, and any method
    hyperparameter, which must be >= 0), distinct unless ``distinct`` is false (lists of points)."""
    coords = {}
    for name, values in grids.items():
        if values is None and name in ("lr", "momentum"):
            raise NqmError(f"{name} is required: give one value or a list")
        if values is None:
            continue
        what, ok, kind = _RULES.get(name, _HYPER_RULE)
        try:
            array = np.atleast_1d(np.asarray(values, dtype=np.float64))
        except (TypeError, ValueError):
            raise NqmError(f"{name} must be numbers, got {values!r}") from None
        if array.ndim != 1 or array.size == 0:
            raise NqmError(f"{name} is empty: give at least one value")
        bad = array[~(np.isfinite(array) & ok(array))]
        if bad.size:
            raise NqmError(f"{name}={bad[0]:g} is invalid: each value must be {what}")
        if distinct and np.unique(array).size != array.size:
            raise NqmError(f"{name} has repeated values: give each value once")
        coords[name] = array.astype(np.int64 if kind is int else np.float64)
    return coords


def grid_size(coords: dict) -> int:
    """The number of cells of a grid, refused above :data:`MAX_CELLS`."""
    cells = int(np.prod([np.size(v) for v in coords.values()], dtype=np.float64))
    if cells > MAX_CELLS:
        raise NqmError(f"the grid has {cells:,} cells, more than {MAX_CELLS:,}; sweep it in parts")
    return cells


def run_config(settings: dict):
    """A :class:`nqm.engine.RunConfig` from checked settings."""
    from nqm import engine

    config = engine.RunConfig(**settings)
    if not (_real(config.target) and np.isfinite(config.target) and config.target > 0):
        raise NqmError(f"target must be a number > 0, got {config.target!r}")
    count(config.max_steps, "max_steps", high=MAX_STEPS)
    count(config.chunk_steps, "chunk_steps", high=MAX_STEPS)
    if config.devices is not None:
        count(config.devices, "devices")
    if config.memory_budget is not None and not (_real(config.memory_budget) and np.isfinite(config.memory_budget)
                                                 and config.memory_budget > 0):
        raise NqmError(f"memory_budget must be a number of bytes > 0, got {config.memory_budget}")
    if not (_real(config.diverge_factor) and np.isfinite(config.diverge_factor) and config.diverge_factor > 1):
        raise NqmError(f"diverge_factor must be a number > 1, got {config.diverge_factor!r}")
    return config


def _real(value) -> bool:
    """A real number (int, float, numpy scalar): not a string, a bool or None."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def count(value, name: str, *, low: int = 1, high: int | None = None) -> int:
    """An integer option (a dimension, a number of steps, cells, …) within bounds."""
    try:
        ok = (_real(value) and float(value) == int(value) and int(value) >= low
              and (high is None or int(value) <= high))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        bound = f">= {low}" if high is None else f"between {low} and {high:,}"
        raise NqmError(f"{name} must be an integer {bound}, got {value!r}")
    return int(value)
