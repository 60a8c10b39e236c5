"""How delay moves the critical batch size of the nonlinear remedies, by Monte Carlo with seeds.

``fig_batch_delay`` answers it for SGD, SGDM and preconditioned SGD by the exact mode. AB, shifted
momentum, OrMo, DANA, Adam and braked Adam have no exact mode: here ``nqm scaling`` searches each
by Monte Carlo, over 3 seeds (a point's T the median of its seeds' first passages, a point counting
only if it settles in every seed),
with SGDM searched the same way as the baseline. A smaller regime than the exact figures', to fit
the CPU: zhang N = 100, σ = 0.3 per example (σ/√B per batch), target 0.01, budget 50,000 steps,
B = 1, 4, …, 4,096, constant delay D ∈ {0, 1, 4, 16}. Searched: lr × momentum (Adam: lr × b1) and
ρ for the braked ones, each method's other hyperparameters at their defaults.

Left: the critical batch size (steps reach twice perfect scaling) against D, only where every batch
size answered. Right: the best steps against B at D = 4, bars the seeds' min–max at each answer. A
search that misses is run again with more cells and a wider box, and a batch size whose best steps
exceed a smaller one's (less noise cannot need more steps) is searched again (``nqm scaling``); what
still misses is a gap, never a value.

    python scripts/fig_batch_delay_mc.py [--smoke] [--redraw]     (once per core: see fig1_paper.py)
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
sys.path.insert(0, str(Path(__file__).parent))  # fig_batch_delay's claims, beside this script

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from fig_batch_delay import critical_claims  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

METHODS = {"sgdm": "SGDM", "ab": "AB", "shifted": "shifted momentum", "ormo": "OrMo", "dana": "DANA", "adam": "Adam",
           "ab-adam": "braked Adam"}
LR, DECAY, RHO = (1e-4, 2.0), (0.0, 0.999), (0.05, 4.0)
BOXES = {m: {"lr": LR, "b1" if m in ("adam", "ab-adam") else "momentum": DECAY, **({"rho": RHO} if "ab" in m else {})}
         for m in METHODS}
FULL = dict(dim=100, budget=50_000, sizes=4 ** np.arange(7), delays=[0, 1, 4, 16], seeds=3, cells={2: 300, 3: 600},
            coarse={2: 6, 3: 4}, shown=4)
SMOKE = dict(dim=10, budget=2_000, sizes=np.array([1, 16, 256]), delays=[0, 4], seeds=2, cells={2: 40, 3: 60},
             coarse={2: 3, 3: 2}, shown=4, methods=["sgdm", "adam"])
SIGMA, TARGET = 0.3, 0.01


def compute(smoke, checkpoint=None):
    """Each (delay, method) curve is kept in ``checkpoint`` as it finishes, and the batch sizes of
    the curve under way beside it, so a rerun resumes; started once per core, each process takes
    curves of its own (:mod:`nqm.sharing`)."""
    import nqm
    from nqm import sharing
    from nqm.search.scaling import scaling

    size = SMOKE if smoke else FULL
    methods = size.get("methods", list(METHODS))
    curves = {}
    for key in sharing.each([f"{m}.d{d}" for d in size["delays"] for m in methods], checkpoint):
        m, delay = key.split(".d")
        k = len(BOXES[m])
        curves[key] = sharing.kept(checkpoint, key)
        if curves[key] is None:
            curves[key] = sharing.keep(checkpoint, key, scaling(
                m, delay=int(delay), batch_size=size["sizes"], noise=SIGMA, problem=nqm.zhang(size["dim"]),
                target=TARGET, max_steps=size["budget"], seeds=size["seeds"], max_cells=size["cells"][k],
                coarse=size["coarse"][k], progress=False, **BOXES[m], checkpoint=checkpoint and f"{checkpoint}.{key}"))
    per_delay = {}
    for delay in size["delays"]:
        found = {m: curves[f"{m}.d{delay}"] for m in methods}
        critical = xr.DataArray([found[m].attrs["critical_batch_size"] for m in methods], dims="method")
        per_delay[delay] = stack({m: found[m][["steps", "steps_min", "steps_max", "perfect", "lr", "answered"]]
                                  for m in methods}, "method").assign(critical_batch_size=critical)
    first = found[methods[0]].attrs
    return stack(per_delay, "delay").assign_attrs(
        {k: first[k] for k in ("spectrum", "dim", "target", "max_steps", "evaluation", "seeds")}, noise=SIGMA,
        shown=size["shown"], boxes="; ".join(f"{m}: " + ", ".join(f"{k} in [{lo:g}, {hi:g}]" for k, (lo, hi) in
                                                                  BOXES[m].items()) for m in methods))


def draw(data):
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), layout="constrained")
    shown = int(data.attrs["shown"]) if int(data.attrs["shown"]) in data.delay.values else int(data.delay.values[-1])
    missing = _missing(data)
    for j, m in enumerate(data.method.values):  # sel({...}): sel(method=...) is sel's own option
        style = dict(color=f"C{j}", label=METHODS[m] + (f" ({missing[m]} without an answer)" if missing[m] else ""))
        left.plot(data.delay.values + 1, data.critical_batch_size.sel({"method": m}), "D-", mfc="white", ms=6, **style)
        at = data.sel({"method": m, "delay": shown})
        low, high = np.fmin(at.steps_min, at.steps), np.where(np.isfinite(at.steps_max), at.steps_max, at.steps)
        right.errorbar(data.batch_size * (1 + 0.04 * (j - 3)), at.steps, yerr=[at.steps - low, high - at.steps],
                       fmt="o-", ms=4, capsize=2, lw=1, **style)
    left.set(xscale="log", yscale=_scale(data.critical_batch_size), xlabel="delay D (axis: D + 1)",
             ylabel="critical batch size (steps = 2 × perfect scaling)")
    left.set_xticks(data.delay.values + 1, [str(d) for d in data.delay.values])
    if left.get_yscale() == "log":
        left.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    for axis in (left.xaxis, left.yaxis):
        axis.set_minor_formatter(NullFormatter())
    left.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    right.set(xscale="log", yscale=_scale(data.steps), xlabel="batch size B (noise σ/√B)",
              ylabel=f"best steps to loss < {data.attrs['target']:g} (median over seeds)",
              title=f"D = {shown}; bars: the seeds' min–max at each answer")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), title="a gap: no answer (a search\nthat "
                 "missed after reruns,\nor steps rising with B)" if any(missing.values()) else None, title_fontsize=7)
    a = data.attrs
    suptitle(fig, f"How delay moves the critical batch size, by Monte Carlo: {a['spectrum']}, σ = {a['noise']:g} per "
                  f"example (σ/√B per batch), budget {int(a['max_steps']):,}, {int(a['seeds'])} seeds, settled runs\n"
                  f"the best lr (and momentum or b1, and ρ) searched at every batch size; {a['boxes']}", fontsize=9)
    return fig


def _scale(values):
    """Log, unless nothing was drawn (no search answered, as at the smoke size)."""
    values = np.asarray(values, np.float64)
    return "log" if (np.isfinite(values) & (values > 0)).any() else "linear"


def _missing(data):
    """Per method: how many (delay, batch size) searches have no answer (``nqm.search.answered``, and
    best steps that rise with B: less noise cannot need more steps), drawn as gaps."""
    answered = data.answered.transpose("method", ...).values
    return {m: int((answered[i] == 0).sum()) for i, m in enumerate(data.method.values)}


def claims(data):
    out = critical_claims(data)
    out["no_answer"] = {m: n for m, n in _missing(data).items() if n}
    return out


main = FigureScript("fig_batch_delay_mc", compute, draw, claims, doc=__doc__, checkpoint=True).main

if __name__ == "__main__":
    raise SystemExit(main())
