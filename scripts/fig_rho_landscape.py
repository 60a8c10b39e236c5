"""How to choose ρ: Adaptive Braking's best braking coefficient against the constant delay D, found by
search, robust to a nudge, over seeds.

On zhang N = 100, target 0.01, for D ∈ {0, 1, 4, 16} and σ ∈ {0, 0.05}, every T is a robust answer
of ``nqm.best`` over lr × momentum (successive refinement over a box, not the argmin of one grid):
robust T*_best, the smallest over points of the largest T in the point's ±2 % nudge neighbourhood.
Per (D, σ), over the same box and regime:

* SGDM (AB at ρ = 0; noiseless: by its exact expected loss, which is then the loss itself);
* AB at each fixed ρ of ``rhos``, then a search over ρ: each round evaluates, on a log scale, the
  midpoints between the best ρ so far and its two neighbours (beyond the last ρ, its mirror image,
  within ρ ∈ [0.05, 4]), ``rounds`` rounds. *The best ρ* is the one with the smallest robust
  T*_best; the curve of robust T*_best against ρ shows how flat the optimum is;
* noiseless, as a check: AB with ρ searched jointly with lr and momentum (one 3-parameter
  ``nqm.best``, as fig_methods_vs_delay does). A joint search can land on slower robust points than
  the per-ρ searches (it did at every D at N = 1,000), which is why the best ρ is searched over ρ,
  one ``nqm.best`` per ρ.

Noiseless runs are deterministic (one seed); noisy ones use 5 seeds, ranked by the median T (a
point counting only if it settles in every seed), the bars spanning each seed's own robust T at the
answer. *Within the spread* of the best: a ρ whose
robust T*_best is at most the largest seed's robust T at the best ρ (noiseless, with no seeds:
within 5 % of the best).

Left and middle: per σ, robust T*_best against ρ (SGDM at ρ = 0 and as a dashed level), one line
per D through every ρ evaluated, the best ρ a star. Right: the best ρ
against D, the bar spanning the evaluated ρ within the spread of the best.

FULL: N = 100, six fixed ρ, two rounds over ρ (each search's time is in the data, ``wall_seconds``;
about 25 minutes of searching under the 0.4.0 settled test, whose floor probes run on the unstable
eigenvalues alone; under 0.3.0's, whose float64 probes reran whole cells, N = 1,000 was days of CPU);
the searches are resumable: an interrupted run resumes from
its checkpoint (``fig_rho_landscape.nc.partial`` beside the PNG, a JSON file), and ``--redraw``
draws from the committed data.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from nqm.search import answers  # noqa: E402
from nqm.search.answered import ATTEMPTS, GROWTH  # noqa: E402
from nqm.plots.script import FigureScript, suptitle  # noqa: E402

BOX = {"lr": (1e-4, 2.0), "momentum": (0.0, 0.999), "rho": (0.05, 4.0)}
EXACT_WITHIN = 0.05  # noiseless (no seed spread): the ρ within 5 % of the best count as "within"
FULL = dict(dim=100, delays=[0, 1, 4, 16], sigmas=[0.0, 0.05], target=0.01,
            budget={0: 20_000, 1: 20_000, 4: 20_000, 16: 40_000}, seeds=5, delta=0.02,
            rhos=[0.25, 0.5, 0.75, 1.0, 1.5, 2.0], rounds=2, cells=300, noiseless_cells=600, joint_cells=1200,
            coarse=None)
SMOKE = dict(dim=32, delays=[0, 4], sigmas=[0.0, 0.05], target=0.01, budget={0: 2_000, 4: 2_000}, seeds=3,
             delta=0.02, rhos=[0.5, 1.0], rounds=1, cells=40, noiseless_cells=120, joint_cells=180, coarse=3)


def key(delay, sigma, what):
    """A search's key: ``sgdm_d4_s0.05``, ``rho0.5_d4_s0.05`` (AB, ρ fixed), ``joint_d4_s0`` (AB, ρ
    searched with lr and momentum)."""
    return f"{what}_d{delay}_s{sigma:g}"


def _job(size, delay, sigma, **search):
    """One ``nqm.best`` search at (D, σ): the regime every search of the figure shares."""
    import nqm

    seeds = size["seeds"] if sigma else 1
    cells = size["cells"] * seeds if sigma else size["noiseless_cells"]
    shared = dict(lr=BOX["lr"], momentum=BOX["momentum"], problem=nqm.zhang(size["dim"]), target=size["target"],
                  robust=size["delta"], delay=delay, noise=sigma, max_steps=size["budget"][delay], seeds=seeds,
                  max_cells=cells, first_passage=size.get("first_passage", False),
                  **({"coarse": size["coarse"]} if size["coarse"] else {}))
    return {**shared, **search}


def jobs(size):
    """Per (D, σ): SGDM and AB at each fixed ρ of ``size["rhos"]``; noiseless, AB with ρ searched jointly
    (its own ``joint_cells``)."""
    out = {}
    for sigma in size["sigmas"]:
        for delay in size["delays"]:
            out[key(delay, sigma, "sgdm")] = _job(size, delay, sigma, method="sgdm",
                                                  **({} if sigma else {"expected": True}))
    for delay in size["delays"]:
        out[key(delay, 0.0, "joint")] = _job(size, delay, 0.0, method="ab", rho=BOX["rho"],
                                             max_cells=size["joint_cells"])
    for sigma in size["sigmas"]:
        for delay in size["delays"]:
            for rho in size["rhos"]:
                out[key(delay, sigma, f"rho{rho:g}")] = _job(size, delay, sigma, method="ab", rho=rho)
    return out


def landscape(found, delay, sigma):
    """Every ρ evaluated at (D, σ) (AB, ρ fixed), sorted: ``[(ρ, outcome), ...]``."""
    tail = f"_{key(delay, sigma, '')[1:]}"
    return sorted((float(k[3:-len(tail)]), f) for k, f in found.items() if k.startswith("rho") and k.endswith(tail))


def next_rhos(found, delay, sigma):
    """The next round's ρ at (D, σ): the log-midpoints between the best ρ so far and its neighbours
    (beyond the last ρ evaluated, its mirror image, within the box), 3 significant digits, new ones only."""
    points = landscape(found, delay, sigma)
    rhos = [rho for rho, _ in points]
    t = [answers.value(f) for _, f in points]
    if not np.isfinite(t).any():
        return []
    i = int(np.nanargmin(np.where(np.isfinite(t), t, np.nan)))
    lo, hi = BOX["rho"]
    out = []
    for j, mirror in ((i - 1, i + 1), (i + 1, i - 1)):
        if 0 <= j < len(rhos):
            out.append(np.sqrt(rhos[i] * rhos[j]))
        elif 0 <= mirror < len(rhos):
            out.append(min(hi, max(lo, rhos[i] ** 2 / rhos[mirror])))
    out = [float(f"{r:.3g}") for r in out]
    return [r for r in dict.fromkeys(out) if r not in rhos]


def compute(smoke, checkpoint=None):
    return collect(SMOKE if smoke else FULL, checkpoint)


def collect(size, checkpoint=None):
    """Run :func:`jobs`, then ``size["rounds"]`` rounds over ρ (all resumable), and keep the
    outcomes with the regime: the figure's data."""
    found = answers.run(jobs(size), checkpoint=checkpoint)
    for _ in range(size["rounds"]):
        more = {key(d, s, f"rho{rho:g}"): _job(size, d, s, method="ab", rho=rho)
                for s in size["sigmas"] for d in size["delays"] for rho in next_rhos(found, d, s)}
        found.update(answers.run(more, checkpoint=checkpoint))
    return {**{k: v for k, v in size.items() if k != "budget"}, "budget": {str(d): b for d, b in size["budget"].items()},
            "box": {k: list(v) for k, v in BOX.items()}, "within": EXACT_WITHIN, "searches": found}


def best(data, delay, sigma):
    """The best ρ at (D, σ) (smallest robust T*_best; NaN if none), its outcome, the bound of its
    spread (its largest seed's robust T; noiseless: 5 % above its robust T; ∞ when a seed has
    none), and every evaluated ρ whose robust T*_best is within that bound."""
    points = [(rho, f) for rho, f in landscape(data["searches"], delay, sigma) if np.isfinite(answers.value(f))]
    if not points:
        return np.nan, None, np.nan, []
    rho, found = min(points, key=lambda p: answers.value(p[1]))
    bound = answers.seed_bars(found)[1] if sigma else answers.value(found) * (1 + data["within"])
    bound = np.inf if np.isnan(bound) else bound
    return rho, found, bound, [r for r, f in points if answers.value(f) <= bound]


def _landscape_line(ax, data, delay, sigma, color):
    """One D's robust T*_best against ρ (answered searches only: a gap where a search gave no answer),
    SGDM at ρ = 0 and as a dashed level, the best ρ a star, the joint search's answer a diamond."""
    found = data["searches"]
    sgdm = found[key(delay, sigma, "sgdm")]
    runs = [(0.0, sgdm)] + landscape(found, delay, sigma)
    x = np.array([rho for rho, _ in runs])
    y = np.array([answers.value(f) for _, f in runs])
    scale = answers.value(sgdm)
    label = f"D = {delay}: SGDM {scale:,.0f} steps" if np.isfinite(scale) else f"D = {delay}: SGDM no answer"
    if sigma:
        low, high = np.array([answers.seed_bars(f) for _, f in runs]).T
        ax.errorbar(x, y, yerr=[y - np.fmin(low, y), np.fmax(high, y) - y], color=color, marker="o", ms=4, capsize=3,
                    lw=1.2, label=label)  # NaN where a search gave no answer: a gap in the line
    else:
        ax.plot(x, y, "o-", color=color, ms=4, lw=1.2, label=label)
    if np.isfinite(scale):
        ax.axhline(scale, color=color, ls="--", lw=0.8)
    rho, at, _, _ = best(data, delay, sigma)
    if at is not None:
        ax.plot(rho, answers.value(at), "*", ms=16, color=color, mec="k", zorder=5)
    joint = found.get(key(delay, sigma, "joint"))
    if joint and np.isfinite(answers.value(joint)):
        ax.plot(joint["robust_point"]["rho"], answers.value(joint), "D", ms=8, mfc="none", mew=1.5, color=color,
                zorder=5)


def draw(data):
    delays, sigmas = data["delays"], data["sigmas"]
    found = data["searches"]
    fig = plt.figure(figsize=(17, 5.8), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 0.8])
    for ax, sigma in zip(axes, sigmas):
        for i, delay in enumerate(delays):
            _landscape_line(ax, data, delay, sigma, f"C{i}")
        handles, labels = ax.get_legend_handles_labels()
        handles += [Line2D([], [], ls="", marker="*", ms=12, color="grey", mec="k"), Line2D([], [], ls="--", color="grey")]
        labels += ["the best ρ (smallest robust T*_best)", "SGDM's robust T*_best at that D (ρ = 0)"]
        if not sigma:
            handles.append(Line2D([], [], ls="", marker="D", mfc="none", mew=1.5, color="grey"))
            labels.append(f"check: ρ searched jointly with lr, m (up to {GROWTH ** (ATTEMPTS - 1) * data['joint_cells']:,} cells)")
        ax.legend(handles, labels, fontsize=8, loc="upper left", ncols=2, title_fontsize=8,
                  title="a gap in a line: that search gave no answer")
        spread = (f"median of {data['seeds']} seeds; bars: each seed's robust T, min–max" if sigma else
                  "deterministic (SGDM: its exact expected loss)")
        ax.set(xlabel="ρ (braking coefficient; ρ = 0 is SGDM)", ylabel="robust T*_best (steps; log scale)", yscale="log",
               title=f"({'ab'[sigmas.index(sigma)]}) σ = {sigma:g}: {spread}")
        ax.title.set_fontsize(10)
    low = min(ax.get_ylim()[0] for ax in axes[:2])
    high = max(ax.get_ylim()[1] for ax in axes[:2])
    for ax in axes[:2]:
        ax.set_ylim(low, high * 8)  # room for the legend above the curves
    right = axes[2]
    x = np.array(delays) + 0.5
    for sigma, color, shift in zip(sigmas, ("C7", "C3"), (0.95, 1.05)):
        found_best = [best(data, d, sigma) for d in delays]
        rho = np.array([b[0] for b in found_best])
        low = np.array([min(b[3]) if b[3] else np.nan for b in found_best])
        high = np.array([max(b[3]) if b[3] else np.nan for b in found_best])
        within = "the seeds' spread" if sigma else f"{data['within']:.0%}"
        right.errorbar(x * shift, (low + high) / 2, yerr=(high - low) / 2, fmt="none", ecolor=color, elinewidth=7,
                       capsize=7, capthick=2, alpha=0.4, label=f"σ = {sigma:g}: every ρ within {within} of the best")
        right.plot(x * shift, rho, "*-", ms=15, mec="k", color=color, lw=1, label=f"σ = {sigma:g}: the best ρ", zorder=5)
    right.set(xscale="log", xlabel="delay D (+0.5, to show D = 0 on a log axis)", ylabel="ρ",
              ylim=(0, 1.35 * right.get_ylim()[1]),
              title="(c) the best ρ against D; bars: the ρ as good")
    right.title.set_fontsize(10)
    right.set_xticks(x, [str(d) for d in delays])
    right.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    right.legend(fontsize=8, loc="upper left")
    box = data["box"]
    budgets = ", ".join(f"{int(v):,} at D = {d}" for d, v in data["budget"].items())
    suptitle(fig, f"How to choose ρ: Adaptive Braking on zhang N = {data['dim']:,}, target {data['target']:g} (T: "
                  f"{answers.which_t(next(iter(data['searches'].values())))}), budget "
                  f"{budgets}. Every point a robust answer (nudge δ = {data['delta']:g}) of nqm.best over lr ∈ "
                  f"[{box['lr'][0]:g}, {box['lr'][1]:g}] × m ∈ [{box['momentum'][0]:g}, {box['momentum'][1]:g}] at a"
                  f" fixed ρ: ρ ∈ {{{', '.join(f'{r:g}' for r in data['rhos'])}}}, then {data['rounds']} rounds over ρ "
                  f"(midpoints around the best), {data['noiseless_cells']:,} cells per noiseless search, "
                  f"{data['cells'] * data['seeds']:,} per noisy one ({data['seeds']} seeds), a search that misses rerun "
                  f"once with twice the cells and a wider box; {sum(answers.answered(f) for f in found.values())} of "
                  f"{len(found)} searches answered, {sum(f['cells'] for f in found.values()):,} cells", fontsize=11)
    return fig


def claims(data):
    """Only answers (:func:`nqm.search.answers.value`: NaN where a search missed): the best ρ, its
    robust T*_best and seed spread, SGDM's, the speed-up, the ρ as good, every ρ's robust T*_best,
    the joint search's; per (D, σ) the searches and cells, and over all the answered count and time."""
    out = {}
    for sigma in data["sigmas"]:
        for delay in data["delays"]:
            name = key(delay, sigma, "")[1:]
            sgdm = data["searches"][key(delay, sigma, "sgdm")]
            rho, at, _, inside = best(data, delay, sigma)
            out[f"{name}_best_rho"] = rho
            out[f"{name}_robust_t"] = answers.value(at)
            out[f"{name}_sgdm_robust_t"] = answers.value(sgdm)
            if sigma:
                out[f"{name}_seeds_min"], out[f"{name}_seeds_max"] = answers.seed_bars(at)
                if answers.answered(sgdm):
                    out[f"{name}_sgdm_seeds_min"], out[f"{name}_sgdm_seeds_max"] = answers.seed_bars(sgdm)
            out[f"{name}_speedup"] = answers.value(sgdm) / answers.value(at)
            out[f"{name}_within_lo"] = min(inside) if inside else None
            out[f"{name}_within_hi"] = max(inside) if inside else None
            for r, f in landscape(data["searches"], delay, sigma):
                out[f"{name}_rho{r:g}_robust_t"] = answers.value(f)
            joint = data["searches"].get(key(delay, sigma, "joint"))
            if joint:
                out[f"{name}_joint_rho"] = joint["robust_point"]["rho"] if answers.answered(joint) else np.nan
                out[f"{name}_joint_robust_t"] = answers.value(joint)
            out[f"{name}_searches"] = sum(k.endswith(f"_{name}") for k in data["searches"])
            out[f"{name}_cells"] = sum(f["cells"] for k, f in data["searches"].items() if k.endswith(f"_{name}"))
    out["searches"] = len(data["searches"])
    out["answered"] = sum(answers.answered(f) for f in data["searches"].values())
    out["cells"] = sum(f["cells"] for f in data["searches"].values())
    out["minutes"] = sum(f["wall_seconds"] for f in data["searches"].values()) / 60
    return out


main = FigureScript("fig_rho_landscape", compute, draw, claims, doc=__doc__, checkpoint=True, dpi=130).main

if __name__ == "__main__":
    raise SystemExit(main())
