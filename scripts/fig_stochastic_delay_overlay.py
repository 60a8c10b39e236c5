"""Stochastic delays: the simulated divergence boundary against Giladi et al.'s threshold η*(m).

Top row: noiseless SGDM heatmaps (T over lr × momentum; m = 0 is SGD) under iid delays
τ ~ uniform{1..b} (b = 2, 4, 8) and the discretised Gaussian of mean 4, with the threshold of the
mean dynamics, η*(m) = x*(pmf, m)/λ_max, drawn on top and the agreement outside ±3 % of η* in each
title. Bottom row: where single trajectories actually stop converging, on one eigenvalue (λ = 1):
the fraction of seeds that diverge at lr = r·η*(m), for m = 0, 0.5, 0.9.
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm import delays, stability  # noqa: E402
from nqm.plots.heatmap import draw_heatmap, overlay_threshold  # noqa: E402
from nqm.sweeps import linear_stability_agreement  # noqa: E402

PROCESSES = ["uniform:1:2", "uniform:1:4", "uniform:1:8", "gaussian:4"]
MOMENTA = [0.0, 0.5, 0.9]


def boundary_scan(process: str, ratios, seeds, steps):
    """Fraction of seeds diverging at lr = r·η*(m) on λ = 1, per momentum (rows) and ratio (columns)."""
    pmf = delays.pmf(delays.process(process))
    rows = []
    for m in MOMENTA:
        eta = float(stability.threshold("sgdm", momentum=m, pmf=pmf))
        ds = nqm.sweep("sgdm", lr=eta * np.asarray(ratios), momentum=m, delay=process, seed=seeds,
                       problem=nqm.explicit([1.0]), target=1e-8, max_steps=steps, progress=False)
        rows.append((ds.status == -1).mean("seed").squeeze().values)
    return np.array(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_stochastic_delay_overlay.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    side, dim, steps, seeds, points = (8, 50, 2_000, [0, 1], 5) if smoke else (40, 100, 100_000, list(range(10)), 25)
    kw = dict(lr=np.geomspace(0.003, 2.0, side), momentum=np.linspace(0, 0.95, side), delay=PROCESSES,
              problem=nqm.zhang(dim), target=1e-6, max_steps=steps)
    ds = nqm.sweep("sgdm", **kw)
    ratios = np.linspace(0.85, 1.15, points)
    fig, axes = plt.subplots(2, len(PROCESSES), figsize=(4.4 * len(PROCESSES) + 1, 7.8), layout="constrained")
    reached = ds.steps.values[ds.status.values == 1]
    norm = mcolors.LogNorm(vmin=max(1, reached.min()), vmax=reached.max())
    for ax, process, bottom in zip(axes[0], PROCESSES, axes[1]):
        mesh = draw_heatmap(ax, ds.sel(delay=process, noise=0.0, seed=0), norm)
        overlay_threshold(ax, ds, {"delay": process})
        agree = linear_stability_agreement(ds.sel(delay=[process]))
        mean = delays.process(process).mean
        ax.set_title(f"τ ~ {process} (E[τ] = {mean:.2f})\n{100 * agree['fraction']:.1f} % of "
                     f"{agree['compared']} cells agree", fontsize=10)
        ax.set_xlabel("learning rate η")
        diverged = boundary_scan(process, ratios, seeds, steps)
        for m, row in zip(MOMENTA, diverged):
            bottom.plot(ratios, row, "o-", ms=3, label=f"m = {m:g}")
            crossing = ratios[np.argmax(row >= 0.5)] if (row >= 0.5).any() else np.nan
            print(f"{process} m={m:g}: half of the seeds diverge from lr = {crossing:.3f} η*")
        bottom.axvline(1.0, color="red", ls="--", lw=1.2)
        bottom.set(xlabel="lr / η*(m)", ylim=(-0.03, 1.03), title=f"τ ~ {process}: one eigenvalue, {len(seeds)} seeds",
                   ylabel="fraction of seeds diverged" if process == PROCESSES[0] else None)
        bottom.legend(fontsize=8, loc="upper left")
    axes[0, 0].set_ylabel("momentum m")
    fig.colorbar(mesh, ax=axes[0], shrink=0.9).set_label("steps to target T")
    a = ds.attrs
    fig.suptitle(f"Noiseless SGDM under iid delays on {a['spectrum']} (loss < {a['target']:g}, budget {a['max_steps']:,}; "
                 "black: diverged, white: not converged); red dashed: η* of the mean dynamics (Giladi et al.), "
                 f"{a['convention']}", fontsize=10)
    fig.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
