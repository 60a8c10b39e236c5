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
  iid delays, almost-sure stability: mean-square stable at every eigenvalue (which implies it), or
  else ``λ_max·η`` below the almost-sure threshold (the top Lyapunov exponent's first crossing);
* any other (method, delay) — AB, DC-ASGD, restart, Adam and the other optax methods, worker
  pools, a periodic method whose steady state has no closed form here — by continuing the run past
  its first passage T to at least ``2·T + 1000`` steps, and past 64 × the optimizer's memory where
  it keeps moment estimates (Adam's ``1/(1 − b2)``: its bursts come once the second moment of the
  first passage is forgotten; :func:`nqm.engine.step.settling_span`), in the same engine run (a
  reached cell *settles*, stepping on with the cells still running,
  :func:`nqm.engine.step.settle_window`), and reading the second half of what follows T
  (:func:`nqm.status.stays_below`): it stays if its loss does not grow (the slope of ``log L`` is
  not positive beyond two standard errors) and its level is below the target (without noise the
  largest loss at any step there, with noise the mean plus two standard errors). A noiseless run
  of a method that becomes a linear one near the minimum (:func:`nqm.optimizers.base.near_zero`:
  AB once ‖g‖‖v‖ < ε, DC-ASGD as its correction vanishes — both SGDM) stays only where that linear
  method is stable, exactly: a run that stays below the target decays into that regime, where
  float64 follows it and float32 may underflow, so the verdict is the same in both. This
  certifies what the window can resolve: a growth rate slower than about one standard error of
  that slope, or a departure that starts after the window, goes unseen (docs/conventions.md).

Each result's ``settled_test`` attribute says which test applied to each delay.

``first_passage=True`` skips the test: status 1 is then the first passage (the AB paper's literal
definition), and no cell is 2.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nqm import delays
from nqm.checkpoint import unkept
from nqm.conventions import family
from nqm.engine import Last, Outcome, Settle, Trace, record
from nqm.engine.step import WINDOW_POINTS, settle_window, settling_span
from nqm.errors import NqmError
from nqm.expected import steady_state_loss
from nqm.expected.api import stays_from
from nqm.jobs import Job
from nqm.optimizers import make
from nqm.optimizers.base import near_zero, options, registry_cache
from nqm.problem import explicit
from nqm.status import DIVERGED, REACHED, TRANSIENT, slope, stays_below
from nqm.thresholds.derived import threshold
from nqm.validate import MAX_STEPS

EXACT = "exact: the linear dynamics' steady state and stability at every eigenvalue"
CONTINUED = ("continued: the run goes on to at least 2·T + 1000 steps (and 64 × the optimizer's memory, where "
             "it keeps moment estimates); it stays if its loss does not grow (log-loss slope) and its level is below "
             "the target (without noise its largest value at any step, with noise its mean) over the second half of "
             "what follows T; a noiseless run of a method that becomes a linear one near the minimum (AB, DC-ASGD: "
             "SGDM) stays only where that method is stable")
SKIPPED = "none: first_passage=True, status 1 is the first passage"
STAY_DOUBLINGS = 6  # steps_stay looks up to 64 × its first horizon for the last exit
LYAPUNOV_STEPS = 20_000  # the drawn schedule of an almost-sure threshold the settled test needs


def test_for(task: Job, process) -> str:
    """How the runs of ``task`` under ``process`` are told settled from transient (a sentence).

    Args:
      task: the job.
      process: its delay process.

    Returns:
      :data:`SKIPPED`, :data:`EXACT` or :data:`CONTINUED`.
    """
    if task.config.first_passage:
        return SKIPPED
    if _exact(task, process):
        return EXACT
    return CONTINUED


def observers(task: Job, process) -> tuple:
    """What the runs of ``task`` under ``process`` need for their settled test: a
    :class:`~nqm.engine.observers.Settle` (a reached cell steps on through its settling window)
    where they are judged by continuing them, else nothing.

    Args:
      task: the job.
      process: its delay process.

    Returns:
      ``(Settle(),)`` where ``test_for(task, process) == CONTINUED``, else ``()``.
    """
    return (Settle(),) if test_for(task, process) == CONTINUED else ()


def settle(task: Job, process, values: dict, outcome: Outcome, seed: int = 0, keep=None) -> np.ndarray:
    """The statuses of ``outcome`` with each reached cell (1) that does not stay below the target
    made transient (2).

    Args:
      task: the job the cells ran under.
      process: their delay process.
      values: per-cell hyperparameter arrays (``lr``, ``momentum``, ``noise``, …), as the engine got them.
      outcome: the engine's results of those cells (first passage), run with the observers of
        :func:`observers`.
      seed: the seed they ran with (a floor probe runs them again under the same delay schedule).
      keep: keeps a floor probe resumable in a sweep's checkpoint (:meth:`nqm.checkpoint.Checkpointer.nested`).

    Returns:
      the statuses with transient cells marked; unchanged with ``first_passage``.

    Raises:
      NqmError: a continued test on an outcome run without ``settle``.
    """
    status = np.array(outcome.status, np.int8, copy=True)
    reached = np.flatnonzero(status == REACHED)
    if task.config.first_passage or reached.size == 0:
        return status
    cells = {k: np.asarray(v)[reached] for k, v in values.items()}
    if _exact(task, process):
        stays = _exactly(task, process, cells)
    elif outcome.window is None or outcome.peak is None:
        raise NqmError("the continued settled test reads the settling window: run the engine with a Settle observer")
    else:
        first, window, peak = np.asarray(outcome.steps)[reached], outcome.window[reached], outcome.peak[reached]
        span = _span(task, process, cells)
        stays = _windowed(cells, first, window, peak, span, task.config.target)
        stays = _near_zero_stable(task, process, cells, stays, seed, _decay_rate(first, window, span), keep)
    status[reached[~stays]] = TRANSIENT
    return status


def _span(task: Job, process, cells: dict, extra=0) -> np.ndarray:
    """Each cell's least settling span, as the engine ran it (its optimizer's, or ``extra``)."""
    optimizer = task.optimizer(process)
    return np.maximum(settling_span(optimizer, {k: cells[k] for k in optimizer.hyper._fields}), extra)


def _near_zero_stable(task: Job, process, cells: dict, stays: np.ndarray, seed: int, rate: np.ndarray,
                      keep=None) -> np.ndarray:
    """``stays``, less the noiseless cells that go on to leave the target once their method has
    become a linear one near the minimum (:func:`nqm.optimizers.base.near_zero`). A noiseless run
    whose loss decays in its window goes on towards the minimum, so it ends in that regime; where the
    linear method is stable, it stays. Where it is not:

    * approached only in the limit (DC-ASGD's correction vanishes), the run is transient;
    * below a floor (AB: SGDM once ‖g‖‖v‖ < ε; Adam: steps of lr/ε once √v̂ < ε), what the
      linear method's growth does there — rise until the method holds it again, a cycle near the
      floor, or escape — is seen by a floor probe (:func:`_probe`), not by trusting the window:
      float32 may round the run's decay to 0 before it gets there, and float64 gets there late.
    """
    known = near_zero(task.method)
    if known is None or any(_option(task, k) != v for k, v in known.when.items()):
        return stays
    ends = _near_zero_stays(task, process, cells, known)
    if ends is None:
        return stays
    doubtful = np.flatnonzero(stays & ~ends & (rate > 0))
    if doubtful.size == 0:
        return stays
    stays, part = stays.copy(), {k: v[doubtful] for k, v in cells.items()}
    if known.floor is None:
        stays[doubtful] = False
    else:
        stays[doubtful] = _probe(task, process, part, seed, rate[doubtful], known.floor if known.homogeneous else None,
                                 keep)
    return stays


def _option(task: Job, name: str):
    """The value of the method's option ``name`` in ``task`` (its default where not given)."""
    return task.options.get(name, options(family(task.method))[name].default)


PROBE_FLOOR = 1e-4  # a floor probe raises a homogeneous method's floor to this fraction of the target,
PROBE_DECAYS = 4 * float(np.log(1e6))  # runs the time its loss takes to fall 10⁶-fold 4 times over
PROBE_MIN_STEPS = 2**14  # (at least this many; a decay past the run's precision has rate ∞;
PROBE_MAX_STEPS = 2**22  # a decay too slow for that many steps is not probed: transient)


def _probe(task: Job, process, cells: dict, seed: int, rate: np.ndarray, floor: str | None, keep=None) -> np.ndarray:
    """Whether each noiseless cell stays once it has reached its floor, by running it again in
    float64 through its decay to the floor and what follows: the settled test with a span of
    ``PROBE_DECAYS / rate`` steps (``rate``: its loss's decay per step in its window), so that its
    window — the second half — lies past the floor, where a cycle near the floor stays and an
    escape (growth, divergence, a return above the target) does not. In float64 whatever the run's
    precision: float32 can round a decay's unstable components away (the run then sits at 0, which
    proves nothing).

    A homogeneous method (AB: scaling the state scales every step; only ε sets a scale) meets its
    floor where ε puts it, so the probe raises ``floor`` (the option, AB's ε) to ``PROBE_FLOOR ×
    target``: a loss far below the target, but reached soon; otherwise (``floor=None``: Adam, whose
    ε is a scale of its own) the cell runs as it is. A cell that does not decay (``rate`` ≤ 0)
    never reaches its floor and keeps its window's verdict; one that decays too slowly to be
    probed in ``PROBE_MAX_STEPS`` steps, or whose probe is rounded to the minimum exactly (a state
    it would never leave), is transient: the linear method it meets there is unstable."""
    stays = ~(rate > 0)
    budget = np.full(rate.size, np.inf)
    decays = rate > 0
    budget[decays] = np.maximum(np.ceil(PROBE_DECAYS / rate[decays]), PROBE_MIN_STEPS)
    probed = np.flatnonzero(decays & (budget <= PROBE_MAX_STEPS))
    if probed.size == 0:
        return stays
    options = task.options if floor is None else {**task.options, floor: PROBE_FLOOR * task.config.target}
    probe = task._replace(options=options, config=dataclasses.replace(task.config, x64=True, progress=False))
    values, span = {k: v[probed] for k, v in cells.items()}, budget[probed].astype(np.int64)
    out = (keep or unkept)({**values, "span": span})(lambda todo, kept: probe.run(  # resumable where kept
        process, {k: v[todo] for k, v in values.items()}, seed, [Settle(span[todo]), *kept]), probed.size)
    reached = out.status == REACHED
    rounded = (out.window == 0).any(1)  # rounded to w = 0 exactly, where it would stay: that proves nothing
    stays[probed] = reached & ~rounded & _windowed(values, out.steps, out.window, out.peak,
                                                   _span(probe, process, values, span), task.config.target)
    return stays


def _decay_rate(first: np.ndarray, window: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Each cell's decay rate per step over its settling window, minus the slope of ``log L``,
    where the loss decays beyond two standard errors of that slope (0 where it does not, or the
    window holds too few finite points; ∞ where it reached 0, past what the run's precision holds)."""
    _, stride, n0, n1 = settle_window(first, span)
    rate = np.zeros(first.size)
    for i in range(first.size):
        n = np.arange(n0[i], n1[i] + 1)
        loss = np.asarray(window[i, :n.size], np.float64)
        if n.size < 8 or not np.isfinite(loss).all():
            continue
        if (loss == 0).any():
            rate[i] = np.inf
            continue
        fall, error = slope(stride[i] * n, np.log(loss))
        rate[i] = -fall if -fall > 2 * error else 0.0
    return rate


def _near_zero_stays(task: Job, process, cells: dict, known) -> np.ndarray | None:
    """Per cell, whether the linear method ``known`` (a :class:`~nqm.optimizers.base.NearZero`)
    that ``task``'s becomes near the minimum is stable there (noisy cells: True, they never get
    there); ``None`` where no exact test applies to it (a worker pool: the window alone)."""
    options = {**{k: v for k, v in task.options.items() if k == "dampening"}, **known.options}
    base = task._replace(method=known.method, options=options)
    if not _exact(base, process):
        return None
    quiet = np.flatnonzero(np.asarray(cells["noise"], np.float64) == 0)
    stays = np.ones(np.size(cells["lr"]), bool)
    if quiet.size:
        values = {k: np.asarray(v, np.float64)[quiet] for k, v in cells.items()}
        mapped = known.hyper(values) if known.hyper is not None else values
        with np.errstate(divide="ignore", over="ignore"):
            stays[quiet] = _exactly(base, process, {"lr": np.asarray(mapped["lr"], np.float64),
                                                    "momentum": np.asarray(mapped["momentum"], np.float64),
                                                    "noise": np.zeros(quiet.size)})
    return stays


def cannot_settle(task: Job, process, values: dict) -> np.ndarray:
    """Per cell, whether it is known before running that it cannot settle (status 1): a linear
    method whose exact test fails (unstable at some eigenvalue, or a steady state at or above the
    target), or a noiseless run of a method that ends as an unstable linear one near the minimum.
    A search need not run such a point (:data:`nqm.status.SKIPPED`). Never with ``first_passage``.

    Args:
      task: the job.
      process: the delay process.
      values: per-cell arrays of ``lr``, ``momentum`` and ``noise``.

    Returns:
      A boolean array, one per cell.
    """
    size = np.size(values["lr"])
    if task.config.first_passage or size == 0:
        return np.zeros(size, bool)
    if _exact(task, process):
        return ~_exactly(task, process, values)
    known = near_zero(task.method)
    if known is None or known.floor is not None or any(_option(task, k) != v for k, v in known.when.items()):
        return np.zeros(size, bool)  # (a run that meets a floor may cycle there: only running it tells)
    ends = _near_zero_stays(task, process, values, known)
    return np.zeros(size, bool) if ends is None else ~ends


def _exactly(task: Job, process, cells: dict) -> np.ndarray:
    """Whether each cell stays, from the linear dynamics (see the module's docstring)."""
    lr, momentum, noise = (np.asarray(cells[k], np.float64) for k in ("lr", "momentum", "noise"))
    stays = np.ones(lr.size, bool)
    noisy = noise > 0
    dampening = bool(task.options.get("dampening", False))
    if np.count_nonzero(process.pmf()) > 1:  # iid delays
        # A single noiseless run stays when it is almost surely stable. Mean-square stability at every
        # eigenvalue (finite second moments, exact and fast) implies it; only the cells it leaves out
        # need the almost-sure threshold (a Lyapunov exponent's first crossing, seconds per momentum).
        quiet = np.flatnonzero(~noisy)
        unit = steady_state_loss(task.problem, task.method, process.label, lr[quiet], momentum[quiet],
                                 np.ones(quiet.size), dampening=dampening) if quiet.size else np.zeros(0)
        for i in quiet[~np.isfinite(unit)]:
            stays[i] = lr[i] * task.problem.eigenvalues.max() < _almost_sure(task.method, float(momentum[i]),
                                                                             process.label, dampening)
        rows = noisy
    else:
        rows = np.ones(lr.size, bool)
    if rows.any():
        level = steady_state_loss(task.problem, task.method, process.label, lr[rows], momentum[rows], noise[rows],
                                  dampening=dampening)
        stays[rows] = level < task.config.target
    return stays


@registry_cache(maxsize=256)
def _almost_sure(method: str, momentum: float, delay: str, dampening: bool) -> float:
    """The almost-sure threshold x* (a Lyapunov exponent's first crossing), once per setting, over a
    schedule of :data:`LYAPUNOV_STEPS` steps (a fifth of ``nqm threshold``'s: the cells that need it sit
    between the mean-square and the almost-sure thresholds, rare outside a sweep across the boundary)."""
    return float(threshold(method, momentum=momentum, delay=delay, criterion="almost-sure", dampening=dampening,
                           steps=LYAPUNOV_STEPS))


def _windowed(cells: dict, first: np.ndarray, window: np.ndarray, peak: np.ndarray, span: np.ndarray,
              target: float) -> np.ndarray:
    """Whether each cell stays, from the losses its settling window sampled (:func:`nqm.status.stays_below`):
    the steps n·stride, n0 ≤ n ≤ n1, of :func:`nqm.engine.step.settle_window` past its first
    passage ``first`` (a cell that diverged on the way is transient already); without noise, its
    level is the window's ``peak`` (every step, so that a burst between two samples counts)."""
    _, stride, n0, n1 = settle_window(first, span)
    stays = np.zeros(first.size, bool)
    for i in range(first.size):
        n = np.arange(n0[i], n1[i] + 1)
        noisy = bool(cells["noise"][i] > 0)
        stays[i] = stays_below(window[i, :n.size], stride[i] * n, noisy, target) and (noisy or peak[i] < target)
    return stays


def stay_steps(task: Job, process, values: dict, seed: int, steps: np.ndarray, status: np.ndarray) -> np.ndarray:
    """``steps_stay``: the first step after which the loss stays below the target — one more than its
    last exit (the last step with ``L(w_t) >= target``) — for each settled noiseless cell; NaN where
    it is not defined here (a run that does not settle, or a single noisy run, whose loss keeps
    crossing the target of its stationary level: there is no such step to report).

    A linear method under a constant delay (where the exact test applies) is continued to the step S
    from which its closed form proves the loss below the target for good
    (:func:`nqm.expected.api.stays_from`; all such cells to the largest S): the last exit before it
    is the last one, exactly (up to the run's float rounding). Any other run — or one whose closed form
    proves nothing — is continued to a horizon ``H`` (at least ``2·T + 1000`` steps) that is doubled
    until its loss stays below the target with a non-growing envelope over the second half (the
    settled test's window): the last exit before ``H`` is then the last one. A run that still leaves
    the target after ``STAY_DOUBLINGS`` doublings gets NaN: its loss keeps coming back (e.g. Adam's
    bursts once its second moment has decayed), however well its settling window looked.

    Args:
      task: the job the cells ran under.
      process: their delay process.
      values: per-cell hyperparameter arrays (``lr``, ``momentum``, ``noise``, …).
      seed: the seed they ran with.
      steps: their first passages.
      status: their statuses after the settled test (only settled noiseless cells are continued).

    Returns:
      ``steps_stay`` per cell (float; NaN where not defined).
    """
    status, steps = np.asarray(status), np.asarray(steps)
    out = np.full(status.shape, np.nan)
    rows = np.flatnonzero((status == REACHED) & (np.asarray(values["noise"], np.float64) == 0))
    if rows.size == 0:
        return out
    cells = {k: np.asarray(v)[rows] for k, v in values.items()}

    def continued(group, budget):  # the group run to ``budget``: its last exits, and whether each stays
        stride = max(1, budget // WINDOW_POINTS)
        config = dataclasses.replace(task.config, target=-1.0, max_steps=budget, progress=False)
        run = task._replace(config=config).run(
            process, {n: v[group] for n, v in cells.items()}, seed,
            [Trace({"loss": record.loss, "last_exit": Last(record.Exceeds(float(task.config.target)))}, stride)])
        t = stride * np.arange(1, run.trace["loss"].shape[1] + 1)
        window = t > budget / 2
        stays = np.array([run.status[i] != DIVERGED and stays_below(run.trace["loss"][i, window], t[window], False,
                                                                     task.config.target) for i in range(group.size)])
        return run.summary["last_exit"] + 1, stays, run.status != DIVERGED

    proven = _proven(task, process, cells)
    certain = np.flatnonzero(proven > 0)
    if certain.size:  # one horizon for them all: one compilation (each one's exits end before its own)
        stay, _, kept = continued(certain, int(proven[certain].max()))
        out[rows[certain[kept]]] = stay[kept]
    # Each cell's horizon depends on its own T only (its settling horizon, doubled), never on the
    # cells beside it: a cell's steps_stay is the same in any grid.
    first, pending = settle_window(steps[rows])[0], np.flatnonzero(proven == 0)
    for doubling in range(STAY_DOUBLINGS + 1):  # what is pending after the last keeps leaving the target
        horizons, still = np.minimum(first[pending] << doubling, MAX_STEPS), []
        for budget in np.unique(horizons):
            group, budget = pending[horizons == budget], int(budget)
            stay, done, _ = continued(group, budget)
            out[rows[group[done]]] = stay[done]
            if budget < MAX_STEPS:  # no longer horizon to try
                still.append(group[~done])
        pending = np.concatenate(still) if still else pending[:0]
        if not pending.size:
            break
    return out


def _proven(task: Job, process, cells: dict) -> np.ndarray:
    """Per noiseless cell, the step from which its closed form proves the loss below the target for
    good (0: none — not a linear method under a constant delay, or nothing proven)."""
    lr = np.asarray(cells["lr"], np.float64)
    if not _exact(task, process) or np.count_nonzero(process.pmf()) != 1:
        return np.zeros(lr.size, np.int64)
    return stays_from(task.problem, task.method, process.label, lr, np.asarray(cells["momentum"], np.float64),
                      target=float(task.config.target), dampening=bool(task.options.get("dampening", False)))


EXACT_STEADY_WORK = 2**30  # components × (delays + 2)² per cell: the exact steady state's cost (seconds) at most


def _exact(task: Job, process) -> bool:
    """Whether the exact test decides this run's cells: also, whether its steady state costs seconds
    per cell (the step-down recursion is quadratic in the delay); past that the continued test does."""
    pmf = delays.pmf(process)
    if pmf is not None and task.problem.dim * (pmf.size + 1) ** 2 > EXACT_STEADY_WORK:
        return False
    return _exact_for(task.method, tuple(sorted(task.options.items())), process.label)


@registry_cache(maxsize=64)
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
