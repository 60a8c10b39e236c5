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
target) and *false transient* (nqm says 2, the long run stays) — and how the settled cells were
settled: at the look (``1.25·T + 250``, the cheap certificate) with its own false settled, or by
the window; cells left undecided by the work limit are counted apart (not compared).

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
from nqm import delays, jobs, settling
from nqm.status import REACHED, SETTLED, TRANSIENT, UNDECIDED

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
    """One sweep and the long runs of its reached cells: (nqm verdicts, long-run verdicts, settled at
    the look, undecided) per reached cell, and the cells' values."""
    if quick:
        grids = {k: v[::2] if len(v) > 2 else v[:1] for k, v in grids.items()}
    problem = nqm.zhang(DIM).with_rotation(rotation)
    task, defaults = jobs.job(method, problem, dict(max_steps=BUDGET, target=TARGET, progress=False))
    names = ["lr"] + [k for k in grids if k != "lr"]
    mesh = np.meshgrid(*(np.asarray(grids[k], np.float64) for k in names), indexing="ij")
    values = {k: v.ravel() for k, v in zip(names, mesh)}
    values.setdefault("momentum", np.zeros(values["lr"].size))
    values = {**{k: np.full(values["lr"].size, v) for k, v in defaults.items()}, **values,
              "noise": np.full(values["lr"].size, noise)}
    process = delays.process(delay)
    test = settling.choose(task, process)  # what nqm.sweep does for each delay, at the level that shows the look
    test.prepare(values)
    outcome = task.run(process, values, 0, stop=test.rule(values))
    status = test.decide(values, outcome, 0)
    early = np.zeros(status.size, bool) if outcome.stop is None else np.asarray(outcome.stop.early) == 1
    reached = np.flatnonzero(np.isin(status, (SETTLED, TRANSIENT, UNDECIDED)))
    hyper = {k: values[k][reached] for k in grids if not (k == "momentum" and method in ("adam", "ab-adam", "lion"))}
    long = reference.long_runs(method, problem.eigenvalues, hyper, delay=delay, steps=QUICK_LONG_RUN if quick else LONG_RUN,
                               rotation=problem.rotation, noise=noise, target=TARGET)
    level = reference.level_after(long, noisy=noise > 0)
    truth = np.where(np.isnan(level), np.nan, level < TARGET)  # NaN: the long run never reached the target
    truth = np.where(status[reached] == UNDECIDED, np.nan, truth)  # undecided: not compared
    return (status[reached] == SETTLED, truth, early[reached] & (status[reached] == SETTLED),
            status[reached] == UNDECIDED, {k: v.tolist() for k, v in hyper.items()})


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
        verdicts, truths, looks, undecided = [], [], [], []
        for delay, rotation, noise in itertools.product(delays, rotations, NOISES):
            start = time.time()
            verdict, truth, look, left, hyper = case(method, grids, delay, rotation, noise, args.quick)
            name = f"{method} D={delay} {'rotated' if rotation is not None else 'axis'} sigma={noise:g}"
            cells[name] = {"hyper": hyper, "nqm_settled": verdict.tolist(), "settled_at_look": look.tolist(),
                           "undecided": left.tolist(),
                           "long_run_settled": [None if np.isnan(x) else bool(x) for x in truth]}
            verdicts.append(verdict), truths.append(truth), looks.append(look), undecided.append(left)
            print(f"{name:42s} {name_row(tally(verdict, truth, look, left))} ({time.time() - start:.0f} s)", flush=True)
        table[method] = tally(*(np.concatenate(x) for x in (verdicts, truths, looks, undecided)))
        if args.out:  # after every method: a long check keeps what it has
            write(args.out, args.quick, table, cells)
    print(f"\n{'method':10s} {'compared':>9s} {'agree':>6s} {'settled':>8s} {'false settled':>15s} "
          f"{'false transient':>16s} {'at the look':>12s} {'its false settled':>18s} {'undecided':>10s} "
          f"{'long run never reached':>23s}")
    for method, row in table.items():
        print(f"{method:10s} {row['compared']:9d} {row['agree']:6d} {row['settled']:8d} {row['false_settled']:6d} "
              f"({100 * row['false_settled_share']:4.1f} %) {row['false_transient']:16d} {row['settled_at_look']:12d} "
              f"{row['false_settled_at_look']:18d} {row['undecided']:10d} {row['never_reached']:23d}")


def tally(verdict, truth, look, undecided) -> dict:
    """The agreement of nqm's verdicts (settled or not) with the long runs' (settled, not, or NaN:
    the float64 run never reached the target, a chaotic first passage, or nqm left the cell
    undecided: not compared), and of the cells settled at the look."""
    known = ~np.isnan(truth)
    v, t, at = verdict[known], truth[known].astype(bool), look[known]
    row = {"compared": int(v.size), "agree": int((v == t).sum()), "settled": int(v.sum()),
           "false_settled": int((v & ~t).sum()), "false_transient": int((~v & t).sum()),
           "settled_at_look": int(at.sum()), "false_settled_at_look": int((at & ~t).sum()),
           "undecided": int(undecided.sum()), "never_reached": int((~known & ~undecided).sum())}
    row["false_settled_share"] = row["false_settled"] / max(row["settled"], 1)
    return row


def name_row(row: dict) -> str:
    return (f"{row['compared']:4d} cells, {row['false_settled']} false settled ({row['false_settled_at_look']} at the "
            f"look), {row['false_transient']} false transient, {row['undecided']} undecided, {row['never_reached']} "
            "never reached by the long run")


def write(path, quick, table, cells):
    regime = {"dim": DIM, "budget": BUDGET, "long_run": QUICK_LONG_RUN if quick else LONG_RUN, "target": TARGET,
              "noises": list(NOISES), "seed": 0, "quick": quick}
    pathlib.Path(path).write_text(json.dumps({"regime": regime, "table": table, "cases": cells}) + "\n")


if __name__ == "__main__":
    main()
