"""The host side of a run: settings, groups of cells, chunks, progress, callbacks and snapshots.

:func:`simulate` draws the delay schedule, lays the cells out (:mod:`nqm.engine.layout`) and runs
each group chunk by chunk through :func:`nqm.engine.loop.advance`. Between chunks it reads the
status, updates the progress bar, hands finished cells to a callback (checkpoints), offers a
snapshot of the running cells, and repacks the cells still running into fewer batches.
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import threading
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from nqm import delays
from nqm.engine import loop
from nqm.engine.record import Summary, first_view, value_shapes
from nqm.engine import step
from nqm.engine.layout import Layout, blocks, choose, compact, fetch, put, split, worth_compacting
from nqm.engine.step import Cells, Inputs, init_cells
from nqm.config import RunConfig
from nqm.errors import NqmError
from nqm.optimizers import Optimizer
from nqm.problem import Problem
from nqm.status import BUDGET, SETTLING, active
from nqm.validate import BOUNDS, MAX_STEPS, format_bytes


class Outcome(NamedTuple):
    """Per-cell results: ``steps`` (T, or the step at which the run stopped), ``status``, final
    ``loss``, the recorded ``trace`` (name → ``(C, max_steps // stride, …)``: steps ``stride``,
    ``2·stride``, …), the finished ``summary`` values (name → ``(C, …)``; both empty unless asked),
    and ``work``: how many cell-steps the devices computed, useful or not (a block steps all its
    cells while any of them runs; padding cells count too), so that ``Σ steps / work ≤ 1`` is the
    fraction of the computation that early exit and repacking leave useful. With ``settle``,
    ``window`` ``(C, WINDOW_SLOTS)`` holds each reached cell's settling window (the losses at the
    steps of :func:`nqm.engine.step.settle_window`, NaN elsewhere) and ``peak`` ``(C,)`` the largest
    loss over that window's every step, else ``None``."""

    steps: np.ndarray
    status: np.ndarray
    loss: np.ndarray
    trace: dict = {}
    summary: dict = {}
    work: np.ndarray = np.zeros(1, np.int64)
    window: np.ndarray | None = None
    peak: np.ndarray | None = None


class Snapshot(NamedTuple):
    """The running cells of a run between two chunks: cell ``index[i]`` (its position in the run)
    has done ``t`` steps and holds the state ``cells[…][i]`` (host arrays; no trace). ``cells``
    may also be given as its list of leaves (``jax.tree.leaves``), as a checkpoint stores it."""

    t: int
    index: np.ndarray
    cells: Any


class _Run(NamedTuple):
    """What every group of a run shares."""

    layout: Layout
    model: Any
    w0: Any
    limits: Any
    seed: Any
    plan: tuple  # the delay schedule (τ_t, k_t) over the budget
    config: RunConfig
    dtype: Any
    outcome: Outcome
    on_finished: Callable | None
    between_chunks: Callable | None
    bar: Any
    description: str
    end: int  # the last step any cell may reach: the budget, or the horizon of settling cells


def simulate(
    problem: Problem,
    optimizer: Optimizer,
    hyper: dict[str, np.ndarray],
    sigma: np.ndarray,
    *,
    delay: int | delays.Process = 0,
    seed: int = 0,
    uids: np.ndarray | None = None,
    config: RunConfig = RunConfig(),
    record: dict[str, Callable | Summary] | None = None,
    stride: int = 1,
    on_finished: Callable[[np.ndarray, Outcome], None] | None = None,
    between_chunks: Callable[[Callable[[], Snapshot]], None] | None = None,
    resume: Snapshot | None = None,
    description: str = "nqm",
    bar=None,
    settle: bool = False,
    span=None,
) -> Outcome:
    """Run every cell to its target, divergence or budget.

    Args:
      problem: the quadratic.
      optimizer: a configured optimizer (``nqm.optimizers.make``), made for ``delay``'s workers.
      hyper: per-cell hyperparameters by name (the fields of ``optimizer.hyper``), each ``(C,)``.
      sigma: per-cell noise scale ``(C,)``.
      delay: the delay process (:mod:`nqm.delays`), or a constant delay ``D ≥ 0``.
      seed: the noise (and delay) seed.
      uids: per-cell identities for ``independent_noise``: ``(C,)`` or ``(C, 2)`` ``uint32`` (two
        words of a 64-bit identity; default ``arange(C)``).
      config: run settings.
      record: diagnostics by name (see :mod:`nqm.diagnostics`): a ``recorder(StepView) -> array``
        is traced every ``stride`` steps (``max_steps // stride`` entries per cell, meaningful up
        to each cell's ``steps``); a :class:`~nqm.engine.record.Summary` is kept on the device.
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
      settle: a cell that reaches the target steps on, past the budget if need be, through its
        settling window (:func:`nqm.engine.step.settle_window`; the settled test of
        :mod:`nqm.settling` reads ``Outcome.window``): its status is then 1 once the window is
        complete, 2 (transient) if it diverged on the way; T and its loss are the first passage's.
      span: with ``settle``, per-cell least spans of the settling runs ``(C,)`` (steps), beyond the
        optimizer's own (:func:`nqm.engine.step.settling_span`); ``None``: the optimizer's alone.

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
    # Settling cells may step on past the budget: to the horizon of a first passage at the budget.
    spans = np.zeros(cells, np.int64)
    if settle:
        spans = step.settling_span(optimizer, hyper)
        if span is not None:
            spans = np.maximum(spans, np.minimum(np.broadcast_to(np.asarray(span, np.int64), (cells,)), MAX_STEPS))
    end = int(step.settle_window(config.max_steps, spans.max(initial=0))[0]) if settle else config.max_steps
    plan = process.schedule(seed, end)

    with jax.enable_x64(config.x64):
        dtype = jnp.float64 if config.x64 else jnp.float32
        layout = choose(problem, optimizer, process.history(plan[0]), cells, config, dtype, record, summaries,
                                int(stride), settle)
        replicated = NamedSharding(layout.sharding.mesh, PartitionSpec())
        model = put(step.model(problem, dtype), replicated)
        w0 = jnp.asarray(problem.w0, dtype)
        outcome = _empty_outcome(layout, model, w0, cells, config.max_steps // int(stride), dtype)
        if cells == 0:
            return outcome
        limits = put((
            np.asarray(config.target, dtype),
            np.asarray(config.diverge_factor * problem.initial_loss, dtype),
            np.asarray(config.max_steps, np.int32),
        ), replicated)
        seed = put(np.asarray(seed, np.uint32), replicated)
        fresh = np.arange(cells) if resume is None else np.setdiff1d(np.arange(cells), resume.index)
        groups = [(fresh[i:i + layout.group_cells], None) for i in range(0, fresh.size, layout.group_cells)]
        if resume is not None and resume.index.size:
            # Resumed cells first, from their step (one group: they stopped together).
            groups.insert(0, (np.asarray(resume.index), resume))
        inputs = (hyper, sigma, uids, spans)
        with contextlib.nullcontext(bar) if bar is not None else _progress(config, description) as bar, \
                _stop_between_chunks(between_chunks) as between_chunks:
            run = _Run(layout, model, w0, limits, seed, plan, config, dtype, outcome, on_finished, between_chunks,
                       bar, description, end)
            for number, (index, start) in enumerate(groups):
                if len(groups) > 1 and getattr(bar, "unit", None) == "step":
                    bar.set_description(f"{description} [group {number + 1}/{len(groups)}]")
                _run_group(run, index, inputs, start)
    return outcome


def check(problem: Problem, optimizer: Optimizer) -> None:
    """Trace one step of ``optimizer`` on ``problem`` abstractly (no computation), so that settings
    that do not fit the problem (e.g. more AB groups than parameters) fail before any work.

    Args:
      problem: the problem.
      optimizer: the configured optimizer.

    Raises:
      Whatever the optimizer's step raises on a weight vector of the problem's dimension.
    """
    jax.eval_shape(lambda w: first_view(None, optimizer, w)._replace(optimizer=None),
                   jax.ShapeDtypeStruct((problem.dim,), jnp.float32))


def _empty_outcome(layout, model, w0, cells: int, entries: int, dtype) -> Outcome:
    spec = layout.spec
    traces, totals = value_shapes(model, spec.optimizer, w0, spec.record, spec.summaries)

    size = sum(cells * entries * math.prod(s.shape) * s.dtype.itemsize for s in traces.values())
    if size > BOUNDS["trace_bytes"]:
        raise NqmError(f"the trace of {cells:,} cell(s) over {entries:,} recorded steps needs {format_bytes(size)}, "
                       f"more than {format_bytes(BOUNDS['trace_bytes'])}; record every K-th step (stride) or fewer "
                       "recorders")

    def finished(summary, like):  # one cell's result: its shape and dtype
        return summary.result(jax.tree.map(lambda x: x[None], summary.zeros(like)), np.ones(1))[0]

    return Outcome(
        np.zeros(cells, np.int32), np.zeros(cells, np.int8), np.zeros(cells, np.float64),
        {name: np.full((cells, entries) + s.shape, np.nan if s.dtype.kind in "fc" else 0, s.dtype)
         for name, s in traces.items()},
        {name: np.zeros((cells,) + finished(r, totals[name]).shape, finished(r, totals[name]).dtype)
         for name, r in spec.summaries},
        np.zeros(1, np.int64),
        np.full((cells, step.WINDOW_SLOTS), np.nan, dtype) if spec.settle else None,
        np.zeros(cells, dtype) if spec.settle else None,
    )


def _run_group(run: _Run, index, inputs, start: Snapshot | None):
    """Advance one group of cells chunk by chunk until all are done (from a snapshot's step and
    state when ``start`` is one)."""
    spec, size, config = run.layout.spec, run.layout.batch_cells, run.config
    hyper, sigma, uids, span = inputs
    # Pad to whole batches with copies of the first cell marked done; they never reach a result.
    padded = np.concatenate([index, np.full(-len(index) % size, -1)])
    owner = padded.reshape(-1, size)
    take = np.where(padded < 0, index[0], padded)
    inputs = Inputs(
        spec.optimizer.hyper(**{k: v[take].astype(run.dtype) for k, v in hyper.items()}),
        sigma[take].astype(run.dtype),
        uids[take],
        span[take].astype(np.int32),
    )
    cells = init_cells(spec, run.model, run.w0, padded >= 0)
    t, chunk = 0, 0
    if start is not None:
        t, row = int(start.t), np.where(padded < 0, 0, np.arange(padded.size))  # saved cells in index order
        saved = start.cells
        if isinstance(saved, (list, tuple)) and not isinstance(saved, Cells):  # leaves, as written to disk
            structure = jax.tree.structure(cells._replace(trace={}))
            if structure.num_leaves != len(saved):
                raise NqmError("the checkpoint's running cells were saved by another version of nqm's engine; "
                               "start over with restart=True (--restart)")
            saved = jax.tree.unflatten(structure, saved)
        cells = cells._replace(**{f: jax.tree.map(lambda x: np.asarray(x)[row], getattr(saved, f))
                                  for f in Cells._fields if f != "trace"})
        cells = cells._replace(status=np.where(padded >= 0, cells.status, BUDGET).astype(np.int8))
    sharding = run.layout.sharding
    batches = [tuple(split(tree, i * size, size, sharding) for tree in (cells, inputs)) for i in range(len(owner))]
    bar = run.bar
    by_step = getattr(bar, "unit", None) == "step"  # a disabled bar has no unit, and shows nothing anyway
    if by_step:
        bar.reset(total=config.max_steps)
        bar.update(t)
    window, window_t0 = None, 0  # noise and schedule of steps window_t0 … window_t0 + chunk_steps − 1
    replicated = NamedSharding(spec.mesh, PartitionSpec())
    outcome = run.outcome
    while batches and t < run.end:
        # The first chunks are short, so that cells which stop early (often most divergent
        # ones) are compacted away soon; the length is an argument, not a new compilation.
        length = min(max(1, spec.chunk_steps >> max(0, 4 - chunk)), run.end - t)
        if window is None or t + length > window_t0 + spec.chunk_steps:
            # Drawn a chunk ahead and shared by the short chunks it covers: never drawn twice.
            window_t0 = t
            rows = slice(t, t + spec.chunk_steps)
            schedule = put(tuple(np.resize(x[rows], spec.chunk_steps) for x in run.plan), replicated)
            noise = None if spec.independent_noise else loop.common_noise(run.seed, jnp.int32(t), run.model,
                                                                          spec.chunk_steps, spec.mesh)
            window = (noise, schedule)
        batches = [
            (loop.advance(spec, cells_b, inputs_b, run.model, *window, jnp.int32(t - window_t0), jnp.int32(t),
                          jnp.int32(length), run.seed, run.limits), inputs_b)
            for cells_b, inputs_b in batches
        ]
        if spec.record:
            _collect_trace(outcome.trace, batches, owner, t, length, spec.stride)
        t, chunk = t + length, chunk + 1
        status = np.stack(fetch([cells_b.status for cells_b, _ in batches]))
        finished = ~active(status) & (owner >= 0)
        steps = np.stack(fetch([c.steps for c, _ in batches])) if finished.any() else None
        # A settled cell's steps are T, not where it stopped: its block counts the whole chunk.
        outcome.work[0] += _work(run.layout, owner, finished, None if spec.settle else steps, t - length, length)
        if finished.any():
            loss = np.stack(fetch([c.loss for c, _ in batches]))
            ids = owner[finished]
            outcome.steps[ids], outcome.status[ids], outcome.loss[ids] = steps[finished], status[finished], loss[finished]
            if spec.summaries:
                totals = jax.tree.map(lambda *xs: np.stack(xs), *fetch([c.summary for c, _ in batches]))
                for name, summary in spec.summaries:
                    done = jax.tree.map(lambda x: x[finished], totals[name])
                    outcome.summary[name][ids] = summary.result(done, steps[finished])
            samples = peaks = None
            if spec.settle:
                samples = np.stack(fetch([c.window for c, _ in batches]))[finished]
                peaks = np.stack(fetch([c.peak for c, _ in batches]))[finished]
                outcome.window[ids], outcome.peak[ids] = samples, peaks
            if run.on_finished is not None:
                run.on_finished(ids, Outcome(steps[finished], status[finished], loss[finished], window=samples,
                                             peak=peaks))
            owner = np.where(finished, -1, owner)
        running = int((owner >= 0).sum())
        settling = f" ({int((status == SETTLING).sum())} settling)" if spec.settle else ""
        if by_step:
            bar.update(min(t, config.max_steps) - bar.n)
            bar.set_postfix_str(f"running {running}/{len(index)} cells{settling}", refresh=False)
        else:
            bar.update(int(finished.sum()))
            bar.set_postfix_str(f"{run.description}: step {t:,}/{config.max_steps:,}, {running} running{settling}",
                                refresh=False)
        if running == 0:
            break
        if run.between_chunks is not None:
            run.between_chunks(functools.partial(_snapshot, batches, owner, t))
        if config.compaction and worth_compacting(owner, run.layout):
            batches, owner = compact(batches, owner, run.layout)


def _work(layout, owner, finished, steps, t0: int, length: int) -> int:
    """Cell-steps computed by a chunk from ``t0``: a block runs ``length`` steps while any of its
    cells still runs, up to its last finisher's step if all finished in the chunk (where ``steps``
    gives it; else the whole chunk), none otherwise."""
    live, done = blocks(owner >= 0, layout), blocks(finished, layout)
    ran = np.where(live.any(-1), length, 0)
    if steps is not None:
        last = np.where(done, blocks(steps, layout) - t0, 0).max(-1)
        ran = np.where(live.any(-1) & (live == done).all(-1), last, ran)
    return int(ran.sum()) * layout.spec.block_cells


def _snapshot(batches, owner, t) -> Snapshot:
    cells = jax.tree.map(lambda *xs: np.concatenate(xs), *fetch([c._replace(trace={}) for c, _ in batches]))
    live = owner.reshape(-1) >= 0
    return Snapshot(t, owner.reshape(-1)[live], jax.tree.map(lambda x: x[live], cells))


def _collect_trace(trace: dict, batches, owner, t0: int, length: int, stride: int):
    """Copy the chunk's recorded values of every live cell into the host arrays."""
    first, end = t0 // stride, (t0 + length) // stride  # entries of steps first·stride … end·stride
    end = min(end, next(iter(trace.values())).shape[1])  # settling cells step past the budget: not traced
    if end <= first:
        return
    for (cells_b, _), ids in zip(batches, owner):
        values = fetch(cells_b.trace)
        live = ids >= 0
        for name, array in trace.items():
            array[ids[live], first:end] = values[name][live, :end - first]


@contextlib.contextmanager
def _stop_between_chunks(between_chunks):
    """Ctrl-C during a run stops it at the next chunk boundary (a second one at once), so that no
    computation is in flight when the program exits (an exit mid-chunk can crash the runtime). A
    caller's own SIGINT handler (a checkpointing sweep's) is left in charge."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield between_chunks
        return
    requested = []

    def request(signum, frame):
        if requested:
            raise KeyboardInterrupt
        requested.append(signum)

    def boundary(snapshot):
        if requested:
            raise KeyboardInterrupt
        if between_chunks is not None:
            between_chunks(snapshot)

    signal.signal(signal.SIGINT, request)
    try:
        yield boundary
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if requested:
        raise KeyboardInterrupt


def _progress(config: RunConfig, description: str):
    from tqdm import tqdm

    # disable=None: no bar when stderr is not a terminal (logs, CI).
    return tqdm(total=config.max_steps, desc=description, unit="step", dynamic_ncols=True, leave=False,
                disable=None if config.progress else True)
