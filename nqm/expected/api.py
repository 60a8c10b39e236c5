"""The public entry points: sweeps and lists of points of the exact expected loss, one cell's
curve, and the steady state. Every argument is checked here, before any work."""

from __future__ import annotations

import numpy as np
import xarray as xr

from nqm import grids, schedules, validate
from nqm.config import RunConfig, checked_config
from nqm.conventions import batch_noise, family
from nqm.errors import NqmError
from nqm.expected import autoregression, choices, reduced, second_moment, steady
from nqm.expected.choices import STEADY_MEANING
from nqm.expected.recursion import recursion
from nqm.optimizers import base
from nqm.problem import Problem
from nqm.results import attribute, outcomes
from nqm.status import CONTINUE, REACHED, SETTLED, TRANSIENT, WINDOW_POINTS, meaning, stays_below

STAY_EXPECTED = ("steps_stay: the first step after which the expected loss stays below the target (one more than "
                 "its last exit); NaN where it does not settle")
CURVE_VALUES = 2**25  # expected losses held at once when stepping curves for steps_stay (256 MiB)
TRACED_VALUES = 2**21  # cells × components stepped at once when tracing (every one in its own slot)


def steady_state_loss(problem: Problem, method: str, delay, lr, momentum, sigma, *, dampening=False,
                      bins=None, power=None, ema=None, schedule=None, horizon=None, **own) -> np.ndarray:
    """``E[L_∞] = σ² V_∞`` per cell (the elements of ``lr``, ``momentum``, ``sigma``, broadcast): for a
    constant delay from each component's reflection coefficients, ∞ where there is none (a root of
    a component's recursion on or outside the unit circle); for iid delays (``"uniform:1:4"``, …) the
    fixed point of the second-moment map, ∞ where its spectral radius is ≥ 1.

    Args:
      problem: the quadratic.
      method: a linear method (``sgd``, ``sgdm``, ``nesterov``, ``shifted``).
      delay: one constant delay or iid spec.
      lr, momentum, sigma: the cells' learning rates, momenta and noise scales σ (broadcast together).
      dampening: the velocity takes ``(1 − m) g`` instead of ``g``.
      bins: ``None``: every eigenvalue; B: B log-spaced eigenvalue bins (count-weighted mean λ each).
      power: ``precond``'s p (default 0.5); no other method takes one.
      ema: the iterate average's rate γ per cell (broadcast with ``lr``), or ``None``: ``E[L(ŵ_∞)]``.
      schedule: a learning-rate schedule (:mod:`nqm.schedules`), or ``None``: the level of its final
        regime (at ``lr`` times its last factor; where that is 0, ``E[L(w_S)]`` at its last breakpoint S,
        where the run stops moving).
      horizon: the steps within which a custom schedule's last change is looked for (default: the budget's).
      own: the method's own hyperparameters (broadcast with ``lr``; default: their defaults) and
        options (one value each), as :func:`nqm.sweep` takes them.

    Returns:
      ``E[L_∞]`` per cell, the broadcast shape (float64).

    Raises:
      NqmError: invalid values, several delays or shapes that do not broadcast.
    """
    # Numbers checked as such first: float64 would read "0.1" as 0.1.
    given = [validate.floats(x, name).reshape(np.shape(x))
             for x, name in ((lr, "lr"), (momentum, "momentum"), (sigma, "sigma"))]
    hyper, options = reduced.own(method, own)
    given += [validate.floats(v, k).reshape(np.shape(v)) for k, v in hyper.items()]
    if ema is not None:
        given.append(validate.floats(ema, "ema").reshape(np.shape(ema)))
    try:
        lr, momentum, sigma, *values = np.broadcast_arrays(*given)
    except ValueError:
        raise NqmError("lr, momentum, sigma" + "".join(f", {k}" for k in hyper) + (", ema" if ema is not None else "")
                       + " must be numbers of shapes that broadcast") from None
    gamma = None if ema is None else choices.rates(values.pop().ravel(), distinct=False)
    flat = validate.coordinates(distinct=False, lr=lr.ravel(), momentum=momentum.ravel(), noise=sigma.ravel())
    hyper = validate.coordinates(distinct=False, domains=_domains(method), **{k: v.ravel() for k, v in zip(hyper, values)})
    process = reduced.one_delay(delay)
    problem, bins = reduced.checked(method, flat["momentum"], problem, bins, dampening)
    power = reduced.checked_power(method, power)
    schedule = schedules.one(schedule)
    if gamma is not None or schedule is not None:
        return choices.steady_state(problem, method, process, flat, gamma, schedule, dampening=dampening, bins=bins,
                                    power=power, horizon=RunConfig.max_steps if horizon is None else int(horizon),
                                    hyper=hyper, options=options).reshape(lr.shape)
    reduced.check_cost(problem, method, [process], bins, dampening, flat["lr"].size, steady=True, options=options)
    method, lam, weight, _ = reduced.reduce(method, problem, bins, power)  # the steady state has no memory of w₀
    with np.errstate(over="ignore", invalid="ignore"):  # no steady state overflows to ∞: what it means
        if (constant := reduced.autoregressive_delay(process, method)) is not None:
            rows = recursion(method, constant, flat["lr"], flat["momentum"], dampening)
            _, unit = steady.analyse(rows, lam, weight)
        else:
            unit = second_moment.steady_state(method, process, flat["lr"], flat["momentum"], dampening, lam, weight,
                                              level=flat["noise"] > 0, hyper=hyper, options=options)
    with np.errstate(invalid="ignore"):  # ∞ · 0 where unstable and noiseless: still ∞
        return np.where(np.isinf(unit), np.inf, unit * flat["noise"] ** 2).reshape(lr.shape)


def expected_loss(problem: Problem, *, lr: float, momentum: float, delay=0, noise: float = 0.0,
                  steps: int = 1000, method: str = "sgdm", dampening: bool = False, bins: int | None = None,
                  power=None, ema=None, schedule=None, **own):
    """``E[L(w_t)]`` for ``t = 1 … steps`` (float64) of one cell; ``delay`` a constant or an iid spec.

    Args:
      problem: the quadratic.
      lr, momentum, noise: the cell's learning rate, momentum and noise scale σ, one each.
      delay: one constant delay or iid spec.
      steps: how many steps.
      method: a linear method.
      dampening: the velocity takes ``(1 − m) g`` instead of ``g``.
      bins: ``None``: every eigenvalue; B: B log-spaced eigenvalue bins (count-weighted mean λ each).
      power: ``precond``'s p (default 0.5); no other method takes one.
      ema: the iterate average's rate γ (one value), or ``None``: the curve is then ``E[L(ŵ_t)]``.
      schedule: a learning-rate schedule (:mod:`nqm.schedules`), or ``None``.
      own: the method's own hyperparameters (one value each; default: their defaults) and options,
        as :func:`nqm.sweep` takes them.

    Returns:
      ``(steps,)`` float64; ∞ once the loss overflowed.

    Raises:
      NqmError: several values of a setting, or invalid ones.
    """
    hyper, options = reduced.own(method, own)
    point = validate.coordinates(lr=lr, momentum=momentum, noise=noise, domains=_domains(method), **hyper)
    if any(v.size != 1 for v in point.values()):
        raise NqmError("expected_loss takes one lr, momentum, delay, noise" + "".join(f", {k}" for k in hyper)
                       + "; use sweep for grids")
    process = reduced.one_delay(delay)
    steps = validate.count(steps, "steps", high=validate.MAX_STEPS)
    problem, bins = reduced.checked(method, point["momentum"], problem, bins, dampening)
    power = reduced.checked_power(method, power)
    gamma = None if ema is None else choices.rates(ema, one=True)
    schedule = schedules.one(schedule)
    kw = dict(dampening=dampening, bins=bins, target=-1.0, max_steps=steps, diverge_factor=np.inf, trace_steps=steps,
              power=power, hyper={k: point[k] for k in hyper}, options=options)
    if gamma is not None or schedule is not None:
        curve = choices.evaluate(problem, method, process, point["lr"], point["momentum"], point["noise"], ema=gamma,
                                  schedule=schedule, **kw)[3]
        return np.where(np.isnan(curve[0, 0]), np.inf, curve[0, 0])
    reduced.check_cost(problem, method, [process], bins, dampening, 1, options=options)
    _, _, _, curve, _ = reduced.evaluate_process(problem, method, process, point["lr"], point["momentum"],
                                                 point["noise"], **kw)
    # The curve is a loss (>= 0): NaN in it is where it overflowed (∞ − ∞ in its terms) or stepped no
    # further once it had: ∞.
    return np.where(np.isnan(curve[0, 0]), np.inf, curve[0, 0])


def evaluate(method: str = "sgdm", *, lr, momentum, delay=0, noise: float = 0.0, problem: Problem | None = None,
             bins: int | None = None, dampening: bool = False, target: float = RunConfig.target,
             max_steps: int = RunConfig.max_steps, diverge_factor: float = RunConfig.diverge_factor,
             first_passage: bool = RunConfig.first_passage, stay: bool = False, power=None, ema=None, schedule=None,
             **own) -> xr.Dataset:
    """The exact expected twin of :func:`nqm.sweeps.evaluate`: ``steps``, ``status`` and ``loss`` of
    the expected loss at a list of points (element ``i`` of ``lr`` and ``momentum``; repeats
    allowed), each exactly what :func:`sweep` gives for the same cell.

    Args:
      method: a linear method.
      lr, momentum: the points' learning rates and momenta (one length, or single values).
      delay: one constant delay or iid spec.
      noise: one noise scale σ.
      problem: the quadratic, or ``None`` for :func:`nqm.zhang` (N = 10⁴).
      bins: ``None``: every eigenvalue; B: B log-spaced eigenvalue bins (count-weighted mean λ each).
      dampening: the velocity takes ``(1 − m) g`` instead of ``g``.
      target, max_steps, diverge_factor, first_passage: the run settings, as in :class:`nqm.config.RunConfig`.
      stay: also give ``steps_stay``, the first step after which the expected loss stays below the
        target (settled points, with or without noise; NaN elsewhere).
      power: ``precond``'s p (default 0.5); no other method takes one.
      ema: the iterate average's rate γ per point (as ``lr``), or ``None``: T and the status read on ŵ.
      schedule: one learning-rate schedule (:mod:`nqm.schedules`), or ``None``.
      own: the method's own hyperparameters (per point, as ``lr``; default: their defaults) and
        options (one value each), as :func:`nqm.sweeps.evaluate` takes them.

    Returns:
      A Dataset over ``point``: ``steps``, ``status``, ``loss`` (and ``steps_stay``).

    Raises:
      NqmError: several delays or noise levels, or invalid values.
    """
    checked_config(target=target, max_steps=max_steps, diverge_factor=diverge_factor, x64=True,
                   first_passage=first_passage)
    stay = validate.flag(stay, "stay")
    hyper, options = reduced.own(method, own)
    named = dict(lr=lr, momentum=momentum, **hyper, **({} if ema is None else {"ema": ema}))
    given = [validate.floats(v, k) for k, v in named.items()]  # "0.1" is no number
    try:
        lr, momentum, *own_values = np.broadcast_arrays(*given)
    except ValueError:
        raise NqmError("the points' lr, momentum" + "".join(f", {k}" for k in list(named)[2:]) +
                       " must be numbers of one length (or single values)") from None
    gamma = None if ema is None else choices.rates(own_values.pop().ravel(), distinct=False)
    values = validate.coordinates(distinct=False, lr=lr.ravel(), momentum=momentum.ravel(), domains=_domains(method),
                                  **{k: v.ravel() for k, v in zip(hyper, own_values)})
    hyper = {k: values[k] for k in hyper}
    schedule = schedules.one(schedule)
    chosen = gamma is not None or schedule is not None
    if chosen and stay:
        raise NqmError(choices.NO_STAY)
    coords = validate.coordinates(noise=noise)
    labels, processes = reduced.delay_processes(delay)
    if labels.size != 1 or coords["noise"].size != 1:
        raise NqmError("evaluate takes one delay and one noise level; call it once per value")
    problem, bins = reduced.checked(method, values["momentum"], problem, bins, dampening)
    power = reduced.checked_power(method, power)
    kw = dict(dampening=dampening, bins=bins, target=target, max_steps=max_steps, diverge_factor=diverge_factor,
              power=power, hyper=hyper, options=options)
    if chosen:
        steps, status, loss, _, level = choices.evaluate(problem, method, processes[0], values["lr"],
                                                          values["momentum"], coords["noise"], ema=gamma,
                                                          schedule=schedule, **kw)
    else:
        reduced.check_cost(problem, method, processes, bins, dampening, values["lr"].size, options=options)
        steps, status, loss, _, unit = reduced.evaluate_process(problem, method, processes[0], values["lr"],
                                                                values["momentum"], coords["noise"], **kw)
        level = choices.level(unit, coords["noise"])
    if not first_passage:
        status = choices.settled(status, level, target)
    data = outcomes(("point",), steps[:, 0], status[:, 0], loss[:, 0], meaning(first_passage))
    if stay:
        data["steps_stay"] = ("point", _stay(problem, method, processes[0], values["lr"], values["momentum"],
                                             coords["noise"], steps, status, dampening=dampening, bins=bins,
                                             target=target, diverge_factor=diverge_factor, power=power, hyper=hyper,
                                             options=options)[:, 0],
                              {"long_name": STAY_EXPECTED})
    point_coords = {k: ("point", v) for k, v in values.items()}
    if gamma is not None:
        point_coords["ema"] = ("point", gamma)
    result = xr.Dataset(data, coords=point_coords,
                        attrs={"method": method, "delay": labels[0].item(), "noise": float(coords["noise"][0]),
                               "evaluation": "exact expected dynamics", **reduced.power_attrs(power),
                               **({} if schedule is None else {"schedule": schedule.label}),
                               **{k: attribute(v) for k, v in options.items()}})
    return result


def _stay(problem, method, process, lr, momentum, sigma, steps, status, *, dampening, bins, target, diverge_factor,
          power=None, hyper=None, options=None):
    """``steps_stay`` (cells, levels) of the expected loss: for each settled cell and noise level, one
    more than the last step with ``E[L_t] >= target``; NaN elsewhere. ``E[L_t]`` is deterministic, so
    this is defined with noise too, where a single run's is not.

    Under a constant delay each cell's closed form gives the step S from which its expected loss is
    proven below the target for good (:func:`nqm.expected.closed_form.stays_from`): the curves are
    stepped to the largest such S and each one's last exit is the last one, exactly. A cell it proves nothing for is stepped to a horizon H (at least 2·T + 1000)
    doubled until the second half stays below the target without growing (:func:`nqm.status.stays_below`
    on the engine's window samples, every H // 256 steps)."""
    out = np.full(status.shape, np.nan)

    def curves(cells, level, budget):  # (cell, E[L] at steps 1 … budget), what fits in memory at once
        per_call = max(1, min(CURVE_VALUES // budget, TRACED_VALUES // problem.dim))
        for start in range(0, cells.size, per_call):
            chunk = cells[start:start + per_call]
            curve = reduced.evaluate_process(problem, method, process, lr[chunk], momentum[chunk], sigma[[level]],
                                             dampening=dampening, bins=bins, target=-1.0, max_steps=budget,
                                             diverge_factor=diverge_factor, trace_steps=budget, power=power,
                                             hyper={k: v[chunk] for k, v in (hyper or {}).items()},
                                             options=options)[3][:, 0]
            yield from zip(chunk, curve)

    def stay(row):  # row[s - 1] = E[L(w_s)]; w_0 is above the target: an exit at 0
        exits = np.flatnonzero(~(row < target)) + 1
        return (exits[-1] if exits.size else 0) + 1

    proven = _stays_from(problem, method, process, lr, momentum, sigma, status, dampening=dampening, bins=bins,
                         target=target, power=power)
    for level in range(status.shape[1]):
        settled = status[:, level] == SETTLED
        certain = np.flatnonzero(settled & (proven[:, level] > 0))
        for budget, group in _octaves(certain, proven[certain, level]):
            for cell, row in curves(group, level, budget):
                out[cell, level] = stay(row)
        pending = np.flatnonzero(settled & (proven[:, level] == 0))
        horizon = 2 * int(steps[pending, level].max(initial=0)) + CONTINUE
        while pending.size:
            budget = min(horizon, validate.MAX_STEPS)
            stride = max(1, budget // WINDOW_POINTS)
            t = stride * np.arange(1, budget // stride + 1)
            t = t[t > budget / 2]  # the window: the second half
            done = np.zeros(pending.size, bool)
            for i, (cell, row) in enumerate(curves(pending, level, budget)):
                if stays_below(row[t - 1], t, False, target):
                    done[i], out[cell, level] = True, stay(row)
            pending, horizon = pending[~done], 2 * horizon
            if budget == validate.MAX_STEPS:
                break  # what stays pending has no step after which it stays, within any budget
    return out


def _octaves(cells: np.ndarray, reach: np.ndarray):
    """``cells`` grouped by the octave of ``reach`` (the steps each one's curve must cover), with the
    steps that cover the group: ``(budget, cells)``. A call steps all its curves to one length, so
    one cell proven only late (a shifted-momentum cell can leave the target again near step 10⁶
    after reaching it by 300) would make every curve that long; powers of two bound the lengths,
    hence the compilations."""
    octave = np.ceil(np.log2(np.maximum(reach, 1))).astype(np.int64)
    for k in np.unique(octave):
        yield int(min(2**k, reach.max())), cells[octave == k]


def stays_from(problem: Problem, method: str, delay, lr, momentum, *, target: float, dampening: bool = False,
               power=None) -> np.ndarray:
    """Per noiseless cell under a constant delay, the step S from which its closed form proves the loss
    below the target at every later step (0 where it proves nothing): one more than the last exit
    lies at or before S. A noiseless run's loss is its expected loss, so this bounds the engine's too.

    Args:
      problem: the quadratic.
      method: a linear method the exact mode holds.
      delay: one constant delay (iid delays: every S is 0).
      lr, momentum: the cells' (flat arrays of one length).
      target: the target loss.
      dampening: the velocity takes ``(1 − m) g``.
      power: ``precond``'s p.

    Returns:
      S per cell (int64).
    """
    lr, momentum = (np.asarray(x, np.float64).ravel() for x in (lr, momentum))
    status = np.full((lr.size, 1), SETTLED, np.int8)
    return _stays_from(problem, method, reduced.one_delay(delay), lr, momentum, np.zeros(1), status, dampening=dampening,
                       bins=None, target=target, power=reduced.checked_power(method, power))[:, 0]


def _stays_from(problem, method, process, lr, momentum, sigma, status, *, dampening, bins, target, power):
    """Per cell and noise level, the step from which the closed form proves the expected loss below
    the target for good (0: it proves nothing, or the delay is not constant; only settled cells)."""
    out = np.zeros(status.shape, np.int64)
    stepped, lam, weight, initial = reduced.reduce(method, problem, bins, power)
    constant = reduced.autoregressive_delay(process, stepped)
    rows = np.flatnonzero((status == SETTLED).any(1))
    if constant is None or rows.size == 0:
        return out
    with np.errstate(over="ignore", invalid="ignore"):
        out[rows] = autoregression.stays_from(stepped, constant, lr[rows], momentum[rows], dampening, lam, weight,
                                              np.asarray(sigma), target=target, initial=initial)
    return out


def sweep(method: str = "sgdm", *, lr, momentum, delay=0, noise=0.0, batch_size=None, problem: Problem | None = None,
          bins: int | None = None, dampening: bool = False, target: float = RunConfig.target,
          max_steps: int = RunConfig.max_steps, diverge_factor: float = RunConfig.diverge_factor,
          first_passage: bool = RunConfig.first_passage, stay: bool = False, power=None, ema=None, schedule=None,
          **own) -> xr.Dataset:
    """The exact expected twin of :func:`nqm.sweep` for the linear methods: ``steps``, ``status``
    and ``loss`` of the *expected* loss, plus ``steady_state_loss`` (∞ where there is none) and
    ``reachable`` (whether ``E[L_∞] < target``: a cell that is not can never reach the target in
    expectation), with the same dimensions and attributes (one seed, 0). ``delay``: constant delays
    and/or iid specs (``"uniform:1:4"``, ``"gaussian:3"``, ``"pmf:…"``; labels as :func:`nqm.sweep`
    gives them); worker pools, whose delays are not iid, are refused. Status 1 is *settled*: the
    expected loss reached the target and ``E[L_∞] < target``; 2 where it reached it without that
    (``first_passage=True``: the first passage alone).

    Args:
      method: a linear method.
      lr, momentum, noise: the grids (a value or a list each).
      delay: constant delays and/or iid specs (a value or a list).
      batch_size: ``None``, or batch sizes B (a value or a list): a ``batch_size`` dimension, ``noise``
        being the single-example σ and a batch running with ``σ/√B``, as in :func:`nqm.sweep`.
      problem, bins, dampening: as in :func:`evaluate` (bins: at most the distinct eigenvalues).
      target, max_steps, diverge_factor, first_passage: the run settings, as in :class:`nqm.config.RunConfig`.
      stay: also give ``steps_stay``, the first step after which the expected loss stays below the
        target (settled cells, with or without noise; NaN elsewhere).
      power: ``precond``'s p, one value (default 0.5; the result's ``power`` attribute); no other
        method takes one.
      ema: iterate averaging's rates γ in [0, 1) (a value or a list: an ``ema`` dimension), or ``None``:
        T, the status and the loss read on ŵ (:mod:`nqm.expected.augmented`).
      schedule: learning-rate schedules (a spec or a list: a ``schedule`` dimension; one optax
        schedule), or ``None`` (:mod:`nqm.schedules`); a cell's settled status is its final regime's.
      own: the method's own hyperparameters as grids (a dimension each, default: their defaults) and
        its options (one value each), as :func:`nqm.sweep` takes them: a method registered with
        ``linear=True`` (:func:`nqm.optimizers.base.register`) with a hyperparameter ``c`` takes ``c=[…]``.

    Returns:
      The result, as :func:`nqm.sweep`'s plus ``steady_state_loss`` and ``reachable`` (and ``steps_stay``).

    Raises:
      NqmError: a method that is not linear, a delay process without a pmf (worker pools), an
        invalid value, or a second-moment map that would not fit in memory (with what fits), in one line.

    Examples:
      The expected loss of SGDM on the grid of :func:`nqm.sweep`'s example: without noise, exactly the
      engine's steps; with noise σ = 0.05, E[L∞] per cell (∞ where the cell diverges).

      >>> import nqm, nqm.expected
      >>> ex = nqm.expected.sweep("sgdm", lr=[0.1, 0.5, 2.5], momentum=[0.0, 0.5], noise=[0.0, 0.05],
      ...                         problem=nqm.zhang(10), max_steps=500)
      >>> ex.steps.sel(delay=0, noise=0.0, seed=0).values.tolist()
      [[140, 28, 19], [69, 13, 7]]
      >>> ex.steady_state_loss.sel(delay=0, noise=0.05, seed=0).values.round(5).tolist()
      [[0.00019, 0.00107, inf], [0.00037, 0.00202, 0.02688]]
    """
    config = checked_config(target=target, max_steps=max_steps, diverge_factor=diverge_factor, x64=True,
                            first_passage=first_passage)
    stay = validate.flag(stay, "stay")
    hyper, options = reduced.own(method, own)
    coords = validate.coordinates(lr=lr, momentum=momentum, noise=noise, seed=0, domains=_domains(method), **hyper)
    if batch_size is not None:
        coords["batch_size"] = grids.batch_sizes(batch_size, coords["noise"], "float64")
    coords["delay"], processes = reduced.delay_processes(delay)
    plans = choices.dimensions(coords, ema, schedule, stay)  # the schedules, one run each ([None]: none)
    chosen = ema is not None or schedule is not None
    validate.grid_size(coords)
    problem, bins = reduced.checked(method, coords["momentum"], problem, bins, dampening)
    power = reduced.checked_power(method, power)
    # The cells: the method's own hyperparameters (in its order), [ema,] momentum, lr, as nqm.sweep lays them out.
    names = (*hyper, *(("ema",) if ema is not None else ()), "momentum", "lr")
    *own_values, m, lr_ = (x.ravel() for x in np.meshgrid(*(coords[k] for k in names), indexing="ij"))
    gamma = own_values.pop() if ema is not None else None
    cells = dict(zip(hyper, own_values))
    if not chosen:
        reduced.check_cost(problem, method, processes, bins, dampening, lr_.size, options=options)
    stepped = family(reduced.stepped(method))
    result = grids.empty(stepped, second_moment.optimizer_options(stepped, dampening, options), problem, config,
                         coords, processes, None if schedule is None else plans)
    result.attrs.update(method=method, evaluation="exact expected dynamics", bins=-1 if bins is None else bins,
                        **reduced.power_attrs(power))
    steady_loss, stay_steps = np.empty(result.steps.shape), np.full(result.steps.shape, np.nan)
    # Every noise level the grid runs: σ, or σ/√B per (noise, batch size) in that order.
    levels = (coords["noise"].size,) + ((coords["batch_size"].size,) if "batch_size" in coords else ())
    sigma = coords["noise"] if len(levels) == 1 else batch_noise(coords["noise"][:, None], coords["batch_size"]).ravel()
    shape = (*(coords[k].size for k in names), *levels)
    # → noise, [batch_size,] [hyperparameters,] seed, momentum, lr
    order = lambda x: np.expand_dims(np.moveaxis(x.reshape(shape), range(len(names)), range(-len(names), 0)), -3)
    if chosen:
        choices.fill(result, problem, method, processes, plans, lr_, m, gamma, sigma, order, dampening=dampening,
                       bins=bins, target=target, max_steps=max_steps, diverge_factor=diverge_factor, power=power,
                       hyper=cells, options=options, first_passage=first_passage)
        result.status.attrs["meaning"] = meaning(first_passage)
        return result
    for i, process in enumerate(processes):
        steps, status, loss, _, unit = reduced.evaluate_process(
            problem, method, process, lr_, m, sigma, dampening=dampening, bins=bins, target=target,
            max_steps=max_steps, diverge_factor=diverge_factor, power=power, hyper=cells, options=options)
        level = choices.level(unit, sigma)
        if not first_passage:
            status = choices.settled(status, level, target)
        result.steps.values[i], result.status.values[i], result.loss.values[i] = order(steps), order(status), order(loss)
        steady_loss[i] = order(level)
        if stay:
            stay_steps[i] = order(_stay(problem, method, process, lr_, m, sigma, steps, status, dampening=dampening,
                                        bins=bins, target=target, diverge_factor=diverge_factor, power=power,
                                        hyper=cells, options=options))
    result["steady_state_loss"] = (result.steps.dims, steady_loss, {"long_name": STEADY_MEANING})
    if stay:
        result["steps_stay"] = (result.steps.dims, stay_steps, {"long_name": STAY_EXPECTED})
    result["reachable"] = (result.steps.dims, (steady_loss < target).astype(np.int8),
                           {"meaning": "1: E[L_inf] < target; 0: the expected loss can never reach the target"})
    return result


def _domains(method: str) -> dict:
    """Where the method's own hyperparameters may lie (:func:`nqm.optimizers.base.domains`)."""
    return base.domains(family(method))

