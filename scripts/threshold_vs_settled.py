"""Two questions about AB's edge, two answers: the simulated threshold against the sweep's settled test.

``nqm threshold --simulate`` asks whether a run *grows*: its loss, in float64 with no divergence
bound, finite and without a positive log-slope over the second half of its steps — growth above
the scale where braking acts. The sweep's settled test asks whether a run that reached the target
*stays below it for good* — including what AB does once ‖g‖‖v‖ falls below its ε floor, where it
is SGDM, which may be unstable there (its floor probe). Below the simulated threshold a run does not
grow; it may still leave the target from its floor. This script puts both on one table: for AB
noiseless on zhang(100) (λ_max = 1), each (ρ, m, D) case's simulated threshold x*_sim (20,000 steps,
tolerance 1e-3), SGDM's derived threshold at the same (m, D) (where AB meets its floor), and the
sweep's status (budget 20,000) at lr = f · x*_sim for f in 0.5, 0.9, 0.97, 1.03.

    python scripts/threshold_vs_settled.py [--smoke] [--out figures/threshold_vs_settled.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib

import numpy as np

FACTORS = (0.5, 0.9, 0.97, 1.03)
FULL = dict(dim=100, rhos=(0.5, 1.0), momenta=(0.5, 0.9), delays=(0, 4), steps=20_000, tol=1e-3)
SMOKE = dict(dim=10, rhos=(0.5,), momenta=(0.9,), delays=(4,), steps=2_000, tol=1e-2)


def compute(size: dict) -> dict:
    import nqm
    from nqm.thresholds.derived import threshold
    from nqm.search.simulated import simulated_threshold

    problem = nqm.zhang(size["dim"])
    rows = []
    for rho, momentum, delay in itertools.product(size["rhos"], size["momenta"], size["delays"]):
        table = simulated_threshold("ab", rho=rho, momentum=momentum, delay=delay, problem=problem,
                                    steps=size["steps"], tol=size["tol"])
        x_sim = float(table.threshold.values.ravel()[0])
        lrs = np.array(FACTORS) * x_sim / float(problem.eigenvalues.max())
        ds = nqm.sweep("ab", lr=lrs, momentum=momentum, rho=rho, delay=delay, problem=problem,
                       max_steps=size["steps"], progress=False)
        rows.append({"rho": rho, "momentum": momentum, "delay": delay, "x_simulated": x_sim,
                     "x_sgdm": float(threshold("sgdm", momentum=momentum, delay=delay)),
                     "status": [int(s) for s in ds.status.values.ravel()],
                     "steps": [int(s) for s in ds.steps.values.ravel()]})
        print(rows[-1], flush=True)
    return {"regime": {**size, "factors": list(FACTORS), "method": "ab", "noise": 0.0, "problem": problem.spectrum},
            "rows": rows}


def main():
    import nqm

    nqm.use_every_core()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    data = compute(SMOKE if args.smoke else FULL)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
