"""Why a run converges or not: per-step traces recorded by the engine's own loop.

Each recorder maps a :class:`nqm.engine.StepView` (one step of one cell) to an array. The energy
of eigencomponent k after a step is (AB paper, App. K.2, eq. 31)

    E_k = ½ λ_k u_k² + ½ (Δu_k)² / η,      u = Qᵀ w_{t+1},  Δu = Qᵀ (w_{t+1} − w_t),

which is ``½ λ u² + ½ η v²`` for heavy ball; the relative energy decay compares, from the same
state and with the same gradient sample, the energy after the optimizer's step with the energy
after an SGDM step (the ratio ``E_{t+1} / Ê_{t+1}``, averaged geometrically over t).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import xarray as xr

from nqm import engine
from nqm.optimizers import make
from nqm.optimizers.base import momentum_coefficient
from nqm.problem import Problem


def _eigen(view, x):
    """Coordinates of ``x`` in the eigenbasis (``Qᵀ x``)."""
    return x if view.model.basis is None else view.model.basis.T @ x


def _energy(view, w_next):
    u, du = _eigen(view, w_next), _eigen(view, w_next - view.w)
    return 0.5 * view.model.lam * u**2 + 0.5 * du**2 / view.hyper.lr


def loss(view):
    """``L(w_{t+1})``."""
    return view.model.loss(view.w_next)


def component_loss(view):
    """``½ λ_k u_k²`` per eigencomponent."""
    return 0.5 * view.model.lam * _eigen(view, view.w_next) ** 2


def energy(view):
    """Per-component energy ``E_k`` after the step."""
    return _energy(view, view.w_next)


def alpha(view):
    """Adaptive Braking's factor α (mean over groups); 1 for methods without braking."""
    return view.info.get("alpha", jnp.ones((), view.w.dtype))


def velocity_norm(view):
    """``‖w_{t+1} − w_t‖ / η`` (= ‖v_{t+1}‖ for heavy ball)."""
    return jnp.linalg.norm(view.w_next - view.w) / view.hyper.lr


def gradient_velocity_ratio(view):
    """``‖g_t‖ / ‖v_t‖``, the gradient-to-velocity ratio before the step (∞ at t = 0)."""
    return jnp.linalg.norm(view.g) / jnp.linalg.norm(view.velocity)


def energy_ratio(dampening: bool = False):
    """Recorder of ``E_{t+1} / Ê_{t+1}`` per component, Ê after an SGDM step from the same state."""
    def ratio(view):
        c = momentum_coefficient(view.hyper.momentum, dampening)
        w_sgdm = view.w - view.hyper.lr * (view.hyper.momentum * view.velocity + c * view.g)
        return _energy(view, view.w_next) / _energy(view, w_sgdm)

    return ratio


RECORDERS = {
    "loss": loss,
    "component_loss": component_loss,
    "energy": energy,
    "alpha": alpha,
    "velocity_norm": velocity_norm,
    "gradient_velocity_ratio": gradient_velocity_ratio,
}


def trajectory(problem: Problem, method: str = "sgdm", *, lr, momentum, rho=None, delay: int = 0,
               noise: float = 0.0, steps: int = 1000, seed: int = 0, record=("loss",), x64: bool = False,
               **options) -> xr.Dataset:
    """Per-step diagnostics of one run for ``steps`` steps (no early stop).

    Args:
      problem: the quadratic.
      method: optimizer name; ``options`` go to :func:`nqm.optimizers.make`.
      lr, momentum, rho, delay, noise, seed: the cell.
      steps: how many steps to record.
      record: names from :data:`RECORDERS`, and/or ``"energy_ratio"``.
      x64: record in float64.

    Returns:
      Dataset with one variable per recorder over ``step`` (1…steps) and, for per-component
      ones, ``component`` (eigenvalue index, sorted as given); coordinate ``eigenvalue``.
    """
    recorders = {name: RECORDERS[name] for name in record if name != "energy_ratio"}
    if "energy_ratio" in record:
        recorders["energy_ratio"] = energy_ratio(bool(options.get("dampening", False)))
    optimizer = make(method, delay=delay, **options)
    hyper = {"lr": [lr], "momentum": [momentum], "rho": [0.0 if rho is None else rho]}
    config = engine.RunConfig(target=-1.0, diverge_factor=np.inf, max_steps=steps, x64=x64,
                              chunk_steps=min(steps, 1000), progress=False)
    out = engine.simulate(problem, optimizer, hyper, [noise], delay=delay, seed=seed, config=config, record=recorders)
    data = {}
    for name, values in out.trace.items():
        dims = ("step",) if values.ndim == 2 else ("step", "component")
        data[name] = (dims, values[0])
    return xr.Dataset(
        data,
        coords={"step": np.arange(1, steps + 1), "eigenvalue": ("component", problem.eigenvalues)},
        attrs={"method": method, "lr": lr, "momentum": momentum, "rho": -1 if rho is None else rho,
               "delay": delay, "noise": noise, "seed": seed, "spectrum": problem.spectrum},
    )


def relative_energy_decay(ratio: xr.DataArray) -> xr.DataArray:
    """Geometric mean over steps of ``E_{t+1} / Ê_{t+1}`` (AB paper, Fig. 2–3): below 1, the
    optimizer dissipates that component's energy faster than SGDM would."""
    return np.exp(np.log(ratio).mean("step"))
