"""The largest stable learning rate of Adam and of braked Adam (ab-adam) under a constant delay.

On nqm.zhang(100), noiseless, D = 4: x* = λ_max · η*, η* the largest lr whose run does not grow,
found by bisection with the engine (nqm.search.simulated.simulated_threshold), per b1 (and ρ
for the braked one; ρ = 0 is Adam itself, a check of the numbers).

Read with care: Adam's step is bounded by about lr, so its loss need not grow exponentially above a
rate, and x* found this way moves with the budget (on this grid about 30× lower at 20,000 steps
than at 4,000): a comparison between the two optimizers at one budget, not a stability boundary.

    python scripts/compare_adam_braking.py [--steps 4000] [--tol 0.01] [--delay 4]
"""

from __future__ import annotations

import argparse

import nqm
from nqm.bench import timed
from nqm.search.simulated import simulated_threshold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000, help="budget of each run (growth read over its second half)")
    parser.add_argument("--tol", type=float, default=0.01, help="relative width of the final brackets")
    parser.add_argument("--delay", type=int, default=4, help="the constant delay D")
    parser.add_argument("--dim", type=int, default=100, help="N of nqm.zhang(N)")
    args = parser.parse_args()
    nqm.use_every_core()
    problem = nqm.zhang(args.dim)
    common = dict(delay=args.delay, steps=args.steps, tol=args.tol, problem=problem, b1=[0.5, 0.9])
    seconds, (adam, braked) = timed(lambda: (simulated_threshold("adam", **common).threshold.squeeze(),
                                             simulated_threshold("ab-adam", rho=[0.0, 0.5, 1.0], **common).threshold.squeeze()))
    print(f"zhang({args.dim}), noiseless, D = {args.delay}, {args.steps} steps, tol {args.tol}: "
          f"x* = lambda_max * eta*")
    for b1 in (0.5, 0.9):
        row = [f"adam {float(adam.sel(b1=b1)):.4g}"]
        row += [f"ab-adam rho={rho:g} {float(braked.sel(b1=b1, rho=rho)):.4g}" for rho in (0.0, 0.5, 1.0)]
        print(f"  b1 = {b1}: " + ", ".join(row))
    print(f"({seconds:.0f} s)")


if __name__ == "__main__":
    main()
