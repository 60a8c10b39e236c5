"""Why a run converges or not: per-step diagnostics recorded by the engine's own loop.

A recorder maps a :class:`nqm.engine.StepView` (one step of one cell) to an array. It is either
traced every ``stride`` steps, or kept on the device as a running :class:`nqm.engine.Summary`
(a mean, a histogram, or the first step at which something happens), so a long run at full size
fits in bounded memory. Every recorder works for every method: they see the velocity through the
family's accessor (``view.velocity``), never through its state.

The energy of eigencomponent k after a step is (AB paper, App. K.2, eq. 31)

    E_k = ½ λ_k u_k² + ½ (Δu_k)² / η,      u = Qᵀ w_{t+1},  Δu = Qᵀ (w_{t+1} − w_t),

which is ``½ λ u² + ½ η v²`` for heavy ball; the relative energy decay compares, from the same
state and with the same gradient sample, the energy after the optimizer's step with the energy
after an SGDM step (the ratio ``E_{t+1} / Ê_{t+1}``, averaged geometrically over the steps).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import xarray as xr

from nqm import engine
from nqm.engine import Summary
from nqm.errors import NqmError
from nqm.optimizers.base import momentum_coefficient
from nqm.problem import Problem


def _eigen(view, x):
    """Coordinates of ``x`` in the eigenbasis (``Qᵀ x``)."""
    return x if view.model.basis is None else view.model.basis.T @ x


def _energy(view, w_next):
    u, du = _eigen(view, w_next), _eigen(view, w_next - view.w)
    return 0.5 * view.model.lam * u**2 + 0.5 * du**2 / view.hyper.lr


def _cosine(a, b):
    """``cos(a, b)``, 0 when either is 0 (norms multiplied after the square roots: no overflow)."""
    norms = jnp.sqrt(jnp.vdot(a, a)) * jnp.sqrt(jnp.vdot(b, b))
    return jnp.where(norms > 0, jnp.vdot(a, b) / jnp.where(norms > 0, norms, 1), 0)


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
    """Adaptive Braking's factor α (the mean over parameters of the first micro-step's α); 1 for
    methods without braking."""
    return view.info.get("alpha", jnp.ones((), view.w.dtype))


def velocity_norm(view):
    """``‖w_{t+1} − w_t‖ / η`` (= ‖v_{t+1}‖ for heavy ball)."""
    return jnp.linalg.norm(view.w_next - view.w) / view.hyper.lr


def gradient_norm(view):
    """``‖g_t‖``, the (delayed, noisy) gradient applied at step t."""
    return jnp.linalg.norm(view.g)


def gradient_velocity_ratio(view):
    """``‖g_t‖ / ‖v_t‖``, the gradient-to-velocity ratio before the step (∞ at t = 0)."""
    return jnp.linalg.norm(view.g) / jnp.linalg.norm(view.velocity)


def gradient_velocity_cosine(view):
    """``cos(g_t, v_t)``: the alignment AB brakes on (0 while v = 0)."""
    return _cosine(view.g, view.velocity)


def group_cosine(view):
    """cos(g, v) of the parameter's braking group, per parameter (Adaptive Braking's own measure,
    with its ε floor; for other methods the global cos(g_t, v_t) for every parameter)."""
    return view.info.get("cosine", jnp.broadcast_to(gradient_velocity_cosine(view), view.g.shape))


def update_alignment(view):
    """``cos(w_t − w_{t+1}, g_t)``: how well the step follows the gradient (1: plain SGD; AB
    paper, Fig. 11)."""
    return _cosine(view.w - view.w_next, view.g)


def delay(view):
    """The delay τ_t of the gradient applied at step t."""
    return view.ctx.delay


def _sgdm_step(view, dampening):
    """``w_{t+1}`` of an SGDM step from the same state. A braking family (one with ``rho``) takes
    its own step at ρ = 0 — SGDM bit for bit, with the same rounding — so a ratio is exactly 1 when
    the braking is off."""
    if "rho" in view.hyper._fields:
        braking_off = view.hyper._replace(rho=view.hyper.rho * 0)
        return view.optimizer.step(braking_off, view.state, view.w, view.g, view.ctx)[0]
    c = momentum_coefficient(view.hyper.momentum, dampening)
    return view.w - view.hyper.lr * (view.hyper.momentum * view.velocity + c * view.g)


@functools.cache
def energy_ratio(dampening: bool = False):
    """Recorder of ``E_{t+1} / Ê_{t+1}`` per component, Ê after an SGDM step from the same state
    (the same function for the same convention, so that it never recompiles)."""

    def ratio(view):
        w_sgdm = _sgdm_step(view, dampening)
        same = _eigen(view, view.w_next) == _eigen(view, w_sgdm)  # the same step: exactly 1, whatever the rounding of E
        return jnp.where(same, 1.0, _energy(view, view.w_next) / _energy(view, w_sgdm))

    return ratio


@functools.cache
def log_energy_ratio(dampening: bool = False):
    """``log(E_{t+1} / Ê_{t+1})`` per component: its running mean is the log relative energy decay."""
    ratio = energy_ratio(dampening)
    return lambda view: jnp.log(ratio(view))


@functools.cache
def below(target: float):
    """True once ``L(w_{t+1}) < target``, computed exactly as the engine's stopping rule does."""
    return lambda view: view.model.loss(view.w_next) < target


RECORDERS = {
    "loss": loss,
    "component_loss": component_loss,
    "energy": energy,
    "alpha": alpha,
    "velocity_norm": velocity_norm,
    "gradient_norm": gradient_norm,
    "gradient_velocity_ratio": gradient_velocity_ratio,
    "gradient_velocity_cosine": gradient_velocity_cosine,
    "group_cosine": group_cosine,
    "update_alignment": update_alignment,
    "delay": delay,
}

ALPHA_EDGES = tuple(np.round(np.linspace(-2.0, 4.0, 601), 6))  # α histogram bins, 0.01 wide
# What `nqm trace` records, under these names: what nqm.plots.trace.plot_trace draws.
TRACE = ("loss", "alpha", "velocity_norm", "gradient_velocity_ratio", "update_alignment", "gradient_velocity_cosine",
         "gradient_norm")


def trajectory(problem: Problem, method: str = "sgdm", *, lr, momentum, delay=0, noise: float = 0.0,
               steps: int = 1000, seed: int = 0, record=("loss",), stride: int = 1, summaries: bool = False,
               target: float | None = None, x64: bool = False, independent_noise: bool = False,
               **hyper_and_options) -> xr.Dataset:
    """Diagnostics of one cell for ``steps`` steps (no early stop).

    Args:
      problem: the quadratic.
      method: optimizer name; its extra hyperparameters (e.g. ``rho``, default as in
        :func:`nqm.sweep`) and options go in ``hyper_and_options``.
      lr, momentum, delay, noise, seed: the cell, as in :func:`nqm.sweep` (``delay`` may be a process).
      steps: how many steps to run.
      record: names from :data:`RECORDERS`, and/or ``"energy_ratio"`` (per step and component).
      stride: trace steps ``stride, 2·stride, …`` only.
      summaries: also keep, on the device, the relative energy decay per component and α's
        histogram (mean and percentiles in the attributes).
      target: also report ``steps_to_target``, the first step with ``L < target`` — exactly the T
        that :func:`nqm.sweep` reports for this cell and seed (0: not reached).
      x64: record in float64.
      independent_noise: draw the noise as :func:`nqm.sweep` does with ``independent_noise``.

    Returns:
      Dataset with one variable per recorder over ``step`` (and ``component`` for per-component
      ones, with coordinate ``eigenvalue``); with ``summaries``, ``relative_energy_decay`` over
      ``component`` and ``alpha_histogram`` over ``alpha_bin``.
    """
    from nqm import delays, sweeps
    from nqm.optimizers import make

    cell = sweeps.cell(method, lr=lr, momentum=momentum, noise=noise, seed=seed, **hyper_and_options)
    noise, seed = float(np.ravel(noise)[0]), int(np.ravel(seed)[0])
    unknown = [name for name in record if name not in RECORDERS and name != "energy_ratio"]
    if unknown:
        raise NqmError(f"unknown recorder {unknown[0]!r}; choose from {', '.join([*RECORDERS, 'energy_ratio'])}")
    if int(steps) != steps or steps < 1:
        raise NqmError(f"steps must be an integer >= 1, got {steps}")
    if int(stride) != stride or not 1 <= stride <= steps:
        raise NqmError(f"stride must be an integer between 1 and steps ({steps}), got {stride}")
    if target is not None and not (np.isfinite(target) and target > 0):
        raise NqmError(f"target must be a number > 0, got {target}")
    process = delays.process(delay)
    dampening = bool(cell.options.get("dampening", False))
    recorders = {name: RECORDERS.get(name) or energy_ratio(dampening) for name in record}
    if summaries:
        recorders["relative_energy_decay"] = Summary(log_energy_ratio(dampening))
        recorders["alpha_histogram"] = Summary(alpha, "histogram", ALPHA_EDGES)
    if target is not None:
        recorders["steps_to_target"] = Summary(below(float(target)), "first")
    optimizer = make(method, delay=process, **cell.options)
    config = engine.RunConfig(target=-1.0, diverge_factor=np.inf, max_steps=int(steps), x64=x64,
                              independent_noise=independent_noise, chunk_steps=min(int(steps), 1000), progress=False)
    out = engine.simulate(problem, optimizer, cell.hyper, [noise], delay=process, seed=int(seed), uids=cell.uid,
                          config=config, record=recorders, stride=int(stride))
    data = {}
    for name, values in out.trace.items():
        dims = ("step",) if values.ndim == 2 else ("step", "component")
        data[name] = (dims, values[0])
    attrs = {"method": method, **{k: float(v[0]) for k, v in cell.hyper.items()},
             "delay": process.label, "noise": noise, "seed": seed, "stride": int(stride), "steps": int(steps),
             **{k: sweeps._attr(v) for k, v in optimizer.config if k != "workers"}, **problem.describe()}
    if summaries:
        data["relative_energy_decay"] = ("component", np.exp(out.summary["relative_energy_decay"][0]),
                                         {"long_name": "geometric mean over steps of E / E_SGDM"})
        counts = out.summary["alpha_histogram"][0]
        data["alpha_histogram"] = ("alpha_bin", counts, {"long_name": "steps with α in [edge, next edge)"})
        attrs.update(_alpha_stats(counts))
    if target is not None:
        data["steps_to_target"] = ((), int(out.summary["steps_to_target"][0]), {"meaning": "0: not reached"})
        attrs["target"] = float(target)
    coords = {"step": np.arange(1, int(steps) // int(stride) + 1) * int(stride),
              "eigenvalue": ("component", problem.eigenvalues)}
    if summaries:
        coords["alpha_bin"] = np.r_[-np.inf, ALPHA_EDGES]
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _alpha_stats(counts: np.ndarray) -> dict:
    """α's mean and percentiles from its histogram (to the bins' 0.01 resolution)."""
    if counts.sum() == 0:
        return {}
    centres = np.r_[ALPHA_EDGES[0], np.add(ALPHA_EDGES[1:], ALPHA_EDGES[:-1]) / 2, ALPHA_EDGES[-1]]
    cdf = np.cumsum(counts) / counts.sum()
    stats = {f"alpha_p{q}": float(centres[np.searchsorted(cdf, q / 100)]) for q in (5, 50, 95)}
    return {"alpha_mean": float(centres @ counts / counts.sum()), **stats}


def relative_energy_decay(ratio: xr.DataArray) -> xr.DataArray:
    """Geometric mean over steps of ``E_{t+1} / Ê_{t+1}`` (AB paper, Fig. 2–3): below 1, the
    optimizer dissipates that component's energy faster than SGDM would."""
    return np.exp(np.log(ratio).mean("step"))
