"""Does braking help Adam under delay? Adam and braked Adam (ab-adam) against SGDM and AB, on a
rotated NQM.

The AB paper leaves braking for other optimizers, such as Adam, to future work. On nqm's default
NQM, axis-aligned with w₀ = 1 in every coordinate, Adam's per-coordinate normalisation is an exact
diagonal preconditioner and a sign step of size 1 lands on the minimum: it wins for reasons that
do not transfer. Here the same spectrum is rotated by a Haar-random Q (``--rotate 0``), where
Adam's coordinates mix the curvatures as a network's do.

Every answer by ``nqm.best``: lr × momentum (Adam: lr × b1) and ρ for the braked ones, robust to a
±2 % nudge; zhang N = 100 rotated, target 0.01, constant D ∈ {0, 4, 16}, budget 20,000 (40,000 at
D = 16); noiseless runs ranked by the step after which they stay below the target (one run per
point), σ = 0.05 over 3 seeds by the median first passage of settled runs.

Left: noiseless robust T*_best against D; right: with noise (bars: each seed's own robust T). A
search that misses (its cell limit, or its box's edge) is run again with more cells and a wider
box (``nqm.search.answered``); one that still misses is no answer: not drawn, and said.

    python scripts/fig_adam_braking.py [--smoke] [--redraw]
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.search import answers  # noqa: E402
from nqm.plots.script import FigureScript, suptitle  # noqa: E402

METHODS = {"sgdm": "SGDM", "ab": "AB", "adam": "Adam", "ab-adam": "braked Adam"}
LR, DECAY, RHO = (1e-4, 2.0), (0.0, 0.999), (0.05, 4.0)
PAIRS = (("ab-adam", "adam"), ("ab", "sgdm"), ("adam", "sgdm"), ("ab-adam", "sgdm"))  # (method, against) speed-ups
FULL = dict(dim=100, rotate=0, delays=[0, 4, 16], budget={0: 20_000, 4: 20_000, 16: 40_000}, sigma=0.05, seeds=3,
            cells={2: 1200, 3: 2400}, noisy_cells={2: 1800, 3: 3600}, coarse=None)
SMOKE = dict(dim=10, rotate=0, delays=[4], budget={4: 1_000}, sigma=0.05, seeds=2,  # (no D = 0: a minute's probe)
             cells={2: 30, 3: 60}, noisy_cells={2: 40, 3: 80}, coarse=3)


def jobs(size):
    """One ``nqm.best`` search per (method, delay, noiseless or noisy)."""
    import nqm

    problem = nqm.zhang(size["dim"]).with_rotation(size["rotate"])
    out = {}
    for method in METHODS:
        box = {"lr": LR, "b1" if "adam" in method else "momentum": DECAY, **({"rho": RHO} if "ab" in method else {})}
        common = dict(method=method, **box, problem=problem, target=0.01, robust=0.02,
                      **({"coarse": size["coarse"]} if size["coarse"] else {}))
        for delay in size["delays"]:
            budget = size["budget"][delay]
            out[f"{method}_d{delay}_s0"] = dict(common, delay=delay, noise=0.0, max_steps=budget, objective="stay",
                                                max_cells=size["cells"][len(box)])
            out[f"{method}_d{delay}_s{size['sigma']:g}"] = dict(common, delay=delay, noise=size["sigma"],
                                                                 max_steps=budget, seeds=size["seeds"],
                                                                 max_cells=size["noisy_cells"][len(box)] * size["seeds"])
    return out


def compute(smoke, checkpoint=None):
    size = SMOKE if smoke else FULL
    found = answers.run(jobs(size), checkpoint=checkpoint)
    return {"dim": size["dim"], "rotate": size["rotate"], "delays": size["delays"], "sigma": size["sigma"],
            "seeds": size["seeds"], "budget": {str(d): b for d, b in size["budget"].items()}, "target": 0.01,
            "delta": 0.02, "searches": found}


def draw(data):
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 5), layout="constrained")
    delays = np.array(data["delays"])
    x = delays + 1
    for ax, noise in zip(axes, (0.0, data["sigma"])):
        for j, method in enumerate(METHODS):
            runs = [data["searches"].get(f"{method}_d{d}_s{noise:g}") for d in delays]
            y = np.array([answers.value(r) for r in runs])
            shift = 1 + 0.04 * (j - 1.5)
            style = dict(color=f"C{j}", marker="osD^"[j], ms=6, capsize=3, lw=1.2, label=METHODS[method])
            low, high = np.array([answers.seed_bars(r) for r in runs]).T if noise else (y, y)
            high = np.where(np.isfinite(high), high, y)
            ax.errorbar(x * shift, y, yerr=[y - np.fmin(low, y), np.fmax(high, y) - y], **style)
            missing = [f"D = {d}" for d, value in zip(delays, y) if not np.isfinite(value)]
            if missing:  # said, not silently left out: a search that did not answer is not drawn
                ax.annotate(f"{METHODS[method]}: no answer at {', '.join(missing)}", (0.98, 0.03 + 0.05 * j),
                            xycoords="axes fraction", ha="right", fontsize=8, color=f"C{j}")
        which = answers.which_t(next(r for r in data["searches"].values()
                                     if r["regime"].get("noise", 0) == noise))
        drawn = any(np.isfinite(answers.value(r)) for k, r in data["searches"].items() if k.endswith(f"_s{noise:g}"))
        ax.set(xscale="log", yscale="log" if drawn else "linear", xlabel="delay D (axis: D + 1)",
               ylabel=f"robust T*_best ({which})",
               title="noiseless, one run per point" if not noise else
               f"σ = {noise:g}: median over {data['seeds']} seeds; bars: each seed's own robust T")
        ax.set_xticks(x, [str(d) for d in delays])
        ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    budgets = ", ".join(f"{int(v):,} at D = {k}" for k, v in data["budget"].items())
    suptitle(fig, f"Braking for Adam under delay, on zhang N = {data['dim']} rotated (Haar Q, seed {data['rotate']}), "
                  f"target {data['target']:g}; nqm.best over lr ∈ [{LR[0]:g}, {LR[1]:g}] × m or b1 ∈ [{DECAY[0]:g}, "
                  f"{DECAY[1]:g}] (× ρ ∈ [{RHO[0]:g}, {RHO[1]:g}] braked), robust δ = {data['delta']:g}; "
                  f"budget {budgets}", fontsize=10)
    return fig


def claims(data):
    """The answers (only of searches that answered: :func:`nqm.search.answers.answered`) and their ratios."""
    out = {}
    for key, found in data["searches"].items():
        out[f"{key}_answered"] = int(answers.answered(found))
        if not answers.answered(found):
            continue
        out[f"{key}_robust_t"], out[f"{key}_t"] = found["robust_t_star"], found["t_star"]
        if found.get("robust_seeds"):
            out[f"{key}_seeds_min"], out[f"{key}_seeds_max"] = found["robust_seeds"]["min"], found["robust_seeds"]["max"]
        if found["robust_point"] and "rho" in found["robust_point"]:
            out[f"{key}_rho"] = found["robust_point"]["rho"]
    for delay in data["delays"]:
        for noise in (0.0, data["sigma"]):
            for braked, plain in PAIRS:  # plain T / own T
                a, b = (answers.value(data["searches"].get(f"{m}_d{delay}_s{noise:g}")) for m in (braked, plain))
                if np.isfinite(a) and np.isfinite(b):
                    out[f"{braked}_speedup_over_{plain}_d{delay}_s{noise:g}"] = b / a
    out["minutes"] = sum(f["wall_seconds"] for f in data["searches"].values()) / 60
    out["cells"] = sum(f.get("cells_total", f["cells"]) for f in data["searches"].values())
    return out


main = FigureScript("fig_adam_braking", compute, draw, claims, doc=__doc__, checkpoint=True).main

if __name__ == "__main__":
    raise SystemExit(main())
