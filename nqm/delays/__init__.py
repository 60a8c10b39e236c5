"""Delay processes: where each applied gradient comes from, as registered parts.

At step ``t`` the server applies a gradient computed at the weights of iteration ``t − τ_t`` by
worker ``k_t`` (``w_{s<0} = w_0``). A process turns a seed into the whole schedule ``(τ_t, k_t)``
for ``t = 0 … steps − 1``; it is drawn on the host before a run, keyed by the seed alone and drawn
sequentially, so a cell's delays never depend on its grid, batch, chunking, device count or budget
(a longer budget extends the same schedule). Every cell of a run sees the same schedule (common
random delays, like the common noise).

A process is a small frozen object with

* ``label``: its spec string (``process(label)`` gives it back);
* ``mean``: the long-run mean delay;
* ``workers``: how many workers per-worker optimizers (shifted momentum, DANA, OrMo) see;
* ``pmf()``: ``P(τ = k)``, ``k = 0…K``, when the delays are iid (a constant is a one-hot pmf), else
  ``None`` — what the stability analysis and the exact expected dynamics read;
* ``schedule(seed, steps)``: the ``(τ_t, k_t)`` arrays (int32);
* ``history(delays)``: what the engine must keep to serve those delays (:class:`History`): a ring
  of the last ``slots`` weights, or one snapshot per worker — what a worker fetched last, all that
  the hardware keeps, however old it is.

Families are registered with :func:`register` (one parser each, for the text after ``NAME:``); the
syntax help of the CLI and every entry point read this one registry:
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from nqm import validate
from nqm.delays.registry import History, Family, Process, families, register, syntax
from nqm.delays.constant_delays import Constant, constant
from nqm.delays.iid_delays import Iid, iid
from nqm.delays.worker_pools import Workers, workers
from nqm.errors import NqmError
from nqm.pmfs import gaussian_pmf, uniform_pmf, validate_pmf  # the pmfs of the iid families, by name here too

__all__ = ["Constant", "Family", "History", "Iid", "Process", "Workers", "constant", "coordinate", "families",
           "gaussian_pmf", "identity", "iid", "pmf", "process", "register", "syntax", "uniform_pmf", "validate_pmf",
           "workers"]


def process(spec) -> Process:
    """A delay process from a process, an integer delay or a spec string (``D`` is ``constant:D``).

    Args:
      spec: a process (returned as it is), an integer delay ``D`` (an integral float too), or a
        spec string ``D`` or ``NAME:rest``.

    Returns:
      The process.

    Raises:
      NqmError: ``spec`` is neither, or names no registered family.

    Examples:
      >>> from nqm import delays
      >>> p = delays.process("uniform:1:4")
      >>> p.label, p.mean, p.workers
      ('uniform:1:4', 2.5, 5)
      >>> p.pmf().tolist()
      [0.0, 0.25, 0.25, 0.25, 0.25]
      >>> delay, worker = p.schedule(0, 8)  # seed 0, the first 8 steps
      >>> delay.tolist()
      [1, 3, 4, 1, 1, 1, 4, 2]
      >>> delays.process(3)
      Constant(delay=3)
    """
    if isinstance(spec, (bool, np.bool_)) or not isinstance(spec, (str, int, float, np.integer, np.floating)):
        if all(hasattr(spec, name) for name in ("label", "schedule", "history")):
            return spec
        raise NqmError(f"delay must be an integer or a spec ({syntax()}), got {spec!r}")
    if isinstance(spec, (int, np.integer)) or (isinstance(spec, (float, np.floating)) and float(spec).is_integer()):
        return constant(int(spec))
    text = str(spec).strip()
    if re.fullmatch(r"\d+", text):
        return constant(int(text))
    name, _, rest = text.partition(":")
    family = {f.name: f for f in families()}.get(name)
    if family is None or not rest:
        raise NqmError(f"delay process must be {syntax()}, got {spec!r}")
    return family.parse(rest)


def coordinate(values) -> tuple[np.ndarray, list]:
    """The ``delay`` coordinate of a result or a table, and the processes: integers when every delay
    given is a number (a constant), else every process's label (an integer still selects its
    constant there: :class:`nqm.results.DelayIndex`). Empty or repeated delays are errors.

    Args:
      values: one delay or a sequence of them (integers, spec strings or processes).

    Returns:
      ``(coord, processes)``: the coordinate (int array, or array of labels) and one process
      per entry.

    Raises:
      NqmError: no delay, or a process given twice.
    """

    items = list(values) if isinstance(values, (list, tuple, range, np.ndarray)) else [values]
    if not items:
        raise NqmError("delay is empty: give at least one delay (an integer, or a spec such as uniform:1:8)")
    if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in items):
        coord = validate.coordinates(delay=items)["delay"]
        return coord, [constant(int(d)) for d in coord]
    processes = [process(v) for v in items]
    labels = np.array([p.label for p in processes])
    if np.unique(labels).size != labels.size:
        raise NqmError("delay has repeated processes: give each once")
    return labels, processes


def identity(process: Process) -> str:
    """Everything that defines a process's schedule, exactly (a pmf to the last bit), as text: what
    a checkpoint compares to know that it holds the same delays.

    Args:
      process: the delay process.

    Returns:
      Its dataclass repr (type name and fields), else its label.
    """
    if dataclasses.is_dataclass(process):
        return f"{type(process).__name__}{dataclasses.astuple(process)!r}"
    return str(process.label)


def pmf(spec) -> np.ndarray | None:
    """The delay pmf of a process (``None`` when its delays are not iid, e.g. a worker pool).

    Args:
      spec: anything :func:`process` accepts.

    Returns:
      ``P(τ = k)``, ``k = 0…K``, or ``None``.
    """
    return process(spec).pmf()


__doc__ += "\n" + "\n".join(f"* ``{f.syntax}`` — {f.help}." for f in families()) + "\n"
