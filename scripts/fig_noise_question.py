"""The noise question at the paper's scale: does Adaptive Braking help when there is gradient noise but
no delay?

The AB paper's Fig. 1 (second row) claims that with noise alone AB reaches the target faster. Here
SGDM (lr × momentum searched) and AB (lr × momentum × ρ searched) at D = 0 on zhang N = 10⁴, with a
200,000-step budget, for each σ: every answer by ``nqm.best`` over the same box with 5 seeds and a
±2 % nudge (robust T*_best), so that a lucky seed or a knife-edge point cannot decide it.

Left: robust T*_best per method and σ (bars: each seed's own robust T, min–max over the seeds;
hollow: the plain T*_best). Right: the T of every point AB's search evaluated against its ρ (the
lower envelope is the best AB can do at that ρ), with SGDM's robust T*_best as a line.

The searches take hours: ``--redraw`` draws from the committed data; an interrupted run resumes
from its checkpoint (``fig_noise_question.nc.partial`` beside the PNG, a JSON file).
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.plots.script import FigureScript, suptitle  # noqa: E402

METHODS = {"sgdm": "SGDM", "ab": "AB (ρ searched)"}
BOX = {"lr": (1e-3, 2.0), "momentum": (0.0, 0.999), "rho": (0.02, 2.0)}


def jobs(sigmas, dim, budget, seeds, delta, max_cells, coarse=None):
    """One ``nqm.best`` search per (σ, method): ``{"sgdm_s0.1": kwargs, ...}``."""
    import nqm

    problem = nqm.zhang(dim)
    out = {}
    for sigma in sigmas:
        for method in METHODS:
            box = {k: v for k, v in BOX.items() if k != "rho" or method == "ab"}
            out[f"{method}_s{sigma:g}"] = dict(method=method, **box, delay=0, noise=sigma, problem=problem,
                                               target=0.01, max_steps=budget, seeds=seeds, robust=delta,
                                               max_cells=max_cells[method], coarse=coarse)
    return out


def compute(smoke, budget=None, sigmas=None, max_cells_sgdm=None, max_cells_ab=None, checkpoint=None):
    from nqm.plots import searches

    if smoke:
        dim, steps, seeds, coarse, cells, default_sigmas = 50, 2_000, 3, 4, {"sgdm": 200, "ab": 400}, [0.03, 0.1]
    else:
        dim, steps, seeds, coarse, cells, default_sigmas = 10_000, 200_000, 5, None, {"sgdm": 1200, "ab": 2400}, [0.03, 0.1]
    steps = budget or steps
    cells = {"sgdm": max_cells_sgdm or cells["sgdm"], "ab": max_cells_ab or cells["ab"]}
    sigmas = [float(s) for s in sigmas.split(",")] if sigmas else default_sigmas
    found = searches.run(jobs(sigmas, dim, steps, seeds, 0.02, cells, coarse), checkpoint=checkpoint,
                         points=lambda key: key.startswith("ab"))
    return {"sigmas": sigmas, "dim": dim, "budget": steps, "seeds": seeds, "delta": 0.02, "target": 0.01,
            "box": {k: list(v) for k, v in BOX.items()}, "max_cells": cells, "searches": found}


def _t(found, key):
    return np.nan if found[key] is None else float(found[key])


def draw(data):
    found, sigmas = data["searches"], data["sigmas"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 5.2), layout="constrained")
    x = np.arange(len(sigmas))
    for j, (method, name) in enumerate(METHODS.items()):
        runs = [found[f"{method}_s{s:g}"] for s in sigmas]
        robust = np.array([_t(r, "robust_t_star") for r in runs])
        low = np.array([np.nan if r["robust_seeds"] is None else _t(r["robust_seeds"], "min") for r in runs])
        high = np.array([np.nan if r["robust_seeds"] is None else _t(r["robust_seeds"], "max") for r in runs])
        plain = np.array([_t(r, "t_star") for r in runs])
        xs = x + (j - 0.5) * 0.18
        color = f"C{j}"
        left.errorbar(xs, robust, yerr=[robust - np.fmin(low, robust), np.fmax(high, robust) - robust], fmt="o",
                      color=color, capsize=4, ms=7, label=f"{name}: robust T*_best (bars: min–max over seeds)")
        left.plot(xs + 0.06, plain, "o", mfc="none", color=color, ms=7, label=f"{name}: plain T*_best")
        for xi, value in zip(xs, robust):
            if np.isfinite(value):
                left.annotate(f"{value:,.0f}", (xi, value), textcoords="offset points", xytext=(-6, 8), ha="right",
                              fontsize=8, color=color)
    left.set(xticks=x, xticklabels=[f"σ = {s:g}" for s in sigmas], yscale="log", xlim=(-0.6, len(sigmas) - 0.4),
             ylabel=f"steps to loss < {data['target']:g}", title="fastest trajectory found, per method and σ")
    left.legend(fontsize=8, loc="upper left")
    for i, sigma in enumerate(sigmas):
        ab, sgdm = found[f"ab_s{sigma:g}"], found[f"sgdm_s{sigma:g}"]
        points = ab["points"]
        t = np.array([np.nan if v is None else v for v in points["t"]], np.float64)
        color = f"C{i + 2}"
        right.scatter(points["rho"], t, s=6, alpha=0.35, color=color, label=f"AB points, σ = {sigma:g}")
        if ab["robust_point"] is not None:
            right.plot(ab["robust_point"]["rho"], ab["robust_t_star"], "*", ms=14, color=color, mec="k",
                       label=f"AB robust answer, σ = {sigma:g} (ρ = {ab['robust_point']['rho']:.2g})")
        if sgdm["robust_t_star"] is not None:
            right.axhline(sgdm["robust_t_star"], color=color, ls="--", lw=1.2,
                          label=f"SGDM robust T*_best, σ = {sigma:g}")
    right.set(xscale="log", yscale="log", xlabel="ρ (braking coefficient)", ylabel="T (median over seeds)",
              title="every point AB's search evaluated (converged ones)")
    right.legend(fontsize=7, loc="upper left")
    box = data["box"]
    cells = ", ".join(f"{k} {v:,}" for k, v in data["max_cells"].items())
    suptitle(fig, f"Noise without delay (D = 0): SGDM vs AB on zhang N = {data['dim']:,}, budget "
                  f"{data['budget']:,}, target {data['target']:g}; nqm.best over lr ∈ [{box['lr'][0]:g}, "
                  f"{box['lr'][1]:g}] × m ∈ [{box['momentum'][0]:g}, {box['momentum'][1]:g}] (× ρ ∈ "
                  f"[{box['rho'][0]:g}, {box['rho'][1]:g}] for AB), {data['seeds']} seeds, robust δ = "
                  f"{data['delta']:g}, at most {cells} cells")
    return fig


def claims(data):
    out = {}
    for sigma in data["sigmas"]:
        for method in METHODS:
            found = data["searches"][f"{method}_s{sigma:g}"]
            key = f"{method}_s{sigma:g}"
            out[f"{key}_robust_t"] = found["robust_t_star"]
            out[f"{key}_t"] = found["t_star"]
            for end in ("min", "max"):
                out[f"{key}_robust_seeds_{end}"] = None if found["robust_seeds"] is None else found["robust_seeds"][end]
            out[f"{key}_cells"] = found["cells"]
            out[f"{key}_minutes"] = found["wall_seconds"] / 60
        ab, sgdm = data["searches"][f"ab_s{sigma:g}"], data["searches"][f"sgdm_s{sigma:g}"]
        out[f"ab_s{sigma:g}_robust_rho"] = None if ab["robust_point"] is None else ab["robust_point"]["rho"]
        if ab["robust_t_star"] and sgdm["robust_t_star"]:
            out[f"s{sigma:g}_sgdm_over_ab"] = sgdm["robust_t_star"] / ab["robust_t_star"]
    out["hours"] = sum(f["wall_seconds"] for f in data["searches"].values()) / 3600
    return out


OPTIONS = {
    "--budget": dict(type=int, default=None, help="steps per run (default 200,000; smoke 2,000)"),
    "--sigmas": dict(default=None, help="comma-separated noise scales (default 0.03,0.1)"),
    "--max-cells-sgdm": dict(type=int, default=None, help="cells (points × seeds) per SGDM search"),
    "--max-cells-ab": dict(type=int, default=None, help="cells (points × seeds) per AB search"),
}
main = FigureScript("fig_noise_question", compute, draw, claims, doc=__doc__, options=OPTIONS, checkpoint=True).main

if __name__ == "__main__":
    raise SystemExit(main())
