"""Which delay remedies survive large delays: T* against D for every method (the NQM analogue of the
AB paper's Fig. 4), and heatmaps under heterogeneous workers.

Top: for every registered method, T* (the fastest trajectory over a learning rate × momentum grid,
and over its own extra hyperparameter — AB's ρ, DC-ASGD's λ_dc — when it has one) against the
constant delay D, noiseless and noisy; a missing point means no cell of the grid converged.
Bottom: T over lr × momentum for a few methods under a pool of workers of which a quarter are four
times slower (`workers:K:slow=0.25:4`).
"""

import argparse
import itertools
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm.optimizers import methods  # noqa: E402
from nqm.plots.heatmap import draw_heatmap  # noqa: E402
from nqm.sweeps import hyper_dims, t_star  # noqa: E402

EXTRA_GRIDS = {"rho": [0.25, 0.5, 1.0], "lambda_dc": [0.1, 0.5, 2.0]}  # swept where a method has them
HETEROGENEOUS = ["sgdm", "ab", "shifted", "ormo", "dana", "staleness"]


def best_t_star(method, delays, noise, grid):
    """T* per delay: the best panel over the method's extra hyperparameters."""
    extra = {name: EXTRA_GRIDS[name] for name in hyper_dims(method) if name in EXTRA_GRIDS}
    ds = nqm.sweep(method, delay=delays, noise=noise, **grid, **extra)
    out = []
    for d in delays:
        panel = ds.sel(delay=d, noise=noise)
        values = [t_star(panel.sel(dict(zip(extra, combo)))) for combo in itertools.product(*extra.values())]
        out.append(np.nanmin(values) if np.isfinite(values).any() else np.nan)
    return np.array(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_methods_vs_delay.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    if smoke:
        delays, side, dim, steps, noise, workers = [0, 2, 8], 5, 32, 1_000, 0.05, "workers:4:slow=0.25:4"
    else:
        delays, side, dim, steps, noise, workers = [0, 1, 2, 4, 8, 16, 32, 64], 14, 100, 20_000, 0.05, "workers:16:slow=0.25:4"
    grid = dict(lr=np.geomspace(0.005, 2.0, side), momentum=np.linspace(0.0, 0.95, max(4, side // 2)),
                problem=nqm.zhang(dim), target=0.01, max_steps=steps, progress=False)
    names = methods()
    shown = [m for m in HETEROGENEOUS if m in names]
    fig = plt.figure(figsize=(4.2 * max(3, len(shown)), 9), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.15, 1])
    curves = top.subplots(1, 2, sharey=True)
    markers = "osD^v<>ph*Xd"
    for ax, sigma in zip(curves, (0.0, noise)):
        for method, marker in zip(names, markers):
            ts = best_t_star(method, delays, sigma, grid)
            print(f"sigma={sigma:g} {method}: T* = " + ", ".join(f"D={d}: {t:.0f}" for d, t in zip(delays, ts)))
            ax.plot(np.array(delays) + 0.5, ts, marker=marker, ms=5, label=method)
        ax.set(xscale="log", yscale="log", xlabel="delay D (+0.5, to show D = 0 on a log axis)",
               title=f"σ = {sigma:g}: fastest trajectory over the grid")
        ax.set_xticks(np.array(delays) + 0.5, [str(d) for d in delays])
    curves[0].set_ylabel("T* (steps to loss < 0.01)")
    curves[1].legend(fontsize=8, ncols=2)
    top.suptitle(f"Every method at its best (lr {side} values in [0.005, 2] × m in [0, 0.95]"
                 f" × ρ or λ_dc in {EXTRA_GRIDS['rho']} / {EXTRA_GRIDS['lambda_dc']}); zhang N = {dim}, "
                 f"budget {steps:,}", fontsize=10)
    axes = bottom.subplots(1, len(shown), sharey=True, squeeze=False)[0]
    results = {m: nqm.sweep(m, delay=workers, noise=noise, **grid) for m in shown}
    reached = np.concatenate([ds.steps.values[ds.status.values == 1] for ds in results.values()])
    reached = reached if reached.size else np.array([1, 10])
    norm = mcolors.LogNorm(vmin=max(1, reached.min()), vmax=reached.max())
    mesh = None
    for ax, (method, ds) in zip(axes, results.items()):
        panel = ds.sel(delay=workers, noise=noise, seed=0).squeeze(drop=True)
        mesh = draw_heatmap(ax, panel, norm)
        ts = t_star(panel)
        ax.set_title(f"{method}: T* = {ts:,.0f}" if np.isfinite(ts) else f"{method}: none converged", fontsize=10)
        ax.set_xlabel("learning rate η")
    axes[0].set_ylabel("momentum m")
    bottom.colorbar(mesh, ax=axes, shrink=0.9).set_label("steps to target T")
    bottom.suptitle(f"Heterogeneous workers {workers} (a quarter of them 4× slower), σ = {noise:g}; "
                    "black: diverged, white: not converged; AB at ρ = 0.5, DC-ASGD at its default λ_dc", fontsize=10)
    fig.savefig(args.out, dpi=140)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
