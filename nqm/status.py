"""What a cell's result means, shared by the engine, results and figures (no JAX here, so that
reading and plotting a saved result never import the engine)."""

from __future__ import annotations

import numpy as np

from nqm.errors import NqmError

SETTLED, TRANSIENT, BUDGET, DIVERGED = 1, 2, 0, -1
# The first passage: what the engine's runs find (a cell that reached the target), before the
# settled test tells settled from transient runs, and all that `first_passage=True` keeps.
REACHED = SETTLED
RUNNING = 3  # a cell still running: only in checkpoints and inside the engine, never in a result
MEANING = ("1: settled (reached the target, and its long-run loss level is below it), 2: transient (reached "
           "the target, then left it, or would: rising back, diverging, or asymptotically unstable), "
           "0: step budget exhausted, -1: diverged before reaching the target")
FIRST_PASSAGE_MEANING = "1: reached the target (first passage), 0: step budget exhausted, -1: diverged"


def meaning(first_passage: bool) -> str:
    """What a result's status codes mean under its definition of converged.

    Args:
      first_passage: whether the result uses the first-passage definition of converged.

    Returns:
      The text of :data:`FIRST_PASSAGE_MEANING` or :data:`MEANING`.
    """
    return FIRST_PASSAGE_MEANING if first_passage else MEANING


def t_star(ds, percentile: float = 1.0) -> float:
    """``T*``: the ``percentile``-th percentile of T over the converged cells (status 1: settled,
    or reached under the first-passage definition), linearly interpolated between cells (so it need
    not be a whole step; NaN if none converged).

    Args:
      ds: the result, with ``steps`` and ``status`` variables.
      percentile: the percentile, in [0, 100].

    Returns:
      ``T*`` in steps (a float).

    Raises:
      NqmError: a percentile that is not a number in [0, 100].

    Examples:
      >>> import nqm
      >>> ds = nqm.sweep("sgdm", lr=[0.1, 0.5, 2.5], momentum=[0.0, 0.5], problem=nqm.zhang(10),
      ...                max_steps=500, progress=False)
      >>> round(nqm.t_star(ds), 2)  # the 1st percentile of T over the 5 settled cells
      7.24
    """
    if not (isinstance(percentile, (int, float, np.number)) and 0 <= percentile <= 100):
        raise NqmError(f"percentile must be a number in [0, 100], got {percentile!r}")
    steps = np.asarray(ds.steps.values)[np.asarray(ds.status.values) == SETTLED]
    return float(np.percentile(steps, percentile)) if steps.size else float("nan")


def format_t_star(value: float) -> str:
    """T* as every summary and figure prints it: one decimal (it is interpolated), or why not.

    Args:
      value: ``T*`` in steps, or NaN.

    Returns:
      ``"T* = 1,234.5"``, or ``"no cell reached the target"``.
    """
    return f"T* = {value:,.1f}" if np.isfinite(value) else "no cell reached the target"


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun with an ``s`` unless ``count`` is 1 (``"1,000 cells"``).

    Args:
      count: the number, printed with thousands separators.
      noun: the singular noun.

    Returns:
      The phrase.
    """
    return f"{count:,} {noun}" + ("" if count == 1 else "s")
