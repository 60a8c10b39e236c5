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
from nqm.io import atomic_write
from nqm.errors import NqmError
from nqm.results import GRID, combine_seeds, grid, panels
from nqm.status import REACHED, TRANSIENT, UNDECIDED, t_star


COLUMNS = {  # what each column of a summary is (the table's header says it too)
    "t_star": "T*: 1st percentile of T over the panel's converged cells (interpolated; what figures title)",
    "best_steps": "T of the fastest cell of the panel (the ★ of a heatmap); T* is at least this",
    "best_lr": "learning rate of the fastest cell",
    "best_momentum": "momentum of the fastest cell",
    "converged": "cells that settled below the target (status 1; under --first-passage: that reached it)",
    "converged_fraction": "converged / cells of the panel",
    "transient": "cells that reached the target and did not stay (status 2; none under --first-passage)",
    "undecided": "cells that reached the target with no verdict within the work limit (status 3)",
}


def summarize(ds: xr.Dataset, by_seed: bool = False) -> xr.Dataset:
    """Per panel (one value of every dimension but lr and momentum): the :data:`COLUMNS`. NaN / 0
    where no cell converged.

    Several seeds are combined as the heatmaps combine them (:func:`nqm.results.combine_seeds`: a
    cell converged when every seed did, with the median T), so a summary, a figure's titles and the
    sweep's closing lines give the same T*; ``by_seed=True`` keeps one row per seed instead (what
    :func:`spread` needs).

    Args:
      ds: a sweep result (``steps`` and ``status`` over lr and momentum at least).
      by_seed: keep the seed dimension rather than combining the seeds.

    Returns:
      The table: one variable per column, over the panel dimensions.

    Raises:
      NqmError: ``ds`` is not such a result.

    Examples:
      >>> import nqm
      >>> from nqm import summary
      >>> ds = nqm.sweep("sgdm", lr=[0.1, 0.5, 2.5], momentum=[0.0, 0.5], problem=nqm.zhang(10),
      ...                max_steps=500, progress=False)
      >>> table = summary.summarize(ds)
      >>> [table[c].item() for c in ("best_steps", "best_lr", "best_momentum", "converged")]
      [7.0, 2.5, 0.5, 5]
      >>> round(table.t_star.item(), 2)
      7.24
    """
    ds = grid(ds)  # the schema nqm.save checks: what it writes is summarised
    ds = ds if by_seed else combine_seeds(ds)
    dims = panels(ds)
    shape = tuple(ds.sizes[d] for d in dims)
    out = {name: np.full(shape, np.nan) for name in ("t_star", "best_lr", "best_momentum", "best_steps")}
    counts = {name: np.zeros(shape, np.int64) for name in ("converged", "transient", "undecided")}
    for index in itertools.product(*(range(n) for n in shape)):
        panel = ds.isel(dict(zip(dims, index))).transpose(*GRID)
        reached = panel.status.values == REACHED
        for name, code in (("converged", REACHED), ("transient", TRANSIENT), ("undecided", UNDECIDED)):
            counts[name][index] = (panel.status.values == code).sum()
        if reached.any():
            steps = np.where(reached, panel.steps.values.astype(float), np.inf)
            m, lr = np.unravel_index(np.argmin(steps), steps.shape)
            out["t_star"][index] = t_star(panel)
            out["best_lr"][index], out["best_momentum"][index] = panel.lr.values[lr], panel.momentum.values[m]
            out["best_steps"][index] = steps[m, lr]
    cells = ds.sizes["lr"] * ds.sizes["momentum"]
    data = {name: (dims, values) for name, values in out.items()}
    data.update(converged=(dims, counts["converged"]), converged_fraction=(dims, counts["converged"] / cells),
                transient=(dims, counts["transient"]), undecided=(dims, counts["undecided"]))
    result = xr.Dataset(data, coords={d: ds[d] for d in dims}, attrs=dict(ds.attrs, cells_per_panel=cells))
    for name, text in COLUMNS.items():
        result[name].attrs["long_name"] = text
    return result


def spread(table: xr.Dataset, over=("seed", "perturbation")) -> xr.Dataset:
    """Median, min and max of ``t_star`` and ``converged`` over the dimensions ``over`` (those present).

    Args:
      table: a summary with ``t_star`` and ``converged``, by seed and/or perturbation.
      over: the dimensions to spread over.

    Returns:
      ``t_star_median``, ``t_star_min``, ``t_star_max`` and the same for ``converged``.

    Raises:
      NqmError: the table has none of ``over``.

    Examples:
      >>> import nqm
      >>> from nqm import summary
      >>> ds = nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=[0.0, 0.5], noise=0.05, seed=[0, 1, 2],
      ...                problem=nqm.zhang(10), max_steps=500, progress=False)
      >>> s = summary.spread(summary.summarize(ds, by_seed=True))
      >>> s.attrs["spread_over"], s.converged_min.item(), s.converged_max.item()
      ('seed', 4, 4)
    """
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

    Args:
      method: the optimizer's name.
      perturbations: the relative lr perturbations ``ε`` (default above).
      seed: the seeds of every re-run.
      sweep_kwargs: the arguments of :func:`nqm.sweeps.sweep`; ``lr`` is required.

    Returns:
      The spread merged with the full table (dimensions perturbation and seed).

    Raises:
      NqmError: no ``lr`` given.

    Examples:
      >>> import nqm
      >>> from nqm import summary
      >>> r = summary.robustness("sgdm", lr=[0.1, 0.5], momentum=[0.0, 0.5], seed=[0, 1],
      ...                        problem=nqm.zhang(10), max_steps=500, progress=False)
      >>> dict(r.sizes)["perturbation"], r.attrs["spread_over"]
      (5, 'seed, perturbation')
      >>> r.t_star_min.item() == r.t_star_max.item()  # noiseless and well conditioned: no spread
      True
    """
    from nqm.sweeps import sweep  # a layer above, reached only where robustness re-runs sweeps

    if perturbations is None:
        small, large = (1e-15, 1e-12) if sweep_kwargs.get("x64") else (1.2e-7, 1e-6)
        perturbations = (0.0, -small, small, -large, large)
    if "lr" not in sweep_kwargs:
        raise NqmError("robustness needs lr: the learning rates of the sweep it re-runs (and momentum, …)")
    lr = validate.coordinates(lr=sweep_kwargs.pop("lr"), distinct=False)["lr"]
    tables = []
    for eps in perturbations:
        ds = sweep(method, lr=lr * (1.0 + eps), seed=seed, **sweep_kwargs).assign_coords(lr=lr)
        tables.append(summarize(ds, by_seed=True).expand_dims(perturbation=[float(eps)]))
    table = xr.concat(tables, "perturbation")
    return xr.merge([spread(table), table], combine_attrs="override")


def to_csv(table: xr.Dataset, path: str | os.PathLike) -> None:
    """One row per panel, one column per dimension and value (written atomically).

    Args:
      table: a summary, as :func:`summarize` returns it.
      path: the CSV file to write.
    """
    _check_table(table, "to_csv")
    frame = _frame(table).reset_index()
    with atomic_write(path, "w") as f:
        frame.to_csv(f, index=False, float_format="%.10g")


def format_table(table: xr.Dataset) -> str:
    """The summary as aligned text, one line per panel, under a header that says what each column is.

    Args:
      table: a summary, as :func:`summarize` returns it.

    Returns:
      The text, a legend then the table.
    """
    _check_table(table, "format_table")
    columns = [c for c in COLUMNS if c in table]  # a table written before the transient and undecided counts
    frame = _frame(table[columns])
    legend = "\n".join(f"  {name}: {COLUMNS[name]}" for name in columns)
    return f"per panel ({table.attrs.get('cells_per_panel', '?')} cells each):\n{legend}\n" + \
        frame.to_string(float_format=lambda x: f"{x:.4g}")


def _frame(table: xr.Dataset):
    """The table as a DataFrame, one row per panel (a result of one panel has no panel dimension:
    its one row is labelled ``panel``)."""
    if not table.t_star.dims:
        table = table.expand_dims(panel=["all"])
    return table.to_dataframe()


def _check_table(table, what: str, columns=tuple(COLUMNS)[:6]) -> None:
    """``table`` must be what :func:`summarize` returns (with ``columns`` at least)."""
    missing = [c for c in columns if c not in table] if isinstance(table, xr.Dataset) else list(columns)
    if missing:
        raise NqmError(f"{what} takes the table of nqm.summary.summarize(result); this has no {missing[0]}")
