"""``steps_stay``: the first step after which a settled noiseless run's loss stays below the target."""

from __future__ import annotations

import dataclasses

import numpy as np

from nqm.engine import Last, ToHorizon, Trace, record
from nqm.expected.api import stays_from
from nqm.settling.window import horizons
from nqm.status import DIVERGED, REACHED, WINDOW_POINTS, stays_below

STAY_DOUBLINGS = 6  # steps_stay looks up to 64 × its first horizon for the last exit


def stay_steps(test, values: dict, seed: int, steps: np.ndarray, status: np.ndarray) -> np.ndarray:
    """``steps_stay``: the first step after which the loss stays below the target — one more than its
    last exit (the last step with ``L(w_t) >= target``) — for each settled noiseless cell; NaN where
    it is not defined here (a run that does not settle; a single noisy run, whose loss keeps
    crossing the target of its stationary level: there is no such step to report; or a run whose
    last exit is not found within the work limit).

    A linear method under a constant delay (where the exact test applies) is continued to the step S
    from which its closed form proves the loss below the target for good
    (:func:`nqm.expected.api.stays_from`; all such cells to the largest S): the last exit before it
    is the last one, exactly (up to the run's float rounding). Any other run — or one whose closed form
    proves nothing — is continued to a horizon ``H`` (at least ``2·T + 1000`` steps) that is doubled
    until its loss stays below the target with a non-growing envelope over the second half (the
    settled test's window): the last exit before ``H`` is then the last one. A run that still leaves
    the target after ``STAY_DOUBLINGS`` doublings gets NaN: its loss keeps coming back (e.g. Adam's
    bursts once its second moment has decayed), however well its settling window looked. No horizon
    passes the work limit (``work_limit × max_steps``).

    Args:
      test: the settled test the cells ran under (:func:`nqm.settling.choose`).
      values: per-cell hyperparameter arrays (``lr``, ``momentum``, ``noise``, …).
      seed: the seed they ran with.
      steps: their first passages.
      status: their statuses after the settled test (only settled noiseless cells are continued).

    Returns:
      ``steps_stay`` per cell (float; NaN where not defined).
    """
    task, process = test.task, test.process
    status, steps = np.asarray(status), np.asarray(steps)
    out = np.full(status.shape, np.nan)
    rows = np.flatnonzero((status == REACHED) & (np.asarray(values["noise"], np.float64) == 0))
    if rows.size == 0:
        return out
    cells = {k: np.asarray(v)[rows] for k, v in values.items()}
    limit = test.limit

    def continued(group, budget):  # the group run to ``budget``: its last exits, and whether each stays
        stride = max(1, budget // WINDOW_POINTS)
        config = dataclasses.replace(task.config, max_steps=budget, progress=False)
        run = task._replace(config=config).run(
            process, {n: v[group] for n, v in cells.items()}, seed,
            [Trace({"loss": record.loss, "last_exit": Last(record.Exceeds(float(task.config.target)))}, stride)],
            stop=ToHorizon(budget))
        t = stride * np.arange(1, run.trace["loss"].shape[1] + 1)
        window = t > budget / 2
        stays = np.array([run.status[i] != DIVERGED and stays_below(run.trace["loss"][i, window], t[window], False,
                                                                     task.config.target) for i in range(group.size)])
        return run.summary["last_exit"] + 1, stays, run.status != DIVERGED

    proven = _proven(test, cells)
    certain = np.flatnonzero((proven > 0) & (proven <= limit))
    if certain.size:  # one horizon for them all: one compilation (each one's exits end before its own)
        stay, _, kept = continued(certain, int(proven[certain].max()))
        out[rows[certain[kept]]] = stay[kept]
    # Each cell's horizon depends on its own T only (its settling horizon, doubled), never on the
    # cells beside it: a cell's steps_stay is the same in any grid.
    first, pending = horizons(steps[rows])[0], np.flatnonzero(proven == 0)
    for doubling in range(STAY_DOUBLINGS + 1):  # what is pending after the last keeps leaving the target
        horizon, still = first[pending] << doubling, []
        for budget in np.unique(horizon[horizon <= limit]):
            group, budget = pending[horizon == budget], int(budget)
            stay, done, _ = continued(group, budget)
            out[rows[group[done]]] = stay[done]
            still.append(group[~done])
        pending = np.concatenate(still) if still else pending[:0]
        if not pending.size:
            break
    return out


def _proven(test, cells: dict) -> np.ndarray:
    """Per noiseless cell, the step from which its closed form proves the loss below the target for
    good (0: none — not a linear method under a constant delay, or nothing proven)."""
    lr = np.asarray(cells["lr"], np.float64)
    exact = test.exact_cells(cells)
    out = np.zeros(lr.size, np.int64)
    if not exact.any() or np.count_nonzero(test.process.pmf()) != 1:
        return out
    linear = test.linear
    out[exact] = stays_from(linear.problem, linear.method, test.process, lr[exact],
                            np.asarray(cells["momentum"], np.float64)[exact], target=float(test.task.config.target),
                            dampening=bool(linear.options.get("dampening", False)))
    return out
