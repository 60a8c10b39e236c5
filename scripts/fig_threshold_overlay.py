"""Simulated divergence boundary vs the linear-stability threshold η*(m) (Giladi et al. 2020).

Noiseless SGDM and shifted momentum (undampened, the AB paper's convention) on the NQM, heatmaps of
T over lr × momentum for several delays, with the characteristic-polynomial threshold
η*(m) = x*(D, m)/λ_max drawn on top. The title of each panel gives the fraction of cells outside a
±3 % band around η* whose simulated status (diverged or not) agrees with the linear prediction.
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm.plots.heatmap import draw_heatmap, overlay_threshold  # noqa: E402
from nqm.sweeps import linear_stability_agreement  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_threshold_overlay.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    side, dim, steps = (8, 50, 2_000) if smoke else (40, 100, 100_000)
    delays = [1, 4, 8]
    # A low target: just above η* the unstable mode starts tiny, and the loss may dip below a higher
    # target before it blows up.
    kw = dict(lr=np.geomspace(0.003, 2.0, side), momentum=np.linspace(0, 0.95, side), delay=delays,
              problem=nqm.zhang(dim), target=1e-6, max_steps=steps)
    results = {method: nqm.sweep(method, **kw) for method in ("sgdm", "shifted")}
    fig, axes = plt.subplots(2, len(delays), figsize=(4.3 * len(delays) + 1, 7.6), sharex=True, sharey=True,
                             layout="constrained")
    reached = np.concatenate([ds.steps.values[ds.status.values == 1] for ds in results.values()])
    norm = mcolors.LogNorm(vmin=max(1, reached.min()), vmax=reached.max())
    for row, (method, ds) in zip(axes, results.items()):
        for ax, delay in zip(row, delays):
            panel = ds.sel(delay=delay, noise=0.0, seed=0)
            mesh = draw_heatmap(ax, panel, norm)
            overlay_threshold(ax, ds, {"delay": delay})
            agree = linear_stability_agreement(ds.sel(delay=[delay]))
            name = "SGDM" if method == "sgdm" else "shifted momentum"
            ax.set_title(f"{name}, D = {delay}: {100 * agree['fraction']:.1f} % of "
                         f"{agree['compared']} cells agree", fontsize=10)
            print(f"{method} D={delay}: agreement {agree}")
    for ax in axes[-1]:
        ax.set_xlabel("learning rate η")
    for ax in axes[:, 0]:
        ax.set_ylabel("momentum m")
    fig.colorbar(mesh, ax=axes, shrink=0.8).set_label("steps to target T")
    a = results["sgdm"].attrs
    fig.suptitle(f"Noiseless sweeps on {a['spectrum']} (loss < {a['target']:g}, budget {a['max_steps']:,}; "
                 "black: diverged, white: not converged)\nred dashed: linear-stability threshold η*(m) = x*/λ_max, "
                 f"{a['convention']}; agreement counted outside ±3 % of η*", fontsize=10)
    fig.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
