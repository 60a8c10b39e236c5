"""What a cell's result means, shared by the engine, results and figures (no JAX here, so that
reading and plotting a saved result never import the engine)."""

from __future__ import annotations

import numpy as np

REACHED, BUDGET, DIVERGED = 1, 0, -1
RUNNING = 2  # a cell still running: only in checkpoints and inside the engine, never in a result
MEANING = "1: reached target, 0: step budget exhausted, -1: diverged"


def t_star(ds, percentile: float = 1.0) -> float:
    """``T*``: the ``percentile``-th percentile of T over the cells that reached the target,
    linearly interpolated between cells (so it need not be a whole step; NaN if none reached)."""
    steps = np.asarray(ds.steps.values)[np.asarray(ds.status.values) == REACHED]
    return float(np.percentile(steps, percentile)) if steps.size else float("nan")


def format_t_star(value: float) -> str:
    """T* as every summary and figure prints it: one decimal (it is interpolated), or why not."""
    return f"T* = {value:,.1f}" if np.isfinite(value) else "no cell reached the target"


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")
