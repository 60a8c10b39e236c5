"""What a shorter settling window would cost in verdicts: AB's continued settled test with horizons
nearer its first passage, against the current one and against long float64 runs.

The continued test (``nqm.settling``) steps a cell that reached the target at T on to a horizon H of
at least ``2·T + 1000`` steps (rounded up to the octave: 2–4 × T) and reads the second half of
(T, H]. It costs at least Σ (H − T) over the reached cells — about as much again as the first
passage on a grid where most cells reach the target. Here each reached cell of
``scripts/check_settled.py``'s AB cases (N = 100, ρ ∈ {1, 2}, D ∈ {0, 4, 16}, σ ∈ {0, 0.05}; its
verdicts and the long runs' are read from ``figures/check_settled.json``) is traced step by step
(:func:`nqm.trajectory`, the sweep's own losses) to the current horizon, and its window's verdict
(:func:`nqm.status.stays_below`: no growth, a level below the target; without noise the largest
loss at any step of the window) is taken again over shorter horizons ``H = ⌈(1 + f)·T⌉ + c``.

Printed per horizon rule: the verdicts that change from the current rule's window (to settled, to
transient; per case in the JSON), the cells whose final verdict would then disagree with the long
float64 run (false settled, false transient; a noiseless cell that the floor probe made transient
stays so; one that only the shorter window keeps is counted settled — the floor probe is not run
again), and the least cost of the rule, ``1 + Σ (H − T) / Σ steps`` on
``scripts/bench_settled.py``'s AB grid (N = 1,000, 16 × 16, D = 4, 20,000 steps), where the settled
sweep's time is measured against the first passage's (target: at most 1.3 ×).

    python scripts/check_settled_window.py [--quick] [--out figures/check_settled_window.json]

``--quick``: the noisy D = 4 case only (a smoke run).
"""

import argparse
import json
import pathlib

import numpy as np

import nqm
from nqm.engine.step import CONTINUE, WINDOW_POINTS, settle_window
from nqm.status import stays_below

ROOT = pathlib.Path(__file__).resolve().parent.parent
RULES = {"current (octave, >= 2T + 1000)": None, "2T + 1000": (1.0, CONTINUE), "1.5T + 250": (0.5, 250),
         "1.25T + 250": (0.25, 250), "1.25T": (0.25, 0)}
DIM, TARGET, BUDGET = 100, 0.01, 20_000  # scripts/check_settled.py's regime


def horizon(first: np.ndarray, rule) -> np.ndarray:
    """Each cell's horizon under ``rule`` (``None``: the engine's own, AB has no settling span)."""
    if rule is None:
        return settle_window(first)[0]
    f, c = rule
    return np.ceil((1 + f) * first).astype(np.int64) + c


def window_stays(loss: np.ndarray, first: int, end: int, noisy: bool) -> bool:
    """The window's verdict over the second half of (T, H], sampled as the engine samples it
    (every ``H // WINDOW_POINTS`` steps; without noise its level is the largest loss at any step)."""
    stride = max(1, end // WINDOW_POINTS)
    n = np.arange((first + end) // (2 * stride) + 1, end // stride + 1)
    stays = stays_below(loss[n * stride - 1], n * stride, noisy, TARGET)
    return stays and (noisy or float(loss[(first + end) // 2:end].max()) < TARGET)


def case_verdicts(name: str, cells: dict) -> dict:
    """Per rule, the window verdict of each reached cell of one check_settled case."""
    _, delay, rotation, noise = name.split()
    delay, noise = int(delay[2:]), float(noise.split("=")[1])
    problem = nqm.zhang(DIM).with_rotation(None if rotation == "axis" else 0)
    hyper = cells["hyper"]
    verdicts = {rule: [] for rule in RULES}
    steps = int(max(horizon(np.array([BUDGET]), spec)[0] for spec in RULES.values()))  # the longest horizon
    for i in range(len(hyper["lr"])):
        one = {k: v[i] for k, v in hyper.items()}
        trace = nqm.trajectory("ab", delay=delay, noise=noise, problem=problem, steps=steps,
                               target=TARGET, **one)
        loss, first = trace.loss.values, int(trace.steps_to_target)
        for rule, spec in RULES.items():
            end = int(horizon(np.array([first]), spec)[0])
            verdicts[rule].append(first > 0 and np.isfinite(loss[:end]).all() and window_stays(loss, first, end, noise > 0))
    return {rule: np.array(v) for rule, v in verdicts.items()}


def floor_costs() -> dict:
    """Each rule's least cost on bench_settled's AB grid: 1 + Σ (H − T) / Σ steps, per noise."""
    grid = dict(lr=np.geomspace(0.02, 0.6, 16), momentum=np.linspace(0.0, 0.9, 16), delay=4, rho=0.5,
                problem=nqm.zhang(1_000), max_steps=20_000, progress=False, first_passage=True)
    costs = {}
    for noise in (0.0, 0.05):
        ds = nqm.sweep("ab", noise=noise, **grid)
        steps = ds.steps.values.ravel().astype(np.int64)
        reached = steps[ds.status.values.ravel() == 1]
        costs[f"sigma={noise:g}"] = {rule: 1 + float((horizon(reached, spec) - reached).sum() / steps.sum())
                                     for rule, spec in RULES.items()}
    return costs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None, help="write the table to this JSON file")
    args = parser.parse_args()
    checked = json.loads((ROOT / "figures" / "check_settled.json").read_text())["cases"]
    names = [n for n in checked if n.startswith("ab ") and (not args.quick or n == "ab D=4 axis sigma=0.05")]
    table = {rule: dict(changed=0, to_settled=0, to_transient=0, false_settled=0, false_transient=0, compared=0,
                        changed_by_case={}) for rule in RULES}
    cells = 0
    for name in names:
        got = case_verdicts(name, checked[name])
        final = np.array(checked[name]["nqm_settled"])
        truth = np.array([np.nan if x is None else float(x) for x in checked[name]["long_run_settled"]])
        current = got[next(iter(RULES))]
        # settled needs the window's verdict; where it held and the cell is transient, the floor probe decided
        assert not (final & ~current).any(), f"{name}: a settled cell whose traced window does not stay"
        probed_out = current & ~final
        known, cells = ~np.isnan(truth), cells + final.size
        for rule in RULES:
            verdict = got[rule] & ~probed_out
            row = table[rule]
            row["changed"] += int((got[rule] != current).sum())
            row["to_settled"] += int((got[rule] & ~current).sum())
            row["to_transient"] += int((~got[rule] & current).sum())
            row["changed_by_case"][name] = int((got[rule] != current).sum())
            row["compared"] += int(known.sum())
            row["false_settled"] += int((verdict & known & (truth == 0)).sum())
            row["false_transient"] += int((~verdict & known & (truth == 1)).sum())
        print(f"{name}: {final.size} reached cells traced", flush=True)
    costs = floor_costs()
    print(f"\n{cells} reached AB cells (check_settled's cases, N = {DIM}); least cost on bench_settled's grid")
    print(f"{'horizon':32s} {'changed (to 1, to 2)':>21s} {'false settled':>14s} {'false transient':>16s} "
          f"{'cost σ=0':>9s} {'σ=0.05':>7s}")
    for rule, row in table.items():
        print(f"{rule:32s} {row['changed']:8d} ({row['to_settled']:3d}, {row['to_transient']:3d}) "
              f"{row['false_settled']:14d} {row['false_transient']:16d} "
              f"{costs['sigma=0'][rule]:8.2f}× {costs['sigma=0.05'][rule]:6.2f}×")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"cells": cells, "quick": args.quick, "table": table,
                                                      "least_cost": costs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
