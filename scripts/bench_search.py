"""nqm.best against a brute-force grid: cells run, T*_best against the grid's smallest T (the answer
ratio, ≤ 1 when the search does at least as well), and wall times measured in one run (ratios; on a
shared machine the absolute times are noisy).

    python scripts/bench_search.py [--quick] [--grid 48] [--robust 0.05] [--cases sgdm-n200-d2,adam-n100-d4]

Each case searches lr × momentum (Adam: lr × b1; log scales, log(1 − x) for a decay rate) on
zhang(N) with a constant delay D, noiseless, settled runs, and sweeps the same box on an n × n grid
(geometric in lr and in 1 − x). The grid also gets its own robust T* where ``--robust`` is given
(momentum cases): the largest T over the δ-neighbourhood of each grid point whose T beats the
search's robust T (only those can), every neighbour evaluated with ``nqm.sweeps.evaluate``.
"""

import argparse
import itertools
import json

import numpy as np

import nqm
from nqm import sweeps
from nqm.bench import timed
from nqm.search import answer, best

CASES = {  # name: (method, N, delay, lr box, (second axis, its box), budget, extra hyperparameters)
    "sgdm-n200-d2": ("sgdm", 200, 2, (0.01, 1.5), ("momentum", (0.0, 0.95)), 20_000, {}),
    "sgdm-n100-d16": ("sgdm", 100, 16, (1e-3, 1.0), ("momentum", (0.0, 0.995)), 20_000, {}),
    "ab-n100-d16": ("ab", 100, 16, (1e-3, 1.0), ("momentum", (0.0, 0.995)), 20_000, {"rho": 0.5}),
    "adam-n100-d4": ("adam", 100, 4, (1e-3, 0.5), ("b1", (0.0, 0.99)), 20_000, {}),
    "sgdm-n100-d64": ("sgdm", 100, 64, (1e-4, 0.3), ("momentum", (0.0, 0.999)), 20_000, {}),
    "ab-n100-d64": ("ab", 100, 64, (1e-4, 0.3), ("momentum", (0.0, 0.999)), 20_000, {"rho": 0.5}),
    "sgdm-n1000-d16": ("sgdm", 1000, 16, (1e-3, 1.0), ("momentum", (0.0, 0.999)), 20_000, {}),
    "ab-n1000-d16": ("ab", 1000, 16, (1e-3, 1.0), ("momentum", (0.0, 0.999)), 20_000, {"rho": 0.5}),
}
QUICK = {"sgdm-4": ("sgdm", 60, 4, (1e-2, 4.0), ("momentum", (0.0, 0.99)), 3000, {}),
         "ab-4": ("ab", 60, 4, (1e-2, 4.0), ("momentum", (0.0, 0.99)), 3000, {"rho": 0.5}),
         "adam-4": ("adam", 60, 4, (1e-3, 0.5), ("b1", (0.0, 0.99)), 3000, {})}


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
        method, dim, delay, lr_box, (axis, box), budget, extra = cases[name]
        kw = dict(delay=delay, problem=nqm.zhang(dim), max_steps=budget, progress=False, **extra)
        search_time, ds = timed(lambda: best(method, lr=lr_box, robust=args.robust, max_cells=20_000, **{axis: box}, **kw))
        found = answer(ds)
        n = args.grid
        lr, other = np.geomspace(*lr_box, n), 1 - np.geomspace(1 - box[0], 1 - box[1], n)  # (a decay rate: 1 − x)
        grid_time, grid = timed(lambda: nqm.sweep(method, lr=lr, **{axis: other}, **kw))
        t = t_of(grid.steps.transpose(axis, "lr", ...).values, grid.status.transpose(axis, "lr", ...).values)
        t = t.reshape(n, n)  # (axis, lr)
        row = {"case": name, "method": method, "N": dim, "delay": delay, "budget": budget,
               "box": f"lr={lr_box[0]:g}:{lr_box[1]:g}, {axis}={box[0]:g}:{box[1]:g}",
               "search": {**found, "rounds": int(ds.attrs["rounds"]), "stopped": ds.attrs["stopped"],
                          "wall_s": round(search_time, 1)},
               "grid": {"cells": n * n, "t_star_best": float(t.min()), "wall_s": round(grid_time, 1)},
               "answer_ratio": round(found["t_star"] / float(t.min()), 3) if found["t_star"] else None,
               "cells_ratio": round(found["cells"] / (n * n), 3), "wall_ratio": round(search_time / grid_time, 3)}
        if args.robust is not None and axis == "momentum":
            mm, ll = np.meshgrid(other, lr, indexing="ij")
            bound = found["robust_t_star"] if found["robust_t_star"] is not None else np.inf
            seconds, (value, cells) = timed(lambda: grid_robust(method, ll.ravel(), mm.ravel(), t.ravel(), args.robust,
                                                                bound + 1, **kw))
            row["grid"].update(robust_t_star=value, robust_cells=cells, robust_wall_s=round(seconds, 1))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
