"""A one-page figure of a trace (``nqm trace --plot``): loss, α, velocity, alignment, energy decay."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr


def plot_trace(ds: xr.Dataset):
    """Six panels of a trace: a dataset written by ``nqm trace``, or what
    ``nqm.diagnostics.trajectory(..., record=nqm.diagnostics.TRACE, summaries=True)`` returns (the
    variables under their :data:`nqm.diagnostics.RECORDERS` names; ``target`` adds T). The settings
    go in the title."""
    fig, ax = plt.subplots(2, 3, figsize=(14, 7.5), layout="constrained")
    step = ds.step.values
    ax[0, 0].semilogy(step, ds.loss.values)
    if "target" in ds.attrs:
        ax[0, 0].axhline(ds.attrs["target"], color="grey", ls=":", label=f"target {ds.attrs['target']:g}")
        reached = int(ds.get("steps_to_target", 0))
        if reached:
            ax[0, 0].axvline(reached, color="red", ls="--", lw=1, label=f"T = {reached:,}")
        ax[0, 0].legend(fontsize=8)
    ax[0, 0].set(title="loss L(w)", xlabel="step", ylabel="loss")
    ax[0, 1].plot(step, ds.alpha.values, lw=0.8)
    ax[0, 1].set(title="braking factor α (mean over parameters)", xlabel="step", ylabel="α")
    ax[0, 2].semilogy(step, ds.velocity_norm.values, label="‖v‖ = ‖Δw‖/η")
    ax[0, 2].semilogy(step, ds.gradient_velocity_ratio.values, label="‖g‖ / ‖v‖")
    ax[0, 2].set(title="velocity and gradient/velocity ratio", xlabel="step")
    ax[0, 2].legend(fontsize=8)
    ax[1, 0].plot(step, ds.update_alignment.values, lw=0.8, label="cos(−Δw, g)")
    if "gradient_velocity_cosine" in ds:
        ax[1, 0].plot(step, ds.gradient_velocity_cosine.values, lw=0.8, label="cos(g, v)")
    ax[1, 0].set(title="alignments", xlabel="step", ylim=(-1.05, 1.05))
    ax[1, 0].legend(fontsize=8)
    ax[1, 1].loglog(ds.eigenvalue.values, ds.relative_energy_decay.values, ".", ms=3)
    ax[1, 1].axhline(1.0, color="grey", ls=":")
    ax[1, 1].set(title="relative energy decay E/E_SGDM (geometric mean)", xlabel="eigenvalue λ",
                 ylabel="ratio (< 1: damped faster than SGDM)")
    counts = ds.alpha_histogram.values
    edges = ds.alpha_bin.values[1:]
    used = np.flatnonzero(counts[1:-1])
    if used.size:
        lo, hi = used[0], used[-1] + 2
        ax[1, 2].stairs(counts[1:-1][lo:hi - 1], edges[lo:hi])
    ax[1, 2].set(title="distribution of α over steps", xlabel="α", ylabel="steps")
    a = ds.attrs
    hyper = ", ".join(f"{k} = {a[k]:g}" for k in ("lr", "momentum", "rho", "lambda_dc") if k in a)
    fig.suptitle(f"{a.get('method')} on {a.get('spectrum', '?')}: {hyper}, delay {a.get('delay')}, "
                 f"σ = {float(a.get('noise', 0)):g}, seed {a.get('seed')}; every {a.get('stride', 1)} steps")
    return fig
