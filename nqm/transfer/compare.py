"""What a real model's NQM predicts against what the model does, on the same grid.

For a problem of :mod:`nqm.transfer.problems`: its NQM is measured at the starting point
(:func:`nqm.transfer.measure`: the Hessian's spectrum and the per-example gradient noise σ, which a
batch of B examples divides by √B); then, for each method and delay, the same lr × momentum grid is
run twice — as an NQM sweep (``nqm.sweep`` on the measured spectrum, noise σ/√B, the target the
same fraction of the initial loss as the model's) and as the model itself
(:func:`nqm.transfer.train`). Compared per method, delay and momentum:

* the stability boundary: the largest lr of the grid below the first that diverges (status −1,
  the same rule on both sides: where the model is an NQM, the boundaries are equal);
* the largest lr that settles (status 1: reaches the target and stays; each side by its own
  settled test, nqm's and the trainer's window);
  predicted, observed and their ratios — where the model's edge is the grid's largest lr, the edge
  lies beyond the grid and the ratio is only a bound (``*_beyond_grid``);
* the fastest settled cell's steps (best over lr), and so the ranking of the methods at each delay.

The NQM is a model of the start of training: where the model's curvature changes as it trains
(the logistic loss flattens as it fits), the prediction is of the first steps, and the comparison
says how far that carries.
"""

from __future__ import annotations

import itertools

import numpy as np
import xarray as xr

from nqm import optimizers, sweeps, validate
from nqm.optimizers import base
from nqm.errors import NqmError
from nqm.status import DIVERGED, SETTLED
from nqm.transfer.measure import measure
from nqm.transfer.problems import problem as real_problem
from nqm.transfer.train import train

METHODS = ("sgdm", "ab", "shifted")  # methods with a momentum: one grid for all of them
RHO = 0.5  # AB's braking coefficient here


def transfer(problem: str = "digits-logistic", *, methods=METHODS, delays=(0, 4), lr, momentum, steps: int = 2000,
             batch_size: int | None = None, seed: int = 0, x64: bool = False, top: int = 16) -> xr.Dataset:
    """The NQM's prediction against the model's outcome (see the module's docstring).

    Args:
      problem: a name of :data:`nqm.transfer.problems.PROBLEMS`.
      methods: registered methods with a momentum (AB at ρ = 0.5).
      delays: constant delays.
      lr, momentum: the grid, the same for both.
      steps: the budget of each run.
      batch_size: examples per step (``None``: the whole data, no gradient noise).
      seed: the problem's, the minibatches' and the NQM's noise seed.
      x64: both in float64 (the model's parameters and the NQM).
      top: eigenvalues found by Lanczos (the rest from the bulk's density).

    Returns:
      Dataset over (method, delay, momentum): for each edge (``stable``, ``settled``)
      ``lr_EDGE_predicted``, ``lr_EDGE_observed``, ``lr_EDGE_ratio`` (predicted / observed) and
      ``EDGE_beyond_grid`` (the model's edge is the grid's largest lr); ``best_steps_predicted``,
      ``best_steps_observed``; over
      (method, delay, momentum, lr): ``status_predicted``, ``status_observed``; the measured
      ``eigenvalues`` and noise in its attributes.

    Raises:
      NqmError: an unknown problem or method, or invalid values, in one line.
    """
    import jax

    if isinstance(methods, str) or not methods:
        raise NqmError("methods must be a non-empty list of names, e.g. ['sgdm', 'ab']")
    for method in methods:
        if method not in optimizers.methods() or "momentum" not in base.hyperparameters(method)._fields:
            raise NqmError(f"method {method!r} is not a registered method with a momentum (nqm transfer compares "
                           f"methods on one lr × momentum grid){validate.did_you_mean(method, optimizers.methods())}")
    delays = [validate.count(d, "delay", low=0, high=validate.MAX_DELAY) for d in np.atleast_1d(delays).tolist()]
    steps, seed = validate.count(steps, "steps", low=2, high=validate.MAX_STEPS), validate.count(seed, "seed", low=0)
    if batch_size is not None:
        batch_size = validate.count(batch_size, "batch_size")
    x64 = validate.flag(x64, "x64")
    coords = validate.coordinates(lr=lr, momentum=momentum)
    with jax.enable_x64(x64):
        real = real_problem(problem, seed)
        fitted = measure(real.loss, real.params, real.data, top=top, seed=seed)
        nqm_problem = fitted.problem()
        first = float(real.loss(real.params, real.data))
        nqm_target = real.target / first * nqm_problem.initial_loss  # the same fraction of the initial loss
        noise = 0.0 if batch_size is None else fitted.sigma / np.sqrt(batch_size)
        shape = (len(methods), len(delays), coords["momentum"].size, coords["lr"].size)
        predicted, observed = np.zeros(shape, np.int8), np.zeros(shape, np.int8)
        t_predicted, t_observed = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        for (i, method), (j, delay) in itertools.product(enumerate(methods), enumerate(delays)):
            extra = {"rho": RHO} if method == "ab" else {}
            ours = sweeps.sweep(method, lr=coords["lr"], momentum=coords["momentum"], delay=delay, noise=noise, seed=seed,
                                problem=nqm_problem, max_steps=steps, target=nqm_target, x64=x64, progress=False,
                                **extra).isel(delay=0, noise=0, seed=0).squeeze(drop=True)
            model = train(real.loss, real.params, real.data, method, lr=coords["lr"], momentum=coords["momentum"],
                          delay=delay, steps=steps, target=real.target, batch_size=batch_size, seed=seed, **extra)
            predicted[i, j], t_predicted[i, j] = ours.status.values, ours.steps.values
            observed[i, j], t_observed[i, j] = model.status.values.squeeze(), model.steps.values.squeeze()
    dims = ("method", "delay", "momentum")
    data = {"status_predicted": (dims + ("lr",), predicted), "status_observed": (dims + ("lr",), observed),
            "best_steps_predicted": (dims, _best(predicted, t_predicted)),
            "best_steps_observed": (dims, _best(observed, t_observed))}
    for edge, rule in (("stable", _stable), ("settled", _settled)):
        ours, theirs = rule(predicted, coords["lr"]), rule(observed, coords["lr"])
        data |= {f"lr_{edge}_predicted": (dims, ours), f"lr_{edge}_observed": (dims, theirs),
                 f"lr_{edge}_ratio": (dims, ours / theirs),
                 f"{edge}_beyond_grid": (dims, (theirs == coords["lr"][-1]).astype(np.int8))}
    attrs = {"problem": problem, "description": real.description, "steps": steps, "seed": seed, "x64": int(x64),
             "batch_size": -1 if batch_size is None else batch_size, "target": real.target, "nqm_target": nqm_target,
             "sigma_per_example": fitted.sigma, "nqm_noise": noise, "rho": RHO, "lam_max": float(fitted.top[0]),
             **{f"measured_{k}": v if isinstance(v, (int, float, str)) else str(v) for k, v in fitted.how.items()}}
    return xr.Dataset(data, coords={"method": list(methods), "delay": delays, **coords}, attrs=attrs)


def _stable(status: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """Per row, the largest lr below the first that diverges (NaN: the smallest already does)."""
    diverges = status == DIVERGED
    first = np.where(diverges.any(-1), diverges.argmax(-1), lr.size)
    return np.where(first > 0, lr[np.maximum(first - 1, 0)], np.nan)


def _settled(status: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """Per row, the largest lr whose cell settles (NaN: none does)."""
    settles = status == SETTLED
    last = lr.size - 1 - np.argmax(settles[..., ::-1], -1)
    return np.where(settles.any(-1), lr[last], np.nan)


def _best(status: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per row, the steps of the fastest settled cell (NaN: none settled)."""
    settled = np.where(status == SETTLED, steps, np.iinfo(np.int64).max)
    best = settled.min(-1)
    return np.where(best < np.iinfo(np.int64).max, best, np.nan).astype(float)
