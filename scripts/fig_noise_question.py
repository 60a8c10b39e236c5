"""The noise question: does Adaptive Braking help when there is gradient noise but no delay?

The AB paper's Fig. 1 (second row) claims that with noise alone AB reaches the target faster (T*)
and over a wider region of (η, m). Here: SGDM and AB (ρ = 0.5, the paper's Fig. 1 setting) at
D = 0 on the 1/j spectrum, for σ from 0.01 to 1 and two targets, on one lr × momentum grid: T*
(left) and the number of converged cells (right).
"""

import argparse
import os

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import nqm  # noqa: E402
from nqm import summary  # noqa: E402

SIGMAS = [0.01, 0.03, 0.1, 0.3, 1.0]
TARGETS = [0.01, 0.003]


def run(side, dim, steps, sigmas=SIGMAS, targets=TARGETS):
    """Per target: the summary table of an AB sweep over ρ ∈ {0, 0.5} (ρ = 0 is SGDM) and σ."""
    grid = dict(lr=np.geomspace(0.005, 4.0, side), momentum=np.linspace(0, 0.98, max(4, side * 3 // 4)),
                delay=0, noise=sigmas, rho=[0.0, 0.5], problem=nqm.zhang(dim), max_steps=steps, progress=False)
    return {target: summary.summarize(nqm.sweep("ab", target=target, **grid)) for target in targets}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default="figures/fig_noise_question.png")
    args = parser.parse_args(argv)
    smoke = args.smoke or os.environ.get("NQM_SMOKE") == "1"
    side, dim, steps = (5, 50, 2_000) if smoke else (16, 1000, 20_000)
    tables = run(side, dim, steps)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    for (target, table), style in zip(tables.items(), ("-", "--")):
        for rho, marker, name in ((0.0, "o", "SGDM"), (0.5, "s", "AB ρ = 0.5")):
            row = table.sel(delay=0, rho=rho, seed=0)
            left.loglog(SIGMAS, row.t_star, style, marker=marker, label=f"{name}, target {target:g}")
            right.semilogx(SIGMAS, row.converged, style, marker=marker, label=f"{name}, target {target:g}")
            print(f"target {target:g} {name}: T* {np.round(row.t_star.values)}, converged {row.converged.values}")
    left.set(xlabel="noise σ", ylabel="T* (steps to target, fastest cells)", title="fastest trajectory", xlim=(0.007, 1.4))
    right.set(xlabel="noise σ", ylabel=f"converged cells (of {tables[TARGETS[0]].attrs['cells_per_panel']})",
              title="converging region", xlim=(0.007, 1.4))
    left.legend(fontsize=8)
    fig.suptitle(f"Noise without delay (D = 0): SGDM vs AB on zhang N = {dim}, lr {side} values in [0.005, 4] × "
                 f"m in [0, 0.98], budget {steps:,}; a missing point: nothing converged", fontsize=10)
    fig.savefig(args.out, dpi=150)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
