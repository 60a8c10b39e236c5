"""Searches over boxes of hyperparameters: :func:`best` (``nqm.best``, ``nqm best``) and its answer.

* :mod:`~nqm.search.api` — ``best``: the search;
* :mod:`~nqm.search.refine` — the lattice and the pattern-search tracks that propose each round;
* :mod:`~nqm.search.answers` — what a search found (``answer``, ``describe``), many searches kept
  in one file, and readers of their answers (what the figure scripts draw from);
* :mod:`~nqm.search.scaling` — ``scaling``: one search per batch size, perfect scaling and the
  critical batch size.
"""

import importlib

__all__ = ["Axis", "answer", "best", "describe"]


def __getattr__(name):
    # Loaded on first use: reading kept answers (nqm.search.answers, figure redraws) needs no JAX.
    if name in __all__:
        return getattr(importlib.import_module("nqm.search.answers" if name in ("answer", "describe") else
                                               "nqm.search.api"), name)
    raise AttributeError(f"module 'nqm.search' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
