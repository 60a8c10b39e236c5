"""Does a real model's NQM predict where its training under delay stops being stable?

`nqm transfer` on two small real problems that need no download — multinomial logistic regression
and a 64–32–10 tanh network on scikit-learn's bundled digits (1,797 images) — full batch, from
their starting points: the NQM measured there (Hessian spectrum by Lanczos and stochastic Lanczos
quadrature), then the same lr grid (log-spaced) × momentum {0, 0.9} run as that NQM and as the
model, SGDM, AB (ρ = 0.5) and shifted momentum, constant delay D ∈ {0, 4, 16}, one budget.

Left: the stability boundary — the largest lr of the grid below the first whose run goes out of
bounds (loss not finite or above 10⁶ × its initial value) — predicted by the NQM against observed
on the model, per (problem, method, momentum, D); a point on the diagonal is a right prediction,
an open marker an observed edge beyond the grid (the model stays bounded at its largest lr: a
bound, not a value). Right: the same for the largest lr that settles (reaches the target, 0.3 of
the initial loss here, in the first half of the budget and stays below it through the second).
One run per cell (full batch: deterministic).

    python scripts/fig_transfer.py [--smoke] [--redraw]
"""

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.plots.script import FigureScript, suptitle  # noqa: E402

FULL = dict(problems=["digits-logistic", "digits-mlp"], methods=["sgdm", "ab", "shifted"], delays=[0, 4, 16],
            momenta=[0.0, 0.9], lr=(0.02, 40.0, 14), steps=1000)
SMOKE = dict(problems=["digits-logistic"], methods=["sgdm", "ab"], delays=[0, 2], momenta=[0.0, 0.9],
             lr=(0.1, 10.0, 4), steps=40)
EDGES = ("stable", "settled")


def compute(smoke):
    from nqm.transfer.compare import transfer

    size = SMOKE if smoke else FULL
    lr = np.geomspace(*size["lr"])
    out = {"grid": {**size, "lr": lr.tolist()}, "problems": {}}
    for problem in size["problems"]:
        ds = transfer(problem, methods=size["methods"], delays=size["delays"], lr=lr, momentum=size["momenta"],
                      steps=size["steps"])
        out["problems"][problem] = {
            "lam_max": ds.attrs["lam_max"], "sigma": ds.attrs["sigma_per_example"], "description": ds.attrs["description"],
            **{f"lr_{e}_{side}": ds[f"lr_{e}_{side}"].values.tolist() for e in EDGES for side in ("predicted", "observed")},
            **{f"{e}_beyond_grid": ds[f"{e}_beyond_grid"].values.tolist() for e in EDGES},
            "lr_threshold": ds.lr_threshold.values.tolist()}
    return out


def _points(data, edge):
    """(problem, method, delay, momentum, predicted, observed, beyond) for every cell of the comparison."""
    size = data["grid"]
    for problem, found in data["problems"].items():
        for (i, method), (j, delay), (k, m) in itertools.product(
                enumerate(size["methods"]), enumerate(size["delays"]), enumerate(size["momenta"])):
            yield (problem, method, delay, m, found[f"lr_{edge}_predicted"][i][j][k],
                   found[f"lr_{edge}_observed"][i][j][k], bool(found[f"{edge}_beyond_grid"][i][j][k]))


def draw(data):
    size = data["grid"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), layout="constrained")
    colors = dict(zip(size["methods"], ("C0", "C1", "C2", "C3")))
    shapes = dict(zip(size["problems"], ("o", "s")))
    lo, hi = size["lr"][0] / 1.5, size["lr"][-1] * 1.5
    for ax, edge, title in zip(axes, EDGES, ("stability boundary (largest lr before a run out of bounds)",
                                              "largest lr that settles")):
        for problem, method, delay, m, predicted, observed, beyond in _points(data, edge):
            if predicted is None or observed is None or np.isnan(predicted) or np.isnan(observed):
                continue
            jitter = 1 + 0.04 * (size["delays"].index(delay) - 1) + 0.015 * m
            ax.scatter(observed * jitter, predicted, marker=shapes[problem], s=30 + 20 * size["delays"].index(delay),
                       facecolors="none" if beyond else colors[method], edgecolors=colors[method], alpha=0.8)
        ax.plot([lo, hi], [lo, hi], color="grey", ls=":", lw=1)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="observed on the model (lr)",
               ylabel="predicted by its NQM (lr)", title=title)
    handles = [plt.Line2D([], [], ls="", marker="o", color=c, label=mth) for mth, c in colors.items()]
    handles += [plt.Line2D([], [], ls="", marker=s, color="k", mfc="none", label=p) for p, s in shapes.items()]
    handles += [plt.Line2D([], [], ls="", marker="o", color="k", ms=4 + 2 * i, label=f"D = {d}")
                for i, d in enumerate(size["delays"])]
    axes[0].legend(handles=handles, fontsize=8, loc="upper left")
    suptitle(fig, f"A real model's NQM against the model: full batch, {size['steps']:,} steps, momentum "
                  f"{', '.join(f'{m:g}' for m in size['momenta'])}, lr grid of {len(size['lr'])} from "
                  f"{size['lr'][0]:g} to {size['lr'][-1]:g}; open marker: the model's edge lies beyond the grid\n"
                  "(shifted momentum at D = 0 is SGDM: its points cover SGDM's; a missing point: no edge on one side)",
             fontsize=10)
    return fig


def claims(data):
    out = {}
    for edge in EDGES:
        ratios = [p / o for *_, p, o, beyond in _points(data, edge)
                  if p is not None and o is not None and not beyond and np.isfinite(p) and np.isfinite(o)]
        out[f"{edge}_cells_compared"] = len(ratios)
        out[f"{edge}_beyond_grid"] = sum(beyond for *_, beyond in _points(data, edge))
        if ratios:
            out[f"{edge}_ratio_median"] = float(np.median(ratios))
            out[f"{edge}_ratio_min"], out[f"{edge}_ratio_max"] = float(min(ratios)), float(max(ratios))
    return out


main = FigureScript("fig_transfer", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
