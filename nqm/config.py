"""How a simulation runs — :class:`RunConfig` — and the checks of its settings.

Plain data, no JAX: the engine runs by it, the exact mode and the searches check their settings
with it, and the CLI derives its run options and their defaults from its fields.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nqm.errors import NqmError
from nqm.validate import BOUNDS, MAX_STEPS, count, number


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How to run a simulation. ``target``, ``max_steps``, ``diverge_factor``, ``independent_noise``
    and ``x64`` change a cell's result; the others only change how fast it comes — except
    ``block_cells``, which may change the last bits when set by hand (XLA's float32 reductions round
    a block of 2 cells differently from one of 4 or 8 below N ≈ 8000; left automatic, the block
    depends on N alone).

    Attributes:
      target: stop a cell once ``L(w_t) < target``.
      max_steps: step budget per cell.
      diverge_factor: a cell diverged once ``L(w_t)`` is not finite or exceeds
        ``diverge_factor · L(w₀)``.
      independent_noise: draw the noise per cell instead of once per step for all cells.
      x64: simulate in float64 (default float32).
      chunk_steps: steps per jitted call; progress, compaction and checkpoints happen between chunks
        (``None``: 1,000, or up to 16 times as many for a small problem, see
        :func:`nqm.engine.layout.chunk_length`).
      block_cells: cells a device advances together (``None``: fit a CPU cache block; the whole
        device share on accelerators).
      batch_cells: cells per jitted call (``None``: automatic). Rounded to whole blocks per device.
      compaction: repack running cells into fewer batches between chunks.
      memory_budget: bytes of simulation state held at once; larger grids run in groups
        (``None``: half of the accelerators' memory, or 4 GiB on CPU).
      devices: how many devices to shard over (``None``: all of the default backend).
      progress: show a tqdm progress bar.
      first_passage: count a cell that reached the target as converged (status 1) even if it does
        not stay there: the AB paper's literal definition. By default status 1 means *settled* and a
        run that reaches the target without staying is 2, transient (:mod:`nqm.settling`).
      skip_decided: do not run the cells known before running not to settle (status −2,
        :data:`nqm.status.SKIPPED`): a linear method's exact test fails (unstable at an eigenvalue,
        or a steady state at or above the target), or a noiseless run ends as an unstable linear
        method near the minimum (:meth:`nqm.settling.SettledTest.cannot_settle`). Their budget is saved; a
        settled cell's T and every settled cell are the same as without it. Not with
        ``first_passage`` (a cell that cannot settle may still pass the target).
      work_limit: the most steps a cell takes, its settled test included (the run past its first
        passage and any floor probe), as a multiple of ``max_steps`` (of 1,000 steps for a smaller
        budget: a settled test's window runs at least 1,000 steps past T); at least 1. A cell whose
        test would need more is status 3, *undecided* (:data:`nqm.status.UNDECIDED`). A result records it.
    """

    target: float = 0.01
    max_steps: int = 100_000
    diverge_factor: float = 1e6
    independent_noise: bool = False
    x64: bool = False
    chunk_steps: int | None = None
    block_cells: int | None = None
    batch_cells: int | None = None
    compaction: bool = True
    memory_budget: float | None = None
    devices: int | None = None
    progress: bool = True
    first_passage: bool = False
    skip_decided: bool = False
    work_limit: float = 16.0

    RESULT_FIELDS = ("target", "max_steps", "diverge_factor", "independent_noise", "x64", "first_passage",
                     "skip_decided", "work_limit")


_FLAGS = ("independent_noise", "x64", "compaction", "progress", "first_passage", "skip_decided")

RUN_OPTIONS = tuple(f.name for f in dataclasses.fields(RunConfig))  # the settings of a run, by name


def checked_config(**settings) -> RunConfig:
    """A :class:`RunConfig` from settings checked one by one (each of its type: a string, a float
    count or a NaN is one error line, never a traceback later).

    Args:
      settings: the fields of :class:`RunConfig`, by name.

    Returns:
      The checked configuration.

    Raises:
      NqmError: a setting of the wrong type or out of range.
    """
    config = RunConfig(**settings)
    target = number(config.target, "target")
    if not (np.isfinite(target) and target > 0):
        raise NqmError(f"target must be a number > 0, got {config.target}")
    counts = {"max_steps": count(config.max_steps, "max_steps", high=MAX_STEPS)}
    if config.chunk_steps is not None:
        counts["chunk_steps"] = count(config.chunk_steps, "chunk_steps", high=MAX_STEPS)
    for name in ("devices", "block_cells", "batch_cells"):
        if getattr(config, name) is not None:
            counts[name] = count(getattr(config, name), name)
    budget = config.memory_budget
    if budget is not None and not (np.isfinite(number(budget, "memory_budget")) and budget > 0):
        raise NqmError(f"memory_budget must be a number of bytes > 0, got {budget}")
    factor = number(config.diverge_factor, "diverge_factor")
    if not (np.isfinite(factor) and factor > 1):
        raise NqmError(f"diverge_factor must be a number > 1, got {config.diverge_factor}")
    for name in _FLAGS:
        if not isinstance(getattr(config, name), (bool, np.bool_)):
            raise NqmError(f"{name} must be True or False, got {getattr(config, name)!r}")
    limit = number(config.work_limit, "work_limit")
    if not (np.isfinite(limit) and 1 <= limit <= BOUNDS["work_limit"]):
        raise NqmError(f"work_limit must be a number between 1 and {BOUNDS['work_limit']:,} (a multiple of max_steps), "
                       f"got {config.work_limit}")
    if config.skip_decided and config.first_passage:
        raise NqmError("skip_decided needs the settled definition: a cell that cannot settle may still pass the "
                       "target, which first_passage counts; drop one of the two")
    return dataclasses.replace(config, target=target, diverge_factor=factor, work_limit=limit, **counts)
