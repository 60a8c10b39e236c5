"""Every argument of every entry point, checked in one place before any work.

The API (:func:`nqm.sweep`, :func:`nqm.diagnostics.trajectory`, …) and the CLI share these
checks; each failure is one :class:`NqmError` line that says what is wrong and how to fix it.
"""

from __future__ import annotations

import difflib
from typing import NamedTuple

import numpy as np

from nqm.errors import NqmError

# The bounds of every size, delay and budget, whatever its spelling: a CLI option, a delay spec
# (``constant:D``, ``uniform:A:B``, ``gaussian:MU``, ``pmf:…``, ``workers:K``), an API argument.
BOUNDS = {
    "steps": 10**8,  # a step budget: the delay schedule holds 8 bytes per step
    "delay": 10**6,  # a delay: the weight ring holds delay + 1 copies of w per cell
    "workers": 10**6,  # workers of a pool: one snapshot of w each per cell
    "pmf": 10**6 + 1,  # entries of a delay pmf (its largest delay + 1)
    "dim": 10**7,  # N, the problem's dimension
    "values": 10**6,  # values in one grid axis
    "cells": 10**8,  # cells in one sweep
    "batch": 2**53,  # a batch size: a whole number in float64
    "elements": 2**28,  # cells × N of a benchmark's arrays (2 GiB of float32 w and v)
    "trace_bytes": 8 * 2**30,  # a trajectory's recorded values on the host
    "trace_work": 10**13,  # N × steps of one trace, which has no checkpoint: hours on a CPU
    "exact_ops": 10**14,  # the exact mode's work before stepping (long delays' roots): hours at 10 Gflop/s
    "matrix_bytes": 2 * 2**30,  # the transition matrices, or the exact mode's second-moment map, held at once
    "seeds": 1000,  # seeds every point of a search or a simulated threshold runs: each one more run of it
    # A cell's work limit, in budgets: past it a cell may take its whole MAX_STEPS steps whatever its budget.
    "work_limit": 10**5,
    # A file nqm writes or reads: above any result the other bounds allow (a trace keeps at most
    # trace_bytes of values), so a larger file is refused before it is read into memory.
    "file_bytes": 16 * 2**30,
}
MAX_STEPS, MAX_DELAY, MAX_VALUES, MAX_CELLS = (BOUNDS[k] for k in ("steps", "delay", "values", "cells"))

class Domain(NamedTuple):
    """Where a parameter's values may lie: between ``low`` and ``high``, each end included or not,
    whole numbers only if ``integer``; ``text`` says it in words, for the error line.

    Examples:
      >>> DECAY.holds(np.array([0.0, 0.9, 1.0]))
      array([ True,  True, False])
    """

    text: str
    low: float = -np.inf
    high: float = np.inf
    closed_low: bool = True
    closed_high: bool = True
    integer: bool = False

    def holds(self, x: np.ndarray) -> np.ndarray:
        """Whether each value is in the domain (a boolean array; NaN and ±∞ never are).

        Args:
          x: values.

        Returns:
          A boolean array like ``x``.
        """
        x = np.asarray(x, np.float64)
        with np.errstate(invalid="ignore"):
            above = x >= self.low if self.closed_low else x > self.low
            below = x <= self.high if self.closed_high else x < self.high
            whole = x == np.round(x) if self.integer else True
            return np.isfinite(x) & above & below & whole


RATE = Domain("a learning rate > 0", 0.0, closed_low=False)
DECAY = Domain("a decay rate in [0, 1)", 0.0, 1.0, closed_high=False)  # momentum, b1, b2, decay
NONNEGATIVE = Domain("a number >= 0", 0.0)  # ρ, λ_dc, …: a method hyperparameter not declared otherwise
POSITIVE = Domain("a number > 0", 0.0, closed_low=False)
UNIT = Domain("a number in [0, 1]", 0.0, 1.0)
_DOMAINS = {
    "lr": RATE,
    "momentum": DECAY._replace(text="a momentum in [0, 1)"),
    "delay": Domain(f"an integer delay between 0 and {MAX_DELAY:,}", 0, MAX_DELAY, integer=True),
    "noise": Domain("a noise scale >= 0", 0.0),
    "batch_size": Domain(f"an integer batch size between 1 and {BOUNDS['batch']:,}", 1, BOUNDS["batch"], integer=True),
    "seed": Domain(f"an integer seed between 0 and {2**32 - 1:,}", 0, 2**32 - 1, integer=True),
}
_RUN_AXES = ("lr", "momentum", "delay", "noise", "batch_size", "seed")  # every entry point's: never left out


def coordinates(distinct: bool = True, dtype=None, domains: dict | None = None, **grids) -> dict[str, np.ndarray]:
    """Each grid as a 1-D array of valid values (lr, momentum, delay, noise, batch_size, seed, and
    any method hyperparameter, in its domain: ``domains[name]``, else :data:`NONNEGATIVE`), distinct
    unless ``distinct`` is false (lists of points).

    With ``dtype`` (the run's float precision), a value the run would not see as given — ``lr =
    1e-320`` or ``momentum = 0.99999999999`` in float32, which run as 0 and 1 — is refused
    rather than silently changed (:func:`representable`), and so are two values that become one.

    Args:
      distinct: refuse repeated values in a grid.
      dtype: the run's float dtype, or ``None`` (not checked).
      domains: the method hyperparameters' domains by name (:class:`Domain`), or ``None``.
      grids: each grid by name: one value or a list (``None`` leaves a method hyperparameter out).

    Returns:
      The grids by name: int64 arrays for delay, batch_size and seed, float64 for the rest.

    Raises:
      NqmError: a grid is missing, empty, repeated, invalid or not representable.
    """
    coords = {}
    for name, values in grids.items():
        domain = _DOMAINS.get(name) or (domains or {}).get(name, NONNEGATIVE)
        if values is None and name in ("lr", "momentum"):
            raise NqmError(f"{name} is required: give one value or a list")
        if values is None and name in _RUN_AXES:  # only a method hyperparameter may be left out (its default)
            raise NqmError(f"{name} must be {domain.text} (one value or a list), got None")
        if values is not None:
            coords[name] = _coordinate(name, floats(values, name), domain, distinct, dtype)
    return coords


def _coordinate(name: str, array: np.ndarray, domain: Domain, distinct: bool, dtype) -> np.ndarray:
    """One grid, checked against its domain (and the run's precision)."""
    if array.ndim != 1 or array.size == 0:
        raise NqmError(f"{name} is empty: give at least one value")
    bad = array[~domain.holds(array)]
    if bad.size:
        whole = np.isfinite(bad[0]) and bad[0] == np.round(bad[0]) and abs(bad[0]) <= EXACT_INTEGERS
        # An integer's near miss in full (7.999999999999999, not "8"); other values as %g.
        # An integer beyond 2^53 as %g (1e+300, not its 301 digits).
        shown = (int(bad[0]) if whole else f"{bad[0]:g}" if abs(bad[0]) > EXACT_INTEGERS else repr(float(bad[0]))) \
            if domain.integer else f"{bad[0]:g}"
        raise NqmError(f"{name}={shown} is invalid: each value must be {domain.text}")
    if distinct and np.unique(array).size != array.size:
        raise NqmError(f"{name} has repeated values: give each value once")
    if dtype is not None and not domain.integer:
        below = None if domain.closed_high or not np.isfinite(domain.high) else domain.high
        for x in array:
            representable(x, name, dtype, below=below)
        if distinct and np.unique(array.astype(dtype)).size != array.size:
            raise NqmError(f"{name} has values that are one number in {np.dtype(dtype).name} (the run's "
                           "precision): give them further apart, or run in float64 (x64=True, --x64)")
    return array.astype(np.int64 if domain.integer else np.float64)


def floats(values, name: str) -> np.ndarray:
    """``values`` as a float64 array; strings (even ``"0.1"``), bools, complex numbers and None are
    refused.

    Args:
      values: one number or a sequence of them.
      name: the option's name, for the error message.

    Returns:
      A float64 array, at least 1-D.

    Raises:
      NqmError: a value is not a real number.
    """
    try:
        raw = np.asarray(values)
        bad = raw.dtype.kind in "USbMmc" or (raw.dtype.kind == "O" and any(
            isinstance(x, (str, bytes, bool, np.bool_, complex, np.complexfloating)) or x is None for x in raw.ravel()))
        array = None if bad else np.atleast_1d(raw.astype(np.float64))
    except (TypeError, ValueError, OverflowError):
        array = None
    if array is None:
        raise NqmError(f"{name} must be numbers, got {values!r}")
    exact(values, name)
    return array


EXACT_INTEGERS = 2**53  # beyond it a float64 holds not every integer: 2**53 + 1 would run as 2**53


def exact(values, name: str) -> None:
    """Refuse an integer that a float64 cannot hold exactly (a value the run would silently change),
    among ``values`` (one or a sequence, nested or not).

    Args:
      values: what was given.
      name: the option's name, for the error message.

    Raises:
      NqmError: an integer beyond 2^53 that is not a float64 exactly.
    """
    items = values if isinstance(values, (list, tuple, np.ndarray)) else [values]
    for given in items:
        if isinstance(given, (list, tuple, np.ndarray)):
            exact(given, name)
        elif isinstance(given, (int, np.integer)) and not isinstance(given, (bool, np.bool_)) \
                and abs(int(given)) > EXACT_INTEGERS and float(given) != int(given):
            raise NqmError(f"{name}={int(given)} is beyond what a float holds exactly (2^53); give a float "
                           f"such as {float(given):.6g}")


def representable(value: float, name: str, dtype, *, below: float | None = None) -> float:
    """``value`` if the run's precision ``dtype`` holds it: 0, or a normal number (a value that
    would round to 0, be a denormal, overflow, or — with ``below`` — round up to ``below``, is
    refused).

    Args:
      value: the number.
      name: the option's name, for the error message.
      dtype: the run's float dtype.
      below: a bound the cast value must stay under (1 for a momentum), or ``None``.

    Returns:
      ``value`` unchanged.

    Raises:
      NqmError: the cast changes it as above.
    """
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore", under="ignore"):
        cast = dtype.type(value)
    changed = value != 0 and not (np.isfinite(cast) and abs(cast) >= np.finfo(dtype).tiny)
    if changed or (below is not None and cast >= below):
        precision = f"{dtype.name} (the run's precision)"
        hint = "" if dtype == np.float64 else ", or run in float64 (x64=True, --x64)"
        raise NqmError(f"{name}={float(value)!r} is {float(cast):g} in {precision}: give a value that {dtype.name} holds{hint}")
    return value


def number(value, name: str) -> float:
    """A real number (not a string, a bool or None), as a float.

    Args:
      value: the option's value.
      name: the option's name, for the error message.

    Returns:
      ``float(value)``.

    Raises:
      NqmError: ``value`` is not an int or a float.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise NqmError(f"{name} must be a number, got {value!r}")
    exact(value, name)
    return float(value)


def flag(value, name: str) -> bool:
    """A yes/no option, ``True`` or ``False``, as a bool; ``"yes"``, ``1`` or ``None`` are refused with
    an :class:`NqmError` (not read as truth).

    Args:
      value, name: the option's value, and its name for the error message.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise NqmError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def grid_size(coords: dict) -> int:
    """The number of cells of a grid, refused above :data:`MAX_CELLS`.

    Args:
      coords: the grids by name (each a value or an array).

    Returns:
      The product of their sizes.

    Raises:
      NqmError: more than :data:`MAX_CELLS` cells.
    """
    cells = int(np.prod([np.size(v) for v in coords.values()], dtype=np.float64))
    if cells > MAX_CELLS:
        raise NqmError(f"the grid has {cells:,} cells, more than {MAX_CELLS:,}; sweep it in parts")
    return cells


def count(value, name: str, *, low: int = 1, high: int | None = None) -> int:
    """An integer option (a dimension, a number of steps, cells, …) within bounds: an ``int`` (a
    float such as ``1.0``, a string or a bool is refused: a count is a whole number by type).

    Args:
      value: the option's value.
      name: the option's name, for the error message.
      low, high: the inclusive bounds (``high=None``: none above).

    Returns:
      ``int(value)``.

    Raises:
      NqmError: not an integer within the bounds.
    """
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
        and int(value) >= low and (high is None or int(value) <= high)
    if not ok:
        bound = f">= {low:,}" if high is None else f"between {low:,} and {high:,}"
        raise NqmError(f"{name} must be an integer {bound}, got {value!r}")
    return int(value)


def did_you_mean(name: str, choices) -> str:
    """``"; did you mean 'rho'?"`` for the closest of ``choices`` to a mistyped ``name`` (the two
    closest where two are close; empty if none is), for the end of an error line.

    Args:
      name: what was given.
      choices: the names that would have been accepted.

    Returns:
      The phrase, or ``""``.
    """
    ratio = lambda c: difflib.SequenceMatcher(None, str(name), c).ratio()
    close = difflib.get_close_matches(str(name), [str(c) for c in dict.fromkeys(choices)], n=2, cutoff=0.6)
    close = close[:1] + [c for c in close[1:] if ratio(c) >= max(0.7, ratio(close[0]) - 0.15)]  # a near second
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def format_bytes(size: float) -> str:
    """A size in the unit that reads best: ``512 bytes``, ``3.1 MiB``, ``2.50 GiB``.

    Args:
      size: the size in bytes.

    Returns:
      The size as text: whole bytes below 1 KiB, else 3 significant digits in KiB … TiB.
    """
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{int(size)} bytes"
