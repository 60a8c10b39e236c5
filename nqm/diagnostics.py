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
after an SGDM step (the ratio ``E_{t+1} / Ê_{t+1}``, :func:`energy_ratio`), averaged geometrically
over the steps (the ``relative_energy_decay`` summary).

One vocabulary: the names of :data:`RECORDERS` and :data:`SUMMARIES` are the names of the
variables in a trajectory, in a ``nqm trace`` file and in its figure.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import xarray as xr

from nqm import delays, engine, jobs, schedules, validate
from nqm.engine import First, GeometricMean, Histogram, Mean, Trace
from nqm.engine.record import judged, loss, raw_loss
from nqm.errors import NqmError
from nqm.conventions import momentum_coefficient
from nqm.problem import Problem
from nqm.results import attribute


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


def component_loss(view):
    """``½ λ_k u_k²`` per eigencomponent.

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      One value per eigencomponent, shape ``(dim,)``.
    """
    return 0.5 * view.model.lam * _eigen(view, view.w_next) ** 2


def energy(view):
    """Per-component energy ``E_k`` after the step.

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      One value per eigencomponent, shape ``(dim,)``.
    """
    return _energy(view, view.w_next)


def alpha(view):
    """Adaptive Braking's factor α (the mean over parameters of the first micro-step's α); 1 for
    methods without braking.

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      A scalar.
    """
    return view.info.get("alpha", jnp.ones((), view.w.dtype))


def velocity_norm(view):
    """``‖w_{t+1} − w_t‖ / η`` (= ‖v_{t+1}‖ for heavy ball).

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      A scalar.
    """
    return jnp.linalg.norm(view.w_next - view.w) / view.hyper.lr


def gradient_norm(view):
    """``‖g_t‖``, the (delayed, noisy) gradient applied at step t.

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      A scalar.
    """
    return jnp.linalg.norm(view.g)


def gradient_velocity_ratio(view):
    """``‖g_t‖ / ‖v_t‖``, the gradient-to-velocity ratio before the step (∞ at t = 0).

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      A scalar.
    """
    return jnp.linalg.norm(view.g) / jnp.linalg.norm(view.velocity)


def gradient_velocity_cosine(view):
    """``cos(g_t, v_t)``: the alignment AB brakes on (0 while v = 0).

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      A scalar in [-1, 1].
    """
    return _cosine(view.g, view.velocity)


def group_cosine(view):
    """cos(g, v) of the parameter's braking group, per parameter (Adaptive Braking's own measure,
    with its ε floor; for other methods the global cos(g_t, v_t) for every parameter).

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      One value per parameter, shape ``(dim,)``.
    """
    return view.info.get("cosine", jnp.broadcast_to(gradient_velocity_cosine(view), view.g.shape))


def update_alignment(view):
    """``cos(w_t − w_{t+1}, g_t)``: how well the step follows the gradient (1: plain SGD; AB
    paper, Fig. 11).

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      A scalar in [-1, 1].
    """
    return _cosine(view.w - view.w_next, view.g)


def delay(view):
    """The delay τ_t of the gradient applied at step t.

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      The delay in steps, an integer scalar.
    """
    return view.ctx.delay


def _sgdm_step(view):
    """``w_{t+1}`` of an SGDM step from the same state (in the optimizer's momentum convention). A
    braking family (one with ``rho``) takes its own step at ρ = 0 — SGDM bit for bit, with the same
    rounding — so a ratio is exactly 1 when the braking is off."""
    if "rho" in view.hyper._fields:
        braking_off = view.hyper._replace(rho=view.hyper.rho * 0)
        return view.optimizer.step(braking_off, view.state, view.w, view.g, view.ctx)[0]
    if "momentum" not in view.hyper._fields:  # a method without momentum (Adam) is held against SGD
        return view.w - view.hyper.lr * view.g
    dampening = bool(dict(view.optimizer.config).get("dampening", False))
    c = momentum_coefficient(view.hyper.momentum, dampening)
    return view.w - view.hyper.lr * (view.hyper.momentum * view.velocity + c * view.g)


def energy_ratio(view):
    """``E_{t+1} / Ê_{t+1}`` per component, Ê after an SGDM step from the same state and gradient
    sample (exactly 1 where the two steps agree, whatever the rounding of E).

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      One value per eigencomponent, shape ``(dim,)``.
    """
    w_sgdm = _sgdm_step(view)
    same = _eigen(view, view.w_next) == _eigen(view, w_sgdm)
    return jnp.where(same, 1.0, _energy(view, view.w_next) / _energy(view, w_sgdm))


def energy_ratio_not_finite(view):
    """True at a step whose energy ratio is not finite: the run has diverged (where the relative
    energy decay stops counting steps).

    Args:
      view: one step of one cell (:class:`nqm.engine.StepView`).

    Returns:
      A boolean scalar.
    """
    return ~jnp.all(jnp.isfinite(energy_ratio(view)))


@functools.cache
def below(target: float):
    """True once ``L(w_{t+1}) < target`` (``L(ŵ_{t+1})`` where the run averages), computed exactly as the
    engine's stopping rule does."""
    return lambda view: view.model.loss(judged(view)) < target


RECORDERS = {
    "loss": loss,
    "raw_loss": raw_loss,
    "component_loss": component_loss,
    "energy": energy,
    "energy_ratio": energy_ratio,
    "alpha": alpha,
    "velocity_norm": velocity_norm,
    "gradient_norm": gradient_norm,
    "gradient_velocity_ratio": gradient_velocity_ratio,
    "gradient_velocity_cosine": gradient_velocity_cosine,
    "group_cosine": group_cosine,
    "update_alignment": update_alignment,
    "delay": delay,
}
TRACE = ("loss", "alpha", "velocity_norm", "gradient_velocity_ratio", "update_alignment", "gradient_velocity_cosine",
         "gradient_norm")  # what `nqm trace` records, and `nqm.plots.trace.plot_trace` draws

_COVERED = "_energy_ratio_not_finite"  # internal: the first step of a divergence, for the decay's note
ALPHA_EDGES = tuple(np.round(np.linspace(-2.0, 4.0, 601), 6))  # α histogram bins, 0.01 wide
SUMMARIES = {  # kept on the device with `summaries=True`
    "relative_energy_decay": GeometricMean(energy_ratio, "geometric mean over steps of E / E_SGDM"),
    "alpha_mean": Mean(alpha, "mean over steps of α"),
    "alpha_histogram": Histogram(alpha, "steps with α in [bin, next bin)", ALPHA_EDGES, "alpha_bin"),
}


def trajectory(method: str = "sgdm", *, lr, momentum=None, delay=0, noise: float = 0.0, seed: int = 0,
               problem: Problem | None = None, steps: int = 1000, record=("loss",), stride: int = 1,
               summaries: bool = False, target: float | None = None, x64: bool = False,
               independent_noise: bool = False, ema=None, schedule=None, **hyper_and_options) -> xr.Dataset:
    """Diagnostics of one cell for ``steps`` steps (no early stop).

    Args:
      method: optimizer name; its extra hyperparameters (e.g. ``rho``, default as in
        :func:`nqm.sweep`) and options go in ``hyper_and_options``.
      lr, momentum, delay, noise, seed, problem: the cell, as in :func:`nqm.sweep` (``delay`` may
        be a process; ``problem`` defaults to :func:`nqm.zhang`).
      steps: how many steps to run.
      record: names from :data:`RECORDERS`, traced every ``stride`` steps.
      stride: trace steps ``stride, 2·stride, …`` only.
      summaries: also keep the :data:`SUMMARIES` on the device (relative energy decay per
        component, α's exact mean and its histogram).
      target: also report ``steps_to_target``, the first step with ``L < target`` — exactly the T
        that :func:`nqm.sweep` reports for this cell and seed (0: not reached).
      x64: record in float64.
      independent_noise: draw the noise as :func:`nqm.sweep` does with ``independent_noise``.
      ema: the iterate average's rate γ (one value), or ``None``: ``loss`` and ``steps_to_target`` then
        read ŵ, as :func:`nqm.sweep` does (``raw_loss``: the raw iterate's).
      schedule: a learning-rate schedule (:mod:`nqm.schedules`; a spec or an optax schedule), or ``None``.
      hyper_and_options: the method's extra hyperparameters (one value each) and options, by name.

    Returns:
      Dataset with one variable per recorder over ``step`` (and ``component`` for per-component
      ones, with coordinate ``eigenvalue``) and one per summary.

    Raises:
      NqmError: an unknown recorder, a method or value the engine refuses, or a trace that would
        not fit in memory, in one line.

    Examples:
      >>> import nqm
      >>> trace = nqm.trajectory("sgdm", lr=0.5, momentum=0.5, problem=nqm.zhang(10), steps=100,
      ...                        target=0.01)
      >>> trace.loss.dims, int(trace.steps_to_target)
      (('step',), 13)
      >>> bool(trace.loss[-1] < 1e-10)
      True
    """

    for name, flag in (("x64", x64), ("independent_noise", independent_noise), ("summaries", summaries)):
        if not isinstance(flag, (bool, np.bool_)):
            raise NqmError(f"{name} must be True or False, got {flag!r}")
    task, values = jobs.cell(method, lr=lr, momentum=momentum, noise=noise, seed=seed, problem=problem, x64=x64,
                             **hyper_and_options)
    seed = int(np.ravel(seed)[0])
    steps = validate.count(steps, "steps", high=validate.MAX_STEPS)
    if (work := task.problem.dim * steps) > validate.BOUNDS["trace_work"]:
        raise NqmError(f"a trace of {steps:,} steps of a {task.problem.dim:,}-dimensional problem is {work:.1e} "
                       f"element-steps, more than {validate.BOUNDS['trace_work']:.0e} (a trace runs in one go, with no "
                       "checkpoint: hours on a CPU at that size); trace fewer steps or a smaller problem")
    stride = validate.count(stride, "stride", high=steps)
    if ema is not None:
        gamma = validate.coordinates(ema=ema, dtype="float64" if x64 else "float32", domains={"ema": schedules.EMA})
        if gamma["ema"].size != 1:
            raise NqmError("a trajectory is one cell: give one averaging rate ema")
        values = {**values, **gamma}
    plan = schedules.one(schedule)
    recorders = _recorders(record, summaries, target, x64)
    config = engine.RunConfig(target=-1.0, diverge_factor=np.inf, max_steps=steps, x64=x64,
                              independent_noise=independent_noise, chunk_steps=min(steps, 1000), progress=False)
    task, process = task._replace(config=config, schedule=plan), delays.process(delay)
    out = task.run(process, values, seed, [Trace(recorders, stride)])
    coords = {"step": np.arange(1, steps // stride + 1) * stride, "eigenvalue": ("component", task.problem.eigenvalues)}
    data = {name: (("step",) if array.ndim == 2 else ("step", "component"), array[0]) for name, array in out.trace.items()}
    data.update(_summaries(out.summary, recorders, coords, steps))
    attrs = {"method": method, **{k: float(v[0]) for k, v in values.items() if k != "noise"},
             "delay": process.label, "noise": float(values["noise"][0]), "seed": seed, "stride": stride,
             "steps": steps, **{k: attribute(v) for k, v in task.optimizer(process).config if k != "workers"},
             **task.problem.describe(), **({} if target is None else {"target": float(target)}),
             **({} if plan is None else {"schedule": plan.label})}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _recorders(record, summaries: bool, target, x64: bool) -> dict:
    """The recorders of a trajectory by name: those named in ``record``, the :data:`SUMMARIES` (with
    the step a run's energy ratio stopped being finite), and ``steps_to_target``."""
    record = () if record is None else (record,) if isinstance(record, str) else tuple(record)
    unknown = [name for name in record if name not in RECORDERS]
    if unknown:
        raise NqmError(f"unknown recorder {unknown[0]!r}; choose from {', '.join(RECORDERS)}")
    recorders = {name: RECORDERS[name] for name in record}
    if summaries:
        recorders.update(SUMMARIES)
        recorders[_COVERED] = First(energy_ratio_not_finite)
    if target is not None:
        if not (np.isfinite(validate.number(target, "target")) and target > 0):
            raise NqmError(f"target must be a number > 0, got {target}")
        validate.representable(float(target), "target", "float64" if x64 else "float32")
        recorders["steps_to_target"] = First(below(float(target)), "first step with loss < target (0: never)")
    return recorders


def _summaries(summary: dict, recorders: dict, coords: dict, steps: int) -> dict:
    """The trajectory's summary variables (a histogram's bins join ``coords``); a geometric mean
    over the steps before a divergence says so."""
    summary = dict(summary)
    diverged_at = int(summary.pop(_COVERED, np.zeros(1))[0])
    data = {}
    for name, array in summary.items():
        kind = recorders[name]
        dims = (kind.dim,) if isinstance(kind, Histogram) else ("component",) * array[0].ndim
        if isinstance(kind, Histogram):
            coords[kind.dim] = kind.coordinate
        data[name] = (dims, array[0], {"long_name": kind.long_name})
        if isinstance(kind, GeometricMean):  # over the steps before a divergence, and it says so
            covered = diverged_at - 1 if diverged_at else steps
            note = f" (only the {covered:,} steps before the run diverged)" if covered < steps else ""
            data[name][2].update(long_name=kind.long_name + note, steps=covered)
    return data


def histogram_percentile(histogram: xr.DataArray, q: float) -> float:
    """The ``q``-th percentile of a recorded histogram, to its bins' resolution (the left edge of
    the bin where the cumulative count reaches q %).

    Args:
      histogram: a recorded histogram (e.g. ``alpha_histogram``), counts over its bin coordinate.
      q: the percentile, in [0, 100].

    Returns:
      The bin's left edge, or NaN for an empty histogram.
    """
    counts = np.asarray(histogram.values)
    if counts.sum() == 0:
        return float("nan")
    index = np.searchsorted(np.cumsum(counts) / counts.sum(), q / 100)
    return float(histogram[histogram.dims[0]].values[index])
