"""The engine: every simulation in nqm runs through :func:`simulate`.

A *cell* is one setting of the per-cell hyperparameters (lr, momentum, ρ, noise σ) under one delay
process and one seed. All cells of a run advance in lock-step ``t = 0, 1, …``:

    g_t     = H w_{t−τ_t} + σ ξ_t,   ξ_t ~ N(0, H)        (w_{−k} = w₀)
    w_{t+1} = optimizer.step(hyper, state, w_t, g_t, ctx_t)
    T       = first t ≥ 1 with L(w_t) < target            (status 1; −1 diverged; 0 budget spent)

where ``(τ_t, k_t)`` — the delay of the gradient applied at step ``t`` and the worker that
computed it — come from a delay process (:mod:`nqm.delays`), and
``ctx_t = StepContext(t, τ_t, k_t, w_{t−τ_t})``. A cell stops at its first passage unless the
run's *stop rule* (:mod:`~nqm.engine.stop`) keeps it stepping and decides when it stops, from
per-cell state of its own. What a run does besides stepping — recording diagnostics, showing
progress, checkpointing — is done by its *observers* (:mod:`~nqm.engine.observers`), which the
host loop calls at fixed points.

Three parts, one file each (``docs/architecture.md`` follows a sweep through them):

* :mod:`~nqm.engine.step` — the physics of one step of one cell, and the weights' history (a ring
  as deep as the schedule's largest delay, or one snapshot per worker of a pool);
* :mod:`~nqm.engine.loop` — the device kernel: a jitted call advances a batch by up to a chunk of
  steps, sharded over devices, in cache-sized blocks, each block leaving its ``while_loop`` once
  its cells are done; the common noise, one draw per step shared by every cell, keyed by
  ``(seed, t)`` alone (``independent_noise``: by ``(seed, cell, t)``);
* :mod:`~nqm.engine.layout` and :mod:`~nqm.engine.run` — the host: devices, blocks, batches and
  groups within the memory budget, moving state (also across hosts), chunks, progress, callbacks,
  snapshots and the repacking of running cells between chunks;

and :mod:`~nqm.engine.record`: what recorders see of a step, and the summary kinds kept on the
device. The delay schedule and the noise are keyed by the seed alone, so a cell's result never
depends on its grid, batch, chunking, devices or budget.
"""

from nqm.config import RunConfig
from nqm.engine.observers import Checkpoint, Observer, Progress, Trace
from nqm.engine.record import KINDS, First, GeometricMean, Histogram, Last, Mean, StepView, Summary
from nqm.engine.run import Cells, Outcome, Snapshot, check, simulate
from nqm.engine.stop import FirstPassage, StopRule, ToHorizon
from nqm.status import BUDGET, DIVERGED, REACHED, RUNNING

__all__ = ["BUDGET", "DIVERGED", "REACHED", "RUNNING", "KINDS", "Cells", "Checkpoint", "First", "GeometricMean",
           "FirstPassage", "Histogram", "Last", "Mean", "Observer", "Outcome", "Progress", "RunConfig", "Snapshot",
           "StepView", "StopRule", "Summary", "ToHorizon", "Trace", "check", "simulate"]
