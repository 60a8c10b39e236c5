"""AB paper Fig. 13: micro-stepping at high learning rates.

No noise, no delay, 10⁴ steps: T over lr × momentum for SGDM and for AB with S = 1, 4 and 16
micro-steps (Algorithm 10: the velocity update split into S parts, each braked against the partly
updated velocity). Learning rates reach far beyond SGDM's stability limit 2(1 + m)/λ_max.
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm.plots.heatmap import draw_heatmap  # noqa: E402
from nqm.sweeps import t_star  # noqa: E402

RHO = 1.0
MICRO_STEPS = (1, 4, 16)


def panels(side, dim, steps):
    kw = dict(lr=np.geomspace(0.1, 30.0, side), momentum=np.linspace(0, 0.98, side), problem=nqm.zhang(dim),
              target=0.01, max_steps=steps, progress=False)
    out = {"SGDM": nqm.sweep("sgdm", **kw)}
    for s in MICRO_STEPS:
        out[f"AB ρ = {RHO:g}, S = {s}"] = nqm.sweep("ab", rho=RHO, micro_steps=s, **kw)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_ab13_microsteps.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    side, dim, steps = (6, 50, 1_000) if smoke else (28, 1000, 10_000)
    results = panels(side, dim, steps)
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 4.6), sharey=True, layout="constrained")
    reached = np.concatenate([ds.steps.values[ds.status.values == 1] for ds in results.values()])
    reached = reached if reached.size else np.array([1, 10])
    norm = mcolors.LogNorm(vmin=max(1, reached.min()), vmax=reached.max())
    for ax, (name, ds) in zip(axes, results.items()):
        panel = ds.isel(delay=0, noise=0, seed=0).squeeze(drop=True)
        mesh = draw_heatmap(ax, panel, norm)
        ts, area = t_star(panel), int((panel.status == 1).sum())
        largest = float(panel.lr.where(panel.status == 1).max())
        ax.set_title(f"{name}\nT* = {ts:,.0f}, {area} cells converge, largest η = {largest:.3g}", fontsize=10)
        ax.set_xlabel("learning rate η")
        print(f"{name}: T* = {ts:.0f}, converged {area}, largest converging lr {largest:.3g}")
    axes[0].set_ylabel("momentum m")
    fig.colorbar(mesh, ax=axes, shrink=0.9).set_label("steps to target T")
    fig.suptitle(f"AB paper Fig. 13: micro-stepping, zhang N = {dim}, no noise or delay, loss < 0.01, "
                 f"budget {steps:,} (black: diverged, white: not converged)", fontsize=10)
    fig.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
