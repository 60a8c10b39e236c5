"""Searches over boxes of hyperparameters: :func:`best` (``nqm.best``, ``nqm best``) and its answer.

* :mod:`~nqm.search.api` — ``best``: the search;
* :mod:`~nqm.search.setup` — its settings, box, evaluator and regime, checked before any work;
* :mod:`~nqm.search.refine` — the refinement, an immutable state each round replaces: its axes
  (``Axis``) and the pattern-search tracks that propose each round, on :mod:`~nqm.search.lattice`
  (the lattice over the box, the tracks) and :mod:`~nqm.search.book` (the evaluated points);
* :mod:`~nqm.search.answered` — whether a search answered, and reruns of one that missed;
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
        module = "nqm.search.answers" if name in ("answer", "describe") else \
            "nqm.search.refine" if name == "Axis" else "nqm.search.api"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'nqm.search' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
