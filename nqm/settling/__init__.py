"""Settled or transient: whether a run that reached the target stays there — the settled test, as one
object chosen once per (method, delay process).

The engine finds each cell's first passage (the first step with ``L(w_t) < target``). A converged
cell is one that also *stays*: status 1, **settled**, when its long-run loss level is below the
target — the lim sup of its loss without noise, its stationary mean with noise — and status 2,
**transient**, when it reached the target but leaves it, or would: it rises back, diverges, or is
asymptotically unstable. The decision is asymptotic, never by the budget. Where it cannot be made
within the work the run allows (``work_limit × max_steps`` steps per cell, everything included),
the cell is status 3, **undecided**: never a silent guess.

:func:`choose` picks the test of a job under a delay process, once:

* **first passage** (``first_passage=True``): status 1 is the first passage; no test;
* **exact** — a linear method under a constant or iid delay whose steady state fits the budgets of
  time and memory (:mod:`nqm.settling.exact`): from its own dynamics, with no step past T;
* **continued** — any other (AB, DC-ASGD, restart, Adam and the other optax methods, worker pools,
  a periodic method, an exact test that would not fit): the run steps on past T under the stop rule
  :class:`~nqm.settling.window.Window` (a look at ``1.25·T + 250`` that settles a run which clearly
  decays — or, with noise, whose level is clearly below the target — and otherwise the window to
  ``2·T + 1000`` or more), then, for a noiseless run that becomes an unstable linear method near the
  minimum, a floor probe (:mod:`nqm.settling.floor`). The cells at which the method *is* a linear
  one (AB at ρ = 0 is SGDM: its registered reductions, checked for the job's options) are judged by
  the exact test and stop at T.

The object then gives the engine its stop rule (:meth:`SettledTest.rule`), turns an outcome into
statuses (:meth:`SettledTest.decide`), says which cells cannot settle before running them
(:meth:`SettledTest.cannot_settle`) and describes itself (``settled_test``, in every result).
What each certificate proves and what it cannot: docs/conventions.md.

With iterate averaging (an ``ema`` among a cell's values) every test reads ŵ, the average: the exact
test its level (its stability is the raw iterate's), the window its loss. With a learning-rate
schedule (the job's, :mod:`nqm.schedules`) a run is judged in the schedule's final regime: the exact
test at the final factor (where that is 0, at the level where the run stopped), the continued test's
look and window never before twice the schedule's last breakpoint (so that the second half each reads
lies past it), and no floor probe (the window alone decides, as for a worker pool).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from nqm.delays import Process
from nqm.engine import FirstPassage, Outcome, StopRule
from nqm.errors import NqmError
from nqm.jobs import Job
from nqm.optimizers import make
from nqm.optimizers.base import StepContext, reductions, registry_cache
from nqm.problem import explicit
from nqm.settling import exact, floor
from nqm.settling.stay import stay_steps
from nqm.settling.window import Window, horizons, settling_span, stays
from nqm.status import CONTINUE, REACHED, TRANSIENT, UNDECIDED
from nqm.validate import MAX_STEPS

EXACT = "exact: the linear dynamics' steady state and stability at every eigenvalue"
CONTINUED = ("continued: the run goes on past T to a look at 1.25·T + 250 steps (T + 32 × the optimizer's memory + 250 "
             "where it keeps moment estimates), which settles it where its loss clearly falls (with noise: its level "
             "is clearly below the target), else to a window of at least 2·T + 1000 steps (64 × the memory) read over "
             "its second half: it stays if its loss does not grow and its level is below the target (without noise its "
             "largest value at any step, with noise its mean); a noiseless run of a method that becomes an unstable "
             "linear one near the minimum (AB, DC-ASGD: SGDM) is then judged past its floor by a probe")
SKIPPED = "none: first_passage=True, status 1 is the first passage"
KINDS = ("first passage", "exact", "continued")

__all__ = ["SettledTest", "choose", "stay_steps"]


@dataclasses.dataclass(frozen=True, eq=False)
class SettledTest:
    """The settled test of a job under a delay process (module docstring); make it with :func:`choose`.

    Attributes:
      task: the job.
      process: the delay process.
      kind: ``"first passage"``, ``"exact"`` or ``"continued"``.
      linear: the linear job that judges the exact cells (the method itself, or what it reduces to),
        or ``None``.
      reduced: the hyperparameter values, ``((name, value), …)``, at which a continued method is
        ``linear`` (its cells there are exact); ``()`` where none.
      why_not_exact: why a method the exact test takes is continued here (its cost), or ``None``.
      limit: the last step a cell may reach, its test included (``work_limit × max(max_steps, 1000)``:
        a window runs at least 1,000 steps past T, whatever the budget).
      near_zero: what a continued method's noiseless runs become near the minimum
        (:class:`~nqm.optimizers.base.NearZero`) where the exact test judges that linear method
        under this delay, else ``None`` (the window alone decides).
    """

    task: Job
    process: Process
    kind: str
    linear: Job | None = None
    reduced: tuple = ()
    why_not_exact: str | None = None
    limit: int = 0
    near_zero: object = None  # the NearZero whose linear method the exact test judges near the minimum, or None
    known: dict = dataclasses.field(default_factory=dict, repr=False)  # the linear verdicts found so far

    def prepare(self, values: dict) -> None:
        """Find, in one batch, the linear verdicts :meth:`decide` will need for these cells (the exact
        cells' own, and for noiseless continued cells their linear method's near the minimum), so that
        each later call on some of them looks them up (one computation, not one per finished batch).

        Args:
          values: per-cell arrays of the hyperparameters and ``noise``.
        """
        cells = {k: np.asarray(v) for k, v in values.items()}
        judged = self.exact_cells(cells)
        self._exact_stays({k: v[judged] for k, v in cells.items()})
        rest = {k: v[~judged] for k, v in cells.items()}
        ends = self._ends(rest)
        self.known.pop("candidates", None)
        if ends is not None:  # the cells a floor probe may judge, probed together on first need
            quiet = ~ends & (np.asarray(rest["noise"], np.float64) == 0)
            self.known["candidates"] = {k: v[quiet] for k, v in rest.items()}

    def _memo(self, kind: str, cells: dict, compute) -> np.ndarray:
        """``compute(cells)`` per cell, each cell's found once (by its values) and kept."""
        size = np.size(cells["lr"])
        names = sorted(cells)
        keys = [(kind,) + tuple(float(cells[n][i]) for n in names) for i in range(size)]
        missing = [i for i, key in enumerate(keys) if key not in self.known]
        if missing:
            found = compute({k: np.asarray(v)[missing] for k, v in cells.items()})
            if found is None:
                return None
            self.known.update(zip((keys[i] for i in missing), np.asarray(found, bool)))
        return np.array([self.known[key] for key in keys], bool)

    def _exact_stays(self, cells: dict) -> np.ndarray:
        """The exact test's verdict per cell (:func:`nqm.settling.exact.stays`)."""
        if np.size(cells["lr"]) == 0:
            return np.zeros(0, bool)
        return self._memo("exact", cells, lambda c: exact.stays(self.linear, self.process, c))

    def _ends(self, cells: dict) -> np.ndarray | None:
        """Per cell, whether the linear method it becomes near the minimum is stable (``None``: no
        exact test of it here; :func:`nqm.settling.floor.ends_stable`)."""
        if self.near_zero is None:
            return None
        if np.size(cells["lr"]) == 0:
            return np.zeros(0, bool)
        return self._memo("ends", cells, lambda c: floor.ends_stable(self.task, self.process, c, self.near_zero))

    @property
    def description(self) -> str:
        """What the test is, in a sentence: a result's ``settled_test`` attribute."""
        if self.kind == "first passage":
            return SKIPPED
        if self.kind == "exact":
            return EXACT + (f", in schedule {self.task.schedule.label}'s final regime" if scheduled(self.task) else "")
        text = CONTINUED
        if self.reduced:
            at = ", ".join(f"{name} = {value:g}" for name, value in self.reduced)
            text += f"; cells at {at} ({self.linear.method}): {EXACT}"
        if self.why_not_exact:
            text += f" (not exact: {self.why_not_exact})"
        if scheduled(self.task):
            last, _ = self.task.schedule.regime(self.limit)
            text += f"; with schedule {self.task.schedule.label}, from twice its last breakpoint ({last:,}) on, no floor probe"
        return text + f"; undecided past {self.task.config.work_limit:g} × the budget"

    def exact_cells(self, values: dict) -> np.ndarray:
        """Per cell, whether the exact test judges it.

        Args:
          values: per-cell arrays of the method's hyperparameters.

        Returns:
          A bool per cell.
        """
        size = np.size(values["lr"])
        if self.kind == "exact":
            return np.ones(size, bool)
        if not self.reduced:
            return np.zeros(size, bool)
        return np.logical_and.reduce([np.asarray(values[k], np.float64) == v for k, v in self.reduced]
                                     + [np.ones(size, bool)])

    def rule(self, values: dict) -> StopRule:
        """The engine's stop rule for these cells: the first passage, or the continued test's window
        (:class:`~nqm.settling.window.Window`) for the cells it judges.

        Args:
          values: per-cell arrays of the hyperparameters and ``noise``.

        Returns:
          A :class:`~nqm.engine.stop.StopRule`.
        """
        going = ~self.exact_cells(values)
        if self.kind != "continued" or not going.any():
            return FirstPassage()
        spans = self._spans(values)
        size = going.size
        return Window(longest=int(spans[going].max(initial=0)), spans=spans, limits=np.full(size, self.limit),
                      going=going, noisy=np.asarray(values["noise"], np.float64) > 0)

    def _spans(self, values: dict) -> np.ndarray:
        optimizer = self.task.optimizer(self.process)
        spans = settling_span(optimizer, {k: np.asarray(values[k]) for k in optimizer.hyper._fields})
        if scheduled(self.task):  # the look's and the window's second halves past the last breakpoint
            last, _ = self.task.schedule.regime(self.limit)
            spans = np.maximum(spans, min(2 * last, MAX_STEPS))
        return spans

    def decide(self, values: dict, outcome: Outcome, seed: int = 0, keep=None) -> np.ndarray:
        """The statuses of ``outcome`` (run with :meth:`rule`) after the test: each reached cell (1)
        that does not stay below the target made transient (2), or undecided (3) where the work
        limit left its test unfinished.

        Args:
          values: per-cell arrays of the hyperparameters and ``noise``, as the engine got them.
          outcome: the engine's results of those cells.
          seed: the seed they ran with (a floor probe under iid delays draws the same schedule).
          keep: keeps a floor probe resumable in a sweep's checkpoint (:meth:`nqm.checkpoint.Checkpointer.nested`).

        Returns:
          The statuses (int8).

        Raises:
          NqmError: a continued test on an outcome run without its stop rule.
        """
        status = np.array(outcome.status, np.int8, copy=True)
        if self.kind == "first passage":
            return status
        reached = status == REACHED
        cells = {k: np.asarray(v) for k, v in values.items()}
        judged = np.flatnonzero(reached & self.exact_cells(cells))
        if judged.size:
            ok = self._exact_stays({k: v[judged] for k, v in cells.items()})
            status[judged[~ok]] = TRANSIENT
        rows = np.flatnonzero(reached & ~self.exact_cells(cells))
        if rows.size == 0:
            return status
        if outcome.stop is None:
            raise NqmError("the continued settled test reads what its stop rule kept: run the engine with "
                           "stop=test.rule(values)")
        state = type(outcome.stop)(*(np.asarray(x)[rows] for x in outcome.stop))
        part = {k: v[rows] for k, v in cells.items()}
        ok, rate = stays(part["noise"], np.asarray(outcome.steps)[rows], state, self.task.config.target)
        ok, undecided = self._floor(part, ok, rate, seed, keep)
        status[rows[~ok]] = TRANSIENT
        status[rows[undecided]] = UNDECIDED
        return status

    def _floor(self, cells: dict, ok: np.ndarray, rate: np.ndarray, seed: int, keep) -> tuple:
        """``ok`` less the noiseless cells that leave the target once past their floor, and which
        cells a probe that did not fit leaves undecided (:mod:`nqm.settling.floor`)."""
        undecided = np.zeros(ok.size, bool)
        ends = self._ends(cells)
        if ends is None:
            return ok, undecided
        doubtful = np.flatnonzero(ok & ~ends & (rate > 0))  # a cell that does not decay never gets there
        if doubtful.size == 0:
            return ok, undecided
        known, ok = self.near_zero, ok.copy()
        if known.floor is None:  # approached only in the limit: the unstable linear method is what remains
            ok[doubtful] = False
            return ok, undecided
        spans = self._spans(cells)[doubtful]
        for span in np.unique(spans):  # each cell's allowance is its own: the limit past its longest window
            group = doubtful[spans == span]
            allowance = self.limit - min(self.limit, int(horizons(self.task.config.max_steps, span)[0]))
            part = {k: v[group] for k, v in cells.items()}
            if floor.by_subspace(self.task, known):
                stays_, left = self._subspace(part, seed, allowance, keep)
            else:
                stays_, left = floor.full(self.task, self.process, part, seed, rate[group], known, allowance, keep)
            ok[group], undecided[group] = stays_ & ~left, left
        return ok, undecided

    def _subspace(self, cells: dict, seed: int, allowance: int, keep) -> tuple:
        """The subspace probe's verdicts of ``cells``: probed once, together with every other cell
        of the part that may need it (:meth:`prepare`), in one run; looked up after."""
        names = sorted(cells)

        def keys(part):
            return [("probe", seed, allowance) + tuple(float(part[n][i]) for n in names)
                    for i in range(np.size(part["lr"]))]

        wanted = keys(cells)
        if any(k not in self.known for k in wanted):
            pending = self.known.pop("candidates", None) or {n: np.zeros(0) for n in names}
            pool = {n: np.concatenate([np.asarray(cells[n], np.float64), np.asarray(pending[n], np.float64)])
                    for n in names}
            seen, todo = set(), []
            for i, k in enumerate(keys(pool)):
                if k not in self.known and k not in seen:
                    seen.add(k)
                    todo.append(i)
            part = {n: v[todo] for n, v in pool.items()}
            stays_, left = floor.subspace(self.task, self.process, part, seed, self.near_zero, allowance, keep)
            self.known.update(zip(keys(part), zip(stays_, left)))
        verdicts = np.array([self.known[k] for k in wanted], bool).reshape(-1, 2)
        return verdicts[:, 0], verdicts[:, 1]

    def cannot_settle(self, values: dict) -> np.ndarray:
        """Per cell, whether it is known before running that it cannot settle (status 1): a linear
        method whose exact test fails (unstable at some eigenvalue, or a steady state at or above the
        target), or a noiseless run of a method that ends as an unstable linear one in the limit near
        the minimum (DC-ASGD). A search need not run such a point (:data:`nqm.status.SKIPPED`).
        Never with ``first_passage``.

        Args:
          values: per-cell arrays of ``lr``, ``momentum``, ``noise`` and the method's hyperparameters.

        Returns:
          A bool per cell.
        """
        size = np.size(values["lr"])
        result = np.zeros(size, bool)
        if self.kind == "first passage" or size == 0:
            return result
        cells = {k: np.broadcast_to(np.asarray(v), (size,)) for k, v in values.items()}
        judged = self.exact_cells(cells)
        if judged.any():
            result[judged] = ~self._exact_stays({k: v[judged] for k, v in cells.items()})
        known = self.near_zero
        rest = np.flatnonzero(~judged)
        if rest.size and known is not None and known.floor is None:  # a floor may hold it: only running tells
            ends = self._ends({k: v[rest] for k, v in cells.items()})
            if ends is not None:
                result[rest] = ~ends
        return result

    def stay_steps(self, values: dict, seed: int, steps, status) -> np.ndarray:
        """``steps_stay`` of these cells (:func:`nqm.settling.stay.stay_steps`)."""
        return stay_steps(self, values, seed, steps, status)


def choose(task: Job, process: Process) -> SettledTest:
    """The settled test of ``task``'s cells under ``process`` (module docstring): decided here, once.

    Args:
      task: the job.
      process: its delay process.

    Returns:
      The :class:`SettledTest`.
    """
    limit = int(min(math.ceil(task.config.work_limit * max(task.config.max_steps, CONTINUE)), MAX_STEPS))
    if task.config.first_passage:
        return SettledTest(task, process, "first passage", limit=limit)
    applies, why = exact.applies(task, process)
    if applies:
        return SettledTest(task, process, "exact", linear=task, limit=limit)
    known = floor.linear_near_zero(task)
    if known is not None and not exact.applies(floor.linear_job(task, known), process)[0]:
        known = None  # no exact test of what it becomes near the minimum here (a worker pool): the window decides
    if scheduled(task):
        known = None  # a probe would run the schedule from its start: the window, past the last breakpoint, decides
    for reduction in reductions(task.method):
        linear = task._replace(method=reduction.other,
                               options={k: v for k, v in task.options.items() if k == "dampening"})
        # A setting of the method's own hyperparameters at which it is another, whatever the delay.
        if reduction.hyper and not reduction.other_hyper and exact.applies(linear, process)[0] \
                and _steps_as(task.method, tuple(sorted(task.options.items())), tuple(reduction.hyper.items()),
                              reduction.other, tuple(sorted(linear.options.items()))):
            return SettledTest(task, process, "continued", linear=linear, reduced=tuple(reduction.hyper.items()),
                               why_not_exact=why, limit=limit, near_zero=known)
    return SettledTest(task, process, "continued", why_not_exact=why, limit=limit, near_zero=known)


def scheduled(task: Job) -> bool:
    """Whether ``task``'s cells run a learning-rate schedule other than the constant one."""
    return task.schedule is not None and not task.schedule.constant


@registry_cache(maxsize=64)
def _steps_as(method: str, options: tuple, hyper: tuple, other: str, other_options: tuple) -> bool:
    """Whether ``method`` with ``options``, at the hyperparameters ``hyper``, steps as ``other`` with
    ``other_options`` (a registered reduction, checked for these options: a clamp of AB's α, say,
    breaks AB at ρ = 0 = SGDM): 12 steps of both under a delay of 2 on a 3-dimensional quadratic,
    in float64."""
    lam = np.array([1.0, 0.5, 0.25])
    values = {"lr": 0.2, "momentum": 0.6, **dict(hyper)}
    with jax.enable_x64(True):
        try:
            runs = []
            for name, chosen in ((method, options), (other, other_options)):
                optimizer = make(name, delay=2, problem=explicit(lam), **dict(chosen))
                cell = optimizer.hyper(**{k: jnp.float64(values[k]) for k in optimizer.hyper._fields if k in values})
                history = [jnp.array([1.0, -0.5, 0.3])] * 3
                state = optimizer.init(history[-1])
                for t in range(12):
                    stale = history[-3]
                    w, state, _ = optimizer.step(cell, state, history[-1], jnp.asarray(lam) * stale,
                                                 StepContext(jnp.int32(t), jnp.int32(2), jnp.int32(0), stale))
                    history.append(w)
                runs.append(np.asarray(history[-1]))
        except (TypeError, ValueError, NqmError):
            return False
    return bool(np.allclose(runs[0], runs[1], rtol=1e-12, atol=1e-15))
