"""How often the settled test disagrees with long float64 runs, per method, across the stability boundary.

For each method whose settled test is not exact (the continued test of ``nqm.settling``: Adam,
braked Adam, RMSProp, Lion, AB at ρ ≥ 1 with high momentum, DC-ASGD, adaptive restart), sweeps
that straddle its boundary (N = 100, spectrum 1/j, budget 20,000 steps; several decay rates, D ∈
{0, 4, 16}, axis-aligned and rotated where the method is not rotation-invariant, σ ∈ {0, 0.05})
give each cell's verdict: settled (1) or transient (2). Every cell that reached the target is then
run for 200,000 steps by a plain float64 numpy loop that does not import nqm
(``tests/reference.py``, ``long_runs``; its own noise draws). Its verdict is *settled* when it
never diverged and its level is below the target — without noise its largest loss, with noise
its mean, over the second half of what follows its own first passage (a cell whose float64 run
never reaches the target, a chaotic first passage, is counted apart, not compared). Printed: per method and per case, the cells compared, the
agreements and the disagreements both ways — *false settled* (nqm says 1, the long run leaves the
target) and *false transient* (nqm says 2, the long run stays).

    python scripts/check_settled.py [--quick] [--method adam ...] [--out figures/check_settled.json]

``--quick``: a quarter of the grid and 50,000-step long runs (a smoke test of the script).
"""

import argparse
import itertools
import json
import pathlib
import sys
import time

import numpy as np

import nqm
from nqm.status import SETTLED, TRANSIENT

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import reference  # noqa: E402  (the independent float64 loops)

DIM, BUDGET, LONG_RUN, TARGET, NOISES = 100, 20_000, 200_000, 0.01, (0.0, 0.05)
QUICK_LONG_RUN = 50_000  # --quick: its last half still starts past the budget
# method: (grids, delays, rotations). Each grid straddles the method's boundary on N = 100.
CASES = {
    "adam": (dict(lr=np.geomspace(1e-3, 0.5, 12), b1=[0.0, 0.5, 0.9], b2=[0.99, 0.999]), (0, 4, 16), (None, 0)),
    "ab-adam": (dict(lr=np.geomspace(1e-3, 0.5, 12), b1=[0.5, 0.9], rho=[0.5, 2.0]), (0, 4, 16), (None, 0)),
    "rmsprop": (dict(lr=np.geomspace(1e-4, 0.3, 12), decay=[0.9, 0.99], momentum=[0.0, 0.9]), (0, 4, 16), (None, 0)),
    "lion": (dict(lr=np.geomspace(1e-4, 0.1, 12), b1=[0.5, 0.9], b2=[0.99, 0.999]), (0, 4, 16), (None, 0)),
    "ab": (dict(lr=np.geomspace(0.01, 1.0, 12), momentum=np.linspace(0.5, 0.99, 6), rho=[1.0, 2.0]), (0, 4, 16),
           (None,)),  # global braking is rotation-invariant
    "dc-asgd": (dict(lr=np.geomspace(0.02, 2.0, 12), momentum=np.linspace(0.0, 0.95, 8), lambda_dc=[1.0]), (4, 16),
                (None, 0)),
    "restart": (dict(lr=np.geomspace(0.02, 2.0, 12), momentum=np.linspace(0.0, 0.95, 8)), (4, 16), (None,)),
}


def case(method, grids, delay, rotation, noise, quick):
    """One sweep and the long runs of its reached cells: (nqm verdicts, long-run verdicts) per cell."""
    if quick:
        grids = {k: v[::2] if len(v) > 2 else v[:1] for k, v in grids.items()}
    problem = nqm.zhang(DIM).with_rotation(rotation)
    ds = nqm.sweep(method, **grids, delay=delay, noise=noise, problem=problem, max_steps=BUDGET, target=TARGET,
                   progress=False)
    ds = ds.isel(delay=0, noise=0, seed=0)
    names = [d for d in ds.status.dims]
    status = ds.status.values.ravel()
    values = dict(zip(names, (x.ravel() for x in np.meshgrid(*(ds[d].values for d in names), indexing="ij"))))
    reached = np.flatnonzero((status == SETTLED) | (status == TRANSIENT))
    hyper = {k: v[reached] for k, v in values.items() if not (k == "momentum" and method in ("adam", "ab-adam", "lion"))}
    long = reference.long_runs(method, problem.eigenvalues, hyper, delay=delay, steps=QUICK_LONG_RUN if quick else LONG_RUN,
                               rotation=problem.rotation, noise=noise, target=TARGET)
    level = reference.level_after(long, noisy=noise > 0)
    truth = np.where(np.isnan(level), np.nan, level < TARGET)  # NaN: the long run never reached the target
    return status[reached] == SETTLED, truth, {k: v.tolist() for k, v in hyper.items()}


def main():
    nqm.use_every_core()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--method", nargs="+", choices=sorted(CASES), default=sorted(CASES))
    parser.add_argument("--out", default=None, help="write the table and each cell's verdicts to this JSON file")
    args = parser.parse_args()
    table, cells = {}, {}
    for method in args.method:
        grids, delays, rotations = CASES[method]
        verdicts, truths = [], []
        for delay, rotation, noise in itertools.product(delays, rotations, NOISES):
            start = time.time()
            verdict, truth, hyper = case(method, grids, delay, rotation, noise, args.quick)
            name = f"{method} D={delay} {'rotated' if rotation is not None else 'axis'} sigma={noise:g}"
            cells[name] = {"hyper": hyper, "nqm_settled": verdict.tolist(),
                           "long_run_settled": [None if np.isnan(x) else bool(x) for x in truth]}
            verdicts.append(verdict), truths.append(truth)
            print(f"{name:42s} {name_row(tally(verdict, truth))} ({time.time() - start:.0f} s)", flush=True)
        table[method] = tally(np.concatenate(verdicts), np.concatenate(truths))
        if args.out:  # after every method: a long check keeps what it has
            write(args.out, args.quick, table, cells)
    print(f"\n{'method':10s} {'compared':>9s} {'agree':>6s} {'settled':>8s} {'false settled':>15s} "
          f"{'false transient':>16s} {'long run never reached':>23s}")
    for method, row in table.items():
        print(f"{method:10s} {row['compared']:9d} {row['agree']:6d} {row['settled']:8d} {row['false_settled']:6d} "
              f"({100 * row['false_settled_share']:4.1f} %) {row['false_transient']:16d} {row['never_reached']:23d}")


def tally(verdict, truth) -> dict:
    """The agreement of nqm's verdicts (settled or not) with the long runs' (settled, not, or NaN:
    the float64 run never reached the target, a chaotic first passage: not compared)."""
    known = ~np.isnan(truth)
    verdict, truth = verdict[known], truth[known].astype(bool)
    row = {"compared": int(verdict.size), "agree": int((verdict == truth).sum()), "settled": int(verdict.sum()),
           "false_settled": int((verdict & ~truth).sum()), "false_transient": int((~verdict & truth).sum()),
           "never_reached": int((~known).sum())}
    row["false_settled_share"] = row["false_settled"] / max(row["settled"], 1)
    return row


def name_row(row: dict) -> str:
    return (f"{row['compared']:4d} cells, {row['false_settled']} false settled, {row['false_transient']} false "
            f"transient, {row['never_reached']} never reached by the long run")


def write(path, quick, table, cells):
    regime = {"dim": DIM, "budget": BUDGET, "long_run": QUICK_LONG_RUN if quick else LONG_RUN, "target": TARGET,
              "noises": list(NOISES), "seed": 0, "quick": quick}
    pathlib.Path(path).write_text(json.dumps({"regime": regime, "table": table, "cases": cells}) + "\n")


if __name__ == "__main__":
    main()
