"""nqm.best against a brute-force grid: cells evaluated, T*_best against the grid's smallest T, and
wall times measured in one run (ratios; on a shared machine the absolute times are noisy).

    python scripts/bench_search.py [--quick] [--grid 48] [--robust 0.05] [--cases sgdm-16,ab-64]

Each case searches lr × momentum (log scales) on zhang(N) with a constant delay D, noiseless, and
sweeps the same box on an n × n grid (geometric in lr and in 1 − m). The grid also gets its own
robust T* where ``--robust`` is given: the largest T over the δ-neighbourhood of each grid point
whose T beats the search's robust T (only those can), every neighbour evaluated with
``nqm.sweeps.evaluate``.
"""

import argparse
import itertools
import json
import time

import numpy as np

import nqm
from nqm import sweeps
from nqm.search import answer, best

CASES = {  # name: (method, N, delay, lr box, momentum box, budget, extra hyperparameters)
    "sgdm-n100-d16": ("sgdm", 100, 16, (1e-3, 1.0), (0.0, 0.995), 20_000, {}),
    "ab-n100-d16": ("ab", 100, 16, (1e-3, 1.0), (0.0, 0.995), 20_000, {"rho": 0.5}),
    "sgdm-n100-d64": ("sgdm", 100, 64, (1e-4, 0.3), (0.0, 0.999), 20_000, {}),
    "ab-n100-d64": ("ab", 100, 64, (1e-4, 0.3), (0.0, 0.999), 20_000, {"rho": 0.5}),
    "sgdm-n1000-d16": ("sgdm", 1000, 16, (1e-3, 1.0), (0.0, 0.999), 20_000, {}),
    "ab-n1000-d16": ("ab", 1000, 16, (1e-3, 1.0), (0.0, 0.999), 20_000, {"rho": 0.5}),
}
QUICK = {"sgdm-4": ("sgdm", 60, 4, (1e-2, 4.0), (0.0, 0.99), 3000, {}),
         "ab-4": ("ab", 60, 4, (1e-2, 4.0), (0.0, 0.99), 3000, {"rho": 0.5})}


def t_of(steps, status):
    return np.where(status == nqm.REACHED, steps, np.inf)


def grid_robust(method, lr, m, t, delta, bound, **kw):
    """The grid's robust T*: over the points with T < bound, the largest T of their neighbourhood."""
    keep = np.flatnonzero(t < bound)
    if keep.size == 0:
        return float("inf"), 0
    points = [(a, b) for i in keep for a, b in itertools.product(
        (lr[i], lr[i] * (1 - delta), lr[i] * (1 + delta)),
        (m[i], max(0.0, 1 - (1 - m[i]) * (1 - delta)), max(0.0, 1 - (1 - m[i]) * (1 + delta))))]
    points = np.array(points)
    ds = sweeps.evaluate(method, lr=points[:, 0], momentum=points[:, 1], **kw)
    robust = t_of(ds.steps.values[0], ds.status.values[0]).reshape(keep.size, 9).max(1)
    return float(robust.min()), points.shape[0]


def main():
    nqm.use_every_core()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small problems (seconds)")
    parser.add_argument("--grid", type=int, default=48, help="points per axis of the brute-force grid")
    parser.add_argument("--robust", type=float, default=None, help="also search the robust T at this nudge")
    parser.add_argument("--cases", default=None, help="comma-separated case names")
    args = parser.parse_args()
    cases = QUICK if args.quick else CASES
    names = args.cases.split(",") if args.cases else list(cases)
    for name in names:
        method, dim, delay, lr_box, m_box, budget, extra = cases[name]
        kw = dict(delay=delay, problem=nqm.zhang(dim), max_steps=budget, progress=False, **extra)
        start = time.perf_counter()
        ds = best(method, lr=lr_box, momentum=m_box, robust=args.robust, max_cells=20_000, **kw)
        search_time = time.perf_counter() - start
        found = answer(ds)
        n = args.grid
        lr, m = np.geomspace(*lr_box, n), 1 - np.geomspace(1 - m_box[0], 1 - m_box[1], n)
        start = time.perf_counter()
        grid = nqm.sweep(method, lr=lr, momentum=m, **kw)
        grid_time = time.perf_counter() - start
        t = t_of(grid.steps.values, grid.status.values).squeeze()  # (momentum, lr)
        row = {"case": name, "method": method, "N": dim, "delay": delay, "budget": budget,
               "box": f"lr={lr_box[0]:g}:{lr_box[1]:g}, momentum={m_box[0]:g}:{m_box[1]:g}",
               "search": {**found, "rounds": int(ds.attrs["rounds"]), "stopped": ds.attrs["stopped"],
                          "wall_s": round(search_time, 1)},
               "grid": {"cells": n * n, "t_star_best": float(t.min()), "wall_s": round(grid_time, 1)},
               "cells_ratio": round(found["cells"] / (n * n), 3), "wall_ratio": round(search_time / grid_time, 3)}
        if args.robust is not None:
            mm, ll = np.meshgrid(m, lr, indexing="ij")
            bound = found["robust_t_star"] if found["robust_t_star"] is not None else np.inf
            start = time.perf_counter()
            value, cells = grid_robust(method, ll.ravel(), mm.ravel(), t.ravel(), args.robust, bound + 1, **kw)
            row["grid"].update(robust_t_star=value, robust_cells=cells,
                               robust_wall_s=round(time.perf_counter() - start, 1))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
