"""AB paper Fig. 14: global against element-wise braking, and what a rotation does to them.

32 components log-uniform on [1e-4, 1], target 1e-5, D = 1, no noise; T over lr × momentum for
SGDM, AB with one global α, AB with one α per coordinate on the axis-aligned quadratic, and the
same element-wise AB on a randomly rotated copy (same eigenvalues). SGDM and global AB depend on
the problem only through its eigenvalues; element-wise AB depends on the basis.
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

RHO = 0.5


def panels(side, steps):
    problem = nqm.loguniform(32)
    kw = dict(lr=np.geomspace(0.02, 4.0, side), momentum=np.linspace(0, 0.98, side), delay=1, target=1e-5,
              max_steps=steps, progress=False)
    return {
        "SGDM": nqm.sweep("sgdm", problem=problem, **kw),
        f"AB global, ρ = {RHO:g}": nqm.sweep("ab", problem=problem, rho=RHO, group="global", **kw),
        f"AB element-wise, ρ = {RHO:g}": nqm.sweep("ab", problem=problem, rho=RHO, group="element", **kw),
        f"AB element-wise, ρ = {RHO:g}, rotated H": nqm.sweep("ab", problem=problem.with_rotation(0), rho=RHO,
                                                               group="element", **kw),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_ab14_elementwise.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    side, steps = (6, 5_000) if smoke else (28, 100_000)
    results = panels(side, steps)
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.6), sharey=True, layout="constrained")
    reached = np.concatenate([ds.steps.values[ds.status.values == 1] for ds in results.values()])
    reached = reached if reached.size else np.array([1, 10])
    norm = mcolors.LogNorm(vmin=max(1, reached.min()), vmax=reached.max())
    for ax, (name, ds) in zip(axes, results.items()):
        panel = ds.isel(delay=0, noise=0, seed=0).squeeze(drop=True)
        mesh = draw_heatmap(ax, panel, norm)
        ts, area = t_star(panel), int((panel.status == 1).sum())
        ax.set_title(f"{name}\nT* = {ts:,.0f}, {area} cells converge", fontsize=10)
        ax.set_xlabel("learning rate η")
        print(f"{name}: T* = {ts:.0f}, converged {area}")
    axes[0].set_ylabel("momentum m")
    fig.colorbar(mesh, ax=axes, shrink=0.9).set_label("steps to target T")
    fig.suptitle(f"AB paper Fig. 14: 32 eigenvalues log-uniform on [1e-4, 1], D = 1, σ = 0, loss < 1e-5, "
                 f"budget {steps:,} (black: diverged, white: not converged)", fontsize=10)
    fig.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
