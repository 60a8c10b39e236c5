"""What the exact mode steps for a method, a problem and a delay, checked: the delay processes it
takes (constant or iid), the spectrum (every eigenvalue or log-spaced bins), ``precond`` reduced to
SGDM on a transformed spectrum, and the evaluator each process takes (the autoregression's closed
form for a constant delay, the second-moment map for iid delays)."""

from __future__ import annotations

import numpy as np

import nqm
from nqm import delays, grids, optimizers, validate
from nqm.config import RUN_OPTIONS
from nqm.conventions import ALIASES, family
from nqm.errors import NqmError
from nqm.expected import autoregression, second_moment
from nqm.expected.recursion import METHODS
from nqm.optimizers import base
from nqm.optimizers.precond import PrecondHyper
from nqm.problem import Problem

PRECOND = "precond"  # SGDM preconditioned by H^(-p): SGDM on a transformed spectrum (reduce)
NOMINAL_FLOPS = 1e10  # the rate an operations budget is put in hours at (one fast core)
DEFAULT_BINS = 100  # eigenvalue bins when binning is asked for without a count (docs/expected.md: the T error it causes)


def delay_processes(delay) -> tuple[np.ndarray, list]:
    """The ``delay`` coordinate and its processes (:func:`nqm.delays.coordinate`): constant delays and
    iid ones, whose pmf the exact dynamics need; a worker pool has none."""
    labels, processes = delays.coordinate(delay)
    for p in processes:
        if p.pmf() is None:
            raise NqmError(f"delay {p.label} is a worker pool, whose delays are not iid (no pmf), so it has no exact "
                           "expected dynamics; simulate it with nqm sweep")
    return labels, processes


def constant_delay(process) -> int | None:
    """The delay D of a process whose pmf is one-hot at D (``constant:D``, ``pmf:0,…,0,1``), else None."""
    support = np.flatnonzero(process.pmf())
    return int(support[0]) if support.size == 1 else None


def autoregressive_delay(process, method) -> int | None:
    """The constant delay D that takes the autoregression's closed form, else None (the second-moment map)."""
    constant = constant_delay(process)
    return constant if constant is not None and family(method) in METHODS else None


def check_cost(problem, method, processes, bins, dampening, cells: int, steady=False, options=None) -> None:
    """Refuse, before any work, what would not fit in memory or in the operations budget
    (``BOUNDS["exact_ops"]``), in one line that says the figure and what to change: a
    second-moment map, or the roots and steady state of a long constant delay's autoregression
    (cubic in the delay). ``steady``: only the steady state is asked, which a constant delay gets
    from its n × n state (:func:`second_moment.steady_state`) or its reflection coefficients.
    ``options``: the method's own (:func:`own`)."""
    lam, method = spectrum(problem, bins)[0], stepped(method)
    for process in processes:
        if (delay := autoregressive_delay(process, method)) is not None:
            _check_autoregression(method, delay, lam, cells, steady)
        elif not (steady and np.count_nonzero(process.pmf()) == 1):
            second_moment.check_size(method, process, dampening, lam.size, options)


def _check_autoregression(method, delay, lam, cells, steady) -> None:
    ops, size = autoregression.cost(method, delay, lam, cells, steady_only=steady)
    budget, memory = validate.BOUNDS["exact_ops"], validate.BOUNDS["matrix_bytes"]
    if size > memory:
        need = f"{validate.format_bytes(size)} for one companion matrix (more than {validate.format_bytes(memory)})"
    elif ops > budget:
        need = (f"about {ops:.1e} floating-point operations for {cells:,} cell(s) of {lam.size:,} components "
                f"({ops / NOMINAL_FLOPS / 3600:,.1f} hours at {NOMINAL_FLOPS / 1e9:g} Gflop/s, more than the budget "
                f"of {budget:.0e})")
    else:
        return
    raise NqmError(f"the exact mode at constant delay {delay:,} needs {need}, a cost that grows as the delay cubed; "
                   "give a shorter delay, fewer cells or eigenvalue bins (--bins), or simulate with nqm sweep "
                   "(nqm threshold finds the stability boundary at any delay)")


def spectrum(problem, bins):
    """``(λ, weight)``: every eigenvalue with weight 1, or B log-spaced bins (count, mean λ); B is
    capped at the number of distinct eigenvalues, which then stand for themselves exactly (each
    weighted by its multiplicity): more bins could only split nothing, at the cost of B edges."""
    lam = problem.eigenvalues
    if bins is None:
        return lam, np.ones_like(lam)
    which, count, distinct = _groups(lam, bins)
    if distinct is not None:
        return distinct, count
    total = np.bincount(which, weights=lam, minlength=bins)
    return total[count > 0] / count[count > 0], count[count > 0]


def _groups(lam, bins):
    """``(group of each eigenvalue, count per group, the distinct values or None)``: the distinct
    eigenvalues where they are at most ``bins``, else ``bins`` log-spaced bins (some may be empty)."""
    distinct, which, multiplicity = np.unique(lam, return_inverse=True, return_counts=True)
    if bins >= distinct.size:
        return which, multiplicity.astype(float), distinct
    edges = np.geomspace(lam.min(), lam.max() * (1 + 1e-12), bins + 1)
    which = np.clip(np.searchsorted(edges, lam, side="right") - 1, 0, bins - 1)
    return which, np.bincount(which, minlength=bins).astype(float), None


def squared_start(problem, bins):
    """Each component's squared initial weight as :func:`spectrum` lays them out, or ``None`` for the
    convention's w₀ = 1: ``u₀²`` of a problem given its initial error, the mean over the eigenvalues a
    component stands for (their losses add: exact where they are equal, as binning's λ is not)."""
    if problem.initial is None:
        return None
    squared, lam = problem.initial**2, problem.eigenvalues
    if bins is None:
        return squared
    which, count, _ = _groups(lam, bins)
    return np.bincount(which, weights=squared, minlength=count.size)[count > 0] / count[count > 0]


def methods() -> tuple[str, ...]:
    """Every method the exact mode takes: the linear ones of the registry, ``"sgd"``, and
    ``"precond"`` (SGDM on a transformed spectrum, :func:`reduce`).

    Returns:
      The names.
    """
    linear = (m for m in optimizers.methods() if optimizers.make(m).linear)
    return tuple(dict.fromkeys((*sorted(ALIASES), *linear, PRECOND)))


def own(method: str, given: dict) -> tuple[dict, dict]:
    """The method's own hyperparameters and options among ``given`` (an entry point's other keyword
    arguments), checked: every hyperparameter beyond lr and momentum, as given or at its default
    (values still to check against their domains), and the options given (its factory's keyword
    parameters, one value each). ``precond``'s p is ``power``, not one of these.

    Args:
      method: a method of :func:`methods`.
      given: keyword arguments by name (``None``: not given).

    Returns:
      ``(hyperparameters, options)``, two dicts by name.

    Raises:
      NqmError: a method the exact mode does not take, a name the method does not take (a run
        setting included), a hyperparameter without a default left out, an invalid option, or
        options under which the method is not linear, in one line.
    """
    checked_method(method)
    name = family(method)
    fields = () if method == PRECOND else grids.hyper_dims(name)
    options = {k: v for k, v in base.options(name).items() if k != "dampening"}  # dampening: its own argument
    given = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(set(given) - set(fields) - set(options))
    if unknown:
        if unknown[0] in RUN_OPTIONS:
            raise NqmError(f"{unknown[0]} is a run setting that the exact mode does not take here (it computes the "
                           "expected loss in float64, without sampling): leave it out")
        takes = [*fields, *options]
        raise NqmError(f"{unknown[0]!r} is neither a hyperparameter nor an option of method {method!r} in the exact "
                       f"mode; it takes " + (", ".join(takes) if takes else "none beyond lr and momentum")
                       + validate.did_you_mean(unknown[0], takes))
    defaults = base.hyperparameters(name)._field_defaults
    missing = [f for f in fields if f not in given and f not in defaults]
    if missing:
        raise NqmError(f"method {method!r} has no default for its hyperparameter {missing[0]}: give one value or "
                       f"a list ({missing[0]}=…, --{missing[0].replace('_', '-')})")
    chosen = {k: v for k, v in given.items() if k in options and k not in fields}
    if chosen and not optimizers.make(name, **chosen).linear:
        raise NqmError(f"method {method!r} is not linear with {', '.join(f'{k}={v!r}' for k, v in chosen.items())}, "
                       "so it has no exact expected dynamics; simulate it with nqm sweep")
    return {f: given.get(f, defaults.get(f)) for f in fields}, chosen


def checked_power(method: str, power) -> float | None:
    """``precond``'s exponent p, checked (default its optimizer's, 0.5); ``None`` for every other method."""
    if method != PRECOND:
        if power is not None:
            raise NqmError(f"power is precond's hyperparameter (the p of H^(-p)); {method!r} takes none")
        return None
    p = PrecondHyper._field_defaults["power"] if power is None else validate.number(power, "power")
    if not 0 <= p <= 1:
        raise NqmError(f"power must be a number in [0, 1] (the p of H^(-p)), got {power!r}")
    return float(p)


def reduce(method: str, problem, bins, power):
    """What the evaluators step: ``(method, λ, weight, initial)`` (``initial``: each component's
    squared initial weight, ``None`` for the model's w₀ = 1, :func:`squared_start`). ``precond`` at
    power p is SGDM in the coordinates ``u = λ^(p/2) w``: per component ``v ← m v + λ^(−p) g`` becomes
    SGDM on the curvature λ^(1−p), with noise N(0, λ^(1−p)), loss ½ λ^(1−p) u² and ``u₀ = λ^(p/2)``
    (times the problem's own initial error) — exactly, under any delay (a delayed w is a delayed u).
    Every other method is itself."""
    lam, weight = spectrum(problem, bins)
    start = squared_start(problem, bins)
    if power is None:
        return method, lam, weight, start
    return stepped(method), lam ** (1.0 - power), weight, lam ** power * (1.0 if start is None else start)


def power_attrs(power) -> dict:
    """The ``power`` attribute of a precond result (none for the other methods)."""
    return {} if power is None else {"power": power}


def stepped(method: str) -> str:
    """The method the evaluators step for ``method`` (:func:`reduce`)."""
    return "sgdm" if method == PRECOND else method


def checked_method(method) -> None:
    """Refuse, in one line, a method the exact mode does not take (:func:`methods`)."""
    if not isinstance(method, str) or method not in methods():
        known = method in optimizers.methods()  # a method the engine runs, not exactly
        raise NqmError(f"exact expected dynamics exist for the linear methods {', '.join(methods())}, not "
                       f"{method!r}" + ("; use nqm sweep for the others" if known
                                         else validate.did_you_mean(str(method), optimizers.methods())))


def checked(method, momentum, problem, bins, dampening):
    """The method, problem, bins and dampening, checked; ``momentum`` is the checked momenta."""
    validate.flag(dampening, "dampening")
    checked_method(method)
    family(method, momentum)  # sgd: momentum 0
    problem = nqm.zhang() if problem is None else problem
    if not isinstance(problem, Problem):
        raise NqmError(f"problem must be an nqm.Problem (e.g. nqm.zhang(1000)), got {problem!r}")
    if isinstance(bins, (bool, np.bool_)):
        raise NqmError(f"bins must be an integer >= 1, got {bins!r}")
    return problem, None if bins is None else validate.count(bins, "bins")


def evaluate_process(problem, method, delay, lr, momentum, sigma, *, dampening, bins, target, max_steps, diverge_factor,
              trace_steps=0, power=None, hyper=None, options=None):
    """``(steps, status, loss, curve, V_∞)`` of one delay process: the autoregression's evaluator for a
    constant delay (a one-hot pmf included: the same numbers), the second-moment map's for iid delays
    and for the methods not written out (``hyper``: their own hyperparameters per cell, flat arrays by
    name; ``options``: their own options, :func:`own`)."""
    method, lam, weight, initial = reduce(method, problem, bins, power)
    bound = diverge_factor * 0.5 * float(weight @ (lam if initial is None else lam * initial))  # L(w₀)·factor
    process = delays.process(delay)
    kw = dict(target=target, bound=bound, max_steps=max_steps, trace_steps=trace_steps, initial=initial)
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging loss overflows to ∞: how divergence shows
        if (constant := autoregressive_delay(process, method)) is not None:
            return autoregression.run(method, constant, lr, momentum, dampening, lam, weight, sigma, **kw)
        return second_moment.run(method, process, lr, momentum, dampening, lam, weight, sigma, hyper=hyper,
                                 options=options, **kw)


def one_delay(delay):
    """The one delay process that ``delay`` gives (an integer or a spec)."""
    if isinstance(delay, (list, tuple, range, np.ndarray)) and len(delay) != 1:
        raise NqmError("give one delay (an integer or a spec such as uniform:1:4), not a list")
    return delay_processes(delay)[1][0]
