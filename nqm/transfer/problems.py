"""Small real problems that run on a laptop in minutes and need no download, as plain JAX losses.

* ``digits-logistic``: multinomial logistic regression on scikit-learn's bundled 8 × 8 digits
  (1,797 images, pixels scaled to [0, 1]), with an L2 term of 10⁻³ (a strongly convex loss, so its
  Hessian is positive definite); starts at zero weights.
* ``digits-mlp``: a 64–32–10 tanh network on the same data, seeded Glorot initialisation; not
  convex (its Hessian has negative eigenvalues, which the NQM drops and counts).
* ``quadratic``: an NQM written as a model (``½ wᵀ diag(λ) w − σ (√λ ⊙ z_i)ᵀ w`` per example, with
  whitened z: gradient noise of covariance exactly σ² H): the check that a fitted NQM predicts
  what the model does where the model *is* an NQM; ``quadratic-noisy`` the same with per-example
  noise σ = 0.3 (minibatches: the batch-size check).

And your own: :func:`model` takes ``MODULE:FUNCTION`` (``FUNCTION()`` returns ``(loss, params,
data)``), the function itself, or that triple.

scikit-learn is needed for the digits only (``pip install -e ".[transfer]"``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from nqm.errors import NqmError
from nqm.validate import did_you_mean, number
from nqm.transfer import checked

L2 = 1e-3  # the logistic regression's weight decay (strong convexity)


class RealProblem(NamedTuple):
    """A model, its data and where training starts: ``loss(params, batch)`` is the batch's mean."""

    name: str
    loss: Callable
    params: object
    data: object
    target: float  # the training loss the searches aim at: a fraction of the initial loss
    description: str


def digits(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits: pixels in [0, 1] (1,797 × 64) and one-hot labels (1,797 × 10)."""
    try:
        from sklearn.datasets import load_digits  # optional: the transfer extra
    except ImportError:
        raise NqmError('the digits problems need scikit-learn: pip install -e ".[transfer]"') from None
    x, y = load_digits(return_X_y=True)
    return x / 16.0, np.eye(10)[y]


def _cross_entropy(logits, onehot):
    return -jnp.mean(jnp.sum(onehot * jax.nn.log_softmax(logits), -1))


def digits_logistic(seed: int = 0) -> RealProblem:
    x, y = digits(seed)
    loss = lambda p, b: _cross_entropy(b["x"] @ p["w"] + p["b"], b["y"]) + 0.5 * L2 * jnp.sum(p["w"] ** 2)
    params = {"w": jnp.zeros((64, 10)), "b": jnp.zeros(10)}
    return RealProblem("digits-logistic", loss, params, {"x": jnp.asarray(x), "y": jnp.asarray(y)}, 0.3,
                       f"multinomial logistic regression on the digits (1,797 × 64), L2 {L2:g}, from zero weights")


def digits_mlp(seed: int = 0, hidden: int = 32) -> RealProblem:
    x, y = digits(seed)
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    glorot = lambda k, shape: jax.random.normal(k, shape) * np.sqrt(2.0 / sum(shape))
    params = {"w1": glorot(k1, (64, hidden)), "b1": jnp.zeros(hidden), "w2": glorot(k2, (hidden, 10)),
              "b2": jnp.zeros(10)}
    loss = lambda p, b: _cross_entropy(jnp.tanh(b["x"] @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"], b["y"])
    return RealProblem("digits-mlp", loss, params, {"x": jnp.asarray(x), "y": jnp.asarray(y)}, 0.3,
                       f"a 64–{hidden}–10 tanh network on the digits, Glorot initialisation")


def nqm_as_model(eigenvalues, sigma: float = 0.0, examples: int = 256, seed: int = 0, target: float = 0.01,
                 name: str = "quadratic", initial=None) -> RealProblem:
    """The NQM with ``eigenvalues`` written as a model, from the initial error ``initial`` (default
    w₀ = 1): per example ``½ wᵀ diag(λ) w − σ (√λ ⊙ z_i)ᵀ w`` with whitened z (sample covariance
    exactly I, mean exactly 0), so that its per-example gradient noise has covariance exactly σ² H
    and its loss on the whole data is the NQM's, ``½ Σ λ_k w_k²``."""
    lam = np.asarray(eigenvalues, np.float64)
    examples = max(examples, 2 * lam.size)  # whitened: more examples than dimensions
    z = np.random.default_rng(seed).standard_normal((examples, lam.size))
    z -= z.mean(0)
    z = z @ np.linalg.inv(np.linalg.cholesky(z.T @ z / examples)).T
    root = jnp.asarray(np.sqrt(lam))
    loss = lambda w, b: jnp.mean(0.5 * jnp.vdot(w, jnp.asarray(lam) * w) - sigma * (b * root) @ w)
    start = jnp.ones(lam.size) if initial is None else jnp.asarray(np.asarray(initial, np.float64))
    return RealProblem(name, loss, start, jnp.asarray(z), target,
                       f"the NQM of {lam.size} eigenvalues written as a model, per-example noise σ = {sigma:g}")


def quadratic(seed: int = 0, dim: int = 32, sigma: float = 0.0) -> RealProblem:
    return nqm_as_model(1.0 / np.arange(1, dim + 1), sigma, seed=seed,
                        name="quadratic")._replace(description=f"the NQM zhang({dim}) written as a model, noise σ = {sigma:g}")


def noisy_quadratic(seed: int = 0) -> RealProblem:
    return quadratic(seed, sigma=NOISY_SIGMA)


NOISY_SIGMA = 0.3  # quadratic-noisy's per-example noise

PROBLEMS = {"digits-logistic": digits_logistic, "digits-mlp": digits_mlp, "quadratic": quadratic,
            "quadratic-noisy": noisy_quadratic}


def problem(name: str, seed: int = 0) -> RealProblem:
    """The problem ``name`` (one of :data:`PROBLEMS`)."""
    if not isinstance(name, str) or name not in PROBLEMS:
        raise NqmError(f"unknown problem {name!r}{did_you_mean(str(name), PROBLEMS)}; choose one of {', '.join(PROBLEMS)}")
    return PROBLEMS[name](seed)


TARGET_SHARE = 0.1  # your model's default target: a tenth of its initial loss


def model(spec, target=None, seed: int = 0) -> RealProblem:
    """Your model as a problem: ``spec`` is ``"MODULE:FUNCTION"`` (MODULE imported from the working
    directory or the installed packages), the function itself, or what it returns, the triple
    ``(loss, params, data)`` of :func:`nqm.transfer.measure` and :func:`nqm.transfer.train`. A
    ``FUNCTION`` that takes a ``seed`` argument is called with ``seed`` (a new starting point per seed).

    Args:
      spec: the model, as above.
      target: the training loss to reach (default: a tenth of the loss at ``params``).
      seed: passed to a ``FUNCTION`` that takes one.

    Returns:
      The problem.

    Raises:
      NqmError: a spec that is none of these, a module or function that cannot be found, a function
        that fails or returns something else, or a target that is not a number between 0 and the
        initial loss, in one line.
    """
    label = spec if isinstance(spec, str) else getattr(spec, "__qualname__", "your model")
    made = _call(_function(spec), seed, label) if isinstance(spec, str) or callable(spec) else spec
    if not (isinstance(made, (tuple, list)) and len(made) == 3 and callable(made[0])):
        raise NqmError(f"{label} must return (loss, params, data): a loss function loss(params, batch), its "
                       f"starting parameters and the data, got {type(made).__name__}")
    loss, params, data = made
    examples = checked.examples(data)
    try:
        flat, unravel = ravel_pytree(params)
    except (TypeError, ValueError) as exc:
        raise NqmError(f"{label}: params must be a pytree of arrays ({' '.join(str(exc).split())[:120]})") from None
    first = checked.loss_at(lambda w: loss(unravel(w), data), flat)
    if target is None:
        target = TARGET_SHARE * first
    target = number(target, "target")
    if not (np.isfinite(target) and 0 < target < first):
        raise NqmError(f"target must be a number between 0 and the initial loss {first:.6g} (the level training "
                       f"aims at), got {target:g}")
    return RealProblem(label, loss, params, data, target,
                       f"{label}: {flat.size:,} parameters, {examples:,} examples, initial loss {first:.4g}")


def _function(spec) -> Callable:
    """``MODULE:FUNCTION`` imported (the working directory first, as ``python -c`` does), or the
    callable itself."""
    if callable(spec):
        return spec
    module, _, name = spec.partition(":")
    if not (module and name) or not all(part.isidentifier() for part in module.split(".") + [name]):
        raise NqmError(f"a model is MODULE:FUNCTION (e.g. mymodel:build, FUNCTION() returning (loss, params, data)), "
                       f"got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise NqmError(f"cannot import {module!r} for the model {spec}: no such module in the working directory "
                           f"({os.getcwd()}) or the installed packages") from None
        raise NqmError(f"importing {module!r} for the model {spec} failed: {_said(exc)}") from None
    except Exception as exc:  # the user's module: whatever it raises is one line
        raise NqmError(f"importing {module!r} for the model {spec} failed: {_said(exc)}") from None
    found = getattr(imported, name, None)
    if not callable(found):
        raise NqmError(f"module {module!r} has no function {name!r}{did_you_mean(name, dir(imported))} (the model "
                       f"{spec})")
    return found


def _call(function, seed, label):
    """``function()``, or ``function(seed=seed)`` where it takes a seed; what it raises, one line."""
    try:
        takes_seed = "seed" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        takes_seed = False
    try:
        return function(seed=seed) if takes_seed else function()
    except NqmError:
        raise
    except Exception as exc:  # the user's function: whatever it raises is one line
        raise NqmError(f"the model {label} failed: {_said(exc)}") from None


def _said(exc: BaseException) -> str:
    """An exception as one short line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}{'…' if len(text) > 200 else ''}" if text else type(exc).__name__
