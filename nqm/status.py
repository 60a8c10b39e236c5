"""What a cell's result means, shared by the engine, results and figures (no JAX here, so that
reading and plotting a saved result never import the engine), and the window test that tells a
settled run from a transient one by what it does after its first passage (:func:`stays_below`)."""

from __future__ import annotations

import numpy as np

from nqm.errors import NqmError

SETTLED, TRANSIENT, BUDGET, DIVERGED = 1, 2, 0, -1
# Reached the target, but whether it stays there could not be decided within the work the run allows
# (``RunConfig.work_limit`` × ``max_steps`` steps, the settled test's included): never a silent guess.
UNDECIDED = 3
# Not run: decided before running that it cannot settle (:meth:`nqm.settling.SettledTest.cannot_settle`); a
# search's points only, which need no steps where the answer is known.
SKIPPED = -2
# The first passage: what the engine's runs find (a cell that reached the target), before the
# settled test tells settled from transient runs, and all that `first_passage=True` keeps.
REACHED = SETTLED
RUNNING = 5  # a cell still running: only in checkpoints and inside the engine, never in a result
# A cell that reached the target and that its stop rule keeps stepping (the settled test's continued
# run, or a run to a fixed horizon): only inside the engine and its snapshots, never in a result.
CONTINUING = 6
MEANING = ("1: settled (reached the target, and its long-run loss level is below it), 2: transient (reached "
           "the target, then left it, or would: rising back, diverging, or asymptotically unstable), "
           "3: undecided (reached the target; whether it stays could not be decided within the work limit), "
           "0: step budget exhausted, -1: diverged before reaching the target")
STAY = ("steps_stay: the first step after which the loss stays below the target (one more than its last exit); "
        "NaN where not defined: a run that does not settle, a single noisy run, or one whose last exit lies "
        "beyond the work limit")
SKIPPED_MEANING = ("-2: not run, it cannot settle (decided before running: the linear dynamics it has, or ends "
                   "in near the minimum, are unstable or level out at or above the target)")
# The window of the settled test's continued run (nqm.settling.window), which the exact mode's
# steps_stay shares: a reached cell runs on to at least 2·T + CONTINUE, sampled every horizon // WINDOW_POINTS.
CONTINUE = 1000
WINDOW_POINTS = 256
FIRST_PASSAGE_MEANING = "1: reached the target (first passage), 0: step budget exhausted, -1: diverged"


def active(status):
    """Whether the engine still steps these cells: running, or kept stepping by their stop rule
    (numpy or jax arrays).

    Args:
      status: status codes.

    Returns:
      ``status >= RUNNING``, elementwise.
    """
    return status >= RUNNING


def meaning(first_passage: bool, skipped: bool = False) -> str:
    """What a result's status codes mean under its definition of converged.

    Args:
      first_passage: whether the result uses the first-passage definition of converged.
      skipped: whether cells known not to settle were left unrun (:data:`SKIPPED`).

    Returns:
      The text of :data:`FIRST_PASSAGE_MEANING` or :data:`MEANING` (and :data:`SKIPPED_MEANING`).
    """
    return FIRST_PASSAGE_MEANING if first_passage else MEANING + (", " + SKIPPED_MEANING if skipped else "")


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
    results(ds)
    steps = np.asarray(ds.steps.values)[np.asarray(ds.status.values) == SETTLED]
    return float(np.percentile(steps, percentile)) if steps.size else float("nan")


def results(ds) -> None:
    """Refuse (one line) what is not a result with steps and status (a sweep's, a search's, a loaded file's).

    Args:
      ds: what was given.

    Raises:
      NqmError: not an xarray Dataset holding ``steps`` and ``status``.
    """
    if not (hasattr(ds, "data_vars") and "steps" in ds.data_vars and "status" in ds.data_vars):
        raise NqmError(f"a result of nqm.sweep or nqm.load is needed (an xarray Dataset with steps and status), "
                       f"got {type(ds).__name__}")


def format_t_star(value: float) -> str:
    """T* as every summary and figure prints it: in whole steps (a step count; the percentile
    interpolates between two, a decimal would claim a precision T does not have), or why not.

    Args:
      value: ``T*`` in steps, or NaN.

    Returns:
      ``"T* = 1,235"``, or ``"no cell reached the target"``.
    """
    return f"T* = {value:,.0f}" if np.isfinite(value) else "no cell reached the target"


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun with an ``s`` unless ``count`` is 1 (``"1,000 cells"``).

    Args:
      count: the number, printed with thousands separators.
      noun: the singular noun.

    Returns:
      The phrase.
    """
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def stays_below(loss: np.ndarray, t: np.ndarray, noisy: bool, target: float) -> bool:
    """Whether a loss traced at steps ``t`` (a window well past the first passage) stays below
    ``target`` in the long run: it does not grow (the slope of ``log L`` against t is not positive
    by more than two standard errors) and its level is below the target — without noise its
    largest value (the lim sup), with noise its mean plus two standard errors (batch means).

    Args:
      loss: the traced losses, 1-D.
      t: their steps, same shape.
      noisy: whether the run has gradient noise (σ > 0).
      target: the target loss.

    Returns:
      ``False`` also for fewer than 8 points or a non-finite loss.
    """
    loss = np.asarray(loss, np.float64)
    if loss.size < 8 or not np.isfinite(loss).all():
        return False
    if grows(loss, t):
        return False
    if not noisy:
        return bool(loss.max() < target)
    batches = np.array([b.mean() for b in np.array_split(loss, 8)])
    return bool(batches.mean() + 2 * batches.std(ddof=1) / np.sqrt(batches.size) < target)


def grows(loss: np.ndarray, t: np.ndarray, blocks: int | None = None) -> bool:
    """Whether a traced loss grows: the least-squares slope of ``log L`` against ``t`` is positive
    by more than two standard errors. With ``blocks``, of the log of each block's largest value
    instead — the envelope, which a run ringing near a stability boundary needs (its loss passes
    near zero twice a period). A loss that underflowed to 0 has decayed.

    Args:
      loss: the traced losses, 1-D.
      t: their steps, same shape.
      blocks: the number of blocks of the envelope, or ``None``: every point.

    Returns:
      ``True`` also for a non-finite loss.
    """
    loss, t = np.asarray(loss, np.float64), np.asarray(t, np.float64)
    if not np.isfinite(loss).all():
        return True
    if blocks is not None:
        loss = np.array([b.max() for b in np.array_split(loss, blocks)])
        t = np.array([b.mean() for b in np.array_split(t, blocks)])
    rate, error = slope(t, np.log(np.maximum(loss, np.finfo(np.float64).tiny)))
    return rate - 2 * error > 0


def slope(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of ``y`` against ``t`` and its standard error.

    Args:
      t, y: the points, 1-D, at least 3.

    Returns:
      ``(slope, standard error)``.
    """
    t = t - t.mean()
    rate = float(t @ (y - y.mean()) / (t @ t))
    residual = y - y.mean() - rate * t
    return rate, float(np.sqrt(residual @ residual / (t.size - 2) / (t @ t)))
