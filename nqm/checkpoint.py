"""Checkpoints of a sweep: finished cells in ``OUT.partial`` and the running cells' state beside
it (``OUT.partial.cells.npz``), so that an interrupted sweep resumes mid-cell, bit-identical to an
uninterrupted run. On SIGINT/SIGTERM the sweep saves at the next chunk boundary and stops.

A search (:func:`nqm.best`) keeps its result so far after every round (:func:`resume_search`):
run again, it replays the rounds kept without evaluating them.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import signal
import threading
import time

import jax
import numpy as np
import xarray as xr

from nqm import engine, results
from nqm.errors import NqmError
from nqm.io import atomic_write, check_writable, checksum, discard, load, save


class StaleCheckpoint(NqmError):
    """A checkpoint that cannot be resumed: of another sweep, damaged, or unreadable. ``reason``
    says why; the message says how to start over (the CLI says it with ``--restart``)."""

    def __init__(self, reason: str, path):
        self.reason, self.path = reason, os.fspath(path)
        super().__init__(f"{reason}; to start over pass restart=True, delete {self.path} (and {self.path}.cells.npz) "
                         "or pass another checkpoint path")


def checked(checkpoint, restart) -> None:
    """Refuse, before any work, a checkpoint that is not a file path, or a ``restart`` that is not a
    bool."""
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise NqmError(f"checkpoint must be a file path, got {checkpoint!r}")
    if checkpoint is not None and os.path.isdir(checkpoint):
        raise NqmError(f"checkpoint {os.fspath(checkpoint)} is a directory; give the path of a file (e.g. sweep.partial)")
    if not isinstance(restart, (bool, np.bool_)):
        raise NqmError(f"restart must be True or False, got {restart!r}")


_BEFORE_WORK = contextvars.ContextVar("nqm_before_work", default=None)


@contextlib.contextmanager
def before_work(check):
    """While inside, a sweep or a search with a checkpoint calls ``check(identity)`` once it has
    checked its arguments and before it computes: ``identity`` is the empty result the sweep fills
    (its grid and attributes), or an empty Dataset whose attributes are the search's settings.
    Where the command line refuses, before any work, to replace a result of another computation.

    Args:
      check: a function of the identity; what it raises ends the computation.

    Returns:
      A context manager.
    """
    token = _BEFORE_WORK.set(check)
    try:
        yield
    finally:
        _BEFORE_WORK.reset(token)


def _announce(identity: xr.Dataset) -> None:
    check = _BEFORE_WORK.get()
    if check is not None:
        check(identity)


def resume(result: xr.Dataset, path) -> xr.Dataset:
    """The checkpoint at ``path`` if it is of the same sweep as ``result`` — the same grid and every
    setting that changes a result (:func:`nqm.results.difference`) — with its arrays intact
    (checksum), else :class:`StaleCheckpoint`; ``result`` itself when there is none yet."""
    if not os.path.exists(path):
        check_writable(path)
        _announce(result)
        return result
    saved = _load(path)
    different = results.difference(saved, result)
    if different:
        raise StaleCheckpoint(f"checkpoint {os.fspath(path)} is from a different sweep: {different}", path)
    _announce(result)
    return saved.transpose(*result.steps.dims)


def resume_search(settings: dict, path) -> xr.Dataset | None:
    """The points a search kept at ``path`` (the search's result so far) if every one of its
    ``settings`` (the attributes that identify it: every setting that changes a number) is the same
    there, with its arrays intact, else :class:`StaleCheckpoint`; ``None`` when there is none yet."""
    if not os.path.exists(path):
        check_writable(path)
        _announce(xr.Dataset(attrs=settings))
        return None
    saved = _load(path)
    kept = {k: saved.attrs[k] for k in settings if k in saved.attrs}
    different = results.difference(xr.Dataset(attrs=kept), xr.Dataset(attrs=settings))
    if different:
        raise StaleCheckpoint(f"checkpoint {os.fspath(path)} is from a different search: {different}", path)
    _announce(xr.Dataset(attrs=settings))
    return saved


def _load(path) -> xr.Dataset:
    try:
        return load(path)
    except NqmError as exc:
        raise StaleCheckpoint(f"checkpoint {os.fspath(path)} is damaged ({exc})", path) from None


def discard_checkpoint(path) -> None:
    """Remove the checkpoint at ``path`` and its running cells (to start over)."""
    for stale in (os.fspath(path), os.fspath(path) + ".cells.npz"):
        if os.path.isdir(stale) or not discard(stale):
            raise NqmError(f"cannot remove the checkpoint {stale} to start over; remove it yourself")


class Checkpointer:
    """Writes finished cells into the result, and the result to disk every so often, with the
    running cells' state (``<path>.cells.npz``) so that a resumed sweep continues mid-cell. On
    SIGINT/SIGTERM it saves at the next chunk boundary and stops (a second signal stops at once)."""

    def __init__(self, result: xr.Dataset, path, every: float):
        self.result, self.path, self.every = result, path, every
        # The first save comes a couple of seconds in, not only after `every`.
        self.last, self.dirty, self.stop = time.monotonic() - max(0.0, every - 2.0), False, False
        self.unsaved = True  # finished cells not yet written (the result itself, until its first save)
        self.identity = results.fingerprint(result)
        self.running = {} if path is None else _load_running(path, self.identity)
        self.failed = None  # why the last checkpoint could not be written, if it could not

    @contextlib.contextmanager
    def interruptible(self):
        if self.path is None or threading.current_thread() is not threading.main_thread():
            yield
            return
        signals = (signal.SIGINT, signal.SIGTERM)
        previous = [signal.getsignal(s) for s in signals]

        def request_stop(signum, frame):
            if self.stop:  # a second signal: stop now
                raise KeyboardInterrupt
            self.stop = True

        for s in signals:
            signal.signal(s, request_stop)
        try:
            yield
        finally:
            for s, handler in zip(signals, previous):
                signal.signal(s, handler)
        if self.stop:
            raise KeyboardInterrupt

    def resume_point(self, key, todo) -> engine.Snapshot | None:
        """The saved running cells of part ``key`` that are still to do, as positions in ``todo``."""
        if key not in self.running:
            return None
        t, where, leaves = self.running[key]
        keep = np.isin(where, todo)  # cells that finished after the snapshot are done already
        return engine.Snapshot(t, np.searchsorted(todo, where[keep]), [x[keep] for x in leaves])

    def between_chunks(self, key, todo, snapshot):
        if self.path is None or not (self.stop or time.monotonic() - self.last >= self.every):
            return
        snap = snapshot()
        self.running[key] = (snap.t, todo[snap.index], jax.tree.leaves(snap.cells))
        self.dirty = True
        self.flush(force=True)
        if self.stop:
            raise KeyboardInterrupt

    def done(self, key):
        self.running.pop(key, None)

    def nested(self, prefix: str, identity: dict, observers: tuple = ()) -> "NestedRun":
        """A run started inside part ``prefix`` (a floor probe) of the cells whose arrays are
        ``identity``, kept under ``prefix|`` and a digest of them.

        Args:
          prefix: the part's key and what the run is.
          identity: the arrays that make the run what it is (its cells' values, its spans).
          observers: more observers of the run (its progress in the sweep's bar).

        Returns:
          The run's keeper: call it as :class:`NestedRun` says.
        """
        return NestedRun(self, f"{prefix}|{checksum(identity)[-16:]}", observers)

    def store(self, cell_dims, index, delay, seed, outcome: engine.Outcome):
        full = {"delay": np.full(len(outcome.steps), list(self.result.delay.values).index(delay)),
                "seed": np.full(len(outcome.steps), list(self.result.seed.values).index(seed))}
        full.update(zip(cell_dims, index))
        where = tuple(full[d] for d in self.result.steps.dims)
        for name in ("steps", "status", "loss"):
            self.result[name].values[where] = getattr(outcome, name)
        self.dirty = self.unsaved = True
        self.flush(force=False)

    def flush(self, force: bool):
        if self.path is None or not self.dirty:
            return
        if force or time.monotonic() - self.last >= self.every:
            try:
                if self.unsaved:  # the result only when cells finished since it was written (a netCDF costs)
                    save(self.result, self.path)
                    self.unsaved = False
                _save_running(self.running, self.path, self.identity)
                self.failed = None
            except NqmError as exc:  # keep computing: the cells are in memory, the caller saves them
                self.failed = str(exc)
            self.last, self.dirty = time.monotonic(), False


class NestedRun:
    """A run started from inside a sweep's part — the settled test's floor probe of cells that
    finished there — kept in the sweep's checkpoint under ``key``: its finished cells' results (and
    what its stop rule kept of them) and its running cells' state. A resumed sweep repeats its part
    up to the same call with the same cells (bit-identical), and this run then goes on from where
    it stopped, not from its start."""

    FIELDS = ("steps", "status", "loss")

    def __init__(self, writer: Checkpointer, key: str, observers: tuple = ()):
        self.writer, self.key, self.done_key, self.observers = writer, key, f"{key}|finished", tuple(observers)

    def __call__(self, run, cells: int) -> engine.Outcome:
        """``run(todo, observers)`` runs the cells ``todo`` (of ``0 … cells − 1``) with ``observers``
        added; returns every cell's outcome, in order."""
        _, where, saved = self.writer.running.get(self.done_key, (0, np.zeros(0, np.int64), []))
        todo = np.setdiff1d(np.arange(cells), where)
        done = [(where, saved)] if where.size else []

        def finished(ids, part):  # kept with the next snapshot of the running cells
            done.append((todo[ids], [getattr(part, f) for f in self.FIELDS] + jax.tree.leaves(part.stop)))
            self.writer.running[self.done_key] = (0, np.concatenate([w for w, _ in done]),
                                                  [np.concatenate(x) for x in zip(*(v for _, v in done))])

        kept = engine.Checkpoint(finished, functools.partial(self.writer.between_chunks, self.key, todo),
                                 self.writer.resume_point(self.key, todo))
        out = run(todo, [kept, *self.observers])
        self.writer.done(self.key)
        self.writer.done(self.done_key)
        if not where.size:  # every cell ran now, in order
            return out
        fields = [np.asarray(getattr(out, f)) for f in self.FIELDS] + [np.asarray(x) for x in jax.tree.leaves(out.stop)]
        merged = []
        for now, earlier in zip(fields, saved):
            whole = np.empty((cells,) + now.shape[1:], now.dtype)
            whole[todo], whole[where] = now, earlier
            merged.append(whole)
        stop = jax.tree.unflatten(jax.tree.structure(out.stop), merged[len(self.FIELDS):])
        return out._replace(**dict(zip(self.FIELDS, merged)), stop=stop)


def unkept(identity: dict):
    """The keeper of a run not kept anywhere (no checkpoint): it runs every cell.

    Args:
      identity: what the run is (unused).

    Returns:
      ``keeper(run, cells)``, as :class:`NestedRun`.
    """
    return lambda run, cells: run(np.arange(cells), ())


def _save_running(running: dict, path, identity: str) -> None:
    """The running cells' state beside the checkpoint, written atomically (removed when none), with
    the sweep's identity and a checksum of its arrays."""
    target = os.fspath(path) + ".cells.npz"
    if not running:
        if not discard(target):
            raise NqmError(f"cannot remove {target}")
        return
    arrays = {"keys": np.array(list(running))}
    for i, (t, where, leaves) in enumerate(running.values()):
        arrays.update({f"{i}_t": np.asarray(t), f"{i}_where": where, **{f"{i}_{j}": x for j, x in enumerate(leaves)}})
    arrays["identity"] = np.array(identity)
    arrays["checksum"] = np.array(checksum(arrays))
    with atomic_write(target, "wb") as f:
        np.savez(f, **arrays)


def _load_running(path, identity: str) -> dict:
    target = os.fspath(path) + ".cells.npz"
    if not (os.path.exists(target) and os.path.exists(path)):
        return {}
    try:
        with np.load(target) as f:
            arrays = {name: f[name] for name in f.files}
    except Exception:  # a damaged file: numpy and zipfile raise many types
        raise StaleCheckpoint(f"cannot read the checkpoint's running cells {target}", path) from None
    saved = str(arrays.pop("checksum", ""))
    if saved != checksum(arrays):
        raise StaleCheckpoint(f"the checkpoint's running cells {target} are damaged (their checksum does not "
                              "match)", path)
    if str(arrays.pop("identity")) != identity:
        raise StaleCheckpoint(f"the checkpoint's running cells {target} are from a different sweep", path)
    running = {}
    for i, key in enumerate(arrays["keys"]):
        count = sum(1 for name in arrays if name.startswith(f"{i}_") and name[len(f"{i}_"):].isdigit())
        running[str(key)] = (int(arrays[f"{i}_t"]), arrays[f"{i}_where"], [arrays[f"{i}_{j}"] for j in range(count)])
    return running
