"""How to choose ρ: the braking coefficient that gives the fastest trajectory, against delay.

AB on the 1/j spectrum over an lr × momentum grid for every ρ in RHOS, D from 0 to 32 and two noise
levels. Left: the best ρ (smallest T*); middle: that T* against SGDM's (ρ = 0); right: the
converged area at the best ρ and at ρ = 0. Built on :mod:`nqm.summary`.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm import summary  # noqa: E402
from nqm.plots.script import FigureScript, suptitle  # noqa: E402

RHOS = [0.0, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0]


def landscape_sweep(delays, sigmas, side, dim, steps):
    """One AB sweep over ρ × D × σ on an lr × momentum grid."""
    import nqm

    return nqm.sweep("ab", lr=np.geomspace(0.005, 2.0, side), momentum=np.linspace(0, 0.95, max(4, side * 2 // 3)),
                     delay=delays, noise=sigmas, rho=RHOS, problem=nqm.zhang(dim), max_steps=steps, progress=False)


def landscape(delays, sigmas, side, dim, steps):
    """The per-panel summary of :func:`landscape_sweep`."""
    return summary.summarize(landscape_sweep(delays, sigmas, side, dim, steps))


def best_rho(table):
    """ρ with the smallest T* per (delay, noise) (NaN where nothing converged)."""
    t = table.t_star.fillna(np.inf)
    best = table.rho[t.argmin("rho")]
    return best.where(np.isfinite(t.min("rho")))


def compute(smoke):
    delays, sigmas, side, dim, steps = (([0, 4], [0.0], 5, 32, 2_000) if smoke else
                                        ([0, 1, 4, 16], [0.0, 0.05], 12, 1000, 20_000))
    return landscape_sweep(delays, sigmas, side, dim, steps)[["steps", "status"]]


def draw(data):
    table = summary.summarize(data)
    rho = best_rho(table)
    delays = data.delay.values
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.0), layout="constrained")
    x = delays + 0.5
    for sigma, color in zip(data.noise.values, ("C0", "C3")):
        row = table.sel(noise=sigma)
        best = rho.sel(noise=sigma)
        at_best = row.sel(rho=best.fillna(0.0))
        axes[0].plot(x, best, "o-", color=color, label=f"σ = {sigma:g}")
        axes[1].plot(x, at_best.t_star, "o-", color=color, label=f"best ρ, σ = {sigma:g}")
        axes[1].plot(x, row.sel(rho=0.0).t_star, "x--", color=color, label=f"SGDM (ρ = 0), σ = {sigma:g}")
        axes[2].plot(x, at_best.converged, "o-", color=color, label=f"best ρ, σ = {sigma:g}")
        axes[2].plot(x, row.sel(rho=0.0).converged, "x--", color=color, label=f"SGDM, σ = {sigma:g}")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(x, [str(d) for d in delays])
        ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
        ax.set_xlabel("delay D (+0.5, to show D = 0 on a log axis)")
        ax.legend(fontsize=8)
    rhos = data.rho.values
    axes[0].set(ylabel="best ρ (smallest T*)", title="braking coefficient with the fastest trajectory",
                ylim=(-0.1, rhos.max() + 0.1))
    axes[1].set(yscale="log", ylabel="T*", title="T* at the best ρ and at ρ = 0")
    axes[2].set(ylabel=f"converged cells (of {table.attrs['cells_per_panel']})", title="converged area")
    a = data.attrs
    suptitle(fig, f"How to choose ρ: AB on {a['spectrum']}, ρ in {{{', '.join(f'{r:g}' for r in rhos)}}}, lr "
                  f"{data.sizes['lr']} values in [{data.lr.values[0]:g}, {data.lr.values[-1]:g}] × m "
                  f"{data.sizes['momentum']} values in [0, {data.momentum.values[-1]:g}], target {a['target']:g}, "
                  f"budget {int(a['max_steps']):,}")
    return fig


def claims(data):
    table = summary.summarize(data)
    rho = best_rho(table)
    out = {}
    for sigma in data.noise.values:
        for d in data.delay.values:
            row = table.sel(noise=sigma, delay=d)
            best = rho.sel(noise=sigma, delay=d)
            key = f"d{d}_s{sigma:g}"
            out[f"{key}_best_rho"] = float(best)
            if np.isfinite(best):
                at_best = row.sel(rho=float(best))
                out[f"{key}_speedup_over_sgdm"] = float(row.sel(rho=0.0).t_star / at_best.t_star)
                out[f"{key}_area_ratio_over_sgdm"] = float(at_best.converged / max(1, int(row.sel(rho=0.0).converged)))
    return out


main = FigureScript("fig_rho_landscape", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
