"""What a sweep says, per panel, as a table: T*, the best cell, the converged area — and how far
to trust them (their spread over seeds and over tiny learning-rate perturbations).

A *panel* is one lr × momentum grid: one value of every other dimension of the result (delay,
noise, the method's hyperparameters, seed).
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import xarray as xr

from nqm import validate
from nqm.errors import NqmError
from nqm.results import GRID, panels
from nqm.status import REACHED, t_star


def summarize(ds: xr.Dataset) -> xr.Dataset:
    """Per panel: ``t_star`` (as :func:`nqm.sweeps.t_star`), the fastest cell (``best_lr``,
    ``best_momentum``, ``best_steps``), ``converged`` (cells that reached the target), ``cells`` and
    ``converged_fraction``. NaN / 0 where no cell converged."""
    if not {"steps", "status"} <= set(ds) or not set(GRID) <= set(ds.steps.dims):
        raise NqmError("a summary needs a sweep result with steps and status over lr and momentum")
    dims = panels(ds)
    shape = tuple(ds.sizes[d] for d in dims)
    out = {name: np.full(shape, np.nan) for name in ("t_star", "best_lr", "best_momentum", "best_steps")}
    converged = np.zeros(shape, np.int64)
    for index in itertools.product(*(range(n) for n in shape)):
        panel = ds.isel(dict(zip(dims, index))).transpose(*GRID)
        reached = panel.status.values == REACHED
        converged[index] = reached.sum()
        if reached.any():
            steps = np.where(reached, panel.steps.values.astype(float), np.inf)
            m, lr = np.unravel_index(np.argmin(steps), steps.shape)
            out["t_star"][index] = t_star(panel)
            out["best_lr"][index], out["best_momentum"][index] = panel.lr.values[lr], panel.momentum.values[m]
            out["best_steps"][index] = steps[m, lr]
    cells = ds.sizes["lr"] * ds.sizes["momentum"]
    data = {name: (dims, values) for name, values in out.items()}
    data.update(converged=(dims, converged), converged_fraction=(dims, converged / cells))
    result = xr.Dataset(data, coords={d: ds[d] for d in dims}, attrs=dict(ds.attrs, cells_per_panel=cells))
    result.t_star.attrs["long_name"] = "T*: 1st percentile of T over the converged cells (interpolated)"
    return result


def spread(table: xr.Dataset, over=("seed", "perturbation")) -> xr.Dataset:
    """Median, min and max of ``t_star`` and ``converged`` over the dimensions ``over`` (those present)."""
    _check_table(table, "spread", ("t_star", "converged"))
    dims = [d for d in over if d in table.dims]
    if not dims:
        raise NqmError(f"nothing to spread over: the table has none of {', '.join(over)}")
    out = {}
    for name in ("t_star", "converged"):
        x = table[name]
        out.update({f"{name}_median": x.median(dims), f"{name}_min": x.min(dims), f"{name}_max": x.max(dims)})
    return xr.Dataset(out, attrs={"spread_over": ", ".join(dims)})


def robustness(method: str = "sgdm", *, perturbations=None, seed=(0, 1, 2), **sweep_kwargs) -> xr.Dataset:
    """How much to trust a T*: the same sweep re-run with every learning rate multiplied by
    ``1 + ε`` for each ``ε`` in ``perturbations`` and over ``seed``; per panel, the spread
    (median / min / max) of T* and of the converged area (see :func:`spread`), with the full table.

    ``perturbations`` default to ``0, ±1e-15, ±1e-12`` in float64 (``x64=True``) and to
    ``0, ±1.2e-7, ±1e-6`` in float32, whose resolution (1.2e-7) hides anything smaller. Chaotic
    cells (e.g. element-wise AB) change T under perturbations far below anything a user would
    call a different setting; a well-conditioned panel shows no spread at all.
    """
    from nqm.sweeps import sweep

    if perturbations is None:
        small, large = (1e-15, 1e-12) if sweep_kwargs.get("x64") else (1.2e-7, 1e-6)
        perturbations = (0.0, -small, small, -large, large)
    if "lr" not in sweep_kwargs:
        raise NqmError("robustness needs lr: the learning rates of the sweep it re-runs (and momentum, …)")
    lr = validate.coordinates(lr=sweep_kwargs.pop("lr"), distinct=False)["lr"]
    tables = []
    for eps in perturbations:
        ds = sweep(method, lr=lr * (1.0 + eps), seed=seed, **sweep_kwargs).assign_coords(lr=lr)
        tables.append(summarize(ds).expand_dims(perturbation=[float(eps)]))
    table = xr.concat(tables, "perturbation")
    return xr.merge([spread(table), table], combine_attrs="override")


def to_csv(table: xr.Dataset, path: str | os.PathLike) -> None:
    """One row per panel, one column per dimension and value (written atomically)."""
    from nqm.io import atomic_write

    _check_table(table, "to_csv")
    frame = table.to_dataframe().reset_index()
    with atomic_write(path, "w") as f:
        frame.to_csv(f, index=False, float_format="%.10g")


def format_table(table: xr.Dataset) -> str:
    """The summary as aligned text, one line per panel."""
    _check_table(table, "format_table")
    frame = table[list(_COLUMNS)]
    return frame.to_dataframe().to_string(float_format=lambda x: f"{x:.4g}")


_COLUMNS = ("t_star", "best_lr", "best_momentum", "best_steps", "converged", "converged_fraction")


def _check_table(table, what: str, columns=_COLUMNS) -> None:
    """``table`` must be what :func:`summarize` returns (with ``columns`` at least)."""
    missing = [c for c in columns if c not in table] if isinstance(table, xr.Dataset) else list(columns)
    if missing:
        raise NqmError(f"{what} takes the table of nqm.summary.summarize(result); this has no {missing[0]}")
