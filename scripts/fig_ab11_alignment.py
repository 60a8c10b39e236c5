"""AB paper Fig. 11: how well the update follows the gradient, cos(−Δw, g), against the alignment
cos(g, v) the brake reacts to, for gradient/velocity ratios r = ‖g‖/‖v‖ ∈ {0.1, 0.2, 0.5, 0.8}.

Heavy ball steps along u = m v + α g (α = 1 for SGDM, α = 1 − ρ cos(g, v) for AB), so with
c = cos(g, v):

    cos(u, g) = (m c + α r) / sqrt(m² + 2 m α r c + α² r²).

Lines: this closed form, SGDM dashed, AB ρ = 2 solid. Points: steps measured by the engine
(``update_alignment`` against ``gradient_velocity_cosine``) whose r lies within 10 % of a line's.
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm import diagnostics  # noqa: E402

RATIOS = (0.1, 0.2, 0.5, 0.8)
RECORD = ("update_alignment", "gradient_velocity_cosine", "gradient_velocity_ratio")


def alignment(c, r, m, rho):
    """cos(m v + α g, g) for cos(g, v) = c, ‖g‖/‖v‖ = r, α = 1 − ρ c."""
    alpha = 1.0 - rho * c
    return (m * c + alpha * r) / np.sqrt(m**2 + 2 * m * alpha * r * c + (alpha * r) ** 2)


def measured(rho, m, steps, dim, x64=False):
    """Per-step (cos(g, v), r, cos(−Δw, g)) of noisy delayed runs at a few learning rates."""
    runs = [diagnostics.trajectory("ab", problem=nqm.zhang(dim), lr=lr, momentum=m, rho=rho, delay=2, noise=0.05,
                                   steps=steps, record=RECORD, seed=1, x64=x64) for lr in (0.02, 0.1, 0.3)]
    cat = lambda name: np.concatenate([ds[name].values[5:] for ds in runs])
    return cat("gradient_velocity_cosine"), cat("gradient_velocity_ratio"), cat("update_alignment")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_ab11_alignment.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    steps, dim, m = (300, 50, 0.9) if smoke else (3000, 1000, 0.9)
    c = np.linspace(-1, 1, 401)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True, layout="constrained")
    colors = plt.cm.viridis(np.linspace(0, 0.85, len(RATIOS)))
    for ax, (name, rho) in zip(axes, (("SGDM", 0.0), ("AB, ρ = 2", 2.0))):
        cg, r, cu = measured(rho, m, steps, dim)
        for ratio, color in zip(RATIOS, colors):
            ax.plot(c, alignment(c, ratio, m, rho), color=color, lw=2, ls="--" if rho == 0 else "-",
                    label=f"r = {ratio:g} (closed form)")
            near = np.abs(r / ratio - 1) < 0.1
            ax.plot(cg[near], cu[near], "o", color=color, ms=3, alpha=0.6,
                    label=f"engine steps, r within 10 % ({near.sum()})")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set(title=f"{name}, m = {m:g}", xlabel="cos(g, v): gradient–velocity alignment", xlim=(-1, 1),
               ylim=(-1.05, 1.05))
        ax.legend(fontsize=7, loc="lower right", ncols=2)
    axes[0].set_ylabel("cos(−Δw, g): update–gradient alignment")
    fig.suptitle(f"AB paper Fig. 11: update direction m v + α g against the gradient; points from D = 2, "
                 f"σ = 0.05 runs on zhang N = {dim} (lr 0.02, 0.1, 0.3; {steps:,} steps each)", fontsize=10)
    fig.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
