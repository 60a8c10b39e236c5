"""Steps against batch size (:func:`nqm.search.scaling.scaling`): the curve, perfect scaling from its
anchor and the critical batch size."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr


def plot_scaling(*results: xr.Dataset, labels: list[str] | None = None, ax=None):
    """Best steps against batch size, log-log: each result's curve (seed min–max as error bars where
    it has seeds), its perfect scaling (dotted) and its critical batch size (a marker on the curve).

    Args:
      results: results of :func:`nqm.search.scaling.scaling`.
      labels: one legend label per result (default: each result's method and delay).
      ax: the axes to draw on (default: a new figure's).

    Returns:
      The figure.
    """
    fig, ax = (plt.subplots(figsize=(6, 4.2), layout="constrained") if ax is None else (ax.figure, ax))
    labels = labels or [f"{ds.attrs.get('method', '?')}, D = {ds.attrs.get('delay', '?')}" for ds in results]
    for ds, label in zip(results, labels):
        b, steps = ds.batch_size.values, ds.steps.values
        if "steps_min" in ds:
            spread = np.stack([steps - ds.steps_min.values, np.minimum(ds.steps_max.values, 1e300) - steps])
            line = ax.errorbar(b, steps, yerr=np.where(np.isfinite(spread), spread, 0), marker="o", ms=4, capsize=2,
                               label=label)[0]
        else:
            (line,) = ax.plot(b, steps, marker="o", ms=4, label=label)
        ax.plot(b, ds.perfect.values, ":", color=line.get_color(), lw=1)
        critical = ds.attrs.get("critical_batch_size", np.nan)
        if np.isfinite(critical):
            at = np.exp(np.interp(np.log(critical), np.log(b), np.log(np.where(np.isfinite(steps), steps, np.nan))))
            ax.plot([critical], [at], marker="D", ms=8, mfc="white", color=line.get_color())
    ax.set(xscale="log", yscale="log", xlabel="batch size B (noise σ/√B)",
           ylabel=f"best steps to loss < {results[0].attrs.get('target', 0.01):g}")
    ax.plot([], [], ":", color="grey", label="perfect scaling (steps ∝ 1/B)")
    ax.plot([], [], "D", mfc="white", color="grey", ls="", label="critical batch size (2 × perfect scaling)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig
