"""What the settled test costs: a sweep's time with it against the same sweep with ``first_passage=True``.

A 16 × 16 lr × momentum grid at D = 4, N = 1,000 and a 20,000-step budget, where most cells reach
the target, noiseless and σ = 0.05, for SGDM (a linear method: the exact test from its own
dynamics) and AB (no exact test: each reached cell settles, stepping on to its horizon — at least
2T + 1000 — in the same engine run). Each sweep runs once to compile, then is timed (best of
``--repeat``); the ratio is settled time / first-passage time (the target: at most 1.3).

Printed beside each ratio, the floor the continued test cannot go below: the cell-steps of the
settling windows, Σ (horizon − T) over the reached cells, as a share of the first pass's Σ steps.
For SGDM also the settled sweep with ``skip_decided=True`` (cells whose exact test fails are not
run: the unstable ones, and with noise those whose steady state is at or above the target), as a
ratio to the settled sweep that runs them, here and on Figure 1's box (lr 0.01–4 × m 0–0.98,
D ∈ {0, 4}, σ = 0.05, a 50,000-step budget), where the decided cells are stable ones whose noise
floor lies above the target and would run the whole budget.
``--quick``: an 8 × 8 grid. ``--bench-grid``: ``nqm bench``'s size (N = 10⁴, 256 cells), where no
cell reaches the target within the budget, so the ratio is the settling machinery's own cost.

    python scripts/bench_settled.py [--quick | --bench-grid] [--repeat 2]
"""

import argparse
import json
import time

import numpy as np

import nqm
from nqm.engine.step import settle_window
from nqm.settling import EXACT
from nqm.status import SKIPPED


def timed(run, repeat: int) -> float:
    run()  # compile
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def skipped_share(whole, skipping) -> tuple[int, float]:
    """How many cells ``skip_decided`` left unrun, and the share of the whole sweep's cell-steps
    (Σ steps: where each cell stopped) that it still ran — the saving without a clock's noise."""
    skipped = skipping.status.values == SKIPPED
    return int(skipped.sum()), float(whole.steps.values[~skipped].sum() / whole.steps.values.sum())


def main():
    nqm.use_every_core()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="an 8 × 8 grid")
    size.add_argument("--bench-grid", action="store_true", help="nqm bench's size: N = 10⁴, 16 × 16")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    dim, side, budget = (1_000, 8, 20_000) if args.quick else (10_000, 16, 20_000) if args.bench_grid \
        else (1_000, 16, 20_000)
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
            if method == "sgdm":  # the decided cells skipped (AB: a floor may hold it, none is decided)
                skipping = lambda: nqm.sweep(method, noise=noise, skip_decided=True, **grid, **extra)
                counts["skipped_cells"], steps_kept = skipped_share(settled, skipping())
                seconds["skip_decided"] = timed(skipping, args.repeat)
            reached = literal.steps.values[literal.status.values == 1]
            window = 0 if settled.attrs["settled_test"].endswith(EXACT) else int((settle_window(reached)[0] - reached).sum())
            rows[f"{method} sigma={noise:g}"] = dict(seconds, ratio=seconds["settled"] / seconds["first_passage"],
                                                     reached=int(reached.size), window_floor=1 + window / int(literal.steps.sum()),
                                                     **counts)
            r = rows[f"{method} sigma={noise:g}"]
            print(f"{method:5s} σ = {noise:<4g}: first passage {seconds['first_passage']:6.2f} s, settled "
                  f"{seconds['settled']:6.2f} s = {r['ratio']:.2f}× (the windows' cell-steps alone: "
                  f"{r['window_floor']:.2f}×; of {r['reached']} cells that reached the target, "
                  f"{counts['settled_cells']} settle and {counts['transient_cells']} are transient)")
            if "skip_decided" in seconds:
                r["skip_ratio"], r["skip_steps_kept"] = seconds["skip_decided"] / seconds["settled"], steps_kept
                print(f"{'':5s} skipping the {counts['skipped_cells']} decided cells: {seconds['skip_decided']:6.2f} s "
                      f"= {r['skip_ratio']:.2f}× the settled sweep (its cell-steps: {steps_kept:.2f}×)")
    box = dict(lr=np.geomspace(0.01, 4.0, side), momentum=np.linspace(0.0, 0.98, side), delay=[0, 4], noise=0.05,
               problem=nqm.zhang(dim), max_steps=50_000, progress=False)
    skipping = {skip: timed(lambda: nqm.sweep("sgdm", skip_decided=skip, **box), args.repeat) for skip in (False, True)}
    skipped, steps_kept = skipped_share(*(nqm.sweep("sgdm", skip_decided=skip, **box) for skip in (False, True)))
    rows["sgdm figure-1 box"] = dict(settled=skipping[False], skip_decided=skipping[True], skipped_cells=skipped,
                                     skip_ratio=skipping[True] / skipping[False], skip_steps_kept=steps_kept)
    print(f"sgdm on Figure 1's box (σ = 0.05, D = 0 and 4, budget 50,000): settled {skipping[False]:6.2f} s, skipping "
          f"the {skipped} decided cells {skipping[True]:6.2f} s = {skipping[True] / skipping[False]:.2f}× "
          f"(its cell-steps: {steps_kept:.2f}×)")
    print(json.dumps({"dim": dim, "cells": side * side, "budget": budget, "rows": rows}))


if __name__ == "__main__":
    main()
