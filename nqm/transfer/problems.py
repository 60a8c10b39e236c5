"""Small real problems that run on a laptop in minutes and need no download, as plain JAX losses.

* ``digits-logistic``: multinomial logistic regression on scikit-learn's bundled 8 × 8 digits
  (1,797 images, pixels scaled to [0, 1]), with an L2 term of 10⁻³ (a strongly convex loss, so its
  Hessian is positive definite); starts at zero weights.
* ``digits-mlp``: a 64–32–10 tanh network on the same data, seeded Glorot initialisation; not
  convex (its Hessian has negative eigenvalues, which the NQM drops and counts).
* ``quadratic``: an NQM written as a model (``½ wᵀ diag(λ) w − σ (√λ ⊙ z_i)ᵀ w`` per example, with
  whitened z: gradient noise of covariance exactly σ² H): the check that a fitted NQM predicts
  what the model does where the model *is* an NQM; ``quadratic-noisy`` the same with per-example
  noise σ = 1 (minibatches: the batch-size check).

scikit-learn is needed for the digits only (``pip install -e ".[transfer]"``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from nqm.errors import NqmError
from nqm.validate import did_you_mean

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
        from sklearn.datasets import load_digits
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
                 name: str = "quadratic") -> RealProblem:
    """The NQM with ``eigenvalues`` written as a model, from w₀ = 1: per example
    ``½ wᵀ diag(λ) w − σ (√λ ⊙ z_i)ᵀ w`` with whitened z (sample covariance exactly I), so that its
    per-example gradient noise has covariance exactly σ² H."""
    lam = np.asarray(eigenvalues, np.float64)
    examples = max(examples, 2 * lam.size)  # whitened: more examples than dimensions
    z = np.random.default_rng(seed).standard_normal((examples, lam.size))
    z -= z.mean(0)
    z = z @ np.linalg.inv(np.linalg.cholesky(z.T @ z / examples)).T
    root = jnp.asarray(np.sqrt(lam))
    loss = lambda w, b: jnp.mean(0.5 * jnp.vdot(w, jnp.asarray(lam) * w) - sigma * (b * root) @ w)
    return RealProblem(name, loss, jnp.ones(lam.size), jnp.asarray(z), target,
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
    if name not in PROBLEMS:
        raise NqmError(f"unknown problem {name!r}{did_you_mean(name, PROBLEMS)}; choose one of {', '.join(PROBLEMS)}")
    return PROBLEMS[name](seed)
