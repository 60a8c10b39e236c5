"""The exact test: a linear method's cells judged from its own dynamics, never by running them on.

With noise ``E[L_∞] = σ² V_∞ < target`` (infinite where a component is unstable, mean-square under iid
delays); without noise under a constant delay, every eigencomponent stable (the same analysis at
σ = 0); without noise under iid delays, almost-sure stability: mean-square stable at every
eigenvalue (which implies it), or else ``λ_max·η`` below the almost-sure threshold (the top Lyapunov
exponent's first crossing).

With an iterate average (``ema`` among the cells' values) the level is the average's, ``E[L(ŵ_∞)]``;
its stability is the raw iterate's. With a learning-rate schedule (the job's) the verdict is that of
its final regime: the same test at ``lr`` times its last factor; where that factor is 0 the run stops
moving at the schedule's last breakpoint S, and its level is the expected loss there, ``E[L(w_S)]``
(:mod:`nqm.expected.augmented`).
"""

from __future__ import annotations

import numpy as np

from nqm import delays
from nqm.conventions import family
from nqm.errors import NqmError
from nqm.expected import steady_state_loss
from nqm.expected.reduced import check_cost
from nqm.optimizers import make
from nqm.optimizers.base import registry_cache
from nqm.problem import explicit
from nqm.thresholds.derived import threshold
from nqm.validate import MAX_STEPS

LYAPUNOV_STEPS = 20_000  # the drawn schedule of an almost-sure threshold the settled test needs
EXACT_STEADY_WORK = 2**30  # components × (delays + 2)² per cell: the exact steady state's cost (seconds) at most


def applies(task, process) -> tuple[bool, str | None]:
    """Whether the exact test decides the cells of ``task`` under ``process``, and where it would
    but cannot here, why not (the continued test then does).

    Args:
      task: the job (:class:`nqm.jobs.Job`).
      process: its delay process.

    Returns:
      ``(applies, why not)``: ``why not`` is ``None`` unless the method is one the exact test takes
      whose steady state here would cost too much time or memory.
    """
    options = tuple(sorted(task.options.items()))
    if not _linear(task.method, options) or delays.pmf(process) is None:
        return False, None
    if (_own(task) or set(task.options) - {"dampening"}) and np.count_nonzero(process.pmf()) > 1:
        return False, None  # the almost-sure threshold it may need takes no hyperparameter or option of its own
    pmf = delays.pmf(process)
    if task.problem.dim * (pmf.size + 1) ** 2 > EXACT_STEADY_WORK:
        return False, (f"its steady state under delay {process.label} on {task.problem.dim:,} eigenvalues would take "
                       "hours (the work grows as the delay squared)")
    if not _exact_for(task.method, options, process):
        return False, None
    try:
        check_cost(task.problem, task.method, [process], None, bool(task.options.get("dampening", False)), 1,
                   steady=True)
    except NqmError as exc:
        return False, str(exc).split(";")[0]
    return True, None


@registry_cache(maxsize=64)
def _linear(method: str, options: tuple) -> bool:
    """A linear method with a learning rate and a momentum (and maybe hyperparameters of its own,
    which the exact mode grids; not precond, whose exact mode takes one exponent per run): what the
    exact test may take."""
    optimizer = make(family(method), **dict(options))
    fields = set(optimizer.hyper._fields)
    return bool(optimizer.linear) and {"lr", "momentum"} <= fields and "power" not in fields


def _own(task) -> list:
    """The names of the job's method's own hyperparameters (beyond lr and momentum)."""
    return [n for n in make(family(task.method), **task.options).hyper._fields if n not in ("lr", "momentum")]


@registry_cache(maxsize=64)
def _exact_for(method: str, options: tuple, delay) -> bool:
    """Whether the exact mode holds this method, with these options, under this delay (a periodic
    method — OrMo — has no steady state in closed form here): one cell on one eigenvalue, tried."""
    try:
        steady_state_loss(explicit([1.0]), method, delay, 0.1, 0.0, 0.0, **dict(options))
    except NqmError:
        return False
    return True


def stays(task, process, cells: dict) -> np.ndarray:
    """Whether each cell stays, from the linear dynamics (module docstring).

    Args:
      task: the job of a linear method the exact test takes (:func:`applies`).
      process: the delay process.
      cells: per-cell arrays of ``lr``, ``momentum`` and ``noise``.

    Returns:
      A bool per cell.
    """
    lr, momentum, noise = (np.asarray(cells[k], np.float64) for k in ("lr", "momentum", "noise"))
    result = np.ones(lr.size, bool)
    noisy = noise > 0
    dampening = bool(task.options.get("dampening", False))
    options = {k: v for k, v in task.options.items() if k != "dampening"}
    own = {k: np.asarray(cells[k], np.float64) for k in _own(task)}
    gamma = np.asarray(cells["ema"], np.float64) if "ema" in cells else None
    schedule = getattr(task, "schedule", None)
    last, final = (0, 1.0) if schedule is None else schedule.regime(_horizon(task))
    choices = dict(schedule=schedule, horizon=_horizon(task)) if schedule is not None and not schedule.constant else {}

    def level(rows, sigma):  # E[L_∞] of the cells ``rows`` at noise ``sigma``
        return steady_state_loss(task.problem, task.method, process, lr[rows], momentum[rows], sigma,
                                 dampening=dampening, **options, **{k: v[rows] for k, v in own.items()},
                                 **({} if gamma is None else {"ema": gamma[rows]}), **choices)

    if final == 0:  # the run stops at the schedule's last breakpoint: its level is where it stopped
        return level(np.ones(lr.size, bool), noise) < task.config.target
    if np.count_nonzero(process.pmf()) > 1:  # iid delays
        # A single noiseless run stays when it is almost surely stable. Mean-square stability at every
        # eigenvalue (finite second moments, exact and fast) implies it; only the cells it leaves out
        # need the almost-sure threshold (a Lyapunov exponent's first crossing, seconds per momentum).
        quiet = np.flatnonzero(~noisy)
        unit = level(quiet, np.ones(quiet.size)) if quiet.size else np.zeros(0)
        for i in quiet[~np.isfinite(unit)]:  # at the final regime's rate
            result[i] = final * lr[i] * task.problem.eigenvalues.max() < almost_sure(
                task.method, float(momentum[i]), process, dampening)
        rows = noisy
    else:
        rows = np.ones(lr.size, bool)
    if rows.any():
        result[rows] = level(rows, noise[rows]) < task.config.target
    return result


def _horizon(task) -> int:
    """The last step a cell of ``task`` may reach: where a custom schedule's regime is read."""
    return int(min(task.config.work_limit * max(task.config.max_steps, 1000), MAX_STEPS))


@registry_cache(maxsize=256)
def almost_sure(method: str, momentum: float, delay, dampening: bool) -> float:
    """The almost-sure threshold x* (a Lyapunov exponent's first crossing), once per setting, over a
    schedule of :data:`LYAPUNOV_STEPS` steps (a fifth of ``nqm threshold``'s: the cells that need it sit
    between the mean-square and the almost-sure thresholds, rare outside a sweep across the boundary)."""
    return float(threshold(method, momentum=momentum, delay=delay, criterion="almost-sure", dampening=dampening,
                           steps=LYAPUNOV_STEPS))
