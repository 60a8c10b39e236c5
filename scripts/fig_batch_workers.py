"""Parallelism as batch size × workers: the time to the target when P = B × W examples are computed
per unit of time.

W round-robin workers each compute a gradient on a batch of B examples in one unit of time and the
server applies each as it arrives: W updates per unit of time, every one W − 1 updates stale (a
constant delay D = W − 1). The time to the target is then T / W, T the best steps at batch size B
and delay W − 1. For a budget P of examples per unit of time, is it better spent on larger batches
or on more workers?

The regime of ``fig_batch_delay`` (zhang spectrum, N = 1,000, σ = 0.3 per example, σ/√B per batch,
target 0.01, budget 200,000 steps, the exact expected loss, the best lr (and m) searched by
``nqm scaling`` at every B): SGD, SGDM and preconditioned SGD (p = 0.5) with W ∈ {1, 4, 16} and
B = 1, 4, …, 16,384. Left: time to the target against P for each W. Right: the time with W
workers relative to one worker with the whole batch (B = P) at the same P. Exact: no seeds, no spread; each search stops within 1 % of its best T.

    python scripts/fig_batch_workers.py [--smoke] [--redraw]
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
sys.path.insert(0, str(Path(__file__).parent))  # the regime of fig_batch_delay, beside this script

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from fig_batch_delay import METHODS, SIGMA, searches  # noqa: E402  (the same regime)
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

FULL = dict(dim=1_000, budget=200_000, sizes=4 ** np.arange(8), workers=[1, 4, 16])
SMOKE = dict(dim=20, budget=2_000, sizes=np.array([1, 4, 16]), workers=[1, 4])


def compute(smoke):
    size = SMOKE if smoke else FULL
    per_workers = {}
    for workers in size["workers"]:
        found = searches(size, delay=workers - 1)
        first = found["sgd"].attrs
        per_workers[workers] = stack({m: found[m][["steps", "lr", "momentum"]] for m in METHODS}, "method")
    data = stack(per_workers, "workers")
    return data.assign(time=data.steps / data.workers).assign_attrs(
        {k: first[k] for k in ("spectrum", "dim", "target", "max_steps", "evaluation")}, noise=SIGMA, power=0.5)


def parallelism(data):
    """Time to the target on the (method, workers, P) grid, P = B × W (NaN where no B gives it)."""
    p = np.unique(np.outer(data.workers.values, data.batch_size.values))
    out = xr.full_like(data.time.isel(batch_size=0), np.nan).expand_dims(parallelism=p).copy()
    for w in data.workers.values:
        for b in data.batch_size.values:
            out.loc[{"workers": w, "parallelism": w * b}] = data.time.sel(workers=w, batch_size=b)
    return out.transpose("method", "workers", "parallelism")


def draw(data):
    time = parallelism(data)
    fig, axes = plt.subplots(1, len(METHODS) + 1, figsize=(17, 4.8), layout="constrained")
    p = time.parallelism.values
    for ax, m in zip(axes, time.method.values):
        for j, w in enumerate(data.workers.values):
            ax.plot(w * data.batch_size, data.time.sel({"method": m, "workers": w}), "o-", ms=4, color=f"C{j}",
                    label=f"W = {w} (D = {w - 1})")
        known = time.sel({"method": m}).min("workers")
        start = float(known[np.isfinite(known)][0]) * float(p[np.isfinite(known)][0])
        ax.plot(p, start / p, ":", color="grey", lw=1, label="perfect scaling (time ∝ 1/P)")
        ax.set(xscale="log", yscale="log", xlabel="parallelism P = B × W (examples per unit time)",
               ylabel=f"time to loss < {data.attrs['target']:g} (steps / W)", title=METHODS[m])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7.5)
    right = axes[-1]
    relative = time / time.sel(workers=1)
    for j, m in enumerate(time.method.values):
        for w, style in zip(time.workers.values[1:], ("-", "--", ":", "-.")):
            right.plot(p, relative.sel({"method": m, "workers": w}), "D" + style, color=f"C{j + 3}", mfc="white", ms=5,
                       label=f"{METHODS[m]}, W = {w}")
    right.axhline(1, color="grey", lw=1, ls=":")
    right.set(xscale="log", yscale="log", xlabel="parallelism P = B × W",
              ylabel="time with W workers / time with one (B = P)", title="workers against batch size at the same P\n"
              "(> 1: the batch size is the better use of P)")
    right.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    for axis in (right.xaxis, right.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=7, loc="upper left")
    a = data.attrs
    suptitle(fig, f"Batch size or workers? W round-robin workers (constant delay W − 1), batches of B: {a['spectrum']}, "
                  f"σ = {a['noise']:g} per example (σ/√B per batch), budget {int(a['max_steps']):,} steps\n"
                  f"{a['evaluation']} (no seeds); the best lr (and m) searched at every (B, W)")
    return fig


def claims(data):
    time = parallelism(data)
    out = {}
    for m in time.method.values:
        for w in time.workers.values:
            for p in time.parallelism.values:
                value = float(time.sel({"method": m, "workers": w, "parallelism": p}))
                one = float(time.sel({"method": m, "workers": 1, "parallelism": p}))
                if np.isfinite(value):
                    out[f"{m}_w{int(w)}_p{int(p)}_time"] = value
                if np.isfinite(value) and np.isfinite(one) and w > 1:
                    out[f"{m}_w{int(w)}_p{int(p)}_vs_w1"] = value / one
        # the fastest time at any split, and where
        t = time.sel({"method": m})
        i = np.unravel_index(np.nanargmin(t.values), t.shape)
        out[f"{m}_fastest_time"] = float(t.values[i])
        out[f"{m}_fastest_workers"], out[f"{m}_fastest_p"] = int(t.workers[i[0]]), int(t.parallelism[i[1]])
    return out


main = FigureScript("fig_batch_workers", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
