"""A real model trained by nqm's optimizers under nqm's delay processes, on a grid of cells.

The same code paths as the engine where they apply: the optimizer's ``init``/``step`` on the
flattened parameters (:func:`nqm.optimizers.make`, any registered method), the delay process's
schedule (each step's delay τ_t and worker), and the gradient of step t computed at the weights of
iteration ``max(0, t − τ_t)`` (what the optimizer sends, for DANA's look-ahead) — kept in a ring of
the last ``max τ + 1``. What differs is the gradient: the model's, on a minibatch (``batch_size``
examples drawn without replacement for each step, the same draws for every cell: common random
numbers) or on the whole data, instead of the NQM's ``H w + σ ξ``.

Every cell runs the whole budget; the loss on the whole data is evaluated after every step.
``T`` is the first step with a loss below the target; a cell's status, as nqm's: ``1`` settled —
it reached the target in the first half of the budget and its loss stays below it, finite,
through the second half (the settling window); ``2`` transient — it reached it, and then not;
``0`` it did not reach it in the first half (T is still given if it did later); ``−1`` it diverged
first (a loss not finite or above ``diverge_factor`` × the initial one), or fell without bound (a
loss below ``−diverge_factor`` × the initial one, at any step: a loss that falls past every bound
passes the target on its way, which is no reaching it).

Every number is checked as ``nqm sweep`` checks it (:mod:`nqm.validate`, :func:`nqm.config.checked_config`):
the grid in the precision of the parameters (a learning rate that float32 holds only as 0 or ∞ is
refused, not run), the target, the bound and the seed in their domains.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr
from jax.flatten_util import ravel_pytree

from nqm import delays, jobs, results, validate
from nqm.config import checked_config
from nqm.errors import NqmError
from nqm.optimizers import base, make
from nqm.optimizers.base import StepContext
from nqm.status import BUDGET, DIVERGED, REACHED, TRANSIENT
from nqm.transfer import checked


def train(loss: Callable, params, data, method: str = "sgdm", *, lr, momentum=None, delay=0, steps: int = 1000,
          target: float, batch_size: int | None = None, stride: int | None = None, seed: int = 0,
          diverge_factor: float = 1e6, **hyper_and_options) -> xr.Dataset:
    """Train ``params`` of ``loss`` on ``data`` with ``method`` under ``delay``, every cell of the
    grid lr × momentum (× the method's other hyperparameters) at once (see the module's docstring).

    Args:
      loss: ``loss(params, batch) -> scalar``, the mean over the batch's examples.
      params: the starting point (a pytree of arrays), the same for every cell.
      data: the examples, a pytree of arrays with one leading example axis.
      method: a registered method (``sgdm``, ``ab``, ``shifted``, ``adam``, …).
      lr, momentum: one value or a list each (momentum only for a method that has one).
      delay: a constant delay or a delay process spec (``uniform:0:8``, ``workers:16``, …).
      steps: the budget, per cell.
      target: the training loss to reach.
      batch_size: examples per step (``None``: the whole data, a deterministic run).
      stride: the loss curve is recorded every ``stride`` steps (default: ``steps // 200``, at least 1).
      seed: the minibatches' and the delay schedule's seed.
      diverge_factor: a loss beyond this × the initial one, above or below 0, is divergence.
      hyper_and_options: the method's other hyperparameters (one value or a list each, e.g.
        ``rho``) and options (``group``, …), by name.

    Returns:
      Dataset over (its hyperparameters…, momentum, lr): ``steps`` (T, 0 if never reached),
      ``status``, ``loss`` (at the end), ``diverged_at`` (the first step whose loss was not finite or
      beyond the bound, before or after T; 0: none) and ``curve`` (the loss every ``stride`` steps,
      over ``step``).

    Raises:
      NqmError: an unknown method or option, a value outside its domain, or a loss that is not a
        finite scalar at ``params``, in one line.
    """
    if not callable(loss):
        raise NqmError(f"loss must be a function loss(params, batch) -> scalar (the batch's mean loss), got {loss!r}")
    if not isinstance(method, str):
        raise NqmError(f"method must be a name such as 'sgdm' (see nqm.optimizers.methods()), got {method!r}")
    flat, unravel = ravel_pytree(params)
    examples = checked.examples(data)
    steps = validate.count(steps, "steps", low=2, high=validate.MAX_STEPS)
    stride = validate.count(stride if stride is not None else max(1, steps // 200), "stride", high=steps)
    dtype = np.dtype(flat.dtype)
    if dtype.kind != "f":
        raise NqmError(f"params must be floating-point arrays (a gradient needs them), got {dtype.name}: give float32 "
                       "or float64 values")
    config = checked_config(target=target, diverge_factor=diverge_factor)  # as nqm sweep checks them
    target, factor = config.target, config.diverge_factor
    validate.representable(target, "target", dtype)
    seed = validate.count(seed, "seed", low=0, high=2**32 - 1)
    if batch_size is not None:
        batch_size = validate.count(batch_size, "batch_size", high=examples)
    grids, options, settings = jobs.split(method, hyper_and_options)
    if settings:
        raise NqmError(f"train takes no run setting {', '.join(sorted(settings))}: give steps, target, batch_size, "
                       "stride, seed and diverge_factor")
    coords = validate.coordinates(lr=lr, momentum=jobs.momentum_of(method, momentum), domains=base.domains(method),
                                  dtype=dtype, **grids)
    process = delays.process(delay)
    optimizer = make(method, delay=process, **options)
    names = [n for n in optimizer.hyper._fields if n not in ("momentum", "lr")] + ["momentum", "lr"]
    names = [n for n in names if n in coords]
    mesh = np.meshgrid(*(coords[n] for n in names), indexing="ij")
    hyper = {n: jnp.asarray(m.ravel(), flat.dtype) for n, m in zip(names, mesh) if n in optimizer.hyper._fields}
    hyper.update({n: jnp.full(mesh[0].size, v, flat.dtype) for n, v in _defaults(optimizer, hyper).items()})
    mean = lambda w, batch: loss(unravel(w), batch)
    first = checked.loss_at(lambda w: mean(w, data), flat)
    if first <= 0:
        raise NqmError(f"the loss at params must be > 0 (the target is a level below it), got {first}")
    plan = process.schedule(seed, steps)
    batches = _batches(examples, batch_size, steps, seed)
    run = _compiled(optimizer, mean, flat, data, plan, batches, steps, stride, target, factor * first)
    t_first, status, last, curve, blew_up = (np.asarray(x) for x in run(optimizer.hyper(**hyper)))
    shape = mesh[0].shape
    data_vars = {**results.outcomes(tuple(names), t_first.reshape(shape), status.reshape(shape), last.reshape(shape),
                                    STATUS_MEANING),
                 "curve": (names + ["step"], curve.reshape(shape + (-1,))), "diverged_at": (names, blew_up.reshape(shape))}
    coords_out = {n: coords[n] for n in names} | {"step": stride * np.arange(1, curve.shape[-1] + 1)}
    attrs = {"method": method, "delay": process.label, "target": target, "max_steps": steps, "stride": stride, "seed": seed,
             "batch_size": -1 if batch_size is None else batch_size, "examples": examples, "parameters": flat.size,
             "initial_loss": first, "status_meaning": STATUS_MEANING}
    return xr.Dataset(data_vars, coords=coords_out, attrs=attrs)


STATUS_MEANING = ("1: settled (reached the target in the first half of the budget, stayed below it through the "
                  "second), 2: transient (reached it, then not), 0: not reached in the first half, -1: diverged "
                  "(out of bounds before reaching it, or fell below every bound)")


def _defaults(optimizer, given: dict) -> dict:
    """The hyperparameters not swept, at their defaults (a field without one is an error)."""
    defaults = optimizer.hyper._field_defaults
    missing = [n for n in optimizer.hyper._fields if n not in given and n not in defaults]
    if missing:
        raise NqmError(f"method {optimizer.name!r} needs {', '.join(missing)}")
    return {n: defaults[n] for n in optimizer.hyper._fields if n not in given}


def _batches(examples: int, batch_size: int | None, steps: int, seed: int) -> np.ndarray | None:
    """Each step's example indices (steps, B), drawn without replacement per step; ``None``: full batch."""
    if batch_size is None:
        return None
    rng = np.random.default_rng([seed, 1])
    return np.stack([rng.choice(examples, batch_size, replace=False) for _ in range(steps)]).astype(np.int32)


def _compiled(optimizer, mean, w0, data, plan, batches, steps, stride, target, bound):
    """The jitted run of every cell: ``hyper → (T, status, final loss, curve, first step out of bounds)``."""
    taus, workers = (jnp.asarray(x, jnp.int32) for x in plan)
    batches = None if batches is None else jnp.asarray(batches)
    slots = int(np.max(plan[0])) + 1
    grad = jax.grad(mean)
    half = steps // 2

    def cell(hyper):
        def step(t, carry):
            w, ring, state, first, bad, peak, fell = carry
            tau = taus[t]
            stale = ring[jnp.maximum(t - tau, 0) % slots]
            batch = data if batches is None else jax.tree.map(lambda x: x[batches[t]], data)
            w_next, state, _ = optimizer.step(hyper, state, w, grad(stale, batch), StepContext(t, tau, workers[t], stale))
            sent = w_next if optimizer.sent is None else optimizer.sent(hyper, state, w_next)
            value = mean(w_next, data)
            first = jnp.where((first == 0) & (value < target), t + 1, first)
            wild = ~jnp.isfinite(value) | (jnp.abs(value) > bound)
            bad = jnp.where((bad == 0) & wild, t + 1, bad)
            fell = fell | (value < -bound)
            peak = jnp.where(t + 1 > half, jnp.maximum(peak, jnp.where(jnp.isfinite(value), value, jnp.inf)), peak)
            return w_next, ring.at[(t + 1) % slots].set(sent), state, first, bad, peak, fell

        def chunk(carry, start):
            carry = jax.lax.fori_loop(start, start + stride, step, carry)
            return carry, mean(carry[0], data)

        ring = jnp.broadcast_to(w0, (slots, w0.size))
        carry = (w0, ring, optimizer.init(w0), jnp.int32(0), jnp.int32(0), jnp.zeros((), w0.dtype), jnp.bool_(False))
        carry, curve = jax.lax.scan(chunk, carry, stride * jnp.arange(steps // stride, dtype=jnp.int32))
        carry = jax.lax.fori_loop(jnp.int32(stride * (steps // stride)), jnp.int32(steps), step, carry)  # the steps past the last stride
        w, _, _, first, bad, peak, fell = carry
        diverged = ((bad > 0) & ((first == 0) | (bad < first))) | fell  # falling without bound passes any target
        reached = (first > 0) & (first <= half)
        status = jnp.where(diverged, DIVERGED, jnp.where(~reached, BUDGET,
                           jnp.where((bad == 0) & (peak < target), REACHED, TRANSIENT)))
        return first, status.astype(jnp.int8), mean(w, data), curve, bad

    return jax.jit(jax.vmap(cell))
