"""The book of a search's evaluated points (:mod:`nqm.search.refine`): each point's results per
seed and what the refinement ranks it by, in an immutable value that each round extends."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from nqm.status import DIVERGED, REACHED, SKIPPED


@dataclasses.dataclass(frozen=True)
class Book:
    """Every evaluated point in evaluation order, keyed by its exact values, with its T: the median
    over seeds of the steps where every seed settled, ∞ where one did not (an answer must hold for
    each draw of the noise), and ``median``: that median with an unsettled seed counting as ∞.
    Immutable: :meth:`added` gives a new book (``index`` is never changed in place)."""

    index: dict = dataclasses.field(default_factory=dict)  # values -> row
    rows: tuple = ()
    round: tuple = ()
    nudge: tuple = ()
    steps: tuple = ()
    status: tuple = ()
    loss: tuple = ()
    median: tuple = ()
    t: tuple = ()
    rest: tuple = ()  # where T is ∞, how close it came: the median final loss, a diverged seed ∞
    cells: int = 0  # the cells run (a skipped point costs nothing)

    def added(self, points, nudges, round_number, steps, status, loss) -> Book:
        """This book and a round's ``points``, with their ``steps``, ``status``, ``loss`` (each (seeds, points))."""
        measured = [_measured(steps[:, j], status[:, j], loss[:, j]) for j in range(len(points))]
        median, t, rest = (tuple(m[i] for m in measured) for i in range(3))
        return Book(index={**self.index, **{x: len(self.rows) + j for j, x in enumerate(points)}},
                    rows=self.rows + tuple(points), round=self.round + (round_number,) * len(points),
                    nudge=self.nudge + tuple(nudges), steps=self.steps + tuple(steps.T),
                    status=self.status + tuple(status.T), loss=self.loss + tuple(loss.T),
                    median=self.median + median, t=self.t + t, rest=self.rest + rest,
                    cells=self.cells + int(np.count_nonzero(status != SKIPPED)))

    def t_of(self, x) -> float | None:
        row = self.index.get(x)
        return None if row is None else self.t[row]

    def per_seed(self, row: int) -> np.ndarray:
        """Each seed's steps at a point, ∞ where that seed did not converge (settle)."""
        return _per_seed(self.steps[row], self.status[row])


def _per_seed(steps, status) -> np.ndarray:
    return np.where(status == REACHED, steps, np.inf).astype(np.float64)


def _measured(steps, status, loss) -> tuple[float, float, float]:
    """A point's ``median``, T and ``rest`` (:class:`Book`) from its seeds' results."""
    per_seed = _per_seed(steps, status)
    median = float(np.median(per_seed))
    failed = (status == DIVERGED) | (status == SKIPPED)
    rest = float(np.median(np.where(failed, np.inf, loss)))
    return median, median if np.isfinite(per_seed).all() else math.inf, rest
