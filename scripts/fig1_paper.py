"""AB paper, Figure 1 at the paper's scale: steps to target over learning rate × momentum, SGDM
against Adaptive Braking (ρ = 0.5), N = 10⁴, 32 × 32 cells per panel, 500,000 steps.

Rows (D, σ) = (0, 0), (0, σ), (D, 0), (D, σ) with D = 4 and σ = 0.05 (the paper publishes neither;
``scripts/fig1_heatmaps.py`` draws the same layout at a smaller size). Each panel gives two T*:
the settled one (the 1st percentile of T over the cells that reach the target and stay) and the
first passage's (over every cell that reached it, as the paper counts). SGDM runs as itself, so
its settled test is the exact one (its steady state and stability at every eigenvalue); AB is
continued past its first passage (nqm.settling).

Swept in pieces — each panel in four blocks of momentum rows (the same numbers as one sweep of the
whole grid: a cell's result does not depend on the grid it runs in) — and each finished piece kept
in ``figures/fig1_paper_pieces/`` with its compute time and machine: commit them as they come, and
a later run — in another session, on a fresh checkout — sweeps only the pieces still missing. Within
a piece, the running sweep keeps its finished cells and its running cells' state beside the
figure's checkpoint (``figures/fig1_paper.nc.partial.ab_d4_s0.05_m8-15`` …; up to hundreds of MB,
not committed), so an interruption — Ctrl-C, SIGTERM — resumes where it stopped, bit-identical; the
compute time of every run that went into a piece is added up in ``….seconds`` beside them. Started
once per core, each process sweeps the pieces no other holds (:mod:`nqm.sharing`) and reads theirs
when they are done.

    python scripts/fig1_paper.py [--smoke] [--redraw]     (hours: see the README)
    taskset -c 0 python scripts/fig1_paper.py & taskset -c 1 python scripts/fig1_paper.py
    python scripts/fig1_paper.py --only 'ab_d4_*'     (only those pieces: e.g. on a GPU beside the CPU)

With ``--only``, a run sweeps the pieces whose names match and keeps them; it draws the figure only
if every other piece is kept already (else it says which are missing and exits without drawing).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import sys
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

sys.path.insert(0, str(Path(__file__).parent))  # Figure 1's grid, panels and title, beside this script

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from fig1_heatmaps import SIZES, heading, panels  # noqa: E402
from nqm import sharing  # noqa: E402
from nqm.errors import NqmError  # noqa: E402
from nqm.io import write_bytes  # noqa: E402
from nqm.plots.heatmap import draw_panels  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402
from nqm.status import BUDGET, DIVERGED, REACHED, TRANSIENT, UNDECIDED, t_star  # noqa: E402

METHODS = {"sgdm": "SGDM", "ab": "AB"}
DELAY, NOISE, RHO = 4, 0.05, 0.5
PANELS = {f"{m}_d{d}_s{n:g}": (m, d, n) for m in METHODS for d in (0, DELAY) for n in (0.0, NOISE)}
ROW_BLOCKS = 4  # each panel is swept in blocks of momentum rows: a block is what one sitting must finish
PIECES_DIR = "fig1_paper_pieces"  # beside the figure: each finished block, kept across sessions
OPTIONS = {"--no-progress": dict(action="store_true", help="no progress bar"),
           "--only": dict(nargs="+", metavar="PIECE", help="sweep only the pieces whose names match these "
                          "patterns (as in fig1_paper_pieces/, e.g. 'ab_d4_*'); draw only if the rest are kept")}


def pieces(side: int) -> dict:
    """The figure's pieces on a ``side`` × ``side`` grid: ``{"ab_d4_s0.05_m8-15": (panel, rows)}``,
    each a block of one panel's momentum rows."""
    blocks = np.array_split(np.arange(side), min(ROW_BLOCKS, side))
    return {f"{panel}_m{rows[0]}-{rows[-1]}": (panel, rows) for panel in PANELS for rows in blocks}


def compute(smoke, no_progress=False, only=None, checkpoint=None):
    import nqm

    s = SIZES["smoke" if smoke else "paper"]
    grid = dict(lr=np.geomspace(0.01, 4.0, s["side"]), momentum=np.linspace(0.0, 0.98, s["side"]),
                problem=nqm.zhang(s["dim"]), max_steps=s["max_steps"], progress=not no_progress)
    plan, kept = pieces(s["side"]), checkpoint and not smoke and Path(checkpoint).with_name(PIECES_DIR)
    found = {key: _piece(key, *plan[key], grid, checkpoint, kept)
             for key in sharing.each(_chosen(plan, only), checkpoint)}
    missing = [key for key in plan if key not in found and not (kept and _kept_file(kept, key).is_file())]
    if missing:  # only with --only: the rest is another run's
        print(f"fig1_paper: {len(found)} piece(s) swept; not drawn: {len(missing)} piece(s) are not kept yet "
              f"({', '.join(missing[:4])}{', …' if len(missing) > 4 else ''})")
        return None
    found.update({key: _piece(key, *plan[key], grid, checkpoint, kept) for key in plan if key not in found})
    of = {m: [key for key in plan if PANELS[plan[key][0]][0] == m] for m in METHODS}
    methods = {m: _joined([found[key] for key in keys]) for m, keys in of.items()}
    seconds = {panel: sum(found[key].attrs.get("compute_seconds", np.nan) for key in plan if plan[key][0] == panel)
               for panel in PANELS}
    return stack({m: ds.squeeze("rho", drop=True) if "rho" in ds.dims else ds for m, ds in methods.items()},
                 "method").assign_attrs(
        fig1_size="smoke" if smoke else "paper", rho=RHO, cores=len(os.sched_getaffinity(0)),
        platform=" | ".join(sorted({ds.attrs["platform"] for ds in found.values()})),  # the machines it ran on
        **{f"settled_test_{m}": "; ".join(dict.fromkeys(found[key].attrs["settled_test"] for key in keys))
           for m, keys in of.items()},
        **{f"compute_seconds_{panel}": round(value, 1) for panel, value in seconds.items()},
        **{f"compute_seconds_{m}": round(sum(v for p, v in seconds.items() if PANELS[p][0] == m), 1) for m in METHODS})


def _chosen(plan: dict, only) -> list:
    """The keys of ``plan`` that ``only`` (glob patterns; ``None``: all) names, in the plan's order."""
    keys = [key for key in plan if only is None or any(fnmatch.fnmatchcase(key, pattern) for pattern in only)]
    if not keys:
        raise NqmError(f"--only {' '.join(only)}: no piece has such a name; they are named like "
                       f"{next(iter(plan))} (panel, then momentum rows)")
    return keys


def _joined(pieces):
    """One method's pieces as one dataset, with the attributes they share (their times are the figure's)."""
    ds = xr.combine_by_coords(pieces, combine_attrs="drop_conflicts")
    ds.attrs.pop("compute_seconds", None)
    return ds


def _piece(key: str, panel: str, rows, grid: dict, checkpoint, kept):
    """One piece's sweep (``rows`` of ``panel``): read from ``kept`` (a directory of finished pieces,
    committed between sessions) when it is there, else swept — resumable mid-piece from
    ``CHECKPOINT.KEY`` — with its compute time over every run that went into it, and kept."""
    import nqm

    grid = {**grid, "momentum": grid["momentum"][rows]}
    path = kept and _kept_file(kept, key)
    method, delay, noise = PANELS[panel]
    if path and path.is_file():
        return _same_piece(nqm.load(path), method, delay, noise, grid, path)
    clock = checkpoint and f"{checkpoint}.seconds"
    with _timed(clock, key):
        ds = nqm.sweep(method, delay=delay, noise=noise, checkpoint=checkpoint and f"{checkpoint}.{key}", **grid,
                       **({"rho": RHO} if method == "ab" else {}))
    if clock:
        ds = ds.assign_attrs(compute_seconds=round(_seconds(clock)[key], 1))
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        nqm.save(ds, path)
    return ds


def _kept_file(kept, key: str) -> Path:
    """Where the piece ``key`` is kept in the directory ``kept``."""
    return Path(kept) / f"{key}.nc"


def _same_piece(ds, method: str, delay: int, noise: float, grid: dict, path):
    """A kept piece, if it is this piece: the same method (and ρ), delay, noise, grid, problem, budget
    and settled test, computed by this version of nqm (else one error line naming what differs)."""
    import nqm

    wanted = {"method": method, "delay": [delay], "noise": [noise], "lr": grid["lr"], "momentum": grid["momentum"],
              "spectrum_sha256": grid["problem"].describe()["spectrum_sha256"], "max_steps": grid["max_steps"],
              "target": grid.get("target", 0.01), "first_passage": 0, "nqm_version": nqm.__version__}
    if method == "ab":
        wanted["rho"] = [RHO]
    found = {"method": ds.attrs.get("method"), "delay": ds.delay.values.tolist(), "noise": ds.noise.values.tolist(),
             "lr": ds.lr.values, "momentum": ds.momentum.values, "rho": ds.rho.values.tolist() if "rho" in ds.dims
             else None, **{k: ds.attrs.get(k) for k in ("spectrum_sha256", "max_steps", "target", "first_passage",
                                                         "nqm_version")}}
    for name, want in wanted.items():
        have = found[name]
        same = np.array_equal(np.asarray(have, dtype=object if isinstance(want, str) else None), want) \
            if not isinstance(want, str) else have == want
        if not same:
            raise NqmError(f"{path} is not this piece: its {name} is {_short(have)}, this run's {_short(want)}; "
                           "remove it to sweep that piece again")
    return ds


def _short(value) -> str:
    text = " ".join(str(np.asarray(value).tolist()).split())
    return text if len(text) <= 40 else text[:37] + "…"


def _seconds(clock: str) -> dict:
    """The compute time of every run that went into each piece so far."""
    return json.loads(Path(clock).read_text()) if os.path.exists(clock) else {}


@contextlib.contextmanager
def _timed(clock, method: str, every: float = 60.0):
    """Add the compute time spent inside to ``clock`` every ``every`` seconds and at the end, so that
    an interrupted run's time counts too (one killed outright loses at most ``every``). Compute time
    is this process's CPU time, every thread's: core-seconds, which work beside it does not inflate."""
    last, stop = [time.process_time()], threading.Event()

    def add():
        now = time.process_time()
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
    return panel.assign(status=panel.status.where(~panel.status.isin([TRANSIENT, UNDECIDED]), REACHED))


def draw(ds):
    titled = {f"{METHODS[m]}{' ρ = %g' % ds.attrs['rho'] if m == 'ab' else ''}, D = {d}, σ = {n:g}; first passage "
              f"T* = {t_star(first_passage(panel)):,.0f}": panel for (d, n, m), panel in panels(ds, "method").items()}
    rows, cols = ds.sizes["delay"] * ds.sizes["noise"], ds.sizes["method"]
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols + 1.0, 3.3 * rows + 1.3), sharex=True, sharey=True,
                             layout="constrained", squeeze=False)
    draw_panels(fig, axes, titled, shrink=0.6)
    suptitle(fig, heading(ds) + "\nT* = 1st percentile of T over the cells that settle (first passage: over every "
                  "cell that reached the target); hatched: reached it and did not stay")
    return fig


def panel_claims(panel) -> dict:
    """One panel's settled and first-passage counts and T*, the cells that diverged or ran out of
    budget, and the largest learning rate at which any cell converges (settled) — the paper's rows
    compare these between the columns."""
    settled = panel.status == REACHED
    out = {"converged": int(settled.sum()), "transient": int((panel.status == TRANSIENT).sum())}
    out["reached"] = out["converged"] + out["transient"]
    out["diverged"], out["budget"] = int((panel.status == DIVERGED).sum()), int((panel.status == BUDGET).sum())
    out["t_star"], out["t_star_first_passage"] = t_star(panel), t_star(first_passage(panel))
    out["max_lr"] = float(panel.lr.values[settled.any("momentum").values].max()) if settled.any() else float("nan")
    return out


def claims(ds):
    """Per panel, :func:`panel_claims`; and each method's compute time."""
    out = {}
    for (d, n, m), panel in panels(ds, "method").items():
        out.update({f"{m}_d{d}_s{n:g}_{k}": v for k, v in panel_claims(panel).items()})
    out.update({f"compute_minutes_{m}": ds.attrs[f"compute_seconds_{m}"] / 60 for m in METHODS})
    return out


main = FigureScript("fig1_paper", compute, draw, claims, doc=__doc__, options=OPTIONS, checkpoint=True).main

if __name__ == "__main__":
    raise SystemExit(main())
