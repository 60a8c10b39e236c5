"""Settled or transient: whether a run that reached the target stays there.

The engine finds each cell's first passage (the first step with ``L(w_t) < target``). A converged
cell is one that also *stays*: status 1, **settled**, when its long-run loss level is below the
target — the lim sup of its loss without noise, its stationary mean with noise — and status 2,
**transient**, when it reached the target but leaves it, or would: it rises back, diverges, or is
asymptotically unstable. The decision is asymptotic, never by the budget: a divergence that would
come long after the budget still makes a run transient.

How it is decided, by (method, delay process):

* a linear method under a constant or iid delay, exactly, from its own dynamics
  (:mod:`nqm.expected`, :mod:`nqm.thresholds.derived`): with noise, ``E[L_∞] = σ² V_∞ < target``
  (infinite where a component is unstable, mean-square under iid delays); without noise under a
  constant delay, every eigencomponent stable (the same analysis at σ = 0); without noise under
  iid delays, every eigenvalue below the almost-sure threshold (``λ_max·η < x*``, the top
  Lyapunov exponent's first crossing);
* any other (method, delay) — AB, DC-ASGD, restart, worker pools, a periodic method whose noisy
  steady state has no closed form here — has no asymptotic test yet: its status 1 is the first
  passage, and the result's ``settled_test`` attribute says so for that delay.

``first_passage=True`` skips the test: status 1 is then the first passage (the AB paper's literal
definition), and no cell is 2.
"""

from __future__ import annotations

import functools

import numpy as np

from nqm import delays
from nqm.conventions import family
from nqm.errors import NqmError
from nqm.expected import steady_state_loss
from nqm.jobs import Job
from nqm.optimizers import make
from nqm.problem import explicit
from nqm.status import REACHED, TRANSIENT
from nqm.thresholds.derived import threshold

EXACT = "exact: the linear dynamics' steady state and stability at every eigenvalue"
ALMOST_SURE = "exact without noise: every eigenvalue below the almost-sure threshold (iid delays)"
SKIPPED = "first passage: settled_test=False (first_passage=True)"


def test_for(task: Job, process) -> str:
    """How the runs of ``task`` under ``process`` are told settled from transient (a sentence)."""
    if task.config.first_passage:
        return SKIPPED
    if _exact(task, process):
        return EXACT
    return (f"none yet for {task.method} under {process.label}: status 1 is the first passage "
            "(the run reached the target; whether it stays is not decided)")


def settle(task: Job, process, values: dict, status: np.ndarray) -> np.ndarray:
    """``status`` with each reached cell (1) that does not stay below the target made transient (2).

    Args:
      task: the job the cells ran under.
      process: their delay process.
      values: per-cell hyperparameter arrays (``lr``, ``momentum``, ``noise``, …), as the engine got them.
      status: the engine's statuses of those cells (first passage).

    Returns:
      the statuses with transient cells marked; unchanged where there is no asymptotic test
      (:func:`test_for`) or with ``first_passage``.
    """
    status = np.array(status, np.int8, copy=True)
    reached = np.flatnonzero(status == REACHED)
    if task.config.first_passage or reached.size == 0 or not _exact(task, process):
        return status
    lr, momentum, noise = (np.asarray(values[k], np.float64)[reached] for k in ("lr", "momentum", "noise"))
    stays = np.ones(reached.size, bool)
    noisy = noise > 0
    dampening = bool(task.options.get("dampening", False))
    method = task.method
    if process.pmf() is not None and np.count_nonzero(process.pmf()) > 1:  # iid delays
        quiet = ~noisy
        if quiet.any():  # a single noiseless run: almost-sure stability, per momentum
            for m in np.unique(momentum[quiet]):
                rows = quiet & (momentum == m)
                x_star = float(threshold(method, momentum=m, delay=process.label, criterion="almost-sure",
                                         dampening=dampening))
                stays[rows] = lr[rows] * task.problem.eigenvalues.max() < x_star
        rows = noisy
    else:
        rows = np.ones(reached.size, bool)
    if rows.any():
        level = steady_state_loss(task.problem, method, process.label, lr[rows], momentum[rows], noise[rows],
                                  dampening=dampening)
        stays[rows] = level < task.config.target
    status[reached[~stays]] = TRANSIENT
    return status


def _exact(task: Job, process) -> bool:
    return _exact_for(task.method, tuple(sorted(task.options.items())), process.label)


@functools.lru_cache(maxsize=64)
def _exact_for(method: str, options: tuple, delay: str) -> bool:
    """Whether the exact test applies: a linear method with no option but its momentum convention
    and no hyperparameter beyond lr and momentum, under a delay with a pmf, whose steady state the
    exact mode computes (a periodic method — OrMo — has none in closed form here)."""
    optimizer = make(family(method), **dict(options))
    if not optimizer.linear or delays.pmf(delay) is None or set(dict(options)) - {"dampening"}:
        return False
    if set(optimizer.hyper._fields) != {"lr", "momentum"}:
        return False
    try:  # one cell on one eigenvalue: does the exact mode hold this method under this delay?
        steady_state_loss(explicit([1.0]), method, delay, 0.1, 0.0, 0.0, dampening=bool(dict(options).get("dampening")))
    except NqmError:
        return False
    return True
