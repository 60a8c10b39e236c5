"""The cells whose status differs between two results of one grid, each with independent float64
evidence of which verdict is right: ``tests/reference.py``'s long run (no nqm) and, for a cell of a
linear method (SGDM, or AB at ρ = 0), its exact expected steady-state loss (``nqm.expected``), which
is the definition's own answer where one noisy run cannot tell.

    python scripts/changed_cells.py OLD.nc NEW.nc --out CHANGED.json

A long run is 1,000,000 steps without noise, ``max(400,000, 8 T)`` with noise (rounded up to a
whole block); its level is the largest loss (no noise) or the mean (noise) over the second half of
what follows its own first passage, with the standard error of 20 block means (noise).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

import nqm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
import reference  # noqa: E402  (the independent float64 loops)

NOISELESS_STEPS, NOISY_STEPS, BLOCKS = 1_000_000, 400_000, 20


def changed(old, new) -> list[dict]:
    """Each cell whose status differs: its coordinates, both statuses and its steps."""
    before = old.status.transpose(*new.status.dims).values
    return [{**{d: _plain(new[d].values[i]) for d, i in zip(new.status.dims, index)},
             "old": int(before[tuple(index)]), "new": int(new.status.values[tuple(index)]),
             "steps": int(new.steps.values[tuple(index)])}
            for index in np.argwhere(before != new.status.values)]


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def evidence(cell: dict, new) -> dict:
    """``cell`` with its long run's level and, for a linear cell, its exact steady-state loss."""
    method, rho, problem = new.attrs["method"], cell.get("rho", 0.0), _problem(new)
    lam, target, noise = problem.eigenvalues, float(new.attrs["target"]), float(cell["noise"])
    steps = NOISELESS_STEPS if noise == 0 else -(-max(NOISY_STEPS, 8 * cell["steps"]) // BLOCKS) * BLOCKS
    hyper = {k: np.array([cell[k]]) for k in ("lr", "momentum")} | ({"rho": np.array([rho])} if method == "ab" else {})
    runs = reference.long_runs(method, lam, hyper, delay=int(cell["delay"]), noise=noise, steps=steps, blocks=BLOCKS)
    level = float(reference.level_after(runs, noise > 0)[0])
    out = {**cell, "long_run_steps": steps, "diverged": bool(runs["diverged"][0]), "level": level}
    if noise > 0:
        half = runs["block_mean"][0, BLOCKS // 2:]
        out["level_standard_error"] = float(half.std(ddof=1) / np.sqrt(half.size))
    if method == "sgdm" or (method == "ab" and rho == 0):  # linear: the exact test is the definition
        exact = nqm.expected.sweep("sgdm", lr=[cell["lr"]], momentum=[cell["momentum"]], delay=int(cell["delay"]),
                                   noise=noise, problem=problem, max_steps=int(new.attrs["max_steps"]))
        out["exact_steady_loss"] = float(exact.steady_state_loss.values.ravel()[0])
        out["settled_by_definition"] = out["exact_steady_loss"] < target
    else:
        out["settled_by_definition"] = level < target
    out["new_verdict_right"] = (out["new"] == 1) == out["settled_by_definition"]
    return out


def _problem(result):
    """The result's problem: Zhang's spectrum of its size, which its spectrum's digest must be."""
    problem = nqm.zhang(int(result.attrs["dim"]))
    if problem.describe()["spectrum_sha256"] != result.attrs["spectrum_sha256"]:
        raise SystemExit(f"changed_cells: the result's spectrum ({result.attrs['spectrum']}) is not zhang(N); "
                         "this script rebuilds only that one")
    return problem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    old, new = nqm.load(args.old), nqm.load(args.new)
    cells = [evidence(cell, new) for cell in changed(old, new)]
    report = {"old": pathlib.Path(args.old).name, "new": pathlib.Path(args.new).name,
              "old_version": old.attrs["nqm_version"], "new_version": new.attrs["nqm_version"],
              "cells": int(new.status.size), "changed": len(cells), "cells_changed": cells}
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"{len(cells)} of {new.status.size} statuses differ; {sum(c['new_verdict_right'] for c in cells)} "
          "new verdicts agree with their evidence")


if __name__ == "__main__":
    main()
