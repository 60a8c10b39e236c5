"""The exact mode's entry for the two choices of Zhang et al. beyond momentum and preconditioning —
an iterate average and a learning-rate schedule — between the public functions (:mod:`nqm.expected.api`)
and their evaluator (:mod:`nqm.expected.augmented`): their checks, one delay's run and its final
regime's level, and a sweep's cells laid into its result. Also the two readings every exact result
shares: the level ``E[L_∞]`` per cell and noise level, and the settled status it gives."""

from __future__ import annotations

import numpy as np

from nqm import schedules, validate
from nqm.errors import NqmError
from nqm.expected import augmented, reduced
from nqm.status import REACHED, TRANSIENT

STEADY_MEANING = ("E[L] as t → ∞; inf: no steady state (a constant delay: a root of the recursion on or outside "
                  "the unit circle; iid delays: the mean-square map's spectral radius >= 1), so E[L_t] does not settle")


def level(unit, sigma) -> np.ndarray:
    """``E[L_∞] = σ² V_∞`` per cell (rows) and noise level (columns), ∞ where there is no steady state."""
    with np.errstate(invalid="ignore"):  # ∞ · 0 where unstable and noiseless: still ∞
        return np.where(np.isinf(unit)[:, None], np.inf, unit[:, None] * np.asarray(sigma) ** 2)


def settled(status, level, target) -> np.ndarray:
    """The expected loss settles when its long-run level is below the target: a cell that reached
    the target with ``E[L_∞] >= target`` (or none) is transient."""
    return np.where((status == REACHED) & ~(level < target), TRANSIENT, status).astype(np.int8)


NO_STAY = "steps_stay is not computed with an iterate average or a schedule: leave stay out"


def rates(value, distinct: bool = True, one: bool = False) -> np.ndarray:
    """The averaging rates γ, checked (:data:`nqm.schedules.EMA`: each in [0, 1))."""
    gamma = validate.coordinates(distinct=distinct, domains={"ema": schedules.EMA}, ema=value)["ema"]
    if one and gamma.size != 1:
        raise NqmError("give one averaging rate ema here, not a list")
    return gamma


def dimensions(coords: dict, ema, schedule, stay: bool) -> list:
    """Add a sweep's ``schedule`` and ``ema`` dimensions to ``coords`` where given (checked) and
    return its schedules, one run each (``[None]``: no schedule dimension)."""
    plans = [None]
    if schedule is not None:
        coords["schedule"], plans = schedules.coordinate(schedule)
    if ema is not None:
        coords["ema"] = rates(ema)
    if stay and (ema is not None or schedule is not None):
        raise NqmError(NO_STAY)
    return plans


def steady_state(problem, method, process, flat: dict, gamma, schedule, *, dampening, bins, power, horizon, hyper,
                 options) -> np.ndarray:
    """``E[L_∞]`` per cell (``flat``: its lr, momentum and noise) with an average and/or a schedule: the
    final regime's level (:func:`final_level`), each noise level on its own (a run frozen by its
    schedule has a level that is not σ² times a unit)."""
    stepped, lam, weight, initial = reduced.reduce(method, problem, bins, power)
    out = np.empty(flat["lr"].size)
    for sigma in np.unique(flat["noise"]):
        rows = flat["noise"] == sigma
        out[rows] = final_level(stepped, process, flat["lr"][rows], flat["momentum"][rows], np.array([sigma]),
                                dampening=dampening, lam=lam, weight=weight, initial=initial,
                                ema=None if gamma is None else gamma[rows], schedule=schedule, horizon=horizon,
                                hyper={k: v[rows] for k, v in hyper.items()}, options=options)[:, 0]
    return out


def evaluate(problem, method, process, lr, momentum, sigma, *, ema, schedule, dampening, bins, target,
             max_steps, diverge_factor, power, hyper, options, trace_steps=0):
    """``(steps, status, loss, curve, level)`` of one delay process with an iterate average and/or a
    learning-rate schedule (:mod:`nqm.expected.augmented`): as :func:`reduced.evaluate_process` gives
    them, the status and loss read on ŵ, ``level`` the final regime's ``E[L_∞]`` per cell and noise level."""
    stepped, lam, weight, initial = reduced.reduce(method, problem, bins, power)
    augmented.check_size(stepped, process, dampening, lam.size, options)
    bound = diverge_factor * 0.5 * float(weight @ (lam if initial is None else lam * initial))  # L(w₀)·factor
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging loss overflows to ∞: how divergence shows
        steps, status, loss, curve, parts = augmented.run(
            stepped, process, lr, momentum, dampening, lam, weight, sigma, ema=ema, schedule=schedule, target=target,
            bound=bound, max_steps=max_steps, initial=initial, trace_steps=trace_steps, hyper=hyper, options=options)
    level = final_level(stepped, process, lr, momentum, sigma, dampening=dampening, lam=lam, weight=weight,
                         initial=initial, ema=ema, schedule=schedule, horizon=max_steps, hyper=hyper, options=options,
                         parts=parts)
    return steps, status, loss, curve, level


def final_level(method, process, lr, momentum, sigma, *, dampening, lam, weight, initial, ema, schedule, horizon,
                hyper, options, parts=None) -> np.ndarray:
    """``E[L_∞]`` per cell (rows) and noise level (columns) of the final regime (:mod:`nqm.expected.augmented`):
    the steady state at the schedule's last factor, ∞ where that is unstable; where the schedule ends at
    0, the expected loss of the raw iterate at its last breakpoint, where the run stops (∞ if it diverged)."""
    last, final = (0, 1.0) if schedule is None else schedule.regime(horizon)
    sigma = np.asarray(sigma, np.float64).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        if final > 0:
            if parts is None:
                parts = augmented.parts(method, process, lr, momentum, dampening, ema, hyper, options)
            return level(augmented.steady(parts, lam, weight, final), sigma)
        frozen = augmented.run(method, process, lr, momentum, dampening, lam, weight, sigma, ema=ema, schedule=schedule,
                               target=-1.0, bound=np.inf, max_steps=last, initial=initial, hyper=hyper,
                               options=options, read="raw")[2]
    return np.where(np.isfinite(frozen), frozen, np.inf)


def fill(result, problem, method, processes, plans, lr, momentum, gamma, sigma, order, *, first_passage,
         **kw) -> None:
    """Fill ``result`` (a sweep with an ``ema`` and/or a ``schedule`` dimension) and its
    ``steady_state_loss`` and ``reachable``: one run per delay and schedule."""
    steady_loss = np.empty(result.steps.shape)
    dims = result.steps.dims
    for i, process in enumerate(processes):
        for j, plan in enumerate(plans):
            steps, status, loss, _, level = evaluate(problem, method, process, lr, momentum, sigma, ema=gamma,
                                                     schedule=plan, **kw)
            if not first_passage:
                status = settled(status, level, kw["target"])
            for array, part in ((result.steps.values, steps), (result.status.values, status),
                                (result.loss.values, loss), (steady_loss, level)):
                _part(array, dims, i, j if plan is not None else None)[...] = order(part)
    result["steady_state_loss"] = (dims, steady_loss, {"long_name": STEADY_MEANING})
    result["reachable"] = (dims, (steady_loss < kw["target"]).astype(np.int8),
                           {"meaning": "1: E[L_inf] < target; 0: the expected loss can never reach the target"})


def _part(array, dims, delay: int, schedule: int | None):
    """The view of ``array`` (over ``dims``) at one delay (and schedule), its schedule axis taken out."""
    view = array[delay]
    if schedule is not None:
        view = np.moveaxis(view, dims.index("schedule") - 1, 0)[schedule]
    return view
