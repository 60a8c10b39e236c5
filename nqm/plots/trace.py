"""A one-page figure of a trace (``nqm trace --plot``): loss, α, velocity, alignment, energy decay."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr


def plot_trace(ds: xr.Dataset):
    """Six panels of a trace: a dataset written by ``nqm trace``, or what
    ``nqm.diagnostics.trajectory(...)`` returns (the variables under their
    :data:`nqm.diagnostics.RECORDERS` names; ``target`` adds T). A trace draws what it holds: a
    panel whose variables were not recorded says so. The settings go in the title.

    Args:
      ds: the trace.

    Returns:
      The matplotlib Figure.
    """
    fig, ax = plt.subplots(2, 3, figsize=(14, 7.5), layout="constrained")
    step = ds.step.values if "step" in ds.coords else None

    def held(axes, *names) -> bool:
        """Whether ``ds`` holds every variable the panel ``axes`` draws; if not, the panel says so."""
        missing = [n for n in names if n not in ds]
        if missing:
            axes.text(0.5, 0.5, f"not recorded: {', '.join(missing)}", ha="center", va="center",
                      transform=axes.transAxes, fontsize=9, color="0.4")
        return not missing

    ax[0, 0].set(title="loss L(w)", xlabel="step", ylabel="loss")
    if held(ax[0, 0], "loss"):
        ax[0, 0].semilogy(step, ds.loss.values)
        if "target" in ds.attrs:
            ax[0, 0].axhline(ds.attrs["target"], color="grey", ls=":", label=f"target {ds.attrs['target']:g}")
            reached = int(ds.get("steps_to_target", 0))
            if reached:
                ax[0, 0].axvline(reached, color="red", ls="--", lw=1, label=f"T = {reached:,}")
            ax[0, 0].legend(fontsize=8)
    ax[0, 1].set(title="braking factor α (mean over parameters)", xlabel="step", ylabel="α")
    if held(ax[0, 1], "alpha"):
        ax[0, 1].plot(step, ds.alpha.values, lw=0.8)
    ax[0, 2].set(title="velocity and gradient/velocity ratio", xlabel="step")
    if held(ax[0, 2], "velocity_norm", "gradient_velocity_ratio"):
        ax[0, 2].semilogy(step, ds.velocity_norm.values, label="‖v‖ = ‖Δw‖/η")
        ax[0, 2].semilogy(step, ds.gradient_velocity_ratio.values, label="‖g‖ / ‖v‖")
        ax[0, 2].legend(fontsize=8)
    ax[1, 0].set(title="alignments", xlabel="step", ylim=(-1.05, 1.05))
    if held(ax[1, 0], "update_alignment"):
        ax[1, 0].plot(step, ds.update_alignment.values, lw=0.8, label="cos(−Δw, g)")
        if "gradient_velocity_cosine" in ds:
            ax[1, 0].plot(step, ds.gradient_velocity_cosine.values, lw=0.8, label="cos(g, v)")
        ax[1, 0].legend(fontsize=8)
    ax[1, 1].set(title="relative energy decay E/E_SGDM (geometric mean)", xlabel="eigenvalue λ",
                 ylabel="ratio (< 1: damped faster than SGDM)")
    if held(ax[1, 1], "relative_energy_decay"):
        ax[1, 1].loglog(ds.eigenvalue.values, ds.relative_energy_decay.values, ".", ms=3)
        ax[1, 1].axhline(1.0, color="grey", ls=":")
    ax[1, 2].set(title="distribution of α over steps", xlabel="α", ylabel="steps")
    if held(ax[1, 2], "alpha_histogram"):
        counts = ds.alpha_histogram.values
        edges = ds.alpha_bin.values[1:]
        used = np.flatnonzero(counts[1:-1])
        if used.size:
            lo, hi = used[0], used[-1] + 2
            ax[1, 2].stairs(counts[1:-1][lo:hi - 1], edges[lo:hi])
    a = ds.attrs
    hyper = ", ".join(f"{k} = {a[k]:g}" for k in ("lr", "momentum", "rho", "lambda_dc") if k in a)
    fig.suptitle(f"{a.get('method')} on {a.get('spectrum', '?')}: {hyper}, delay {a.get('delay')}, "
                 f"σ = {float(a.get('noise', 0)):g}, seed {a.get('seed')}; every {a.get('stride', 1)} steps")
    return fig
