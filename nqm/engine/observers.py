"""What the host loop does besides stepping: small objects it calls at fixed points of a run.

    begin(run)                          the cells are laid out: allocate what it keeps
    group(number, groups, t)            a group of cells starts (at step t: 0, or a resumed step)
    chunk(batches, owner, t, length)    a chunk was advanced from step t
    finished(ids, part, fetch)          cells finished: their results, ``fetch(field)`` their state
    progress(t, finished, running, continuing)   between chunks, once the statuses are read
    between(snapshot)                   between chunks: ``snapshot()`` gives the running cells
    end()                               the run is over (also on an error)
    result() -> dict                    what it adds to the :class:`~nqm.engine.run.Outcome`

Three are the engine's own: :class:`Trace` (recorders, traced every ``stride`` steps or kept as
running summaries), :class:`Progress` (a bar over steps, or over a sweep's cells) and
:class:`Checkpoint` (finished cells handed on, snapshots between chunks, a run resumed from one).
:class:`Trace` also says what the compiled chunk computes (``record``, ``summaries``, ``stride``);
when a cell stops is not an observer's business but the run's stop rule's (:mod:`nqm.engine.stop`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import numpy as np

from nqm.engine.layout import fetch
from nqm.engine.record import Summary, value_shapes
from nqm.errors import NqmError
from nqm.progress import bar as progress_bar
from nqm.validate import BOUNDS, format_bytes


class Observer:
    """A hook of the host loop (module docstring): every method may be left out."""

    record: tuple = ()  # traced recorders (name, recorder) the chunk computes
    summaries: tuple = ()  # running summaries (name, Summary) the chunk keeps
    stride: int = 1  # the steps between two traced entries

    def begin(self, run) -> None:
        pass

    def group(self, number: int, groups: int, t: int) -> None:
        pass

    def chunk(self, batches, owner, t: int, length: int) -> None:
        pass

    def finished(self, ids, part, fetch: Callable) -> None:
        pass

    def progress(self, t: int, finished: int, running: int, continuing: int) -> None:
        pass

    def between(self, snapshot: Callable) -> None:
        pass

    def end(self) -> None:
        pass

    def result(self) -> dict:
        return {}


class Trace(Observer):
    """Recorders (see :mod:`nqm.diagnostics`): a ``recorder(StepView) -> array`` traced every
    ``stride`` steps (``max_steps // stride`` entries per cell, meaningful up to each cell's
    ``steps``), a :class:`~nqm.engine.record.Summary` kept on the device."""

    def __init__(self, record: dict[str, Callable | Summary] | None = None, stride: int = 1):
        if int(stride) != stride or stride < 1:
            raise NqmError(f"stride must be an integer >= 1, got {stride}")
        items = sorted((record or {}).items())
        self.summaries = tuple((n, r) for n, r in items if isinstance(r, Summary))
        self.record = tuple((n, r) for n, r in items if not isinstance(r, Summary))
        self.stride = int(stride)
        self.trace, self.summary = {}, {}

    def begin(self, run) -> None:
        entries = run.config.max_steps // self.stride
        traces, totals = value_shapes(run.model, run.layout.spec.optimizer, run.w0, self.record, self.summaries)
        size = sum(run.cells * entries * math.prod(s.shape) * s.dtype.itemsize for s in traces.values())
        if size > BOUNDS["trace_bytes"]:
            raise NqmError(f"the trace of {run.cells:,} cell(s) over {entries:,} recorded steps needs "
                           f"{format_bytes(size)}, more than {format_bytes(BOUNDS['trace_bytes'])}; record every "
                           "K-th step (stride) or fewer recorders")

        def finished(summary, like):  # one cell's result: its shape and dtype
            return summary.result(jax.tree.map(lambda x: x[None], summary.zeros(like)), np.ones(1))[0]

        self.trace = {name: np.full((run.cells, entries) + s.shape, np.nan if s.dtype.kind in "fc" else 0, s.dtype)
                      for name, s in traces.items()}
        self.summary = {name: np.zeros((run.cells,) + finished(r, totals[name]).shape, finished(r, totals[name]).dtype)
                        for name, r in self.summaries}

    def chunk(self, batches, owner, t: int, length: int) -> None:
        """Copy the chunk's recorded values of every live cell into the host arrays."""
        if not self.trace:
            return
        first, end = t // self.stride, (t + length) // self.stride  # entries of steps first·stride … end·stride
        end = min(end, next(iter(self.trace.values())).shape[1])  # steps past the budget (a stop rule's): not traced
        if end <= first:
            return
        for (cells, _), ids in zip(batches, owner):
            values = fetch(cells.trace)
            live = ids >= 0
            for name, array in self.trace.items():
                array[ids[live], first:end] = values[name][live, :end - first]

    def finished(self, ids, part, fetch: Callable) -> None:
        if self.summaries:
            totals = fetch(lambda cells: cells.summary)
            for name, summary in self.summaries:
                self.summary[name][ids] = summary.result(totals[name], part.steps)

    def result(self) -> dict:
        return {"trace": self.trace, "summary": self.summary}


class Progress(Observer):
    """A progress bar: its own over the run's steps (``bar=None``), or one over a sweep's cells
    shared by several runs (``bar``: finished cells advance it, this run's step shows in its
    postfix; ``count=False``: the step only, for a run nested in the sweep's). ``enabled=False``: none.
    ``label``: what the postfix calls the cells a stop rule keeps stepping past their first passage;
    ``limit``: the last step the run may reach, which the postfix states once a step passes the budget."""

    def __init__(self, description: str = "nqm", bar=None, enabled: bool = True, count: bool = True,
                 label: str = "continuing", limit: int | None = None):
        self.description, self.bar, self.enabled, self.count = description, bar, enabled, count
        self.label, self.limit = label, limit
        self.by_step, self.total, self.cells = bar is None, 0, 0

    def begin(self, run) -> None:
        self.total, self.cells = run.config.max_steps, run.cells
        if self.bar is None:
            self.bar = progress_bar(self.enabled, total=self.total, desc=self.description, unit="step", leave=False)

    def group(self, number: int, groups: int, t: int) -> None:
        if self.by_step:
            if groups > 1:
                self.bar.set_description(f"{self.description} [group {number + 1}/{groups}]")
            self.bar.reset(total=self.total)
            self.bar.update(t)

    def progress(self, t: int, finished: int, running: int, continuing: int) -> None:
        label = f" ({continuing} {self.label})" if continuing else ""
        if self.by_step:
            self.bar.update(min(t, self.total) - self.bar.n)
            self.bar.set_postfix_str(f"running {running} cells{label}", refresh=False)
        else:
            self.bar.update(finished if self.count else 0)
            # A stop rule may keep cells stepping past the budget: say so, and how far they may go.
            bound = f" (at most {self.limit:,})" if self.limit else ""
            step = f"step {t:,}/{self.total:,}" if t <= self.total else \
                f"step {t:,}, past the {self.total:,}-step budget{bound}"
            self.bar.set_postfix_str(f"{self.description}: {step}, {running} running{label}", refresh=False)

    def end(self) -> None:
        if self.by_step and self.bar is not None:
            self.bar.close()


class Checkpoint(Observer):
    """Finished cells handed to ``on_finished(ids, Outcome)`` (a sweep's checkpoint stores them),
    ``between_chunks(snapshot)`` called between chunks (it may save the running cells, or raise
    to stop the run), and ``resume``: a :class:`~nqm.engine.run.Snapshot` of an earlier run of
    the same cells, settings and seed, whose cells continue from its step with its state,
    bit-identical to a run never interrupted (their traces hold only the steps run now)."""

    def __init__(self, on_finished: Callable | None = None, between_chunks: Callable | None = None, resume=None):
        self.on_finished, self.between_chunks, self.resume = on_finished, between_chunks, resume

    def finished(self, ids, part, fetch: Callable) -> None:
        if self.on_finished is not None:
            self.on_finished(ids, part)

    def between(self, snapshot: Callable) -> None:
        if self.between_chunks is not None:
            self.between_chunks(snapshot)


def declared(observers, name: str, default: Any = ()):
    """What the observers declare the chunk computes (``record``, ``summaries``, ``stride``)."""
    values = [getattr(o, name) for o in observers if getattr(o, name) != getattr(Observer, name)]
    if len(values) > 1:
        raise NqmError(f"two observers declare {name}: give one Trace")
    return values[0] if values else default
