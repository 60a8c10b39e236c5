"""AB paper, Figure 1: steps to target over learning rate × momentum, SGDM vs Adaptive Braking.

Rows (D, σ) = (0, 0), (0, σ), (D, 0), (D, σ); columns SGDM and AB with ρ = 0.5. The paper does
not publish its delay, noise or grid; the defaults here are where the contrast shows (see the
README). Sizes:

    --smoke   N = 100, 6 × 6 grid, 2 000 steps          (seconds; CI)
    (default) N = 10⁴, 24 × 24 grid, 100 000 steps      (the committed figure)
    --paper   N = 10⁴, 32 × 32 grid, 500 000 steps      (the paper's scale)

The sweep is checkpointed next to the output: an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.patches as mpatches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm.plots.heatmap import draw_heatmap  # noqa: E402
from nqm.sweeps import t_star  # noqa: E402

SIZES = {
    "smoke": dict(dim=100, side=6, max_steps=2_000),
    "default": dict(dim=10_000, side=24, max_steps=100_000),
    "paper": dict(dim=10_000, side=32, max_steps=500_000),
}


def run(size: str, delay: int, noise: float, rho: float, out: str, progress: bool = True):
    s = SIZES[size]
    data = os.path.splitext(out)[0] + ".nc"
    start = time.perf_counter()
    ds = nqm.sweep(
        "ab",
        lr=np.geomspace(0.01, 4.0, s["side"]),
        momentum=np.linspace(0.0, 0.98, s["side"]),
        delay=[0, delay],
        noise=[0.0, noise],
        rho=[0.0, rho],  # ρ = 0 is SGDM, bit for bit
        problem=nqm.zhang(s["dim"]),
        max_steps=s["max_steps"],
        checkpoint=data + ".partial",
        progress=progress,
    )
    elapsed = time.perf_counter() - start
    nqm.save(ds, data)
    os.remove(data + ".partial")
    ds.attrs["wall_seconds"] = elapsed
    return ds, elapsed


def figure(ds, rho: float):
    rows = [(d, n) for d in ds.delay.values for n in ds.noise.values]
    fig, axes = plt.subplots(len(rows), 2, figsize=(9.2, 3.0 * len(rows) + 1.0), sharex=True, sharey=True,
                             layout="constrained", squeeze=False)
    reached = ds.steps.values[ds.status.values == nqm.REACHED]
    norm = mcolors.LogNorm(vmin=max(1, reached.min()), vmax=reached.max()) if reached.size else mcolors.LogNorm(1, 10)
    for (delay, noise), row in zip(rows, axes):
        for ax, r, name in zip(row, (0.0, rho), ("SGDM", f"AB, ρ = {rho:g}")):
            panel = ds.sel(delay=delay, noise=noise, rho=r, seed=ds.seed.values[0])
            mesh = draw_heatmap(ax, panel, norm)
            ts = t_star(panel)
            converged = int((panel.status == nqm.REACHED).sum())
            ax.set_title(f"{name}: D = {delay}, σ = {noise:g}\nT* = {ts:,.0f}, {converged} cells converge"
                         if np.isfinite(ts) else f"{name}: D = {delay}, σ = {noise:g}\nno cell converges", fontsize=9.5)
    for ax in axes[-1]:
        ax.set_xlabel("learning rate η")
    for ax in axes[:, 0]:
        ax.set_ylabel("momentum m")
    fig.colorbar(mesh, ax=axes, shrink=0.6, pad=0.02).set_label("steps to target T")
    fig.legend(handles=[mpatches.Patch(facecolor="black", label="diverged"),
                        mpatches.Patch(facecolor="white", edgecolor="0.5", label="not converged in budget"),
                        plt.Line2D([], [], marker="*", color="white", markeredgecolor="black", markersize=10,
                                   linestyle="none", label="fastest cell")],
               loc="outside lower center", ncols=3, frameon=False, fontsize=9)
    a = ds.attrs
    fig.suptitle(f"Steps to loss < {a['target']:g} on the NQM, {a['spectrum']}, budget {a['max_steps']:,} steps\n"
                 f"{ds.sizes['lr']}×{ds.sizes['momentum']} grid; T* = 1st percentile of T over converged cells",
                 fontsize=10.5)
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_const", dest="size", const="smoke")
    size.add_argument("--paper", action="store_const", dest="size", const="paper")
    parser.add_argument("--delay", type=int, default=4, help="the delayed rows' D (default 4)")
    parser.add_argument("--noise", type=float, default=0.05, help="the noisy rows' σ (default 0.05)")
    parser.add_argument("--rho", type=float, default=0.5)
    parser.add_argument("--out", default="figures/fig1_heatmaps.png")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    size = args.size or os.environ.get("NQM_FIG1_SIZE", "default")
    if os.environ.get("NQM_SMOKE") == "1":
        size = "smoke"
    ds, elapsed = run(size, args.delay, args.noise, args.rho, args.out, progress=not args.no_progress)
    fig = figure(ds, args.rho)
    fig.savefig(args.out, dpi=150)
    panels = ds.sizes["delay"] * ds.sizes["noise"] * ds.sizes["rho"]
    print(f"wrote {args.out} ({size}: {elapsed:.0f} s, {elapsed / panels:.0f} s per panel)")


if __name__ == "__main__":
    sys.exit(main())
