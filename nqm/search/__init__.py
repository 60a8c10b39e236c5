"""Searches over boxes of hyperparameters: :func:`best` (``nqm.best``, ``nqm best``) and its answer.

* :mod:`~nqm.search.api` — ``best``, ``answer``, ``describe``: the search and what it found;
* :mod:`~nqm.search.refine` — the lattice and the pattern-search tracks that propose each round;
* :mod:`~nqm.search.answers` — many searches kept in one file, and readers of their answers
  (what the figure scripts draw from).
"""

from nqm.search.api import Axis, answer, best, describe

__all__ = ["Axis", "answer", "best", "describe"]
