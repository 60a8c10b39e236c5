"""What the settled test costs: a sweep's time with it against the same sweep with ``first_passage=True``.

On the default size of ``nqm bench`` (256 cells, N = 10⁴) as a 16 × 16 lr × momentum grid at D = 4 and a 20,000-step budget,
noiseless and σ = 0.05, for SGDM (a linear method: the exact test from its own dynamics) and AB
(no exact test: each reached cell's run is continued past its first passage). Each sweep runs once
to compile, then is timed (best of ``--repeat``); the ratio is settled time / first-passage time
(the issue's target: at most 1.3). ``--quick`` runs a small grid (N = 1,000, 64 cells).

    python scripts/bench_settled.py [--quick] [--repeat 2]
"""

import argparse
import json
import time

import numpy as np

import nqm


def timed(run, repeat: int) -> float:
    run()  # compile
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    nqm.use_every_core()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 1,000, an 8 × 8 grid")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    dim, side, budget = (1_000, 8, 20_000) if args.quick else (10_000, 16, 20_000)
    grid = dict(lr=np.geomspace(0.02, 0.6, side), momentum=np.linspace(0.0, 0.9, side), delay=4,
                problem=nqm.zhang(dim), max_steps=budget, progress=False)
    rows = {}
    for method, extra in (("sgdm", {}), ("ab", {"rho": 0.5})):
        for noise in (0.0, 0.05):
            run = lambda first: nqm.sweep(method, noise=noise, first_passage=first, **grid, **extra)
            settled, literal = run(False), run(True)
            counts = {f"{name}_cells": int((settled.status == code).sum()) for name, code in (("settled", 1), ("transient", 2))}
            seconds = {kind: timed(lambda: run(kind == "first_passage"), args.repeat)
                       for kind in ("first_passage", "settled")}
            rows[f"{method} sigma={noise:g}"] = dict(seconds, ratio=seconds["settled"] / seconds["first_passage"],
                                                     reached=int((literal.status == 1).sum()), **counts)
            r = rows[f"{method} sigma={noise:g}"]
            print(f"{method:5s} σ = {noise:<4g}: first passage {seconds['first_passage']:6.2f} s, settled "
                  f"{seconds['settled']:6.2f} s = {r['ratio']:.2f}×  (of {r['reached']} cells that reached the "
                  f"target, {counts['settled_cells']} settle and {counts['transient_cells']} are transient)")
    print(json.dumps({"dim": dim, "cells": side * side, "budget": budget, "rows": rows}))


if __name__ == "__main__":
    main()
