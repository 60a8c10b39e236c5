"""What a real model's NQM predicts against what the model does, on the same grid.

For a problem of :mod:`nqm.transfer.problems` or your own model (:func:`nqm.transfer.problems.model`):
its NQM is measured at the starting point (:func:`nqm.transfer.measure`: the Hessian's spectrum,
the model's initial error along it and the per-example gradient noise σ). That NQM, written as a
model (:func:`nqm.transfer.problems.nqm_as_model`: per-example noise of covariance σ² H, so that a
minibatch has the model's noise level) starting from the model's initial error, and the model
itself are then trained the same way (:func:`nqm.transfer.train`: nqm's optimizers and delay
processes, the same rules) on the same lr × momentum grid, per method and delay. The NQM's target
asks for the same decrease as the model's: its initial loss less the model's initial loss less
the target (where the model is a quadratic, the same level above its minimum); where that is not
above 0 the NQM cannot get there (its minimum is above the model's target), which is said. Compared
per method, delay and momentum:

* the stability boundary: the largest lr of the grid below the first whose run goes out of
  bounds (a loss not finite or beyond 10⁶ × the initial one, before or after reaching the target);
  beside it the derived threshold ``x*/λ_max`` of a linear method (Giladi et al.'s, at the measured
  λ_max: the boundary of an infinitely long run);
* the largest lr that settles (status 1: reaches the target in the first half of the budget and
  stays below it through the second);
* the fastest settled cell's steps (best over lr), and so the ranking of the methods at each delay:
  their Spearman rank correlation (with three method rows or more; a method that settles nowhere
  ranks last) and whether the fastest method is the same; with several AB braking coefficients ρ
  (one row each, ``ab:rho=…``), the best ρ on each side.

Where the model is a quadratic measured exactly (a few thousand parameters at most: the dense
Hessian), its NQM is the model itself in its eigenbasis, and the two sides agree to rounding.

Several batch sizes give, per method and delay, the fastest steps over the whole grid against the
batch size on each side, and so the critical batch size (where steps reach twice perfect scaling,
as :mod:`nqm.search.scaling` defines it) predicted against observed; a curve that rises with the
batch size (less noise cannot need more steps: a grid too coarse, or a model the NQM misses) has
none. Several seeds (a new starting point, measurement, minibatch order and NQM noise each) give
each of these per seed: their spread is the comparison's.

Predicted, observed and their ratios; where the model's edge is the grid's largest lr, the edge
lies beyond the grid and the ratio is only a bound (``*_beyond_grid``). The NQM is a model of the start
of training: where the model's curvature changes as it trains (the logistic loss flattens as it
fits, and its gradients stay bounded), the prediction is of the first steps, and the comparison says
how far that carries.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
import xarray as xr

from nqm import optimizers, validate
from nqm.optimizers import base
from nqm.errors import NqmError
from nqm.search.scaling import critical_batch_size
from nqm.status import BUDGET, REACHED, SETTLED, TRANSIENT
from nqm.transfer.measure import measure
from nqm.thresholds import derived
from nqm.transfer.problems import PROBLEMS, model as user_model, nqm_as_model, problem as real_problem
from nqm.transfer.train import train
from nqm.transfer import checked

METHODS = ("sgdm", "ab", "shifted")  # methods with a momentum: one grid for all of them
RHO = 0.5  # AB's braking coefficient here


def transfer(problem: str | None = None, *, model=None, target=None, methods=METHODS, delays=(0, 4), lr, momentum,
             steps: int = 2000, batch_size: int | None = None, seed=0, x64: bool = False, top: int | None = None,
             rho=(RHO,)) -> xr.Dataset:
    """The NQM's prediction against the model's outcome (see the module's docstring).

    Args:
      problem: a name of :data:`nqm.transfer.problems.PROBLEMS` (default ``digits-logistic``, unless
        ``model`` is given).
      model: your model instead: ``"MODULE:FUNCTION"``, the function, or ``(loss, params, data)``
        (:func:`nqm.transfer.problems.model`).
      target: the model's training loss to reach (default: the problem's own; for your model a
        tenth of its initial loss).
      methods: registered methods with a momentum.
      delays: constant delays, distinct.
      lr, momentum: the grid, the same for both.
      steps: the budget of each run.
      batch_size: examples per step (``None``: the whole data, no gradient noise); a list of
        increasing sizes adds a ``batch_size`` dimension and the critical batch sizes.
      seed: the problem's, the minibatches' and the NQM's noise seed; a list of seeds adds a ``seed``
        dimension (each seed its own starting point, measurement and runs).
      x64: both in float64 (the model's parameters and the NQM).
      top: top eigenvalues (:func:`nqm.transfer.measure`'s default where ``None``).
      rho: AB's braking coefficients: one method row each (``ab``, or ``ab:rho=ρ`` for several).

    Returns:
      Dataset over (method, delay, momentum): for each edge (``stable``, ``settled``)
      ``lr_EDGE_predicted``, ``lr_EDGE_observed``, ``lr_EDGE_ratio`` (predicted / observed) and
      ``EDGE_beyond_grid`` (the model's edge is the grid's largest lr); ``lr_threshold`` (a linear
      method's derived threshold at the measured λ_max, NaN for the others); ``best_steps_predicted``,
      ``best_steps_observed``; over (method, delay, momentum, lr): ``status_predicted``,
      ``status_observed``; over (delay, momentum): ``rank_correlation`` (Spearman, of the methods'
      best steps), ``same_fastest``, and with several ρ ``best_rho_predicted``, ``best_rho_observed``;
      with several batch sizes, over (method, delay, batch_size) ``fastest_steps_SIDE`` (the best over
      the whole grid) and over (method, delay) ``consistent_SIDE`` (that curve never rises beyond
      :data:`RISE`), ``critical_batch_size_SIDE`` (where its steps reach twice perfect scaling,
      :func:`nqm.search.scaling.critical_batch_size`; NaN where not consistent) and their ratio;
      λ_max, σ, the NQM's start and target and how they were measured in its attributes (with
      several seeds, those measured per seed are variables over ``seed``).

    Raises:
      NqmError: an unknown problem or method, a model that cannot be loaded, or invalid values, in
        one line, before any work.
    """
    if problem is not None and model is not None:
        raise NqmError("give a problem or a model, not both")
    problem = "digits-logistic" if problem is None and model is None else problem
    if problem is not None:
        _known(problem)
    seeds = _seeds(seed)
    settings = _checked(delays, lr, momentum, steps, batch_size, x64, top, target)
    rows = _rows(methods, rho, settings["dtype"])
    one = lambda s: _transfer(problem, model, rows, s, **settings)  # noqa: E731
    if np.ndim(seed) == 0:
        return one(seeds[0])
    return _over_seeds([one(s) for s in seeds], seeds)


def _seeds(seed) -> list:
    """``seed`` (one, or a list) as a list of distinct checked seeds."""
    seeds = np.atleast_1d(np.asarray(seed, dtype=object))
    if seeds.ndim != 1 or seeds.size == 0:
        raise NqmError(f"seed must be a seed or a non-empty list of seeds, got {seed!r}")
    seeds = [validate.count(s, "seed", low=0, high=2**32 - 1) for s in seeds.tolist()]
    if len(set(seeds)) != len(seeds):
        raise NqmError(f"seeds must be distinct, got {seed!r}")
    return seeds


def _over_seeds(runs: list, seeds: list) -> xr.Dataset:
    """One comparison per seed joined along ``seed``: what is measured per seed, and any other number
    that differs, become variables over seed; texts that differ list their values."""
    differs = {k for r in runs for k, v in r.attrs.items() if any(o.attrs.get(k) != v for o in runs)} - {"seed"}
    differs |= {"lam_max", "sigma_per_example", "sigma_spread"}
    numeric = {k for k in differs if all(isinstance(r.attrs.get(k), (int, float, np.number)) for r in runs)}
    measured = {k: ("seed", [r.attrs.get(k) for r in runs]) for k in numeric}
    texts = {k: " | ".join(dict.fromkeys(str(r.attrs.get(k)) for r in runs)) for k in differs - numeric}
    attrs = {**{k: v for k, v in runs[0].attrs.items() if k not in differs and k != "seed"}, **texts}
    ds = xr.concat([r.drop_attrs() for r in runs], "seed").assign_coords(seed=seeds).assign(measured)
    return ds.assign_attrs(attrs)


def _known(problem) -> None:
    """Refuse an unknown problem name before any work (the problem is built per seed)."""
    if not isinstance(problem, str) or problem not in PROBLEMS:
        real_problem(problem)  # its one line


def _checked(delays, lr, momentum, steps, batch_size, x64, top, target) -> dict:
    """Every setting of :func:`transfer` but the problem, the methods and the seeds, checked as
    ``nqm sweep`` checks them (the grid in the run's precision)."""
    x64 = validate.flag(x64, "x64")
    dtype = "float64" if x64 else "float32"
    coords = validate.coordinates(lr=lr, momentum=momentum, delay=delays, dtype=dtype)
    delays = coords.pop("delay").tolist()
    steps = validate.count(steps, "steps", low=2, high=validate.MAX_STEPS)
    if batch_size is None:
        sizes = [None]
    else:
        if isinstance(batch_size, (list, tuple, np.ndarray)) and len(batch_size) == 0:
            raise NqmError("batch_size is empty: give one size, a list of increasing sizes, or None (the whole data)")
        sizes = [validate.count(b, "batch_size", high=validate.BOUNDS["batch"]) for b in np.atleast_1d(
            np.asarray(batch_size, dtype=object)).tolist()]
    if len(sizes) > 1 and not np.all(np.diff(sizes) > 0):
        raise NqmError(f"batch sizes must be increasing, got {batch_size!r}")
    if top is not None:
        top = validate.count(top, "top", high=validate.BOUNDS["dim"])
    if target is not None:
        target = validate.number(target, "target")
        if not (np.isfinite(target) and target > 0):
            raise NqmError(f"target must be a number > 0 (a training loss to reach), got {target}")
        validate.representable(target, "target", dtype)
    return {"delays": delays, "coords": coords, "steps": steps, "sizes": sizes, "several": batch_size is not None
            and np.ndim(batch_size) > 0, "x64": x64, "dtype": dtype, "top": top, "target": target}


def _rows(methods, rho, dtype) -> dict:
    """The method rows: label → (method, its options); AB once per ρ."""
    if isinstance(methods, str) or not isinstance(methods, (list, tuple, np.ndarray)) or len(methods) == 0:
        raise NqmError(f"methods must be a non-empty list of names, e.g. ['sgdm', 'ab'], got {methods!r}")
    if len(set(map(str, methods))) != len(methods):
        raise NqmError(f"methods has repeated names: give each method once, got {list(methods)!r}")
    for method in methods:
        if not isinstance(method, str) or method not in optimizers.methods() \
                or "momentum" not in base.hyperparameters(method)._fields:
            raise NqmError(f"method {method!r} is not a registered method with a momentum (nqm transfer compares "
                           f"methods on one lr × momentum grid){validate.did_you_mean(str(method), optimizers.methods())}")
    rhos = validate.coordinates(rho=rho, dtype=dtype)["rho"]
    rows = {}
    for method in methods:
        if method != "ab":
            rows[method] = (method, {})
        for r in rhos if method == "ab" else ():
            rows["ab" if rhos.size == 1 else f"ab:rho={r:g}"] = ("ab", {"rho": float(r)})
    return rows


def _transfer(problem, model, rows: dict, seed, *, delays, coords, steps, sizes, several, x64, dtype, top,
              target) -> xr.Dataset:
    """One seed's comparison (see :func:`transfer`): measured once, trained per batch size."""
    with jax.enable_x64(x64):
        real, start, examples = _loaded(problem, model, target, seed, sizes)
        fitted = measure(real.loss, real.params, real.data, top=top, seed=seed)
        twin, twin_start, twin_target = _twin(real, start, fitted, examples, seed, dtype)
        reachable = twin_target > 0
        parts = [_compare({"predicted": twin, "observed": real}, rows, delays, coords, steps, size, seed, fitted,
                          reachable) for size in sizes]
    if not several:
        ds = parts[0]
    else:
        ds = xr.concat(parts, "batch_size").assign_coords(batch_size=sizes)
        ds = ds.assign(critical_batch_sizes(ds))
    rhos = sorted({extra["rho"] for _, extra in rows.values() if "rho" in extra})
    return ds.assign_attrs(
        problem=real.name, description=real.description, steps=steps, seed=seed,
        x64=int(x64), **({} if several else {"batch_size": -1 if sizes[0] is None else sizes[0]}),
        target=real.target, initial_loss=start, nqm_initial_loss=twin_start, nqm_target=twin_target,
        nqm_target_rule="the model's decrease: the NQM's initial loss - (the model's initial loss - target); "
                        + ("reachable" if reachable else "not above 0: the NQM's minimum is above the target, "
                                                          "so no NQM run reaches it"),
        nqm_start="the model's initial error along each eigenvector (the Newton step)",
        sigma_per_example=fitted.sigma, sigma_spread=fitted.sigma_spread,
        rho=rhos[0] if len(rhos) == 1 else ", ".join(f"{r:g}" for r in rhos), lam_max=float(fitted.top[0]),
        nqm_dim=int(fitted.eigenvalues.size),
        **{f"measured_{k}": v if isinstance(v, (int, float, str)) else str(v) for k, v in fitted.how.items()})


def _loaded(problem, model, target, seed, sizes):
    """The problem or the user's model at ``seed`` (with the user's ``target`` for a problem), its
    initial loss and its number of examples, checked against the batch ``sizes``."""
    real = real_problem(problem, seed) if model is None else user_model(model, target, seed)
    start = float(real.loss(real.params, real.data))
    examples = checked.examples(real.data)
    if any(size is not None and size > examples for size in sizes):
        raise NqmError(f"batch_size must be at most the {examples:,} examples of {real.name}, got "
                       f"{max(s for s in sizes if s is not None):,}")
    if model is None and target is not None:
        if not target < start:
            raise NqmError(f"target must be below the initial loss {start:.6g} of {problem}, got {target:g}")
        real = real._replace(target=target)
    return real, start, examples


def _twin(real, start: float, fitted, examples: int, seed, dtype):
    """The model's NQM as a model, its initial loss and its target: the same decrease as the model's
    (for a quadratic, the same level above its minimum); a target not above 0 is out of reach, and the
    twin gets the smallest positive one instead."""
    # as many examples as the model: a minibatch drawn without replacement is as noisy on both sides
    twin = nqm_as_model(fitted.eigenvalues, fitted.sigma, examples=examples, seed=seed,
                        name=f"the NQM of {real.name}", initial=fitted.initial)
    twin_start = float(0.5 * np.sum(fitted.eigenvalues * fitted.initial**2))
    twin_target = twin_start - (start - real.target)
    return twin._replace(target=twin_target if twin_target > 0 else 4 * float(np.finfo(dtype).tiny)), twin_start, \
        twin_target


def _compare(sides: dict, rows: dict, delays, coords, steps, batch_size, seed, fitted, reachable) -> xr.Dataset:
    """Both sides trained on the grid at one batch size, and what is compared (no attributes). An
    NQM that cannot reach its target (``reachable`` false) reaches it nowhere."""
    runs = {side: [[train(p.loss, p.params, p.data, method, lr=coords["lr"], momentum=coords["momentum"],
                          delay=delay, steps=steps, target=p.target, batch_size=batch_size, seed=seed,
                          **extra).squeeze(drop=True)
                    for delay in delays] for method, extra in rows.values()]
            for side, p in sides.items()}
    if not reachable:
        runs["predicted"] = [[_unreached(run) for run in row] for row in runs["predicted"]]
    dims = ("method", "delay", "momentum")
    stack = lambda side, name: np.array([[run[name].values.reshape(coords["momentum"].size, -1) for run in row]
                                         for row in runs[side]])
    data = {}
    for side in ("predicted", "observed"):
        status, t, blew_up = stack(side, "status"), stack(side, "steps"), stack(side, "diverged_at")
        data |= {f"status_{side}": (dims + ("lr",), status), f"best_steps_{side}": (dims, _best(status, t)),
                 f"lr_stable_{side}": (dims, _stable(blew_up > 0, coords["lr"])),
                 f"lr_settled_{side}": (dims, _settled(status, coords["lr"]))}
    for edge in ("stable", "settled"):
        theirs = data[f"lr_{edge}_observed"][1]
        data |= {f"lr_{edge}_ratio": (dims, data[f"lr_{edge}_predicted"][1] / theirs),
                 f"{edge}_beyond_grid": (dims, (theirs == coords["lr"][-1]).astype(np.int8))}
    data["lr_threshold"] = (dims, _thresholds([m for m, _ in rows.values()], delays, coords["momentum"], fitted.top[0]))
    data |= _ranks(data["best_steps_predicted"][1], data["best_steps_observed"][1], rows)
    rho_of = [extra.get("rho", np.nan) for _, extra in rows.values()]
    return xr.Dataset(data, coords={"method": list(rows), "rho": ("method", rho_of), "delay": delays, **coords})


def _unreached(run: xr.Dataset) -> xr.Dataset:
    """``run`` as if its target were out of reach: what reached it did not (its bounds unchanged)."""
    reached = run.status.isin([REACHED, TRANSIENT])
    return run.assign(status=run.status.where(~reached, BUDGET), steps=run.steps.where(~reached, 0))


RISE = 1.1  # a steps-against-batch-size curve that rises by more than this between two sizes is not consistent


def critical_batch_sizes(ds: xr.Dataset) -> dict:
    """Over (method, delay, batch_size), per side, the fastest steps over the whole grid; over (method,
    delay) what :func:`critical` makes of them."""
    fastest = {side: ds[f"best_steps_{side}"].min("momentum").transpose("method", "delay", "batch_size")
               for side in ("predicted", "observed")}
    found = critical(ds.batch_size.values, fastest["predicted"].values, fastest["observed"].values)
    return {**{f"fastest_steps_{side}": curve for side, curve in fastest.items()},
            **{name: (("method", "delay"), values) for name, values in found.items()}}


def critical(batch_size, predicted, observed) -> dict:
    """The critical batch sizes of steps-against-batch-size curves, the NQM's (``predicted``) and the
    model's (``observed``), arrays of the fastest steps over ``(..., batch_size)`` (NaN: no cell
    settled). Both curves are read from the same anchor — the smallest batch size where both
    settled — so that perfect scaling means the same on both sides. Per side: ``consistent_SIDE``
    (from the anchor on, the curve never rises beyond :data:`RISE`: less noise cannot need more
    steps, and a size that no longer settles is a rise) and ``critical_batch_size_SIDE``
    (:func:`nqm.search.scaling.critical_batch_size`; NaN where not consistent or no common anchor,
    ∞ where no size reaches twice perfect scaling); and ``critical_batch_size_ratio``.

    Args:
      batch_size: the increasing batch sizes.
      predicted, observed: the two curves, batch size last.

    Returns:
      The arrays by name, over the curves' leading dimensions.
    """
    sizes = np.asarray(batch_size)
    predicted, observed = np.asarray(predicted, float), np.asarray(observed, float)
    out = {f"{k}_{side}": np.zeros(predicted.shape[:-1], dtype) for side in ("predicted", "observed")
           for k, dtype in (("consistent", np.int8), ("critical_batch_size", float))}
    for index in np.ndindex(*predicted.shape[:-1]):
        both = np.flatnonzero(np.isfinite(predicted[index]) & np.isfinite(observed[index]))
        for side, curve in (("predicted", predicted[index]), ("observed", observed[index])):
            if both.size == 0:
                out[f"critical_batch_size_{side}"][index] = np.nan
                continue
            tail = np.where(np.isfinite(curve[both[0]:]), curve[both[0]:], np.inf)
            with np.errstate(invalid="ignore"):  # ∞/∞: two sizes that both never settle, not a rise
                rise = tail.size > 1 and np.nanmax(tail[1:] / np.fmin.accumulate(tail)[:-1]) > RISE
            out[f"consistent_{side}"][index] = not rise
            out[f"critical_batch_size_{side}"][index] = np.nan if rise else critical_batch_size(sizes[both[0]:], tail)
    with np.errstate(invalid="ignore"):  # ∞/∞: neither curve gets to twice perfect scaling
        out["critical_batch_size_ratio"] = out["critical_batch_size_predicted"] / out["critical_batch_size_observed"]
    return out


def _ranks(predicted: np.ndarray, observed: np.ndarray, rows: dict) -> dict:
    """Over (delay, momentum): the Spearman rank correlation of the method rows' best steps (a row
    that settles nowhere ranks last, ties share a rank; NaN with fewer than three rows or where one
    side ranks every row alike), whether the fastest row is the same (a tie for fastest counts if
    the other side's fastest is among it), and with several AB rows the best ρ on each side (NaN:
    no AB row settles)."""
    from scipy.stats import rankdata  # scipy.stats takes a while to import: only for the ranks

    slow = lambda steps: np.where(np.isfinite(steps), steps, np.inf)
    p, o = slow(predicted), slow(observed)
    correlation = np.full(p.shape[1:], np.nan)
    same = np.zeros(p.shape[1:], np.int8)
    for index in np.ndindex(*p.shape[1:]):
        a, b = p[(slice(None), *index)], o[(slice(None), *index)]
        ra, rb = rankdata(a), rankdata(b)
        if len(rows) >= 3 and ra.std() > 0 and rb.std() > 0:
            correlation[index] = np.corrcoef(ra, rb)[0, 1]
        same[index] = bool(np.isfinite(a.min()) and np.isfinite(b.min()) and (a[b == b.min()] == a.min()).any())
    out = {"rank_correlation": (("delay", "momentum"), correlation), "same_fastest": (("delay", "momentum"), same)}
    braked = [i for i, (_, extra) in enumerate(rows.values()) if "rho" in extra]
    if len(braked) > 1:
        rho = np.array([extra["rho"] for _, extra in rows.values() if "rho" in extra])
        for side, steps in (("predicted", p), ("observed", o)):
            best = steps[braked].argmin(0)
            out[f"best_rho_{side}"] = (("delay", "momentum"), np.where(np.isfinite(steps[braked].min(0)), rho[best], np.nan))
    return out


def _stable(blew_up: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """Per row, the largest lr below the first whose run went out of bounds at any step (NaN: the
    smallest already did)."""
    first = np.where(blew_up.any(-1), blew_up.argmax(-1), lr.size)
    return np.where(first > 0, lr[np.maximum(first - 1, 0)], np.nan)


def _thresholds(methods, delays, momenta, lam_max: float) -> np.ndarray:
    """The derived threshold lr = x*/λ_max of each linear method (NaN for the others, e.g. AB)."""
    out = np.full((len(methods), len(delays), momenta.size), np.nan)
    for (i, method), (j, delay) in itertools.product(enumerate(methods), enumerate(delays)):
        if optimizers.make(method).linear:
            out[i, j] = np.asarray(derived.threshold(method, momentum=momenta, delay=delay)) / lam_max
    return out


def _settled(status: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """Per row, the largest lr whose cell settles (NaN: none does)."""
    settles = status == SETTLED
    last = lr.size - 1 - np.argmax(settles[..., ::-1], -1)
    return np.where(settles.any(-1), lr[last], np.nan)


def _best(status: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per row, the steps of the fastest settled cell (NaN: none settled)."""
    best = np.where(status == SETTLED, steps.astype(float), np.inf).min(-1)
    return np.where(np.isfinite(best), best, np.nan)
