"""The loop: delayed gradients, noise, steps-to-target with early exit, chunking, blocking, sharding.

Every simulation in nqm runs through :func:`simulate`. A *cell* is one setting of the per-cell
hyperparameters (lr, momentum, ρ, noise σ) under one delay and one seed. All cells of a run
advance in lock-step ``t = 0, 1, …``:

    g_t     = H w_{t−τ_t} + σ ξ_t,   ξ_t ~ N(0, H)        (w_{−k} = w₀)
    w_{t+1} = optimizer.step(hyper, state, w_t, g_t, ctx_t)
    T       = first t ≥ 1 with L(w_t) < target            (status 1; −1 diverged; 0 budget spent)

where ``(τ_t, k_t)`` — the delay of the gradient applied at step ``t`` and the worker that
computed it — come from a delay process (:mod:`nqm.delays`; a constant ``D`` by default), and
``ctx_t = StepContext(t, τ_t, k_t, w_{t−τ_t})``.

How the work is laid out (DESIGN.md §7):

* the weight history is a ring of ``S = max τ + 1`` slots per cell (the largest delay of the
  schedule within the budget): ``w_s`` lives in slot ``s mod S``, so the ring is updated in place
  and no delay can reach past it (with a constant ``D``, ``w_{t−D}`` and ``w_{t+1}`` share a slot);
* the delay schedule is drawn once per run on the host, keyed by the seed alone, and handed to
  the devices a chunk at a time with the noise;
* the noise ``ξ_t`` is one draw per step shared by every cell (common random numbers), keyed by
  ``(seed, t)`` alone, so a cell's result does not depend on its grid, its batch or the chunking;
  ``independent_noise`` keys it by ``(seed, cell, t)`` instead. Common noise is drawn a chunk at
  a time, each device drawing a share of the steps;
* a jitted call advances a *batch* of cells by at most ``chunk_steps`` steps. Inside, the batch is
  sharded over devices (``shard_map``) and each device walks its cells in *blocks* small enough to
  stay in cache, in place in the donated batch, each block leaving its ``while_loop`` as soon as
  all its cells are done;
* between chunks Python reads the status, updates the progress bar, hands finished cells to a
  callback (checkpoints), and repacks the cells still running into fewer batches (compaction);
* grids larger than the memory budget are run in groups, one after the other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nqm.errors import NqmError
import nqm._devices  # noqa: F401  (before any JAX computation)
from nqm import delays
from nqm.optimizers import Optimizer
from nqm.optimizers.base import StepContext
from nqm.problem import Problem

from nqm.status import BUDGET, DIVERGED, REACHED, RUNNING  # noqa: F401  (the engine's status codes)

CELLS = "cells"  # the mesh axis over which cells are sharded


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How to run a simulation. ``target``, ``max_steps``, ``diverge_factor``, ``independent_noise``
    and ``x64`` change a cell's result; the others only change how fast it comes.

    Attributes:
      target: stop a cell once ``L(w_t) < target``.
      max_steps: step budget per cell.
      diverge_factor: a cell diverged once ``L(w_t)`` is not finite or exceeds
        ``diverge_factor · L(w₀)``.
      independent_noise: draw the noise per cell instead of once per step for all cells.
      x64: simulate in float64 (default float32).
      chunk_steps: steps per jitted call; progress, compaction and checkpoints happen between chunks.
      block_cells: cells a device advances together (``None``: fit a CPU cache block; the whole
        device share on accelerators).
      batch_cells: cells per jitted call (``None``: automatic). Rounded to whole blocks per device.
      compaction: repack running cells into fewer batches between chunks.
      memory_budget: bytes of simulation state held at once; larger grids run in groups
        (``None``: half of the accelerators' memory, or 4 GiB on CPU).
      devices: how many devices to shard over (``None``: all of the default backend).
      progress: show a tqdm progress bar.
    """

    target: float = 0.01
    max_steps: int = 100_000
    diverge_factor: float = 1e6
    independent_noise: bool = False
    x64: bool = False
    chunk_steps: int = 1000
    block_cells: int | None = None
    batch_cells: int | None = None
    compaction: bool = True
    memory_budget: float | None = None
    devices: int | None = None
    progress: bool = True


class Outcome(NamedTuple):
    """Per-cell results: ``steps`` (T, or the step at which the run stopped), ``status``, final
    ``loss``, the recorded ``trace`` (name → ``(C, max_steps // stride, …)``: steps ``stride``,
    ``2·stride``, …) and the running ``summary`` values (name → ``(C, …)``); both empty unless asked."""

    steps: np.ndarray
    status: np.ndarray
    loss: np.ndarray
    trace: dict = {}
    summary: dict = {}


@dataclasses.dataclass(frozen=True)
class Summary:
    """A recorder kept as a running summary on the device, in memory that does not grow with the
    number of steps. ``kind``:

    * ``"mean"``: the mean over the cell's steps of ``value(view)``;
    * ``"histogram"``: counts of ``value(view)``'s elements in the bins
      ``(−∞, e₀), [e₀, e₁), …, [e_last, ∞)`` of ``edges``;
    * ``"first"``: the first step ``t + 1`` at which ``value(view)`` is true (0: never).

    ``value`` must be a module-level function (or another stable, hashable object), so that the
    same recorder never compiles twice."""

    value: Callable[["StepView"], Any]
    kind: str = "mean"
    edges: tuple = ()

    def zeros(self, like):
        if self.kind == "mean":
            return np.zeros(like.shape, like.dtype)
        return np.zeros(len(self.edges) + 1 if self.kind == "histogram" else (), np.int32)

    def update(self, total, x, t):
        if self.kind == "mean":
            return total + x
        if self.kind == "histogram":
            bins = jnp.searchsorted(jnp.asarray(self.edges, x.dtype), jnp.ravel(x), side="right")
            return total.at[bins].add(1)
        return jnp.where((total == 0) & x, t + 1, total)

    def result(self, total, steps):
        if self.kind == "mean":
            return total / np.maximum(steps, 1).reshape((-1,) + (1,) * (total.ndim - 1))
        return total


class StepView(NamedTuple):
    """What a recorder sees of one step of one cell: ``w_t``, the state before, the gradient and
    its context, the velocity the step continues (zeros for families without one), after, and the
    optimizer itself."""

    model: Any
    hyper: Any
    ctx: StepContext
    w: Any
    state: Any
    velocity: Any
    g: Any
    w_next: Any
    state_next: Any
    info: dict
    optimizer: Optimizer


class _Cells(NamedTuple):
    """The carried state of a set of cells (leading axis = cells)."""

    ring: Any  # (cells, slots, N) history of the weights sent to workers (= the weights, but see `w`)
    w: Any  # (cells, N) the weights, kept apart from the ring only when the optimizer sends others
    opt: Any  # optimizer state
    status: Any  # int8
    steps: Any  # int32
    loss: Any  # loss at `steps`
    trace: Any  # name -> (cells, chunk_steps // stride + 1, ...) values recorded in the current chunk
    summary: Any  # name -> (cells, ...) running totals of the Summary recorders


class _Inputs(NamedTuple):
    """Per-cell constants."""

    hyper: Any  # the optimizer's hyperparameter NamedTuple of (cells,) arrays
    sigma: Any  # noise scale
    uid: Any  # (2,) uint32: the cell's 64-bit identity (keys independent noise)


class _Model(NamedTuple):
    """The problem as arrays: the engine's only view of it."""

    lam: Any  # (N,) eigenvalues
    hessian: Any  # (N, N) dense H, or None when axis-aligned
    noise_map: Any  # (N, N) Q diag(√λ), or (N,) √λ when axis-aligned
    basis: Any  # (N, N) eigenvectors Q, or None when axis-aligned

    def hvp(self, w):
        return self.lam * w if self.hessian is None else self.hessian @ w

    def shape_noise(self, z):
        """``N(0, I) → N(0, H)``."""
        return self.noise_map * z if self.noise_map.ndim == 1 else self.noise_map @ z

    def loss(self, w):
        return 0.5 * jnp.sum(w * self.hvp(w))


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Everything static about a compiled chunk (the jit cache key)."""

    optimizer: Optimizer
    slots: int  # weight-ring slots: the schedule's largest delay + 1
    chunk_steps: int
    block_cells: int
    independent_noise: bool
    mesh: Mesh
    record: tuple = ()  # (name, recorder) pairs; recorder(StepView) -> array, traced every `stride` steps
    summaries: tuple = ()  # (name, Summary) pairs
    stride: int = 1


def simulate(
    problem: Problem,
    optimizer: Optimizer,
    hyper: dict[str, np.ndarray],
    sigma: np.ndarray,
    *,
    delay: int | delays.Process | str = 0,
    seed: int = 0,
    uids: np.ndarray | None = None,
    config: RunConfig = RunConfig(),
    record: dict[str, Callable[[StepView], Any] | Summary] | None = None,
    stride: int = 1,
    on_finished: Callable[[np.ndarray, Outcome], None] | None = None,
    between_chunks: Callable[[Callable[[], "Snapshot"]], None] | None = None,
    resume: "Snapshot | None" = None,
    description: str = "nqm",
    bar=None,
) -> Outcome:
    """Run every cell to its target, divergence or budget.

    Args:
      problem: the quadratic.
      optimizer: a configured optimizer (``nqm.optimizers.make``).
      hyper: per-cell hyperparameters by name (the fields of ``optimizer.hyper``), each ``(C,)``.
      sigma: per-cell noise scale ``(C,)``.
      delay: the delay process: a constant ``D ≥ 0``, a spec string or a :mod:`nqm.delays`
        process. The optimizer must have been made for the same process (its worker count).
      seed: the noise seed.
      uids: per-cell identities for ``independent_noise``: ``(C,)`` or ``(C, 2)`` ``uint32`` (two
        words of a 64-bit identity; default ``arange(C)``).
      config: run settings.
      record: diagnostics by name (see :mod:`nqm.diagnostics`): a ``recorder(StepView) -> array``
        is traced every ``stride`` steps (``max_steps // stride`` entries per cell, meaningful up
        to each cell's ``steps``); a :class:`Summary` is kept as a running mean or histogram.
      stride: trace steps ``stride, 2·stride, …`` only.
      on_finished: called between chunks with the indices of newly finished cells and their
        results (used for checkpoints).
      between_chunks: called between chunks with a function that returns a :class:`Snapshot` of
        the running cells (fetching it costs a copy to the host, so call it only when saving); it
        may raise to stop the run, e.g. after saving on an interrupt.
      resume: a snapshot of an earlier run of the same cells, settings and seed: its cells
        continue from its step with its state, bit-identical to a run never interrupted (their
        traces hold only the steps run now).
      description: label of the progress bar.
      bar: a progress bar over cells shared by several runs (a sweep's): finished cells advance
        it, and this run's step shows in its postfix. ``None``: a bar over this run's steps.

    Returns:
      ``Outcome(steps, status, loss, trace, summary)``, ``steps``, ``status`` and ``loss`` ``(C,)``.
    """
    sigma = np.asarray(sigma, np.float64).reshape(-1)
    cells = sigma.size
    missing = set(optimizer.hyper._fields) - set(hyper)
    if missing:
        raise NqmError(f"method {optimizer.name!r} needs hyperparameter(s) {', '.join(sorted(missing))}")
    hyper = {k: np.broadcast_to(np.asarray(hyper[k], np.float64), (cells,)) for k in optimizer.hyper._fields}
    uids = np.arange(cells, dtype=np.uint32) if uids is None else np.asarray(uids, np.uint32)
    uids = np.stack([uids, np.zeros_like(uids)], 1) if uids.ndim == 1 else uids.reshape(cells, 2)
    record = sorted((record or {}).items())
    summaries = tuple((n, r) for n, r in record if isinstance(r, Summary))
    record = tuple((n, r) for n, r in record if not isinstance(r, Summary))
    if int(stride) != stride or stride < 1:
        raise NqmError(f"stride must be an integer >= 1, got {stride}")
    process = delays.process(delay)
    if optimizer.workers is not None and optimizer.workers != process.workers:
        raise NqmError(
            f"the {optimizer.name} optimizer was made for {optimizer.workers} workers but delay {process.label} "
            f"has {process.workers}; make it with nqm.optimizers.make(..., delay={process.label!r})"
        )
    plan = process.schedule(seed, config.max_steps)
    slots = int(plan[0].max(initial=0)) + 1

    with jax.enable_x64(config.x64):
        dtype = jnp.float64 if config.x64 else jnp.float32
        layout = _layout(problem, optimizer, slots, cells, config, dtype, record, summaries, int(stride))
        replicated = NamedSharding(layout.sharding.mesh, PartitionSpec())
        model = _put(_model(problem, dtype), replicated)
        w0 = jnp.asarray(problem.w0, dtype)
        traces, totals = _value_shapes(layout.spec, model, w0)
        outcome = Outcome(
            np.zeros(cells, np.int32), np.zeros(cells, np.int8), np.zeros(cells, np.float64),
            {name: np.full((cells, config.max_steps // int(stride)) + s.shape, np.nan if s.dtype.kind in "fc" else 0, s.dtype) for name, s in traces.items()},
            {name: np.zeros((cells,) + r.zeros(totals[name]).shape, r.result(r.zeros(totals[name])[None], np.ones(1)).dtype)
             for name, r in layout.spec.summaries},
        )
        if cells == 0:
            return outcome
        limits = _put((
            np.asarray(config.target, dtype),
            np.asarray(config.diverge_factor * problem.initial_loss, dtype),
            np.asarray(config.max_steps, np.int32),
        ), replicated)
        seed = _put(np.asarray(seed, np.uint32), replicated)
        fresh = np.arange(cells) if resume is None else np.setdiff1d(np.arange(cells), resume.index)
        groups = [(fresh[i:i + layout.group_cells], None) for i in range(0, fresh.size, layout.group_cells)]
        if resume is not None and resume.index.size:
            # Resumed cells first, from their step (one group: they stopped together).
            groups.insert(0, (np.asarray(resume.index), resume))
        with contextlib.nullcontext(bar) if bar is not None else _progress(config, description) as bar:
            for number, (index, start) in enumerate(groups):
                if len(groups) > 1 and getattr(bar, "unit", None) == "step":
                    bar.set_description(f"{description} [group {number + 1}/{len(groups)}]")
                _run_group(
                    index, hyper, sigma, uids, optimizer, model, w0, limits, seed, plan,
                    layout, config, dtype, outcome, on_finished, between_chunks, start, bar, description,
                )
    return outcome


def check(problem: Problem, optimizer: Optimizer) -> None:
    """Trace one step of ``optimizer`` on ``problem`` abstractly (no computation), so that settings
    that do not fit the problem (e.g. more AB groups than parameters) fail before any work."""
    w0 = jax.ShapeDtypeStruct((problem.dim,), jnp.float32)

    def one_step(w):
        hyper = optimizer.hyper(*(w[0] for _ in optimizer.hyper._fields))
        ctx = StepContext(jnp.int32(0), jnp.int32(0), jnp.int32(0), w)
        return optimizer.step(hyper, optimizer.init(w), w, w, ctx)

    jax.eval_shape(one_step, w0)


class Snapshot(NamedTuple):
    """The running cells of a run between two chunks: cell ``index[i]`` (its position in the run)
    has done ``t`` steps and holds the state ``cells[…][i]`` (host arrays; no trace). ``cells``
    may also be given as its list of leaves (``jax.tree.leaves``), as a checkpoint stores it."""

    t: int
    index: np.ndarray
    cells: Any


class _Layout(NamedTuple):
    spec: _Spec
    batch_cells: int
    group_cells: int
    sharding: NamedSharding


def _layout(problem, optimizer, slots, cells, config, dtype, record, summaries=(), stride=1) -> _Layout:
    """Choose devices, cache blocks, batch and group sizes for a run."""
    devices = jax.devices()
    count = len(devices) if config.devices is None else config.devices
    if not 1 <= count <= len(devices):
        raise NqmError(f"devices must be between 1 and {len(devices)} here, got {config.devices}")
    mesh = Mesh(np.array(devices[:count]), (CELLS,))
    itemsize = jnp.dtype(dtype).itemsize
    state = jax.eval_shape(optimizer.init, jax.ShapeDtypeStruct((problem.dim,), dtype))
    # The weight ring, the optimizer state and the cell's row of λ (see _advance_block).
    cell_bytes = itemsize * ((slots + 1) * problem.dim + sum(math.prod(x.shape) for x in jax.tree.leaves(state)))
    budget = config.memory_budget
    if budget is None:  # half of an accelerator's memory, or 4 GiB of host memory
        limit = (devices[0].memory_stats() or {}).get("bytes_limit") if devices[0].platform != "cpu" else None
        budget = count * limit / 2 if limit else 4 * 2**30
    # Compaction may hold two copies of the state for a moment: count it twice.
    fits = int(budget // (2 * cell_bytes))
    if config.block_cells is not None:
        block = config.block_cells
    elif devices[0].platform == "cpu":
        # Keep a block's working set inside ~1 MiB of a core's L2 cache. The block never depends
        # on the grid: XLA's code (hence rounding) for a block changes with its shape, and one
        # cell or large blocks of small cells compile differently; 2..8 cells all agree.
        block = 2 ** int(math.log2(min(8, max(2, (1 << 20) // cell_bytes))))
    else:  # accelerators: one vectorised block per device, as large as memory allows
        block = max(1, min(math.ceil(cells / count), fits // count))
    if block < 1:
        raise NqmError(f"block_cells must be >= 1, got {block}")
    unit = count * block
    wanted = config.batch_cells or max(unit, 64)
    batch = unit * math.ceil(min(wanted, cells) / unit)
    if fits < batch:
        raise NqmError(
            f"one batch of {batch} cells needs {2 * batch * cell_bytes / 2**30:.2f} GiB; "
            "raise memory_budget or lower batch_cells/block_cells"
        )
    group = batch * max(1, fits // batch)
    chunk = int(config.chunk_steps)
    if chunk < 1:
        raise NqmError(f"chunk_steps must be >= 1, got {config.chunk_steps}")
    spec = _Spec(optimizer, int(slots), chunk, block, bool(config.independent_noise), mesh, record, summaries, stride)
    return _Layout(spec, batch, group, NamedSharding(mesh, PartitionSpec(CELLS)))


def _model(problem: Problem, dtype) -> _Model:
    lam = jnp.asarray(problem.eigenvalues, dtype)
    q = problem.rotation
    if q is None:
        return _Model(lam, None, jnp.sqrt(lam), None)
    hessian = (q * problem.eigenvalues) @ q.T
    root = q * np.sqrt(problem.eigenvalues)
    return _Model(lam, jnp.asarray(hessian, dtype), jnp.asarray(root, dtype), jnp.asarray(q, dtype))


def _run_group(index, hyper, sigma, uids, optimizer, model, w0, limits, seed, plan,
               layout, config, dtype, outcome, on_finished, between_chunks, start, bar, description):
    """Advance one group of cells chunk by chunk until all are done (from a snapshot's step and
    state when ``start`` is one)."""
    spec, size = layout.spec, layout.batch_cells
    # Pad to whole batches with copies of the first cell marked done; they never reach a result.
    padded = np.concatenate([index, np.full(-len(index) % size, -1)])
    owner = padded.reshape(-1, size)
    take = np.where(padded < 0, index[0], padded)
    inputs = _Inputs(
        optimizer.hyper(**{k: v[take].astype(dtype) for k, v in hyper.items()}),
        sigma[take].astype(dtype),
        uids[take],
    )
    cells = _init_cells(spec, model, w0, padded >= 0)
    t, chunk = 0, 0
    if start is not None:
        t, row = int(start.t), np.where(padded < 0, 0, np.arange(padded.size))  # saved cells in index order
        saved = start.cells
        if isinstance(saved, (list, tuple)) and not isinstance(saved, _Cells):  # leaves, as written to disk
            saved = jax.tree.unflatten(jax.tree.structure(cells._replace(trace={})), saved)
        cells = cells._replace(**{f: jax.tree.map(lambda x: np.asarray(x)[row], getattr(saved, f))
                                  for f in _Cells._fields if f != "trace"})
        cells = cells._replace(status=np.where(padded >= 0, cells.status, BUDGET).astype(np.int8))
    batches = [tuple(_split(tree, i * size, size, layout.sharding) for tree in (cells, inputs)) for i in range(len(owner))]
    by_step = getattr(bar, "unit", None) == "step"  # a disabled bar has no unit, and shows nothing anyway
    if by_step:
        bar.reset(total=config.max_steps)
        bar.update(t)
    window, window_t0 = None, 0  # noise and schedule of steps window_t0 … window_t0 + chunk_steps − 1
    replicated = NamedSharding(spec.mesh, PartitionSpec())
    while batches and t < config.max_steps:
        # The first chunks are short, so that cells which stop early (often most divergent
        # ones) are compacted away soon; the length is an argument, not a new compilation.
        length = min(max(1, spec.chunk_steps >> max(0, 4 - chunk)), config.max_steps - t)
        if window is None or t + length > window_t0 + spec.chunk_steps:
            # Drawn a chunk ahead and shared by the short chunks it covers: never drawn twice.
            window_t0 = t
            rows = slice(t, t + spec.chunk_steps)
            schedule = _put(tuple(np.resize(x[rows], spec.chunk_steps) for x in plan), replicated)
            noise = None if spec.independent_noise else _common_noise(seed, jnp.int32(t), model, spec.chunk_steps, spec.mesh)
            window = (noise, schedule)
        batches = [
            (_advance(spec, cells_b, inputs_b, model, *window, jnp.int32(t - window_t0), jnp.int32(t), jnp.int32(length), seed, limits), inputs_b)
            for cells_b, inputs_b in batches
        ]
        if spec.record:
            _collect_trace(outcome.trace, batches, owner, t, length, spec.stride)
        t, chunk = t + length, chunk + 1
        status = np.stack(_fetch([cells_b.status for cells_b, _ in batches]))
        finished = (status != RUNNING) & (owner >= 0)
        if finished.any():
            steps, loss = (np.stack(_fetch([getattr(c, f) for c, _ in batches])) for f in ("steps", "loss"))
            ids = owner[finished]
            outcome.steps[ids], outcome.status[ids], outcome.loss[ids] = steps[finished], status[finished], loss[finished]
            if spec.summaries:
                totals = jax.tree.map(lambda *xs: np.stack(xs), *_fetch([c.summary for c, _ in batches]))
                for name, summary in spec.summaries:
                    outcome.summary[name][ids] = summary.result(totals[name][finished], steps[finished])
            if on_finished is not None:
                on_finished(ids, Outcome(steps[finished], status[finished], loss[finished]))
            owner = np.where(finished, -1, owner)
        running = int((owner >= 0).sum())
        if by_step:
            bar.update(t - bar.n)
            bar.set_postfix_str(f"running {running}/{len(index)} cells", refresh=False)
        else:
            bar.update(int(finished.sum()))
            bar.set_postfix_str(f"{description}: step {t:,}/{config.max_steps:,}, {running} running", refresh=False)
        if running == 0:
            break
        if between_chunks is not None:
            between_chunks(functools.partial(_snapshot, batches, owner, t))
        if config.compaction and _worth_compacting(owner, layout):
            batches, owner = _compact(batches, owner, layout)


def _snapshot(batches, owner, t) -> Snapshot:
    cells = jax.tree.map(lambda *xs: np.concatenate(xs), *_fetch([c._replace(trace={}) for c, _ in batches]))
    live = owner.reshape(-1) >= 0
    return Snapshot(t, owner.reshape(-1)[live], jax.tree.map(lambda x: x[live], cells))


def _init_cells(spec: _Spec, model: _Model, w0, active) -> _Cells:
    """Initial state of ``active.size`` cells, on the host (numpy)."""
    count = active.size
    w0 = np.asarray(w0)
    traces, totals = _value_shapes(spec, model, w0)
    return _Cells(
        ring=np.broadcast_to(w0, (count, spec.slots, w0.size)),
        w=None if spec.optimizer.sent is None else np.broadcast_to(w0, (count, w0.size)),
        opt=jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (count,) + x.shape), spec.optimizer.init(w0)),
        status=np.where(active, RUNNING, BUDGET).astype(np.int8),
        steps=np.zeros(count, np.int32),
        loss=np.zeros(count, w0.dtype),
        trace={n: np.zeros((count, spec.chunk_steps // spec.stride + 1) + s.shape, s.dtype) for n, s in traces.items()},
        summary={n: np.broadcast_to(r.zeros(totals[n]), (count,) + r.zeros(totals[n]).shape) for n, r in spec.summaries},
    )


def _value_shapes(spec: _Spec, model: _Model, w0) -> tuple[dict, dict]:
    """Shape and dtype of one step's value of each traced and each summarised recorder (by tracing
    a step once, abstractly)."""
    if not (spec.record or spec.summaries):
        return {}, {}
    optimizer = spec.optimizer

    def one_step(w0):
        hyper = optimizer.hyper(*(w0[0] for _ in optimizer.hyper._fields))
        state = optimizer.init(w0)
        ctx = StepContext(jnp.int32(0), jnp.int32(0), jnp.int32(0), w0)
        w_next, state_next, info = optimizer.step(hyper, state, w0, w0, ctx)
        view = StepView(model, hyper, ctx, w0, state, _velocity(optimizer, state, ctx), w0, w_next, state_next, info, optimizer)
        traced = {name: jnp.asarray(fn(view)) for name, fn in spec.record}
        return traced, {name: jnp.asarray(r.value(view)) for name, r in spec.summaries}

    return jax.eval_shape(one_step, w0)


def _collect_trace(trace: dict, batches, owner, t0: int, length: int, stride: int):
    """Copy the chunk's recorded values of every live cell into the host arrays."""
    first, end = t0 // stride, (t0 + length) // stride  # entries of steps first·stride … end·stride
    for (cells_b, _), ids in zip(batches, owner):
        values = _fetch(cells_b.trace)
        live = ids >= 0
        for name, array in trace.items():
            array[ids[live], first:end] = values[name][live, :end - first]


def _put(tree, sharding):
    """Host arrays → global arrays laid out by ``sharding``. Every process holds the same host
    copy and contributes its own shards, so this also works across hosts (jax.distributed)."""
    return jax.tree.map(lambda x: jax.make_array_from_callback(np.shape(x), sharding, lambda i: np.asarray(x)[i]), tree)


def _fetch(tree):
    """Global arrays → host numpy arrays (gathered from every process when spread over hosts)."""
    def get(x):
        return np.asarray(x if x.is_fully_addressable else multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(get, tree)


def _split(tree, start, size, sharding):
    return _put(jax.tree.map(lambda x: x[start:start + size], tree), sharding)


def _shards(owner, layout):
    """``owner`` as (batch, device, block, cell-in-block)."""
    devices = layout.sharding.mesh.size
    return owner.reshape(len(owner), devices, -1, layout.spec.block_cells)


def _worth_compacting(owner, layout) -> bool:
    """Repack once a tenth of the blocks still stepping could be freed (a block costs a full
    block's work while any of its cells runs; a block with none is skipped)."""
    busy = int((_shards(owner, layout) >= 0).any(-1).sum())
    needed = math.ceil(int((owner >= 0).sum()) / layout.spec.block_cells)
    return needed <= 0.9 * busy


def _compact(batches, owner, layout):
    """Repack the running cells densely into blocks, spread evenly over batches and devices.

    Slots are filled in the order (cell in shard, batch, device), so every device's share of
    every batch holds its running cells first; the blocks behind them hold only finished cells
    (from the same batches) and cost nothing.
    """
    size = layout.batch_cells
    flat_owner = owner.reshape(-1)
    running = np.flatnonzero(flat_owner >= 0)
    count = math.ceil(len(running) / size)
    devices = layout.sharding.mesh.size
    slots = np.arange(count * size).reshape(count, devices, size // devices).transpose(2, 0, 1).reshape(-1)
    order = np.empty(count * size, np.int64)
    order[slots[: len(running)]] = running
    order[slots[len(running):]] = np.flatnonzero(flat_owner < 0)[: count * size - len(running)]
    # On the host: a plain copy, with no compilation for each new number of cells.
    merged = jax.tree.map(lambda *xs: np.concatenate(xs), *_fetch(batches))
    picked = jax.tree.map(lambda x: x[order], merged)
    new = [tuple(_split(tree, i * size, size, layout.sharding) for tree in picked) for i in range(count)]
    return new, flat_owner[order].reshape(count, size)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _common_noise(seed, t0, model: _Model, steps: int, mesh: Mesh):
    """``σ``-free noise of steps ``t0 … t0+steps−1``, shaped ``N(0, H)``: one draw per step for all
    cells. Each device draws a share of the steps (with the same per-device program whatever the
    device count, so the same bits), then every device gets all of them."""
    def draw(t, model):
        return jax.vmap(lambda t: model.shape_noise(_normal(jax.random.key(seed), t, model.lam)))(t)

    rows = -(-steps // mesh.size) * mesh.size
    noise = jax.shard_map(draw, mesh=mesh, in_specs=(PartitionSpec(CELLS), PartitionSpec()),
                          out_specs=PartitionSpec(CELLS))(t0 + jnp.arange(rows), model)
    return jax.lax.with_sharding_constraint(noise[:steps], NamedSharding(mesh, PartitionSpec()))


def _normal(key, t, like):
    # Threefry's sequential bit layout: about 1.5x faster on CPU than the partitionable one, and
    # nothing is lost, since each device draws whole steps (or whole cells) itself.
    with jax.threefry_partitionable(False):
        return jax.random.normal(jax.random.fold_in(key, t), like.shape, like.dtype)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=1)
def _advance(spec: _Spec, cells: _Cells, inputs: _Inputs, model: _Model, noise, schedule, row, t0, length, seed, limits) -> _Cells:
    """Advance a batch of cells by up to ``length ≤ spec.chunk_steps`` steps from step ``t0``,
    step ``t0 + k`` taking the common noise ``noise[row + k]`` (``None``: independent noise) and
    the delay and worker ``schedule[i][row + k]``."""
    replicated, sharded = PartitionSpec(), PartitionSpec(CELLS)

    def per_device(cells, inputs, model, noise, schedule, row, t0, length, seed, limits):
        key = jax.random.key(seed)
        size = spec.block_cells
        blocks = cells.status.shape[0] // size
        window = (noise, schedule, row, t0, length, key, limits)
        if blocks == 1:
            return _advance_block(spec, cells, inputs, model, *window)

        # Block by block, in place: each block is sliced out (into cache), advanced and written
        # back into the (donated) batch, which is never copied as a whole.
        def one_block(i, cells):
            block = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, i * size, size), (cells, inputs))
            done = _advance_block(spec, *block, model, *window)
            return jax.tree.map(lambda x, y: jax.lax.dynamic_update_slice_in_dim(x, y, i * size, 0), cells, done)

        return jax.lax.fori_loop(0, blocks, one_block, cells)

    return jax.shard_map(
        per_device,
        mesh=spec.mesh,
        in_specs=(sharded, sharded) + (replicated,) * 8,
        out_specs=sharded,
    )(cells, inputs, model, noise, schedule, row, t0, length, seed, limits)


def _advance_block(spec: _Spec, cells: _Cells, inputs: _Inputs, model, noise, schedule, row, t0, length, key, limits) -> _Cells:
    """The loop: at most ``length`` steps of a block of cells, leaving when all are done."""
    # λ as one materialised row per cell: XLA would otherwise broadcast it afresh at every step
    # for the loss's reduction (a full extra pass over the block).
    model = model._replace(lam=jnp.broadcast_to(model.lam, (cells.status.shape[0],) + model.lam.shape))
    step = jax.vmap(_cell_step, in_axes=(None, None, None, 0, 0, _Model(0, None, None, None), None, None, None))

    def running(carry):
        k, cells = carry
        return (k < length) & jnp.any(cells.status == RUNNING)

    def advance(carry):
        k, cells = carry
        shared = None if noise is None else noise[row + k]
        source = tuple(x[row + k] for x in schedule)
        cells, values = step(spec, t0 + k, source, cells, inputs, model, shared, key, limits)
        return k + 1, cells._replace(trace=_traced(spec, cells.trace, values, t0, k))

    return jax.lax.while_loop(running, advance, (jnp.int32(0), cells))[1]


def _traced(spec: _Spec, trace: dict, values: dict, t0, k) -> dict:
    """Write step ``t0 + k``'s values into the chunk's trace when ``t0 + k + 1`` is a multiple of
    the stride (entry ``(t0 + k + 1) // stride − 1 − t0 // stride``)."""
    if spec.stride == 1:
        return {n: jax.lax.dynamic_update_index_in_dim(trace[n], values[n], k, 1) for n in values}
    t, stride = t0 + k, spec.stride
    row = (t + 1) // stride - 1 - t0 // stride
    due = (t + 1) % stride == 0
    out = {}
    for n, value in values.items():
        old = jax.lax.dynamic_index_in_dim(trace[n], jnp.maximum(row, 0), 1, keepdims=False)
        out[n] = jax.lax.dynamic_update_index_in_dim(trace[n], jnp.where(due, value, old), jnp.maximum(row, 0), 1)
    return out


def _cell_step(spec: _Spec, t, source, cell: _Cells, inputs: _Inputs, model: _Model, noise, key, limits):
    """One step of one cell: delayed noisy gradient, optimizer update, ring write, status."""
    target, diverge_loss, max_steps = limits
    delay, worker = source
    optimizer, slots = spec.optimizer, spec.slots
    w = jax.lax.dynamic_index_in_dim(cell.ring, t % slots, keepdims=False) if cell.w is None else cell.w
    # Slots of iterations t − slots < s < 0 were never written, so they still hold w₀.
    w_stale = jax.lax.dynamic_index_in_dim(cell.ring, (t - delay) % slots, keepdims=False)
    if noise is None:
        cell_key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(key, 1), inputs.uid[0]), inputs.uid[1])
        noise = model.shape_noise(_normal(cell_key, t, model.lam))
    g = model.hvp(w_stale) + inputs.sigma * noise
    ctx = StepContext(t, delay, worker, w_stale)
    w_next, opt, info = optimizer.step(inputs.hyper, cell.opt, w, g, ctx)
    values, summary = {}, cell.summary
    if spec.record or spec.summaries:
        view = StepView(model, inputs.hyper, ctx, w, cell.opt, _velocity(optimizer, cell.opt, ctx), g, w_next, opt, info, optimizer)
        values = {name: fn(view) for name, fn in spec.record}
        summary = {name: jnp.where(cell.status == RUNNING, r.update(cell.summary[name], r.value(view), t), cell.summary[name])
                   for name, r in spec.summaries}
    sent = w_next if optimizer.sent is None else optimizer.sent(inputs.hyper, opt, w_next)
    ring = jax.lax.dynamic_update_index_in_dim(cell.ring, sent, (t + 1) % slots, 0)
    loss = model.loss(w_next)
    status = jnp.where(
        loss < target, REACHED,
        jnp.where(~(loss <= diverge_loss), DIVERGED, jnp.where(t + 1 >= max_steps, BUDGET, RUNNING)),
    ).astype(jnp.int8)
    live = cell.status == RUNNING
    return _Cells(
        ring=ring,
        w=None if cell.w is None else w_next,
        opt=opt,
        status=jnp.where(live, status, cell.status),
        steps=jnp.where(live, t + 1, cell.steps),
        loss=jnp.where(live, loss, cell.loss),
        trace=cell.trace,
        summary=summary,
    ), values


def _velocity(optimizer: Optimizer, state, ctx: StepContext):
    return jnp.zeros_like(ctx.stale) if optimizer.velocity is None else optimizer.velocity(state, ctx)


def _progress(config: RunConfig, description: str):
    from tqdm import tqdm

    # disable=None: no bar when stderr is not a terminal (logs, CI).
    return tqdm(total=config.max_steps, desc=description, unit="step", dynamic_ncols=True, leave=False,
                disable=None if config.progress else True)
