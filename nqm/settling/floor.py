"""What a noiseless run becomes near the minimum, and the probe of its floor.

A noiseless run whose loss decays in its window goes on towards the minimum, where some methods
become linear ones (:class:`nqm.optimizers.base.NearZero`): AB is SGDM once ``‖g‖‖v‖ < ε``, Adam
steps by ``lr/ε`` once ``√v̂ < ε``, DC-ASGD's correction vanishes. Where that linear method is stable
(its exact test, :mod:`nqm.settling.exact`), the run stays. Where it is not:

* approached only in the limit (DC-ASGD), the run is transient;
* below a floor, the linear method's unstable components grow until the method holds them again —
  a cycle near the floor, which stays — or they escape. A **floor probe** tells which:

  - a *homogeneous* method (AB: scaling the state scales every step, only ε sets a scale), by the
    **subspace probe**: once the run is past its floor, only the components where the linear method
    is unstable remain (the others decay under it), so the method is run on those alone — the
    eigenvalues ``λ ≥ x*/η`` at and above the linear method's first unstable ``x*`` (its exact
    threshold), each cell from ``w₀ = 1`` on its own — in float64, with ε raised to
    :data:`PROBE_FLOOR` × the target, for ``max(h, 8 T_p)`` steps (``T_p`` its own first passage),
    and judged by the window over the second half: a loss that stays below the target there and does
    not grow stays (a cycle near the floor); one that is above the target at some step and does not
    clearly decay escapes (it grows, or keeps coming back above), as does one that diverges. The
    rest is not decided yet — a slow cycle caught on its rise far below the target, a ringing decay
    from ``w₀`` not yet below it — and is probed again with ``h`` four times longer (``h =
    PROBE_STEPS, 4 PROBE_STEPS, …``) while the cell's work limit allows. It depends on the cell's
    settings alone, and a step costs what those few components cost;
  - any other (Adam; AB with groups on a rotated problem), by running the cell again in float64
    through its decay to the floor and what follows (the **full probe**: a run past T of
    ``max(PROBE_DECAYS / rate, 2^14)`` steps, ``rate`` the decay per step its window showed).

Either probe takes at most the work its cell has left under the work limit (``work_limit ×
max(max_steps, 1000)`` steps less the longest run its window allows), a step on k of the problem's N
eigencomponents counting k/N: a probe that does not fit leaves its cell ``UNDECIDED``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nqm.checkpoint import unkept
from nqm.conventions import family
from nqm.optimizers.base import near_zero, options, registry_cache
from nqm.problem import explicit
from nqm.settling import exact
from nqm.settling.window import PROBE_FIRSTS, Window, probe_horizons, settling_span, stays
from nqm.status import REACHED, UNDECIDED, grows, slope
from nqm.thresholds.derived import threshold
from nqm.validate import MAX_STEPS

PROBE_FLOOR = 1e-4  # a floor probe raises a homogeneous method's floor to this fraction of the target
PROBE_STEPS = 2**14  # the subspace probe's least horizon
PROBE_DECAYS = 4 * float(np.log(1e6))  # the full probe runs the time its loss takes to fall 10⁶-fold 4 times over
PROBE_MIN_STEPS = 2**14  # (at least this many; a decay past the run's precision has rate ∞)


def linear_near_zero(task):
    """The :class:`~nqm.optimizers.base.NearZero` of ``task``'s method where it holds under the
    job's options, else ``None``."""
    known = near_zero(task.method)
    if known is None or any(_option(task, k) != v for k, v in known.when.items()):
        return None
    return known


def _option(task, name: str):
    """The value of the method's option ``name`` in ``task`` (its default where not given)."""
    return task.options.get(name, options(family(task.method))[name].default)


def _linear_job(task, known):
    """The job of the linear method ``task``'s becomes near the minimum (its momentum convention kept)."""
    chosen = {**{k: v for k, v in task.options.items() if k == "dampening"}, **known.options}
    return task._replace(method=known.method, options=chosen)


def _mapped(known, cells: dict) -> dict:
    """The linear method's lr and momentum per cell (float64)."""
    values = {k: np.asarray(v, np.float64) for k, v in cells.items()}
    mapped = known.hyper(values) if known.hyper is not None else values
    return {"lr": np.asarray(mapped["lr"], np.float64), "momentum": np.asarray(mapped["momentum"], np.float64)}


def linear_job(task, known):
    """The job of the linear method ``task``'s becomes near the minimum (its momentum convention kept).

    Args:
      task: the job.
      known: its method's :class:`~nqm.optimizers.base.NearZero`.

    Returns:
      The linear method's :class:`~nqm.jobs.Job`.
    """
    return _linear_job(task, known)


def ends_stable(task, process, cells: dict, known) -> np.ndarray:
    """Per cell, whether the linear method ``known`` that ``task``'s becomes near the minimum is
    stable there (noisy cells: True, they never get there), by its exact test (which must apply:
    :func:`nqm.settling.exact.applies` of :func:`linear_job`).

    Args:
      task: the job.
      process: the delay process.
      cells: per-cell arrays of the method's hyperparameters and ``noise``.
      known: the method's :class:`~nqm.optimizers.base.NearZero`.

    Returns:
      A bool per cell.
    """
    base = _linear_job(task, known)
    quiet = np.flatnonzero(np.asarray(cells["noise"], np.float64) == 0)
    result = np.ones(np.size(cells["lr"]), bool)
    if quiet.size:
        mapped = _mapped(known, {k: np.asarray(v)[quiet] for k, v in cells.items()})
        with np.errstate(divide="ignore", over="ignore"):
            result[quiet] = exact.stays(base, process, {**mapped, "noise": np.zeros(quiet.size)})
    return result


def by_subspace(task, known) -> bool:
    """Whether ``task``'s floor is probed on the unstable subspace (a homogeneous method whose
    dynamics on the eigencomponents alone are its dynamics on the problem), else by the full probe."""
    return known.floor is not None and known.homogeneous and _subspace_holds(task)


@registry_cache(maxsize=1024)
def _edge(method: str, momentum: float, delay, criterion: str, dampening: bool) -> float:
    """The linear method's first unstable x* at ``momentum``, once per setting."""
    return float(threshold(method, momentum=momentum, delay=delay, criterion=criterion, dampening=dampening))


def _subspace_holds(task) -> bool:
    """Whether the method's dynamics on the eigencomponents alone are its dynamics on the problem:
    rotation-invariant (global braking), or an axis-aligned problem (any grouping of coordinates)."""
    return task.problem.rotation is None or _option(task, "group") == "global"


def unstable_from(task, process, cells: dict, known) -> np.ndarray:
    """Per cell, the least eigenvalue at which the linear method near the minimum is unstable,
    ``x*/η``: its first unstable ``x*`` (the exact threshold; under iid delays the mean-square one,
    the first to fail) at the cell's momentum, over its learning rate.

    Args:
      task: the job.
      process: the delay process.
      cells: per-cell arrays.
      known: the method's :class:`~nqm.optimizers.base.NearZero`.

    Returns:
      float64 per cell.
    """
    mapped = _mapped(known, cells)
    base = _linear_job(task, known)
    criterion = "mean" if np.count_nonzero(process.pmf()) == 1 else "mean-square"
    dampening = bool(base.options.get("dampening", False))
    edges = {m: _edge(base.method, float(m), process, criterion, dampening) for m in np.unique(mapped["momentum"])}
    return np.array([edges[m] for m in mapped["momentum"]]) / mapped["lr"]


def subspace(task, process, cells: dict, seed: int, known, allowance: int, keep=None) -> tuple:
    """The subspace probe of each cell (module docstring): its verdict depends on the cell's settings
    alone, so a test may probe every cell it may need at once.

    Args:
      task: the job.
      process: the delay process.
      cells: the cells' values (noiseless; their linear method near the minimum unstable).
      seed: the seed (a probe under iid delays draws the same schedule).
      known: the method's :class:`~nqm.optimizers.base.NearZero`.
      allowance: the work each may take, in steps of the whole problem: a step of the probe on k of
        its N eigencomponents counts k/N.
      keep: keeps the probe resumable in a sweep's checkpoint (:meth:`nqm.checkpoint.Checkpointer.nested`).

    Returns:
      ``(stays, undecided)``: bools per cell.
    """
    lam = task.problem.eigenvalues
    least = unstable_from(task, process, cells, known)
    # Each cell's subproblem: the top eigenvalues, as many as the least power of two (at least 8) that
    # holds its own unstable ones — it starts at 1 on those and at 0 on the rest, which then stay 0.
    # Cells of one size run together (few sizes, few compilations), whatever else the sweep holds.
    count = (lam[None, :] >= least[:, None] * (1 - 1e-12)).sum(1)
    sizes = np.minimum(lam.size, [max(8, 1 << max(int(c) - 1, 0).bit_length()) for c in count])
    stays_, undecided = np.zeros(least.size, bool), np.ones(least.size, bool)
    for size in np.unique(sizes):
        rows = np.flatnonzero(sizes == size)
        part = {k: np.asarray(v)[rows] for k, v in cells.items()}
        stays_[rows], undecided[rows] = _subspace_run(task, process, part, seed, known, allowance, keep, least[rows],
                                                      int(size))
    return stays_, undecided


def _subspace_run(task, process, cells: dict, seed: int, known, allowance: int, keep, least, dim: int) -> tuple:
    """The subspace probes of cells whose subproblems are the top ``dim`` eigenvalues."""
    count = np.size(cells["lr"])
    lam = task.problem.eigenvalues
    kept = np.zeros(lam.size, bool)
    kept[np.argsort(-lam, kind="stable")[:dim]] = True
    start = (lam[kept][None, :] >= least[:, None] * (1 - 1e-12)).astype(np.float64)
    allowance = int(min(allowance * lam.size // dim, MAX_STEPS))  # in the probe's own steps
    if allowance < PROBE_STEPS:  # not even the least probe fits
        return np.zeros(count, bool), np.ones(count, bool)
    chosen = {**task.options, known.floor: PROBE_FLOOR * task.config.target}
    group = chosen.get("group")
    if group is not None and not (isinstance(group, str) and group in ("global", "element")):
        chosen["group"] = _restricted_groups(group, lam.size, kept)
    # Its own first passage within the run's budget (or the least horizon), its window within the allowance.
    first_passage = max(1, min(allowance // PROBE_FIRSTS, max(task.config.max_steps, PROBE_STEPS)))
    config = dataclasses.replace(task.config, x64=True, progress=False, max_steps=first_passage)
    job = task._replace(options=chosen, problem=explicit(lam[kept]), config=config)
    stays_, undecided = np.zeros(count, bool), np.ones(count, bool)
    todo, spent, probe = np.arange(count), np.zeros(count, np.int64), PROBE_STEPS
    while todo.size:  # each round from w₀ again, four times longer: at most 4/3 of the last round's work
        rule = Window(probe=True, longest=probe, spans=np.full(todo.size, probe), going=np.ones(todo.size, bool),
                      limits=np.maximum(1, allowance - spent[todo]), noisy=np.zeros(todo.size, bool))
        out = _kept_run(job, process, {k: np.asarray(v)[todo] for k, v in cells.items()}, seed, rule, keep,
                        start[todo])
        verdict = _probed(out, task.config.target, probe)
        stays_[todo], undecided[todo] = verdict == _STAYS, verdict == _UNDECIDED
        spent[todo] += probe_horizons(np.asarray(out.steps, np.int64), probe)[0]
        todo = todo[verdict == _OPEN]
        probe *= 4
    return stays_, undecided


def _restricted_groups(group, dim: int, kept: np.ndarray) -> np.ndarray:
    """The braking groups of the kept coordinates, as a partition (labels 0, 1, …)."""
    labels = (np.arange(dim) * int(group.split(":", 1)[1])) // dim if isinstance(group, str) else np.asarray(group)
    return np.unique(labels[kept], return_inverse=True)[1]


def full(task, process, cells: dict, seed: int, rate: np.ndarray, known, allowance: int, keep=None) -> tuple:
    """The full probe of each cell (module docstring).

    Args:
      task: the job.
      process: the delay process.
      cells: the cells' values (noiseless, decaying in their windows; their linear method near the
        minimum unstable).
      seed: the seed they ran with.
      rate: their windows' decay rates per step (> 0).
      known: the method's :class:`~nqm.optimizers.base.NearZero`.
      allowance: the steps each may still take.
      keep: keeps the probe resumable in a sweep's checkpoint.

    Returns:
      ``(stays, undecided)``: bools per cell.
    """
    size = np.size(cells["lr"])
    span = np.maximum(np.ceil(PROBE_DECAYS / rate), PROBE_MIN_STEPS)
    span = np.where(np.isfinite(span), span, PROBE_MIN_STEPS).astype(np.int64)
    chosen = task.options if not known.homogeneous else {**task.options, known.floor: PROBE_FLOOR * task.config.target}
    config = dataclasses.replace(task.config, x64=True, progress=False, max_steps=max(1, allowance))
    job = task._replace(options=chosen, config=config)
    own = settling_span(job.optimizer(process), {k: cells[k] for k in job.optimizer(process).hyper._fields})
    spans = np.maximum(span, own)
    rule = Window(longest=int(spans.max()), spans=spans, limits=np.full(size, max(1, allowance)),
                  going=np.ones(size, bool), noisy=np.zeros(size, bool))
    out = _kept_run(job, process, cells, seed, rule, keep, None)
    return _judged(out, task.config.target)


def _kept_run(job, process, cells: dict, seed: int, rule, keep, start):
    """A probe's run, resumable where ``keep`` keeps it (a sweep's checkpoint)."""
    identity = {**cells, "probe": np.asarray(int(rule.probe)), "limit": np.asarray(rule.limits),
                "span": np.asarray(rule.spans)}
    return (keep or unkept)(identity)(lambda todo, kept: job.run(
        process, {k: np.asarray(v)[todo] for k, v in cells.items()}, seed, kept,
        stop=dataclasses.replace(rule, **{f: getattr(rule, f)[todo] for f in ("spans", "limits", "going", "noisy")}),
        start=None if start is None else start[todo]), np.size(cells["lr"]))


_STAYS, _ESCAPES, _OPEN, _UNDECIDED = range(4)


def _probed(out, target: float, probe: int) -> np.ndarray:
    """A subspace probe's verdicts from its outcome (module docstring), per cell one of ``_STAYS``,
    ``_ESCAPES``, ``_OPEN`` (probe again, longer) and ``_UNDECIDED`` (its window did not fit)."""
    status = np.asarray(out.status)
    verdict = np.where(status == UNDECIDED, _UNDECIDED, _ESCAPES)
    first = np.asarray(out.steps, np.int64)
    _, stride, n0, n1 = probe_horizons(first, probe)
    for i in np.flatnonzero(status == REACHED):
        t = stride[i] * np.arange(n0[i], n1[i] + 1)
        loss = np.asarray(out.stop.window[i, :t.size], np.float64)
        if not np.isfinite(loss).all() or (loss == 0).any():  # rounded to 0 proves nothing: the safer error
            continue
        if float(out.stop.peak[i]) < target:  # a rise far below the target may be a slow cycle's
            verdict[i] = _OPEN if grows(loss, t) else _STAYS
        else:  # above it: still coming down from w₀, or out
            fall, error = slope(t, np.log(loss))
            verdict[i] = _OPEN if fall + 2 * error < 0 else _ESCAPES
    return verdict


def _judged(out, target: float) -> tuple:
    """The full probe's verdicts from its outcome: ``(stays, undecided)``. It stays where its window
    ran to its end and stays (a probe rounded to exactly 0, a state it would never leave, proves
    nothing: transient, the safer error); it is undecided where its window did not fit; otherwise (it
    diverged, never came down to the target, or left it) it does not stay."""
    status = np.asarray(out.status)
    undecided = status == UNDECIDED
    reached = status == REACHED
    result = np.zeros(status.size, bool)
    if reached.any():
        state = type(out.stop)(*(np.asarray(x)[reached] for x in out.stop))
        ok, _ = stays(np.zeros(int(reached.sum())), np.asarray(out.steps)[reached], state, target)
        rounded = (np.asarray(state.window) == 0).any(1)
        result[reached] = ok & ~rounded
    return result, undecided
