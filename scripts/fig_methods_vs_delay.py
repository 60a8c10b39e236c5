"""Which delay remedies survive large delays: every method's fastest trajectory against the constant
delay D (the NQM analogue of the AB paper's Fig. 4), and the ranking under heterogeneous workers.

Every number is an answer of ``nqm.best`` (successive refinement over a box, not the argmin of one
grid) with lr × momentum searched, and each method's own hyperparameter too (AB's ρ, DC-ASGD's
λ_dc), robust to a ±2 % nudge of every searched parameter (robust T*_best: the smallest over points
of the largest T in the point's nudge neighbourhood). Noiseless runs are deterministic (one seed;
SGDM, Nesterov and shifted momentum by their exact expected loss, which is then the loss itself);
noisy ones use 5 seeds, ranked by the median T, the bars spanning each seed's own robust T.

(a) noiseless and (b) noisy robust T*_best against D; (c) each method's robust T*_best relative
to SGDM's at the same D (noisy: the bar spans the seeds' ratios); (d) every method under a pool
of 16 workers of which a quarter are four times slower (`workers:16:slow=0.25:4`). A search that
misses — it stopped at its cell limit, or its answer sits on its box's edge — is run again with
twice the cells and a wider box, twice at most (``nqm.search.answered``); what still misses is no
answer: a gap in the figure, never a value.
"""

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.search import answers  # noqa: E402
from nqm.plots.script import FigureScript, suptitle  # noqa: E402

BOX = {"lr": (1e-4, 2.0), "momentum": (0.0, 0.999), "rho": (0.05, 4.0), "lambda_dc": (0.01, 100.0)}
EXACT = ("sgdm", "nesterov", "shifted")  # noiseless and linear: the exact expected loss is the loss
MOMENTUM = {"adam": "b1", "ab-adam": "b1"}  # a method's momentum by its own name (Adam's first-moment decay)
# The delay remedies, and Adam with and without braking (lr × b1 searched, b2 and eps at optax's defaults).
METHODS = ("ab", "dana", "dc-asgd", "nesterov", "ormo", "ormo-da", "restart", "sgdm", "shifted", "staleness", "adam",
           "ab-adam")
# N = 100: each noiseless AB or Adam cell the settled test doubts runs again in float64 for up to 4
# million steps (nqm.settling), which at N = 1,000 made the figure days of CPU; at N = 100, with twice
# the cells per search, it took 1 h 45 min on two cores (the data's wall_seconds add up per search).
FULL = dict(dim=100, delays=[0, 4, 16], budget={0: 20_000, 4: 20_000, 16: 40_000}, sigma=0.05, seeds=5,
            workers="workers:16:slow=0.25:4", workers_budget=30_000, cells={2: 300, 3: 600}, coarse=None,
            noiseless_cells={2: 600, 3: 1200})
SMOKE = dict(dim=20, delays=[4], budget={4: 600}, sigma=0.05, seeds=3, workers="workers:4:slow=0.25:4",
             workers_budget=600, cells={2: 30, 3: 60}, coarse=3, noiseless_cells={2: 30, 3: 60},
             methods=["sgdm", "ab"])


def jobs(methods, size):
    """One ``nqm.best`` search per (method, delay, σ) and per method under the worker pool."""
    import nqm
    from nqm.grids import hyper_dims

    problem, out = nqm.zhang(size["dim"]), {}
    for method in methods:
        box = {k: v for k, v in BOX.items() if k in ("lr", "momentum") or k in hyper_dims(method)}
        box[MOMENTUM.get(method, "momentum")] = box.pop("momentum")
        k = len(box)
        common = dict(method=method, **box, problem=problem, target=0.01, robust=0.02)
        if size["coarse"]:
            common["coarse"] = size["coarse"]
        for delay in size["delays"]:
            budget = size["budget"][delay]
            # Noiseless, a run's T is the step after which it stays below the target: a ringing run's
            # first dip is luck of phase, not speed.
            out[f"{method}_d{delay}_s0"] = dict(common, delay=delay, noise=0.0, max_steps=budget, seeds=1,
                                                 max_cells=size["noiseless_cells"][k], objective="stay",
                                                 **({"expected": True} if method in EXACT else {}))
            out[f"{method}_d{delay}_s{size['sigma']:g}"] = dict(common, delay=delay, noise=size["sigma"],
                                                                 max_steps=budget, seeds=size["seeds"],
                                                                 max_cells=size["cells"][k] * size["seeds"])
        out[f"{method}_workers"] = dict(common, delay=size["workers"], noise=size["sigma"],
                                        max_steps=size["workers_budget"], seeds=size["seeds"],
                                        max_cells=size["cells"][k] * size["seeds"])
    return out


def compute(smoke, methods=None, checkpoint=None):
    size = dict(SMOKE if smoke else FULL)
    names = methods.split(",") if methods else size.pop("methods", None) or list(METHODS)
    size.pop("methods", None)
    found = answers.run(jobs(names, size), checkpoint=checkpoint)
    return {"methods": names, **{k: v for k, v in size.items() if k != "budget"},
            "budget": {str(d): b for d, b in size["budget"].items()}, "box": {k: list(v) for k, v in BOX.items()},
            "target": 0.01, "delta": 0.02, "searches": found}


def _cells(cells, seeds=1):
    return " | ".join(f"{int(v) * seeds:,}" for _, v in sorted(cells.items()))


def _scale(ax):
    """Log, unless nothing positive was drawn (a size too small for any robust point)."""
    drawn = [np.asarray(line.get_ydata(), np.float64) for line in ax.get_lines()]
    return "log" if any((y[np.isfinite(y)] > 0).any() for y in drawn) else "linear"


def draw(data):
    methods, delays, sigma = data["methods"], np.array(data["delays"]), data["sigma"]
    found = data["searches"]
    fig = plt.figure(figsize=(15, 11), layout="constrained")
    (a, b), (c, d) = fig.subplots(2, 2)
    markers = itertools.cycle("osD^v<>ph*Xd")
    x = delays + 0.5
    colours = [f"C{i}" for i in range(10)] + ["black", "darkgoldenrod"]  # twelve methods, twelve colours
    styles = {m: dict(marker=next(markers), color=colours[i % len(colours)]) for i, m in enumerate(methods)}
    for ax, noise in ((a, 0.0), (b, sigma)):
        for j, method in enumerate(methods):
            runs = [found.get(f"{method}_d{delay}_s{noise:g}") for delay in delays]
            y = np.array([answers.value(r) for r in runs])
            shift = 1 + 0.025 * (j - len(methods) / 2)  # spread the markers of one D apart (log axis)
            if noise:
                low, high = np.array([answers.seed_bars(r) for r in runs]).T
                ax.errorbar(x * shift, y, yerr=[y - np.fmin(low, y), np.fmax(high, y) - y], ms=5, capsize=2, lw=1,
                            label=method, **styles[method])
            else:
                ax.plot(x * shift, y, ms=5, lw=1, label=method, **styles[method])
        ax.set(xscale="log", yscale=_scale(ax), xlabel="delay D (+0.5, to show D = 0 on a log axis)",
               ylabel=f"robust T*_best ({answers.which_t(next(r for r in runs if r))})" if any(runs) else "robust T*_best",
               title=f"({'a' if not noise else 'b'}) σ = {noise:g}: " +
                     ("deterministic, one run per point\n(SGDM, Nesterov, shifted: exact expected loss)" if not noise else
                      f"median over {data['seeds']} seeds\nbars: min–max of each seed's own robust T"))
        ax.set_xticks(x, [str(v) for v in delays])
        ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    a.legend(fontsize=8, ncols=2, title="a gap: the search gave no answer", title_fontsize=8)
    for j, method in enumerate(methods):
        ratio = []
        for delay in delays:
            own, sgdm = found.get(f"{method}_d{delay}_s{sigma:g}"), found.get(f"sgdm_d{delay}_s{sigma:g}")
            ratio.append(answers.value(own) / answers.value(sgdm))
        c.plot(x * (1 + 0.025 * (j - len(methods) / 2)), ratio, ms=5, lw=1, label=method, **styles[method])
    c.axhline(1, color="grey", lw=1, ls=":")
    c.set(xscale="log", yscale=_scale(c), xlabel="delay D", ylabel="robust T*_best / SGDM's (< 1: faster than SGDM)",
          title=f"(c) σ = {sigma:g}: relative to SGDM at the same D (medians over seeds)")
    c.set_xticks(x, [str(v) for v in delays])
    c.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    pool = [(m, found.get(f"{m}_workers")) for m in methods]
    pool = sorted(pool, key=lambda item: (np.isnan(answers.value(item[1])), answers.value(item[1])))
    y = np.arange(len(pool))
    values = np.array([answers.value(r) for _, r in pool])
    low, high = np.array([answers.seed_bars(r) for _, r in pool]).T
    d.barh(y, values, color=[styles[m]["color"] for m, _ in pool], alpha=0.6)
    d.errorbar(values, y, xerr=[values - np.fmin(low, values), np.fmax(high, values) - values], fmt="none", color="k",
               capsize=3)
    for yi, (method, run), value, top in zip(y, pool, values, high):
        if not np.isfinite(value):
            label, at = f"no answer ({run['miss']})" if run and run.get("miss") else "no robust point found", 0
        else:
            failed = run.get("robust_seeds") and run["robust_seeds"]["max"] is None
            label, at = f"{value:,.0f}" + (" (a seed: no robust T)" if failed else ""), np.fmax(value, top)
        d.annotate(label, (at, yi), textcoords="offset points", xytext=(8, 0), va="center", fontsize=8)
    d.set(yticks=y, yticklabels=[m for m, _ in pool], xlabel="robust T*_best (median over seeds; bars: seeds' min–max)",
          title=f"(d) {data['workers']} (a quarter of the workers 4× slower),\nσ = {sigma:g}, budget "
                f"{data['workers_budget']:,}, {data['seeds']} seeds")
    if np.isfinite(np.fmax(values, high)).any():
        d.set_xlim(0, 1.45 * np.nanmax(np.fmax(values, high)))
    d.set_ylim(len(pool) - 0.5, -0.5)  # first row on top; a row without a bar inside the axes too
    budgets = ", ".join(f"{int(v):,} at D = {k}" for k, v in data["budget"].items())
    box = data["box"]
    suptitle(fig, f"Every method at its best on zhang N = {data['dim']:,}, target {data['target']:g}: nqm.best over "
                  f"lr ∈ [{box['lr'][0]:g}, {box['lr'][1]:g}] × m ∈ [{box['momentum'][0]:g}, {box['momentum'][1]:g}]"
                  f" (× ρ ∈ [{box['rho'][0]:g}, {box['rho'][1]:g}] for AB, λ_dc ∈ [{box['lambda_dc'][0]:g}, "
                  f"{box['lambda_dc'][1]:g}] for DC-ASGD), robust δ = {data['delta']:g}; budget {budgets}; "
                  f"at most {_cells(data['noiseless_cells'])} cells per noiseless search (2 | 3 parameters searched),"
                  f" {_cells(data['cells'], data['seeds'])} per noisy one, each rerun with twice the cells and a wider box "
                  f"while it misses (twice at most); a missing point: no answer",
             fontsize=11)
    return fig


def claims(data):
    """The answers (only of searches that answered: :func:`nqm.search.answers.answered`), their
    speed-ups over SGDM, and the cost."""
    out, searches, sigma = {}, data["searches"], data["sigma"]
    for key, found in searches.items():
        out[f"{key}_answered"] = int(answers.answered(found))
        if not answers.answered(found):
            continue
        out[f"{key}_robust_t"] = found["robust_t_star"]
        out[f"{key}_t"] = found["t_star"]
        if found.get("robust_seeds"):
            out[f"{key}_seeds_min"], out[f"{key}_seeds_max"] = found["robust_seeds"]["min"], found["robust_seeds"]["max"]
        for name in ("rho", "lambda_dc"):
            if found["robust_point"] and name in found["robust_point"]:
                out[f"{key}_{name}"] = found["robust_point"][name]
        out[f"{key}_cells"] = found["cells"]
    for method in data["methods"]:
        keys = [f"_d{delay}_s{noise:g}" for delay in data["delays"] for noise in (0.0, sigma)] + ["_workers"]
        for key in keys:
            own, sgdm = answers.value(searches.get(method + key)), answers.value(searches.get("sgdm" + key))
            if np.isfinite(own) and np.isfinite(sgdm):
                out[f"{method}{key}_speedup"] = sgdm / own
    out["searches"] = len(searches)
    out["answered"] = sum(answers.answered(f) for f in searches.values())
    out["cells"] = sum(f.get("cells_total", f["cells"]) for f in searches.values())
    out["hours"] = sum(f["wall_seconds"] for f in searches.values()) / 3600
    out["minutes"] = 60 * out["hours"]
    return out


OPTIONS = {"--methods": dict(default=None, help="comma-separated methods (default: the delay remedies, adam and ab-adam)")}
main = FigureScript("fig_methods_vs_delay", compute, draw, claims, doc=__doc__, options=OPTIONS, checkpoint=True,
                    dpi=130).main

if __name__ == "__main__":
    raise SystemExit(main())
