"""Monte Carlo against exact expected dynamics: T over lr × momentum for SGDM and shifted momentum at
D = 0 and 4 with noise, from one noisy run per cell (`nqm sweep`) and from the expected loss
(`nqm expected`), with the contour E[L∞] = target on both: right of it the expected loss can never
reach the target."""

import argparse
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm import expected  # noqa: E402
from nqm.plots.heatmap import draw_heatmap  # noqa: E402
from nqm.status import format_t_star, t_star  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_expected.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    side, dim, steps, sigma, target = (5, 30, 1_000, 0.05, 0.01) if smoke else (16, 1000, 20_000, 0.05, 0.01)
    grid = dict(lr=np.geomspace(0.005, 2.0, side), momentum=np.linspace(0, 0.95, max(4, side * 3 // 4)),
                delay=[0, 4], noise=sigma, problem=nqm.zhang(dim), target=target, max_steps=steps)
    runs = {}
    for method in ("sgdm", "shifted"):
        runs[method, "Monte Carlo (one run per cell)"] = nqm.sweep(method, progress=False, **grid)
        runs[method, "exact expected loss"] = expected.sweep(method, **grid)
    reached = np.concatenate([ds.steps.values[ds.status.values == 1] for ds in runs.values()])
    norm = mcolors.LogNorm(vmin=max(1, reached.min()), vmax=reached.max())
    fig, axes = plt.subplots(2, 4, figsize=(18, 8), sharex=True, sharey=True, layout="constrained")
    for col, ((method, kind), ds) in enumerate(runs.items()):
        exact = runs[method, "exact expected loss"]
        for row, delay in enumerate([0, 4]):
            ax = axes[row, col]
            panel = ds.sel(delay=delay, noise=sigma, seed=0)
            mesh = draw_heatmap(ax, panel, norm)
            steady = exact.steady_state_loss.sel(delay=delay, noise=sigma, seed=0).transpose("momentum", "lr")
            ratio = np.log10(np.clip(steady.values, 1e-300, 1e300) / target)
            ax.contour(exact.lr.values, exact.momentum.values, ratio, levels=[0.0], colors="red", linewidths=1.6)
            ax.set_title(f"{method}, {kind}\nD = {delay}, σ = {sigma:g}: {format_t_star(t_star(panel))}", fontsize=9)
            print(f"{method} {kind} D={delay}: {format_t_star(t_star(panel))}, converged {int((panel.status == 1).sum())}")
    for ax in axes[-1]:
        ax.set_xlabel("learning rate η")
    for ax in axes[:, 0]:
        ax.set_ylabel("momentum m")
    fig.colorbar(mesh, ax=axes, shrink=0.8).set_label("steps to target T")
    fig.suptitle(f"Monte Carlo vs exact expected dynamics on zhang N = {dim}, target {target:g}, budget {steps:,}; "
                 "red: E[L∞] = target (beyond it the expected loss never reaches the target); "
                 "black: diverged, white: not reached", fontsize=10)
    fig.savefig(args.out, dpi=140)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
