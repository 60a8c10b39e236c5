"""How to choose ρ: the braking coefficient that gives the fastest trajectory, against delay.

AB on the 1/j spectrum over an lr × momentum grid for every ρ in RHOS, D from 0 to 32 and two noise
levels. Left: the best ρ (smallest T*); middle: that T* against SGDM's (ρ = 0); right: the
converged area at the best ρ and at ρ = 0. Built on :mod:`nqm.summary`.
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm import summary  # noqa: E402

RHOS = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0]


def landscape(delays, sigmas, side, dim, steps):
    """The per-panel summary of one AB sweep over ρ × D × σ."""
    ds = nqm.sweep("ab", lr=np.geomspace(0.005, 2.0, side), momentum=np.linspace(0, 0.95, max(4, side * 2 // 3)),
                   delay=delays, noise=sigmas, rho=RHOS, problem=nqm.zhang(dim), max_steps=steps, progress=False)
    return summary.summarize(ds).sel(seed=0)


def best_rho(table):
    """ρ with the smallest T* per (delay, noise) (NaN where nothing converged)."""
    t = table.t_star.fillna(np.inf)
    best = table.rho[t.argmin("rho")]
    return best.where(np.isfinite(t.min("rho")))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_rho_landscape.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    delays, sigmas, side, dim, steps = (([0, 4], [0.0], 5, 32, 2_000) if smoke else
                                        ([0, 1, 2, 4, 8, 16, 32], [0.0, 0.05], 12, 100, 20_000))
    table = landscape(delays, sigmas, side, dim, steps)
    rho = best_rho(table)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6), layout="constrained")
    x = np.array(delays) + 0.5
    for sigma, color in zip(sigmas, ("C0", "C3")):
        row = table.sel(noise=sigma)
        best = rho.sel(noise=sigma)
        at_best = row.sel(rho=best.fillna(0.0))
        axes[0].plot(x, best, "o-", color=color, label=f"σ = {sigma:g}")
        axes[1].plot(x, at_best.t_star, "o-", color=color, label=f"best ρ, σ = {sigma:g}")
        axes[1].plot(x, row.sel(rho=0.0).t_star, "x--", color=color, label=f"SGDM (ρ = 0), σ = {sigma:g}")
        axes[2].plot(x, at_best.converged, "o-", color=color, label=f"best ρ, σ = {sigma:g}")
        axes[2].plot(x, row.sel(rho=0.0).converged, "x--", color=color, label=f"SGDM, σ = {sigma:g}")
        print(f"sigma={sigma:g}: best rho {dict(zip(delays, best.values))}")
        print(f"  T* best {np.round(at_best.t_star.values)}, SGDM {np.round(row.sel(rho=0.0).t_star.values)}")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(x, [str(d) for d in delays])
        ax.set_xlabel("delay D")
    axes[0].set(ylabel="best ρ (smallest T*)", title="braking coefficient with the fastest trajectory",
                ylim=(-0.1, max(RHOS) + 0.1))
    axes[1].set(yscale="log", ylabel="T*", title="T* at the best ρ and at ρ = 0")
    axes[2].set(ylabel=f"converged cells (of {table.attrs['cells_per_panel']})", title="converged area")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(f"How to choose ρ: AB on zhang N = {dim}, ρ in {RHOS}, lr {side} values in [0.005, 2] × m in "
                 f"[0, 0.95], target 0.01, budget {steps:,}", fontsize=10)
    fig.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
