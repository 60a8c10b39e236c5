"""A sweep against its own method's thresholds: the line a heatmap overlays, and how often the
cells agree with it. Never another method's: a method that is not linear has no derived threshold
(give a simulated table instead, :func:`nqm.search.simulated.simulated_threshold`)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from nqm import delays
from nqm.conventions import family
from nqm.errors import NqmError
from nqm.optimizers import make
from nqm.thresholds import derived
from nqm.results import panel_keys
from nqm.thresholds.polynomials import table_line
from nqm.status import DIVERGED


def panel_threshold(ds: xr.Dataset, key: dict, momenta, table: xr.Dataset | None = None) -> np.ndarray | None:
    """``η*(m)`` at ``momenta`` for the panel ``key`` (its delay and method hyperparameters) of the
    result ``ds``: from ``table`` (a threshold table over delay × momentum × …, interpolated in m)
    or derived for the result's own method; ``None`` where there is none (a method that is not
    linear, a worker pool).

    Args:
      ds: the result (``method``, ``dampening`` and ``lam_max`` attributes).
      key: the panel's ``{dimension: value}`` (:func:`nqm.results.panel_keys`).
      momenta: the momenta to evaluate ``η*`` at.
      table: a threshold table, or ``None`` to derive the threshold.

    Returns:
      ``η*`` (a learning rate) per momentum, or ``None``.
    """
    momenta = np.atleast_1d(np.asarray(momenta, float))
    if table is not None:
        x = table_line(table, key, momenta)
    else:
        method = ds.attrs.get("method")
        if method is None or not make(family(method)).linear or delays.pmf(key.get("delay", 0)) is None:
            return None
        # The noise and the batch size change no threshold: the method's own hyperparameters do.
        extra = {k: float(v) for k, v in key.items() if k not in ("delay", "noise", "batch_size", "seed")}
        x = derived.threshold(method, momentum=momenta, delay=delays.process(key.get("delay", 0)).label,
                             dampening=bool(ds.attrs.get("dampening", 0)), **extra)
    return np.asarray(x, float) / float(ds.attrs["lam_max"])


def agreement(ds: xr.Dataset, band: float = 0.03, table: xr.Dataset | None = None) -> dict:
    """How often the cells agree with the stability threshold of their method.

    For every cell with ``lr`` outside ``η*(D, m)·[1 − band, 1 + band]`` the threshold predicts
    convergence (below) or divergence (above); a cell agrees when its status is not −1 below, and
    −1 above. ``η*`` is derived from the result's own method (:func:`panel_threshold`; its mean
    dynamics under iid delays), or read from ``table``; panels without one are not compared.

    Args:
      ds: a sweep result.
      band: the relative half-width of the band around ``η*`` left out.
      table: a threshold table, or ``None`` to derive the threshold.

    Returns:
      ``{"fraction": agreeing / compared, "compared": …, "in_band": …, "stable": …, "unstable": …}``.

    Raises:
      NqmError: no table and the method is not linear.
    """
    if table is None:
        method = ds.attrs.get("method")
        if method is None or not make(family(method)).linear:
            raise NqmError(f"method {method!r} is not linear, so it has no derived threshold; pass a threshold "
                           "table (nqm threshold --simulate ... --out table.nc)")
    compared = agree = stable_count = unstable_count = 0
    for key in panel_keys(ds.isel(seed=0, drop=True) if "seed" in ds.dims else ds):
        eta = panel_threshold(ds, key, ds.momentum.values, table)
        if eta is None:
            continue
        panel = ds.sel(key)
        ratio = panel.lr / xr.DataArray(eta, coords={"momentum": ds.momentum})
        stable, unstable = (ratio < 1 - band).broadcast_like(panel.status), (ratio > 1 + band).broadcast_like(panel.status)
        diverged = panel.status == DIVERGED
        compared += int((stable | unstable).sum())
        agree += int(((stable & ~diverged) | (unstable & diverged)).sum())
        stable_count, unstable_count = stable_count + int(stable.sum()), unstable_count + int(unstable.sum())
    return {"fraction": agree / compared if compared else float("nan"), "compared": compared,
            "in_band": int(ds.status.size - compared), "stable": stable_count, "unstable": unstable_count}
