"""Stability of every linear method, derived from its own update: no characteristic polynomial is
written per method, so a new linear method gets its thresholds for free.

One eigencomponent of curvature λ (thresholds are in ``x = λη``; ``η* = x*/λ_max``). The state
stacks what the update reads (the engine's layout, with N = 1):

    s_t = (h_t, h_{t−1}, …, h_{t−S+1},  [w_t],  the optimizer state, leaf by leaf)

``h`` is what workers receive (``w`` itself, or what ``optimizer.sent`` makes of it — DANA's
look-ahead — in which case ``w_t`` follows the history), ``S`` = largest delay + 1, ``h_{s<0} = w_0``;
a per-worker leaf is flattened worker by worker. When the gradient applied at step t is d steps
old (``g = λ h_{t−d}``), one noiseless step is ``s_{t+1} = A_{t mod P, d} s_t``, and a unit kick in
that gradient adds ``B_{t mod P, d}``. A and B are read off the optimizer's own ``init``/``step``/
``sent``: the basis vectors ride along the component axis (as N eigencomponents would), one jitted
step gives every column. They are affine in η (checked): built at two learning rates, exact at any.

The map cycles with round-robin workers (worker ``k_t = (t − d) mod W``) and OrMo's groups: its
period P is 1 when every phase gives the same matrices, else the worker count W. When the phases
only relabel the workers (per-worker velocities), the *rotating frame* ``s'_t = Π^{−t} s_t`` (Π
rolls the worker axis) makes it time-invariant, ``A'_d = Πᵀ A_{0,d}``, with the same w.

Criteria, d iid with pmf ``p_d`` (the mean: Giladi et al. 2020, App. C and D), over one period::

  mean         E[s] evolves by ``Σ_d p_d A_d``: rate ``ρ(Π_p Σ_d p_d A_{p,d})^{1/P}``;
  mean-square  E[s sᵀ] evolves by ``X ↦ Σ_d p_d A_d X A_dᵀ``: rate ``ρ(that map over a period)^{1/2P}``;
  almost-sure  the top Lyapunov exponent of ``A_{d_T} ⋯ A_{d_1}`` over a drawn schedule: rate ``e^L``.

Mean-square stability implies the other two. With a constant delay all three coincide.
The threshold is the first x > 0 at which the rate reaches 1 (the stable set need not be an interval).

:mod:`nqm.thresholds.matrices` builds the matrices, :mod:`nqm.thresholds.rates` the three rates; numpy and
scipy do the eigenvalues and the root finding. For sgd, sgdm and shifted under a constant delay
(and sgd, sgdm under iid delays) the mean thresholds equal Giladi's polynomials (:mod:`nqm.thresholds.polynomials`).
Shifted momentum under iid delays does not: Giladi's model continues the velocity of step t − τ,
nqm's optimizer the velocity of the (virtual round-robin) worker, as the engine runs it.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import xarray as xr

from nqm import results
from nqm.conventions import family
from nqm.delays import coordinate, pmf
from nqm.errors import NqmError
from nqm.optimizers import base, make
from nqm.problem import Problem, explicit
from nqm.thresholds import polynomials
from nqm.thresholds.matrices import System, footprint, systems
from nqm.thresholds.rates import BATCHES, lyapunov, per_step
from nqm.validate import BOUNDS, coordinates, count, number

__all__ = ["CRITERIA", "Transitions", "transitions", "spectral_radius", "threshold", "threshold_table",
           "precond_threshold"]

CRITERIA = ("mean", "mean-square", "almost-sure")
RTOL = 1e-12  # relative tolerance of a threshold
STEPS = 100_000  # measured steps of the almost-sure criterion's schedule
Z = 3.0  # standard errors above 1 at which an estimated rate counts as unstable
LOG_FLOOR = np.log(np.finfo(float).tiny)  # the log rate Brent's method sees where the state collapsed to 0


class Transitions(NamedTuple):
    """One step of a linear method per eigencomponent: ``s_{t+1} = A[t mod P, j] s_t + B[t mod P, j] ξ``
    when the gradient applied at t is ``delays[j]`` steps old (probability ``pmf[j]``), ξ the
    gradient's noise (variance ``σ²λ``). ``w_t = readout @ s_t``; ``initial`` is ``s_0`` for ``w_0 = 1``;
    ``labels`` name the state's entries; ``rotating``: the matrices are in the rotating frame."""

    A: np.ndarray  # (P, k, n, n)
    B: np.ndarray  # (P, k, n)
    delays: np.ndarray  # (k,) the delays of positive probability
    pmf: np.ndarray  # (k,)
    period: int
    readout: np.ndarray  # (n,)
    initial: np.ndarray  # (n,)
    labels: tuple
    rotating: bool


# ----------------------------------------------------------------------------- thresholds


def _first_crossing(rate, chunk: int = 4) -> float:
    """The first x > 0 at which ``rate(xs)`` reaches 1. Every crossing is bracketed on log grids of
    ever finer steps — ×16 over 2^±32, then ×√2 below the first unstable point, then ×2^{1/16} over
    the octave below that — and the first is refined by Brent's method to ``RTOL`` (x*: 0 if
    unstable everywhere, inf if stable everywhere). ``rate(xs)`` gives ``(rates, errors)``, the
    errors those of ``log rate``: an estimated rate counts as unstable only ``Z`` errors above 1 (at
    tiny x a Lyapunov rate is 1 − O(x), below its statistical error). ``chunk``: xs per call."""
    seen = {}

    def first(xs):
        for part in np.array_split(xs, max(1, len(xs) // chunk)):  # early exit, a part at a time
            values, errors = rate(part)
            seen.update(zip(part, values))
            with np.errstate(divide="ignore", invalid="ignore"):
                unstable = np.where(errors > 0, ~(np.log(values) <= Z * errors), ~(values < 1))
            if unstable.any():
                return part[np.flatnonzero(unstable)[0]]
        return None

    hi = first(2.0 ** np.arange(-32, 33, 4))
    if hi is None:
        return np.inf
    for grid in (np.arange(-8, 0) / 2, np.arange(-16, 0) / 16):
        hi = first(hi * 2.0 ** grid) or hi
    lo = max((x for x, r in seen.items() if x < hi and r < 1), default=None)
    if lo is None:
        return 0.0
    from scipy.optimize import brentq  # here: scipy.optimize takes most of a second to import

    def log_rate(x):  # a state that collapsed to 0 has rate 0: a finite floor keeps Brent's steps finite
        with np.errstate(divide="ignore"):
            return max(np.log(rate(np.array([x]))[0][0]), LOG_FLOOR)

    return brentq(log_rate, lo, hi, xtol=1e-300, rtol=RTOL)


def _threshold(system: System, criterion: str, steps: int, seed: int) -> tuple[float, float]:
    """``(x*, error)``; the almost-sure error is the exponent's standard error over its slope."""
    # A Lyapunov exponent costs one pass over the schedule, whatever the number of xs: all at once.
    x = _first_crossing(lambda xs: per_step(system, xs, criterion, steps, seed, with_error=True),
                        16 if criterion == "almost-sure" else 4)
    if criterion != "almost-sure" or len(system.lags) == 1 or not 0 < x < np.inf:
        return x, 0.0
    exponent, error = lyapunov(system, x * np.array([1 - 1e-3, 1.0, 1 + 1e-3]), steps, seed)
    return x, float(error[1] / abs((exponent[2] - exponent[0]) / (2e-3 * x)))


def _thresholds(name, options, process, rows, criterion, steps, seed) -> list[tuple[float, float]]:
    """``(x*, error)`` per row under one delay process. A constant delay whose matrices exceed the
    memory budget (they grow like D³) of a method with Giladi's polynomial (sgd, sgdm, shifted: the
    same thresholds, tested) takes the polynomial's roots instead, in O(D) time and bounded memory."""
    support = np.flatnonzero(pmf(process))
    average = criterion == "mean"
    if support.size == 1 and name in polynomials.METHODS and set(dict(options)) <= {"dampening"} \
            and footprint(name, options, process, 1, average) > BOUNDS["matrix_bytes"]:
        momenta = np.array([dict(row)["momentum"] for row in rows])
        x = polynomials.threshold(name, int(support[0]), momenta, dampening=dict(options).get("dampening", False))
        return [(float(v), 0.0) for v in np.atleast_1d(x)]
    return [_threshold(s, criterion, steps, seed) for s in systems(name, options, process, 1.0, rows, average=average)]


# ----------------------------------------------------------------------------- public API


def _setup(method, momentum, delay, criterion, kw, *, steps=STEPS, seed=0):
    """Checked arguments, before any work: (registry name, options, processes, momenta, the other
    hyperparameters' grids, convention, steps, seed)."""
    if criterion not in CRITERIA:
        raise NqmError(f"criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    name = family(method)
    fields = [f for f in base.hyperparameters(name)._fields if f not in ("lr", "momentum")]  # unknown method: NqmError
    unknown = sorted(set(kw) - set(fields) - set(base.options(name)))
    if unknown:
        raise NqmError(f"{unknown[0]!r} is neither an option nor a hyperparameter of method {method!r}")
    options = tuple(sorted((k, v) for k, v in kw.items() if k not in fields and v is not None))
    optimizer = make(name, **dict(options))
    if not optimizer.linear:
        raise NqmError(f"method {method!r} is not linear, so it has no transition matrix; estimate its "
                       "threshold by simulation instead (nqm threshold --simulate)"
                       + ("; precond's is SGDM's mapped exactly: nqm.thresholds.derived.precond_threshold"
                          if name == "precond" else ""))
    momenta = coordinates(momentum=momentum)["momentum"]
    family(method, momenta)  # sgd: momentum 0
    defaults = base.hyperparameters(name)._field_defaults
    grids = coordinates(domains=base.domains(name), **{f: kw.get(f, defaults.get(f)) for f in fields})
    labels, processes = coordinate(delay)
    for p in processes:
        if pmf(p) is None:
            raise NqmError(f"delay {p.label} is a worker pool, which has no delay pmf; give a constant delay "
                           "or an iid distribution (uniform:A:B, gaussian:MU, pmf:P0,P1,...)")
    convention = "no momentum" if name != method else dict(optimizer.config).get("convention", "")
    steps = -(-count(steps, "steps", low=BATCHES) // BATCHES) * BATCHES  # whole batches
    return name, options, (labels, processes), momenta, grids, convention, steps, count(seed, "seed", low=0)


def _cell(method, lr, momentum, delay, lam, criterion, kw, **schedule):
    """One cell's checked arguments: (name, options, process, hyperparameter row, lrs, steps, seed)."""
    name, options, (_, processes), momenta, grids, _, steps, seed = _setup(method, momentum, delay, criterion, kw,
                                                                          **schedule)
    lrs = coordinates(distinct=False, lr=lr)["lr"]
    try:  # a number, not a string such as "1" that float() would read
        ok = np.isfinite(number(lam, "lam")) and lam > 0
    except NqmError:
        ok = False
    if not ok:
        raise NqmError(f"lam must be one curvature > 0, got {lam!r}")
    if len(processes) != 1 or momenta.size != 1 or any(v.size != 1 for v in grids.values()):
        raise NqmError("give one delay, one momentum and one value of each hyperparameter (lr may be a list)")
    row = (("momentum", momenta[0]),) + tuple((k, v[0]) for k, v in grids.items())
    return name, options, processes[0], row, lrs, steps, seed


def transitions(method: str, *, lr, momentum, delay=0, lam: float = 1.0, rotating: bool = False,
                **options_and_hyper) -> Transitions:
    """The transition matrices of one step of ``method`` on one eigencomponent.

    Args:
      method: a linear method (``"sgd"`` is ``"sgdm"`` at m = 0).
      lr, momentum: the learning rate η > 0 and the momentum (OrMo's β) in [0, 1).
      delay: a constant delay D, an iid spec (``"uniform:1:8"``, ``"gaussian:4"``, ``"pmf:…"``) or process.
      lam: the component's curvature λ > 0.
      rotating: in the rotating frame (period 1) where the phases only relabel workers.
      options_and_hyper: the method's options (e.g. ``dampening=True``) and other hyperparameters.

    Returns:
      :class:`Transitions` in the state layout of the module docstring (``labels`` names each entry).
    """
    name, options, process, row, lrs, _, _ = _cell(method, lr, momentum, delay, lam, "mean", options_and_hyper)
    if lrs.size != 1:
        raise NqmError("transitions are for one learning rate: give one value of lr")
    system = systems(name, options, process, float(lam), (row,), rotate=rotating)[0]
    A, B = (system.A0 + lrs[0] * system.A1, system.B0 + lrs[0] * system.B1) if system.A1 is not None \
        else system.build(lrs[0])
    readout = np.eye(system.layout.n)[system.layout.slots if system.layout.sent else 0]
    return Transitions(A, B, system.lags, system.pmf, A.shape[0], readout, system.initial, system.layout.labels,
                       system.rotating)


def spectral_radius(method: str, *, lr, momentum, delay=0, criterion: str = "mean", lam: float = 1.0,
                    steps: int = STEPS, seed: int = 0, **options_and_hyper):
    """Per-step rate of ``method`` at each ``lr`` (stable below 1): ``ρ(Π_p Σ_d p_d A_{p,d})^{1/P}``
    (mean), ``ρ(X ↦ Σ_d p_d A_d X A_dᵀ over a period)^{1/2P}`` (mean-square) or ``e^L``, L the top
    Lyapunov exponent over ``steps`` steps of a delay schedule drawn from ``seed`` (almost-sure).

    Args:
      method: a linear method (``"sgd"`` is ``"sgdm"`` at m = 0).
      lr: the learning rate η > 0, one value or a list.
      momentum: the momentum (OrMo's β) in [0, 1), one value.
      delay: a constant delay D, an iid spec (``"uniform:1:8"``, ``"gaussian:4"``, ``"pmf:…"``) or process.
      criterion: ``"mean"``, ``"mean-square"`` or ``"almost-sure"`` (:data:`CRITERIA`).
      lam: the component's curvature λ > 0.
      steps, seed: the almost-sure criterion's schedule (its length, and the seed it is drawn from).
      options_and_hyper: the method's options (e.g. ``dampening=True``) and other hyperparameters.

    Returns:
      the rates, shaped like ``lr``.
    """
    name, options, process, row, lrs, steps, seed = _cell(method, lr, momentum, delay, lam, criterion,
                                                          options_and_hyper, steps=steps, seed=seed)
    system = systems(name, options, process, float(lam), (row,), average=criterion == "mean")[0]
    return per_step(system, lrs, criterion, steps, seed).reshape(np.shape(lr))[()]


def threshold_table(method: str, *, delays=range(65), momenta=(0.0,), criterion: str = "mean",
                    dampening: bool = False, steps: int = STEPS, seed: int = 0, **options_and_hyper) -> xr.Dataset:
    """Thresholds ``x* = λ·η*`` (``η* = x*/λ_max``) of ``method`` over delays × momenta (× any other
    hyperparameter given as a list): the first x > 0 at which the per-step rate of ``criterion``
    reaches 1, derived from the method's own update.

    Args:
      method: a linear method (sgd, sgdm, nesterov, shifted, staleness, dana, ormo, ormo-da); the
        nonlinear ones (ab, dc-asgd, restart) are refused.
      delays: constant delays and/or iid specs (``"uniform:1:8"``, ``"gaussian:4"``, ``"pmf:…"``).
      momenta: momentum values in [0, 1).
      criterion: ``"mean"`` (Giladi et al. 2020), ``"mean-square"`` or ``"almost-sure"``.
      dampening: the velocity takes ``(1 − m) g`` instead of ``g``.
      steps, seed: the almost-sure criterion's schedule.
      options_and_hyper: the method's other options and hyperparameters.

    Returns:
      Dataset: ``threshold`` and ``threshold_error`` (almost-sure under iid delays: the exponent's
      standard error over its slope; else 0) over (``delay``, ``momentum``, …), coordinate
      ``mean_delay``; attributes method, criterion, convention.
    """
    if dampening:
        options_and_hyper["dampening"] = True
    name, options, (labels, processes), momenta, grids, convention, steps, seed = _setup(
        method, momenta, delays, criterion, options_and_hyper, steps=steps, seed=seed)
    rows = tuple(tuple(zip(("momentum", *grids), combo)) for combo in itertools.product(momenta, *grids.values()))
    values = np.array([_thresholds(name, options, p, rows, criterion, steps, seed) for p in processes])
    shape = (len(processes), momenta.size, *(v.size for v in grids.values()))
    return results.threshold_table(
        {"threshold": values[..., 0].reshape(shape), "threshold_error": values[..., 1].reshape(shape)},
        {"threshold": "stability threshold x* = lam*eta*", "threshold_error": "standard error of x*"},
        labels, processes, momenta, grids,
        {"method": method, "criterion": criterion, "convention": convention,
         "derived_from": "the method's own update (nqm.thresholds.derived)", "reference": "Giladi et al. 2020, At Stability's Edge"},
    )


def threshold(method: str, *, momentum=0.0, delay=0, criterion: str = "mean", dampening: bool = False,
              with_error: bool = False, steps: int = STEPS, seed: int = 0, **options_and_hyper):
    """Thresholds ``x* = λ·η*`` of :func:`threshold_table` as an array shaped
    ``np.shape(delay) + np.shape(momentum)`` (+ the shapes of other hyperparameters given);
    ``with_error``: ``(x*, error)``.

    Args:
      method: a linear method, as in :func:`threshold_table`.
      momentum: momentum value(s) in [0, 1).
      delay: a constant delay, an iid spec or a process, or a list of them.
      criterion: ``"mean"``, ``"mean-square"`` or ``"almost-sure"``.
      dampening: the velocity takes ``(1 − m) g`` instead of ``g``.
      with_error: also return the standard errors.
      steps, seed: the almost-sure criterion's schedule.
      options_and_hyper: the method's other options and hyperparameters (a list adds a dimension).

    Returns:
      ``x*`` (float64; a scalar for scalar arguments), or ``(x*, error)``.

    Raises:
      NqmError: a method that is not linear, an unknown criterion, an invalid momentum or delay, or
        transition matrices that would not fit in memory, in one line.

    Examples:
      SGDM's ``x*`` at momenta 0 and 0.5, without delay and at delay 4; under iid delays the
      mean-square threshold lies below the mean one:

      >>> from nqm.thresholds.derived import threshold
      >>> threshold("sgdm", momentum=[0.0, 0.5], delay=[0, 4]).round(4).tolist()
      [[2.0, 3.0], [0.3473, 0.1559]]
      >>> [round(float(threshold("sgd", delay="uniform:1:4", criterion=c)), 4) for c in ("mean", "mean-square")]
      [0.6188, 0.5448]
    """
    table = threshold_table(method, delays=delay if np.ndim(delay) else [delay], momenta=momentum,
                            criterion=criterion, dampening=dampening, steps=steps, seed=seed, **options_and_hyper)
    given = [delay, momentum] + [options_and_hyper.get(k, 0) for k in table.threshold.dims[2:]]
    scalars = tuple(i for i, value in enumerate(given) if np.ndim(value) == 0)
    out = tuple(np.squeeze(table[v].values, axis=scalars)[()] for v in ("threshold", "threshold_error"))
    return out if with_error else out[0]


def precond_threshold(*, power, momentum=0.0, delay=0, problem: Problem | None = None, criterion: str = "mean",
                      dampening: bool = False):
    """The largest stable learning rate ``η*`` of ``precond`` (SGDM preconditioned by ``H^(−p)``) on
    ``problem``, by the exact mapping: each eigencomponent is SGDM at ``x = η λ^(1−p)``, so
    ``η* = x*_sgdm(m, D) / λ_max^(1−p)`` (for p < 1 the largest eigenvalue is the first to leave;
    at p = 1 every component has ``x = η``). ``precond`` is not a linear method in the registry's
    sense (its step reads the whole spectrum), so :func:`threshold` refuses it.

    Args:
      power: the exponent p, one number in [0, 1].
      momentum: momentum value(s) in [0, 1), as :func:`threshold`.
      delay: a constant delay, an iid spec or a process, or a list of them.
      problem: the quadratic (default: one eigenvalue, λ = 1, where ``η* = x*_sgdm``).
      criterion: ``"mean"``, ``"mean-square"`` or ``"almost-sure"``.
      dampening: the velocity takes ``(1 − m) g`` instead of ``g``.

    Returns:
      ``η*`` shaped ``np.shape(delay) + np.shape(momentum)`` (a scalar for scalar arguments).

    Raises:
      NqmError: a power that is not one number in [0, 1], or what :func:`threshold` refuses.

    Examples:
      On λ = (4, 1) at p = 1/2 the rate is SGDM's over √4:

      >>> from nqm.problem import explicit
      >>> round(float(precond_threshold(power=0.5, momentum=0.5, problem=explicit([4.0, 1.0]))), 12)
      1.5
    """
    p = coordinates(domains=base.domains("precond"), power=power)["power"]
    if p.size != 1:
        raise NqmError("power takes one value for precond_threshold; call it once per power")
    problem = explicit([1.0]) if problem is None else problem
    if not isinstance(problem, Problem):
        raise NqmError(f"problem must be an nqm Problem (nqm.explicit([...]), nqm.zhang(N)), got {problem!r}")
    x = threshold("sgdm", momentum=momentum, delay=delay, criterion=criterion, dampening=dampening)
    return x / problem.lam_max ** (1.0 - float(p[0]))
