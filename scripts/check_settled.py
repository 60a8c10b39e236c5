"""How often the settled test disagrees with long runs, near the stability boundary of each method.

For each method without an exact test (AB, DC-ASGD, adaptive restart) and for SGDM under a worker
pool (where the linear analysis has no pmf), a sweep over lr × momentum that straddles the
boundary (N = 100, spectrum 1/j, D = 4 or workers:4, budget 2,000 steps, noiseless and σ = 0.05)
gives each cell's verdict: settled (1) or transient (2). Each cell that reached the target is then
run on to 100 × the budget (200,000 steps), its loss traced every 1,000 steps; the long run's
verdict is settled when it never diverged and its level over the last fifth is below the target
(without noise the largest value, with noise the mean). Printed per case: the cells compared, how
many verdicts agree, and the disagreements both ways. ``--quick``: an 8 × 8 grid, 20 × the budget.

    python scripts/check_settled.py [--quick] [--out figures/check_settled.json]
"""

import argparse
import dataclasses
import json

import numpy as np

import nqm
from nqm import delays, jobs
from nqm.status import DIVERGED, SETTLED, TRANSIENT

CASES = [("ab", 4, {"rho": 0.5}), ("dc-asgd", 4, {"lambda_dc": 1.0}), ("restart", 4, {}), ("sgdm", "workers:4", {})]


def long_run_stays(task, process, values, seed, budget, stride, noisy_rows, target):
    """The long runs' verdicts: never diverged, and the level over the last fifth below the target."""
    config = dataclasses.replace(task.config, target=-1.0, max_steps=budget, progress=False)
    out = task._replace(config=config).run(process, values, seed, record={"loss": lambda v: v.model.loss(v.w_next)},
                                           stride=stride)
    trace = out.trace["loss"]
    tail = trace[:, -max(trace.shape[1] // 5, 1):]
    level = np.where(noisy_rows, tail.mean(1), tail.max(1))
    return (out.status != DIVERGED) & np.isfinite(level) & (level < target)


def main():
    nqm.use_every_core()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None, help="also write the JSON line to this file (e.g. figures/check_settled.json)")
    args = parser.parse_args()
    side, factor = (8, 20) if args.quick else (16, 100)
    budget, target, problem = 2_000, 0.01, nqm.zhang(100)
    rows = {}
    for method, delay, extra in CASES:
        for noise in (0.0, 0.05):
            grid = dict(lr=np.geomspace(0.02, 2.0, side), momentum=np.linspace(0.0, 0.95, side), delay=delay,
                        noise=noise, problem=problem, max_steps=budget, target=target, progress=False, **extra)
            ds = nqm.sweep(method, **grid).isel(delay=0, noise=0, seed=0)
            for name in extra:
                ds = ds.isel({name: 0})
            status = ds.status.transpose("momentum", "lr").values.ravel()
            m, lr = (x.ravel() for x in np.meshgrid(ds.momentum.values, ds.lr.values, indexing="ij"))
            reached = np.flatnonzero((status == SETTLED) | (status == TRANSIENT))
            task, _ = jobs.job(method, problem, dict(target=target, max_steps=budget, progress=False, **extra))
            values = {"lr": lr[reached], "momentum": m[reached], "noise": np.full(reached.size, noise),
                      **{k: np.full(reached.size, v) for k, v in extra.items()}}
            truth = long_run_stays(task, delays.process(delay), values, 0, budget * factor, 1_000,
                                   np.full(reached.size, noise > 0), target)
            verdict = status[reached] == SETTLED
            row = {"compared": int(reached.size), "agree": int((verdict == truth).sum()),
                   "settled_but_long_run_leaves": int((verdict & ~truth).sum()),
                   "transient_but_long_run_stays": int((~verdict & truth).sum()),
                   "transient": int((~verdict).sum())}
            rows[f"{method} D={delay} sigma={noise:g}"] = row
            print(f"{method:8s} {str(delay):10s} σ = {noise:<4g}: {row['agree']}/{row['compared']} agree "
                  f"({row['transient']} transient); settled but leaving later: {row['settled_but_long_run_leaves']}, "
                  f"transient but staying: {row['transient_but_long_run_stays']}")
    line = json.dumps({"dim": problem.dim, "budget": budget, "long_run": budget * factor, "grid": f"{side}x{side}",
                       "delay": 4, "target": target, "seed": 0, "rows": rows})
    print(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
