"""The noise question at the paper's scale: does Adaptive Braking help when there is gradient noise but
no delay?

The AB paper's Fig. 1 (second row) claims that with noise alone AB reaches the target faster. Here
SGDM (lr searched) and AB (lr × ρ searched), momentum 0.9, at D = 0 on zhang N = 10⁴, with a
200,000-step budget, for σ = 0.03 and 0.1: every answer by ``nqm.best`` with 5 seeds and a ±2 % nudge
(robust T*_best), so that a lucky seed or a knife-edge point cannot decide it, SGDM and AB over the
same box at each σ. The boxes and the cells (FULL below) were sized to fit in about 45 minutes on two
shared cores; a search that misses is run again with twice the cells and a wider box, and the
0.4.0 run took about an hour on one core.

Left: robust T*_best per method and σ (bars: each seed's own robust T, min–max over the seeds;
hollow: the plain T*_best). Right: the T of every point AB's search evaluated against its ρ (the
lower envelope is the best AB can do at that ρ), with SGDM's robust T*_best as a line, and the
paired comparison: AB at SGDM's robust point for ρ from 0 (SGDM) to 2, on the searches' seeds and
noise draws, which a search's resolution cannot blur.

The searches take about an hour: ``--redraw`` draws from the committed data; an interrupted
run resumes from its checkpoint (``fig_noise_question.nc.partial`` beside the PNG, a JSON file).
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.search import answers  # noqa: E402
from nqm.plots.script import FigureScript, suptitle  # noqa: E402

METHODS = {"sgdm": "SGDM", "ab": "AB (ρ searched)"}
# What fits in about an hour of two shared cores at N = 10⁴ and 200,000 steps (a cell that runs out
# its budget costs seconds, ten at σ = 0.1): momentum fixed at 0.9, the paper's (on the NQM, SGDM's T
# depends on lr/(1 − m) much more than on m alone). The lr box per σ is placed where the target is
# within reach: the exact expected dynamics (`nqm expected --noise 0.03 0.1 --momentum 0.9`) put SGDM's
# steady-state loss at the target 0.01 near lr = 0.45 (σ = 0.03) and lr = 0.04 (σ = 0.1), the
# fastest trajectories just below. ρ over [0.02, 2]. σ = 0.1 gets fewer cells: its cells cost ten
# times more. Settings given per σ are keyed by it ("0.1").
FULL = dict(dim=10_000, budget=200_000, seeds=5, sigmas=[0.03, 0.1],
            box={"lr": {"0.03": (0.05, 2.0), "0.1": (0.01, 0.1)}, "momentum": 0.9, "rho": (0.02, 2.0)},
            max_cells={"sgdm": {"0.03": 150, "0.1": 100}, "ab": {"0.03": 400, "0.1": 250}},
            coarse={"sgdm": {"0.03": 6, "0.1": 5}, "ab": 4})
MATCHED_RHOS = [0.0, 0.02, 0.1, 0.5, 2.0]  # AB at SGDM's robust point (ρ = 0: SGDM)
SMOKE = dict(dim=20, budget=1_500, seeds=3, sigmas=[0.03, 0.1],
             box={"lr": (0.01, 0.5), "momentum": 0.9, "rho": (0.05, 2.0)},
             max_cells={"sgdm": 18, "ab": 36}, coarse={"sgdm": 4, "ab": 2})


def at_sigma(value, sigma):
    """A setting given once, or per σ (a dict keyed by σ as text)."""
    return value[f"{sigma:g}"] if isinstance(value, dict) else value


def jobs(size, delta=0.02):
    """One ``nqm.best`` search per (σ, method): ``{"sgdm_s0.1": kwargs, ...}``."""
    import nqm

    problem = nqm.zhang(size["dim"])
    out = {}
    for sigma in size["sigmas"]:
        for method in METHODS:
            box = {k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in size["box"].items()
                   if k != "rho" or method == "ab"}
            box["lr"] = tuple(at_sigma(size["box"]["lr"], sigma))
            out[f"{method}_s{sigma:g}"] = dict(method=method, **box, delay=0, noise=sigma, problem=problem,
                                               target=0.01, max_steps=size["budget"], seeds=size["seeds"],
                                               robust=delta, max_cells=at_sigma(size["max_cells"][method], sigma),
                                               coarse=at_sigma(size["coarse"][method], sigma))
    return out


def matched(size, found):
    """AB at SGDM's robust point (else its plain one), ρ = 0 (SGDM itself, bit for bit) up to 2, over the searches' seeds
    and their noise draws (a paired comparison, free of the searches' resolution): ``{σ: {"lr",
    "rho", "t": per ρ, each seed's T (None: not settled)}}``."""
    import nqm
    from nqm import sweeps
    from nqm.status import REACHED

    out = {}
    for sigma in size["sigmas"]:
        point = found[f"sgdm_s{sigma:g}"]["robust_point"] or found[f"sgdm_s{sigma:g}"]["point"]  # robust, if any
        if point is None:
            continue
        ds = sweeps.evaluate("ab", lr=point["lr"], momentum=point["momentum"], rho=MATCHED_RHOS, noise=sigma,
                             seed=list(range(size["seeds"])), problem=nqm.zhang(size["dim"]),
                             max_steps=size["budget"], progress=False)
        t = np.where(ds.status.values == REACHED, ds.steps.values, -1)  # (seed, ρ)
        out[f"{sigma:g}"] = {"lr": point["lr"], "rho": MATCHED_RHOS,
                             "t": [[None if v < 0 else int(v) for v in row] for row in t.T]}
    return out


def compute(smoke, checkpoint=None):
    size = SMOKE if smoke else FULL
    found = answers.run(jobs(size), checkpoint=checkpoint, points=lambda key: key.startswith("ab"))
    return {"sigmas": size["sigmas"], "dim": size["dim"], "budget": size["budget"], "seeds": size["seeds"],
            "delta": 0.02, "target": 0.01, "box": size["box"],
            "max_cells": size["max_cells"], "searches": found, "matched": matched(size, found)}


def _matched_t(data, sigma):
    """The paired comparison at σ: (ρ, median, min, max) over seeds (a seed not settled counts as ∞)."""
    entry = data.get("matched", {}).get(f"{sigma:g}")
    if entry is None:
        return None
    t = np.array([[np.inf if v is None else v for v in row] for row in entry["t"]], np.float64)
    return np.array(entry["rho"]), np.median(t, axis=1), t.min(axis=1), t.max(axis=1)


def _lr_boxes(lr):
    """The lr box, one per σ: "[0.05, 2] (σ = 0.03), [0.005, 0.2] (σ = 0.1)"."""
    if not isinstance(lr, dict):
        return f"[{lr[0]:g}, {lr[1]:g}]"
    return ", ".join(f"[{lo:g}, {hi:g}] (σ = {sigma})" for sigma, (lo, hi) in lr.items())


def _momentum(value):
    return f"m ∈ [{value[0]:g}, {value[1]:g}]" if isinstance(value, list) else f"m = {value:g}"


def draw(data):
    found, sigmas = data["searches"], data["sigmas"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 5.2), layout="constrained")
    x = np.arange(len(sigmas))
    for j, (method, name) in enumerate(METHODS.items()):
        runs = [found[f"{method}_s{s:g}"] for s in sigmas]
        robust = np.array([answers.value(r) for r in runs])
        low, high = np.array([answers.seed_bars(r) for r in runs]).T
        plain = np.array([answers.value(r, "t_star") for r in runs])
        xs = x + (j - 0.5) * 0.18
        color = f"C{j}"
        left.errorbar(xs, robust, yerr=[robust - np.fmin(low, robust), np.fmax(high, robust) - robust], fmt="o",
                      color=color, capsize=4, ms=7, label=f"{name}: robust T*_best (bars: min–max over seeds)")
        plain_low = np.array([answers.value(r["seeds"], "min") for r in runs])
        plain_high = np.array([answers.value(r["seeds"], "max") for r in runs])
        left.errorbar(xs + 0.06, plain, yerr=[plain - np.fmin(plain_low, plain), np.fmax(plain_high, plain) - plain],
                      fmt="o", mfc="none", color=color, capsize=3, ms=7,
                      label=f"{name}: plain T*_best (bars: its seeds' min–max)")
        for i, r in enumerate(runs):  # a search that missed: a line of text where its point would be
            if not answers.answered(r):
                left.text(x[i], 0.8 - 0.2 * j, f"{name.split(' (')[0]}: no answer\n(stopped at {r['cells']} cells)",
                          transform=left.get_xaxis_transform(), ha="center", fontsize=9, color=color)
        for xi, value in zip(xs, robust):
            if np.isfinite(value):
                left.annotate(f"{value:,.0f}", (xi, value), textcoords="offset points", xytext=(-6, 8), ha="right",
                              fontsize=8, color=color)
    drawn = any(answers.answered(r) for r in found.values())
    left.set(xticks=x, xticklabels=[f"σ = {s:g}" for s in sigmas], xlim=(-0.6, len(sigmas) - 0.4),
             yscale="log" if len(sigmas) > 1 and drawn else "linear",
             ylabel=f"steps to loss < {data['target']:g} ({answers.which_t(next(iter(found.values())))})",
             title="fastest trajectory found, per method and σ")
    if drawn:
        left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    else:
        left.set_yticks([])
    low_y, high_y = left.get_ylim()
    left.set_ylim(low_y, high_y * 1.25)  # room for the numbers above the markers
    for i, sigma in enumerate(sigmas):
        ab, sgdm = found[f"ab_s{sigma:g}"], found[f"sgdm_s{sigma:g}"]
        points = ab["points"]
        t = np.array([np.nan if v is None else v for v in points["t"]], np.float64)
        color = f"C{i + 2}"
        right.scatter(points["rho"], t, s=6, alpha=0.35, color=color, label=f"AB points, σ = {sigma:g}")
        if ab["robust_point"] is not None and answers.answered(ab):
            right.plot(ab["robust_point"]["rho"], ab["robust_t_star"], "*", ms=14, color=color, mec="k",
                       label=f"AB robust answer, σ = {sigma:g} (ρ = {ab['robust_point']['rho']:.2g})")
        if sgdm["robust_t_star"] is not None and answers.answered(sgdm):
            right.axhline(sgdm["robust_t_star"], color=color, ls="--", lw=1.2,
                          label=f"SGDM robust T*_best, σ = {sigma:g}")
        if (pair := _matched_t(data, sigma)) is not None:
            rho, median, low, high = pair
            braked = rho > 0
            high = np.where(np.isfinite(high), high, median)  # a seed that did not settle: said in the text
            right.errorbar(rho[braked], median[braked], yerr=[median[braked] - low[braked], high[braked] - median[braked]],
                           fmt="D-", color=color, mfc="white", ms=6, capsize=3, lw=1,
                           label=f"AB at SGDM's robust lr, σ = {sigma:g} (median, min–max over seeds;\nnot drawn: most seeds do not settle)")
            right.axhline(median[~braked][0], color=color, ls=":", lw=1.2, label=f"ρ = 0 there (SGDM), σ = {sigma:g}")
    right.set(xscale="log", yscale="log", xlabel="ρ (braking coefficient)", ylabel="T (median over seeds)",
              title="every point AB's search evaluated (converged ones)")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2)
    box = data["box"]
    sigmas_text = "/".join(f"{sigma:g}" for sigma in sigmas)
    cells = ", ".join(f"{k} {'/'.join(f'{at_sigma(v, sigma):,}' for sigma in sigmas)}"
                      for k, v in data["max_cells"].items()) + (f" (σ = {sigmas_text})" if len(sigmas) > 1 else "")
    suptitle(fig, f"Noise without delay (D = 0): SGDM vs AB on zhang N = {data['dim']:,}, budget "
                  f"{data['budget']:,}, target {data['target']:g}; nqm.best over lr ∈ {_lr_boxes(box['lr'])} "
                  f"× {_momentum(box['momentum'])} (× ρ ∈ "
                  f"[{box['rho'][0]:g}, {box['rho'][1]:g}] for AB), {data['seeds']} seeds, robust δ = "
                  f"{data['delta']:g}, {cells} cells (a search that misses: again with twice the cells, a wider box)")
    return fig


def claims(data):
    out = {}
    for sigma in data["sigmas"]:
        for method in METHODS:
            found = data["searches"][f"{method}_s{sigma:g}"]
            key = f"{method}_s{sigma:g}"
            out[f"{key}_answered"] = int(answers.answered(found))
            out[f"{key}_cells"] = found["cells"]
            out[f"{key}_minutes"] = found["wall_seconds"] / 60
            if not answers.answered(found):  # a search that missed gives no value (nqm.search.answered)
                continue
            out[f"{key}_robust_t"] = found["robust_t_star"]
            out[f"{key}_t"] = found["t_star"]
            for end in ("min", "max"):
                out[f"{key}_robust_seeds_{end}"] = None if found["robust_seeds"] is None else found["robust_seeds"][end]
            for end in ("min", "max"):
                out[f"{key}_seeds_{end}"] = None if found["seeds"] is None else found["seeds"][end]
            out[f"{key}_lr"] = None if found["point"] is None else found["point"]["lr"]
        ab, sgdm = data["searches"][f"ab_s{sigma:g}"], data["searches"][f"sgdm_s{sigma:g}"]
        if answers.answered(ab):
            out[f"ab_s{sigma:g}_rho"] = None if ab["point"] is None else ab["point"]["rho"]
            out[f"ab_s{sigma:g}_robust_rho"] = None if ab["robust_point"] is None else ab["robust_point"]["rho"]
        if answers.answered(ab) and answers.answered(sgdm) and ab["robust_t_star"] and sgdm["robust_t_star"]:
            out[f"s{sigma:g}_sgdm_over_ab"] = sgdm["robust_t_star"] / ab["robust_t_star"]
        if (pair := _matched_t(data, sigma)) is not None:
            seeds = data["matched"][f"{sigma:g}"]["t"]
            for rho, median, low, high, row in zip(*pair, seeds):
                key = f"matched_s{sigma:g}_rho{rho:g}"
                out[f"{key}_t"], out[f"{key}_min"], out[f"{key}_max"] = (v if np.isfinite(v) else None
                                                                          for v in (median, low, high))
                out[f"{key}_unsettled"] = sum(v is None for v in row)
            rho, median = pair[0], pair[1]
            out[f"matched_s{sigma:g}_best_braked_over_sgdm"] = float(np.min(median[rho > 0]) / median[rho == 0][0])
    out["hours"] = sum(f["wall_seconds"] for f in data["searches"].values()) / 3600
    out["minutes"] = 60 * out["hours"]
    out["cells"] = sum(f["cells"] for f in data["searches"].values())
    return out


main = FigureScript("fig_noise_question", compute, draw, claims, doc=__doc__, checkpoint=True).main

if __name__ == "__main__":
    raise SystemExit(main())
