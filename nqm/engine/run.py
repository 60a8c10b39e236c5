"""The host side of a run: cells in groups, groups in chunks, and the observers between chunks.

:func:`simulate` draws the delay schedule, lays the cells out (:mod:`nqm.engine.layout`) and runs
each group chunk by chunk through :func:`nqm.engine.loop.advance`. Between chunks it reads the
statuses, keeps the results of the cells that finished, repacks the cells still running into
fewer batches, and calls its observers (:mod:`nqm.engine.observers`: traces, progress,
checkpoints) at fixed points. When a cell stops is its stop rule's decision (:mod:`nqm.engine.stop`).
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from nqm import delays
from nqm.config import RunConfig
from nqm.engine import loop, step
from nqm.engine.layout import Layout, blocks, choose, compact, fetch, put, split, worth_compacting
from nqm.engine.observers import Checkpoint, Observer, Progress, declared
from nqm.engine.record import first_view
from nqm.engine.step import CellState, Inputs, init_cells
from nqm.engine.stop import FirstPassage, StopRule
from nqm.errors import NqmError
from nqm.optimizers import Optimizer
from nqm.problem import Problem
from nqm.schedules import engine_schedule
from nqm.status import BUDGET, CONTINUING, active


class Cells(NamedTuple):
    """What a run steps: ``optimizer`` (``nqm.optimizers.make``, made for ``delay``'s workers) with
    per-cell hyperparameters ``hyper`` (its fields by name, each ``(C,)``) and noise scales
    ``sigma`` ``(C,)``, under ``delay`` (a :mod:`nqm.delays` process or a constant D) with ``seed``
    (of the noise and the delays); ``uids``: per-cell identities for ``independent_noise``, ``(C,)``
    or ``(C, 2)`` ``uint32`` (two words of a 64-bit identity; default ``arange(C)``); ``start``: each
    cell's initial weights ``(C, N)``, also its history before step 0 (default: the problem's ``w₀``);
    ``ema``: each cell's averaging rate γ in [0, 1) ``(C,)`` (``None``, or every γ 0: no averaging,
    the run judged on ``w_t`` as without it); ``schedule``: a :class:`nqm.schedules.Schedule` of the
    learning rate (``None``: none)."""

    optimizer: Optimizer
    hyper: dict
    sigma: Any
    delay: Any = 0
    seed: int = 0
    uids: Any = None
    start: Any = None
    ema: Any = None
    schedule: Any = None


class Outcome(NamedTuple):
    """Per-cell results: ``steps`` (T, or the step at which the run stopped), ``status``, final
    ``loss``; what the observers kept — the recorded ``trace`` (name → ``(C, max_steps // stride,
    …)``: steps ``stride``, ``2·stride``, …) and the finished ``summary`` values (name → ``(C, …)``)
    of a :class:`~nqm.engine.observers.Trace`; ``stop``: the stop rule's state of each cell where it
    stopped (its pytree, leading axis C; ``None`` for a rule that keeps none); and ``work``: how many cell-steps the devices computed,
    useful or not (a block steps all its cells while any of them runs; padding cells count too), so
    that ``Σ steps / work ≤ 1`` is the fraction of the computation that early exit and repacking
    leave useful."""

    steps: np.ndarray
    status: np.ndarray
    loss: np.ndarray
    trace: dict = {}
    summary: dict = {}
    work: np.ndarray = np.zeros(1, np.int64)
    stop: Any = None


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
    cells: int
    inputs: Inputs  # per-cell, on the host
    observers: tuple
    end: int  # the last step any cell may reach: the budget, or the stop rule's horizon
    result: dict  # steps, status, loss (C,) and work (1,), filled as cells finish, and the stop rule's state
    start: Any  # the initial weights: w₀, or one row per cell


def simulate(problem: Problem, cells: Cells, config: RunConfig = RunConfig(), observers=(),
             stop: StopRule = FirstPassage()) -> Outcome:
    """Run every cell to its target, divergence or budget (and on, as its stop rule says).

    Args:
      problem: the quadratic.
      cells: what to step (:class:`Cells`).
      config: run settings.
      observers: what else the run does (:mod:`nqm.engine.observers`): a
        :class:`~nqm.engine.observers.Trace`, a
        :class:`~nqm.engine.observers.Progress` (default: a bar over the run's steps, shown where
        ``config.progress``), a :class:`~nqm.engine.observers.Checkpoint` (its ``resume`` continues
        an earlier run), or any :class:`~nqm.engine.observers.Observer`.
      stop: when a cell that reached the target stops (:mod:`nqm.engine.stop`; default: there).

    Returns:
      The :class:`Outcome`; ``steps``, ``status`` and ``loss`` ``(C,)``.
    """
    observers = tuple(observers)
    if not any(isinstance(o, Progress) for o in observers):
        observers += (Progress(enabled=config.progress, label=stop.label),)
    optimizer, process = cells.optimizer, delays.process(cells.delay)
    hyper, sigma, uids = _checked(cells, process)
    count = sigma.size
    ema = _averaging(cells.ema, count)
    schedule = engine_schedule(cells.schedule)
    end = stop.horizon(config.max_steps)  # a rule may keep reached cells stepping past the budget
    plan = process.schedule(cells.seed, end)
    resume = next((o.resume for o in observers if isinstance(o, Checkpoint) and o.resume is not None), None)
    with jax.enable_x64(config.x64):
        dtype = jnp.float64 if config.x64 else jnp.float32
        state = stop.init(count, dtype)
        layout = choose(problem, optimizer, process.history(plan[0]), count, config, dtype,
                        declared(observers, "record"), declared(observers, "summaries"),
                        declared(observers, "stride", 1), stop, _bytes_per_cell(state, count), ema is not None,
                        schedule)
        replicated = NamedSharding(layout.sharding.mesh, PartitionSpec())
        limits = put((np.asarray(config.target, dtype), np.asarray(config.diverge_factor * problem.initial_loss, dtype),
                      np.asarray(config.max_steps, np.int32)), replicated)
        result = {"steps": np.zeros(count, np.int32), "status": np.zeros(count, np.int8),
                  "loss": np.zeros(count, np.float64), "work": np.zeros(1, np.int64),
                  "stop": jax.tree.map(np.copy, state)}
        start = _start(cells, problem, count, dtype)
        run = _Run(layout, put(step.model(problem, dtype), replicated), jnp.asarray(problem.w0, dtype), limits,
                   put(np.asarray(cells.seed, np.uint32), replicated), plan, config, dtype, count,
                   Inputs(hyper, sigma, uids, ema), observers, end, result, start)
        with _observed(run) as run:
            for number, (index, start) in enumerate(groups := _groups(run, resume)):
                for observer in observers:
                    observer.group(number, len(groups), 0 if start is None else int(start.t))
                _run_group(run, index, start)
    parts = {k: v for o in observers for k, v in o.result().items()}
    return Outcome(result["steps"], result["status"], result["loss"], work=result["work"], stop=result["stop"], **parts)


def _start(cells: Cells, problem: Problem, count: int, dtype):
    """Each cell's initial weights as given (``(count, N)``, host), or ``None``: the problem's w₀."""
    if cells.start is None:
        return None
    start = np.asarray(cells.start, np.float64)
    if start.shape != (count, problem.dim) or not np.isfinite(start).all():
        raise NqmError(f"the cells' initial weights must be finite numbers of shape ({count}, {problem.dim}), got "
                       f"shape {start.shape}")
    return start.astype(dtype)


def _averaging(ema, count: int):
    """The cells' averaging rates γ as a host array, or ``None`` where no cell averages (γ = 0 everywhere:
    the run is the one without averaging, bit for bit)."""
    if ema is None:
        return None
    gamma = np.broadcast_to(np.asarray(ema, np.float64), (count,))
    if not np.all((gamma >= 0) & (gamma < 1)):
        raise NqmError(f"each cell's averaging rate ema must be in [0, 1), got {gamma[~((gamma >= 0) & (gamma < 1))][0]!r}")
    return gamma if np.any(gamma != 0) else None


def _bytes_per_cell(state, count: int) -> int:
    """What the stop rule keeps per cell, in bytes."""
    return sum(np.asarray(x).nbytes for x in jax.tree.leaves(state)) // max(count, 1)


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


def _checked(cells: Cells, process) -> tuple[dict, np.ndarray, np.ndarray]:
    """The cells' hyperparameters, noise scales and identities as host arrays of one length."""
    optimizer = cells.optimizer
    sigma = np.asarray(cells.sigma, np.float64).reshape(-1)
    missing = set(optimizer.hyper._fields) - set(cells.hyper)
    if missing:
        raise NqmError(f"method {optimizer.name!r} needs hyperparameter(s) {', '.join(sorted(missing))}")
    if optimizer.workers is not None and optimizer.workers != process.workers:
        raise NqmError(
            f"the {optimizer.name} optimizer was made for {optimizer.workers} workers but delay {process.label} "
            f"has {process.workers}; make it with nqm.optimizers.make(..., delay={process.label!r})"
        )
    hyper = {k: np.broadcast_to(np.asarray(cells.hyper[k], np.float64), sigma.shape) for k in optimizer.hyper._fields}
    uids = np.arange(sigma.size, dtype=np.uint32) if cells.uids is None else np.asarray(cells.uids, np.uint32)
    uids = np.stack([uids, np.zeros_like(uids)], 1) if uids.ndim == 1 else uids.reshape(sigma.size, 2)
    return hyper, sigma, uids


def _groups(run: _Run, resume: Snapshot | None) -> list:
    """The groups of cells to run, each ``(index, snapshot or None)``: the resumed cells first, from
    their step (one group: they stopped together), then the fresh ones."""
    fresh = np.arange(run.cells) if resume is None else np.setdiff1d(np.arange(run.cells), resume.index)
    size = run.layout.group_cells
    groups = [(fresh[i:i + size], None) for i in range(0, fresh.size, size)]
    return ([(np.asarray(resume.index), resume)] if resume is not None and resume.index.size else []) + groups


@contextlib.contextmanager
def _observed(run: _Run):
    """The run between its observers' ``begin`` and ``end``, with Ctrl-C taken at a chunk boundary."""
    for observer in run.observers:
        observer.begin(run)
    try:
        with _stop_between_chunks() as stop:
            yield run._replace(observers=(stop,) + run.observers)
    finally:
        for observer in run.observers:
            observer.end()


def _run_group(run: _Run, index, start: Snapshot | None):
    """Advance one group of cells chunk by chunk until all are done (from a snapshot's step and
    state when ``start`` is one)."""
    spec, config = run.layout.spec, run.config
    batches, owner, t = _batches(run, index, start)
    noise = _Noise(run)
    while batches and t < run.end:
        length = min(steps_to_chunk_end(t, spec.chunk_steps), run.end - t)  # an argument, not a new compilation
        drawn, row = noise.covering(t, length)
        batches = [(loop.advance(spec, cells, inputs, run.model, *drawn, jnp.int32(row), jnp.int32(t),
                                 jnp.int32(length), run.seed, run.limits), inputs) for cells, inputs in batches]
        for observer in run.observers:
            observer.chunk(batches, owner, t, length)
        t += length
        owner, finished, status = _finish(run, batches, owner, t, length)
        running = int((owner >= 0).sum())
        for observer in run.observers:
            observer.progress(t, int(finished.sum()), running, int((status == CONTINUING).sum()))
        if running == 0:
            break
        for observer in run.observers:
            observer.between(functools.partial(_snapshot, batches, owner, t))
        if config.compaction and worth_compacting(owner, run.layout):
            batches, owner = compact(batches, owner, run.layout)


def steps_to_chunk_end(t: int, full: int) -> int:
    """The steps of the chunk that starts at step ``t``. A run's first chunks are short (1/16, 1/8, 1/4
    and 1/2 of ``full``), so that cells which stop early (often most divergent ones) are compacted
    away soon. The step alone sets it: a run resumed at a chunk's end cuts its chunks where the run
    it continues did, so the same cells finish together (a run nested in a sweep's, of the cells that
    finish in one chunk, is found again in the checkpoint by its cells).

    Args:
      t: the step the chunk starts at.
      full: the length of a chunk past the short ones.

    Returns:
      Steps to the chunk's end.
    """
    end = 0
    for shift in (4, 3, 2, 1):
        end += max(1, full >> shift)
        if t < end:
            return end - t
    return full


def _batches(run: _Run, index, start: Snapshot | None) -> tuple[list, np.ndarray, int]:
    """The group's cells in batches (padded to whole batches with copies of its first cell marked
    done, which never reach a result), which cell each slot holds (−1: none), and their step."""
    spec, size = run.layout.spec, run.layout.batch_cells
    padded = np.concatenate([index, np.full(-len(index) % size, -1)])
    take = np.where(padded < 0, index[0], padded)
    ema = run.inputs.ema
    inputs = Inputs(spec.optimizer.hyper(**{k: v[take].astype(run.dtype) for k, v in run.inputs.hyper.items()}),
                    run.inputs.sigma[take].astype(run.dtype), run.inputs.uid[take],
                    None if ema is None else ema[take].astype(run.dtype))
    state = jax.tree.map(lambda x: x[take], run.result["stop"])
    cells = init_cells(spec, run.model, run.w0 if run.start is None else run.start[take], padded >= 0, state)
    t = 0
    if start is not None:
        t, cells = int(start.t), _resumed(cells, start, padded)
    batches = [tuple(split(tree, i * size, size, run.layout.sharding) for tree in (cells, inputs))
               for i in range(padded.size // size)]
    return batches, padded.reshape(-1, size), t


def _resumed(cells: CellState, start: Snapshot, padded) -> CellState:
    """The initial state of a group with its saved cells' state (in index order) put back."""
    row = np.where(padded < 0, 0, np.arange(padded.size))
    saved = start.cells
    if isinstance(saved, (list, tuple)) and not isinstance(saved, CellState):  # leaves, as written to disk
        structure = jax.tree.structure(cells._replace(trace={}))
        if structure.num_leaves != len(saved):
            raise NqmError("the checkpoint's running cells were saved by another version of nqm's engine; "
                           "start over with restart=True (--restart)")
        saved = jax.tree.unflatten(structure, saved)
    cells = cells._replace(**{f: jax.tree.map(lambda x: np.asarray(x)[row], getattr(saved, f))
                              for f in CellState._fields if f != "trace"})
    return cells._replace(status=np.where(padded >= 0, cells.status, BUDGET).astype(np.int8))


class _Noise:
    """The common noise and the delay schedule of a chunk's steps, drawn a chunk ahead and shared by
    the short chunks it covers: never drawn twice. Where every cell is noiseless, σ·ξ is 0 whatever
    ξ, so none is drawn: the chunks read one array of zeros (a normal draw per element and step
    cost a noiseless run at N = 1,000 as much as its steps, three times as much in float64)."""

    def __init__(self, run: _Run):
        self.run, self.t0, self.drawn = run, 0, None
        self.replicated = NamedSharding(run.layout.spec.mesh, PartitionSpec())
        self.quiet = not np.any(run.inputs.sigma != 0)

    def covering(self, t: int, length: int) -> tuple[tuple, int]:
        """``(noise, schedule)`` covering steps ``t … t + length − 1``, and the row of step ``t``."""
        spec, run = self.run.layout.spec, self.run
        if self.drawn is None or t + length > self.t0 + spec.chunk_steps:
            self.t0, rows = t, slice(t, t + spec.chunk_steps)
            schedule = put(tuple(np.resize(x[rows], spec.chunk_steps) for x in run.plan), self.replicated)
            if spec.independent_noise:
                noise = None
            elif self.quiet:  # the same array for every chunk
                noise = self.drawn[0] if self.drawn else loop.no_noise((spec.chunk_steps, run.w0.size), run.dtype,
                                                                          spec.mesh)
            else:
                noise = loop.common_noise(run.seed, jnp.int32(t), run.model, spec.chunk_steps, spec.mesh)
            self.drawn = (noise, schedule)
        return self.drawn, t - self.t0


def _finish(run: _Run, batches, owner, t: int, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read the statuses after a chunk, count its work, keep the results of the cells that finished
    and hand them to the observers; returns the owners with those cells let go, which slots
    finished, and the statuses."""
    spec, result = run.layout.spec, run.result
    status = np.stack(fetch([cells.status for cells, _ in batches]))
    finished = ~active(status) & (owner >= 0)
    steps = np.stack(fetch([cells.steps for cells, _ in batches])) if finished.any() else None
    # A cell its stop rule kept stepping reports T, not where it stopped: its block counts the whole chunk.
    result["work"][0] += _work(run.layout, owner, finished, None if spec.stop.continues else steps, t - length, length)
    if not finished.any():
        return owner, finished, status

    def part(field):  # a field of the finished cells' state, in the order of ``ids``
        return jax.tree.map(lambda *xs: np.stack(xs)[finished], *fetch([field(cells) for cells, _ in batches]))

    ids = owner[finished]
    loss = part(lambda cells: cells.loss)
    state = part(lambda cells: cells.stop) if result["stop"] is not None else None
    done = Outcome(steps[finished], status[finished], loss, stop=state)
    result["steps"][ids], result["status"][ids], result["loss"][ids] = done.steps, done.status, done.loss
    if state is not None:
        jax.tree.map(lambda kept, new: kept.__setitem__(ids, new), result["stop"], state)
    for observer in run.observers:
        observer.finished(ids, done, part)
    return np.where(finished, -1, owner), finished, status


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


class _Interrupt(Observer):
    """Ctrl-C during a run stops it at the next chunk boundary (a second one at once), so that no
    computation is in flight when the program exits (an exit mid-chunk can crash the runtime)."""

    def __init__(self):
        self.requested = []

    def request(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested.append(signum)

    def between(self, snapshot) -> None:
        if self.requested:
            raise KeyboardInterrupt


@contextlib.contextmanager
def _stop_between_chunks():
    """An :class:`_Interrupt` in charge of SIGINT while the run lasts — unless a caller's own SIGINT
    handler (a checkpointing sweep's) is, or this is not the main thread: then an inert one."""
    stop = _Interrupt()
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield stop
        return
    signal.signal(signal.SIGINT, stop.request)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if stop.requested:
        raise KeyboardInterrupt
