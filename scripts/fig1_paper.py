"""AB paper, Figure 1 at the paper's scale: steps to target over learning rate × momentum, SGDM
against Adaptive Braking (ρ = 0.5), N = 10⁴, 32 × 32 cells per panel, 500,000 steps.

Rows (D, σ) = (0, 0), (0, σ), (D, 0), (D, σ) with D = 4 and σ = 0.05 (the paper publishes neither;
``scripts/fig1_heatmaps.py`` draws the same layout at a smaller size). Each panel gives two T*:
the settled one (the 1st percentile of T over the cells that reach the target and stay) and the
first passage's (over every cell that reached it, as the paper counts). SGDM runs as itself, so
its settled test is the exact one (its steady state and stability at every eigenvalue); AB is
continued past its first passage (nqm.settling).

Resumable: each method's sweep keeps its finished cells and its running cells' state beside the
figure's checkpoint (``figures/fig1_paper.nc.partial.sgdm`` and ``.ab``), so an interrupted run —
Ctrl-C, SIGTERM, a lost session — resumes where it stopped, bit-identical; the compute time of
every run that went into it is added up in ``….seconds`` beside them and recorded in the data.
Started once per core, each process sweeps a method of its own (:mod:`nqm.sharing`) and the
first to finish reads the other's from its checkpoint when it is done.

    python scripts/fig1_paper.py [--smoke] [--redraw]     (hours: see the README)
    taskset -c 0 python scripts/fig1_paper.py & taskset -c 1 python scripts/fig1_paper.py
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

sys.path.insert(0, str(Path(__file__).parent))  # Figure 1's grid, beside this script

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fig1_heatmaps import SIZES  # noqa: E402
from nqm import sharing  # noqa: E402
from nqm.io import write_bytes  # noqa: E402
from nqm.plots.heatmap import draw_panels  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402
from nqm.status import REACHED, TRANSIENT, t_star  # noqa: E402

METHODS = {"sgdm": "SGDM", "ab": "AB"}
DELAY, NOISE, RHO = 4, 0.05, 0.5
OPTIONS = {"--no-progress": dict(action="store_true", help="no progress bar")}


def compute(smoke, no_progress=False, checkpoint=None):
    import nqm

    s = SIZES["smoke" if smoke else "paper"]
    grid = dict(lr=np.geomspace(0.01, 4.0, s["side"]), momentum=np.linspace(0.0, 0.98, s["side"]),
                delay=[0, DELAY], noise=[0.0, NOISE], problem=nqm.zhang(s["dim"]), max_steps=s["max_steps"],
                progress=not no_progress)
    panels, tests, clock = {}, {}, checkpoint and f"{checkpoint}.seconds"
    for method in sharing.each(METHODS, checkpoint):  # started once per core, each core sweeps a method
        with _timed(clock, method):
            ds = nqm.sweep(method, checkpoint=checkpoint and f"{checkpoint}.{method}",
                           **grid, **({"rho": RHO} if method == "ab" else {}))
        panels[method] = ds.squeeze("rho", drop=True) if "rho" in ds.dims else ds
        tests[f"settled_test_{method}"] = ds.attrs["settled_test"]
    seconds = _seconds(clock) if clock else {}
    return stack({m: panels[m] for m in METHODS}, "method").assign_attrs(  # (the machine: each result's ``platform``)
        fig1_size="smoke" if smoke else "paper", rho=RHO, cores=len(os.sched_getaffinity(0)), **tests,
        **{f"compute_seconds_{m}": round(v, 1) for m, v in seconds.items()})


def _seconds(clock: str) -> dict:
    """The compute time of every run that went into each method's sweep so far."""
    return json.loads(Path(clock).read_text()) if os.path.exists(clock) else {}


@contextlib.contextmanager
def _timed(clock, method: str, every: float = 60.0):
    """Add the time spent inside to ``clock`` every ``every`` seconds and at the end, so that an
    interrupted run's time counts too (one killed outright loses at most ``every``)."""
    last, stop = [time.perf_counter()], threading.Event()

    def add():
        now = time.perf_counter()
        with sharing.locked(clock):  # several processes may add theirs
            total = _seconds(clock)
            total[method] = total.get(method, 0.0) + now - last[0]
            write_bytes(clock, json.dumps(total).encode())
        last[0] = now

    def tick():
        while not stop.wait(every):
            add()

    ticker = threading.Thread(target=tick, daemon=True)
    if clock:
        ticker.start()
    try:
        yield
    finally:
        stop.set()
        if clock:
            ticker.join()
            add()


def first_passage(panel):
    """The panel as the first passage counts it: every cell that reached the target converged."""
    return panel.assign(status=panel.status.where(panel.status != TRANSIENT, REACHED))


def _panel(ds, method, delay, noise):
    return ds.sel({"method": method, "delay": delay, "noise": noise}).isel(seed=0)


def draw(ds):
    panels = {f"{METHODS[m]}{' ρ = %g' % ds.attrs['rho'] if m == 'ab' else ''}, D = {d}, σ = {n:g}; first passage "
              f"T* = {t_star(first_passage(_panel(ds, m, d, n))):,.0f}": _panel(ds, m, d, n)
              for d in ds.delay.values for n in ds.noise.values for m in ds.method.values}
    rows, cols = ds.sizes["delay"] * ds.sizes["noise"], ds.sizes["method"]
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols + 1.0, 3.3 * rows + 1.3), sharex=True, sharey=True,
                             layout="constrained", squeeze=False)
    draw_panels(fig, axes, panels, shrink=0.6)
    a = ds.attrs
    suptitle(fig, f"Steps to loss < {a['target']:g} on the NQM, {a['spectrum']}, budget {int(a['max_steps']):,} "
                  f"steps, {ds.sizes['lr']} × {ds.sizes['momentum']} grid (lr × m), seed {ds.seed.values[0]}\n"
                  "T* = 1st percentile of T over the cells that settle (first passage: over every cell that "
                  "reached the target); hatched: reached it and did not stay")
    return fig


def claims(ds):
    """Per panel: the settled and first-passage counts and T*, and the largest learning rate at
    which any cell converges (settled) — the paper's rows compare these between the columns."""
    out = {}
    lr = ds.lr.values
    for d in ds.delay.values:
        for n in ds.noise.values:
            for m in ds.method.values:
                panel, key = _panel(ds, m, d, n), f"{m}_d{d}_s{n:g}"
                settled = (panel.status == REACHED).values
                out[f"{key}_converged"] = int(settled.sum())
                out[f"{key}_transient"] = int((panel.status == TRANSIENT).sum())
                out[f"{key}_reached"] = out[f"{key}_converged"] + out[f"{key}_transient"]
                out[f"{key}_t_star"] = t_star(panel)
                out[f"{key}_t_star_first_passage"] = t_star(first_passage(panel))
                out[f"{key}_max_lr"] = float(lr[settled.any(axis=0)].max()) if settled.any() else float("nan")
    out.update({f"compute_minutes_{m}": ds.attrs[f"compute_seconds_{m}"] / 60 for m in METHODS})
    return out


main = FigureScript("fig1_paper", compute, draw, claims, doc=__doc__, options=OPTIONS, checkpoint=True).main

if __name__ == "__main__":
    raise SystemExit(main())
