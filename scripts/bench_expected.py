"""Exact expected sweeps against the Monte Carlo sweep, same grid, same run: Figure 1's grid
(lr log-spaced over [0.01, 4] × m over [0, 0.98]) at 32 × 32, N = 10⁴, D = 4, σ = 0.05, 100k
budget. Prints the seconds of each, the ratios MC / exact and MC / binned (above 1: the exact
mode is faster), how the cells ended, and the T error that binning causes against exact.
``--check`` exits with status 1 unless exact >= 1x and binned >= 20x."""

import argparse
import json
import time

import numpy as np

import nqm
from nqm import expected


def binning_error(exact, binned):
    """How far binned T is from exact T: relative error over the cells both reach, and status changes."""
    both = ((exact.status == 1) & (binned.status == 1)).values
    relative = np.abs(binned.steps.values[both] / exact.steps.values[both] - 1.0)
    return {"reached_both": int(both.sum()), "median_T_error": float(np.median(relative)) if both.any() else 0.0,
            "max_T_error": float(relative.max(initial=0.0)),
            "status_differs": int((exact.status != binned.status).sum())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a tiny grid (for CI)")
    parser.add_argument("--side", type=int, default=32)
    parser.add_argument("--dim", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--bins", type=int, default=expected.DEFAULT_BINS)
    parser.add_argument("--check", action="store_true",
                        help="exit with status 1 unless exact >= 1x and binned >= 20x as fast as Monte Carlo")
    parser.add_argument("--only", nargs="+", choices=("monte_carlo", "exact", "binned"), default=None,
                        help="time only these (the ratios need all three)")
    args = parser.parse_args(argv)
    side, dim, steps = (4, 200, 500) if args.smoke else (args.side, args.dim, args.steps)
    grid = dict(lr=np.geomspace(0.01, 4.0, side), momentum=np.linspace(0, 0.98, side), delay=4, noise=0.05,
                problem=nqm.zhang(dim), max_steps=steps)
    times, runs = {}, {}
    for name, run in (("monte_carlo", lambda: nqm.sweep("sgdm", progress=False, **grid)),
                      ("exact", lambda: expected.sweep("sgdm", **grid)),
                      ("binned", lambda: expected.sweep("sgdm", bins=args.bins, **grid))):
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        runs[name] = run()
        times[name] = time.perf_counter() - start
        ended = {k: int((runs[name].status == k).sum()) for k in (1, 0, -1)}
        print(f"{name}: {times[name]:.1f} s; cells reached {ended[1]}, budget {ended[0]}, diverged {ended[-1]}; "
              f"steps summed over cells {int(runs[name].steps.sum()):,}", flush=True)
    if "exact" in runs and "binned" in runs:
        error = binning_error(runs["exact"], runs["binned"])
        print(f"binning (B={args.bins}) against exact: T differs by {error['median_T_error']:.2%} (median), "
              f"{error['max_T_error']:.2%} (max) over the {error['reached_both']} cells both reach; "
              f"status differs in {error['status_differs']} of {runs['exact'].status.size} cells", flush=True)
    if args.only:
        return times
    result = {"side": side, "dim": dim, "steps": steps, "bins": args.bins, **{f"{k}_s": v for k, v in times.items()},
              "exact_speedup": times["monte_carlo"] / times["exact"],
              "binned_speedup": times["monte_carlo"] / times["binned"], **binning_error(runs["exact"], runs["binned"])}
    print(f"{side}x{side} cells, N={dim}, D=4, sigma=0.05, budget {steps:,}: Monte Carlo {times['monte_carlo']:.1f} s, "
          f"exact {times['exact']:.1f} s ({result['exact_speedup']:.2f}x), "
          f"binned B={args.bins} {times['binned']:.1f} s ({result['binned_speedup']:.2f}x)")
    print(json.dumps(result))
    if args.check and not (result["exact_speedup"] >= 1.0 and result["binned_speedup"] >= 20.0):
        raise SystemExit("target missed: exact >= 1x and binned >= 20x the Monte Carlo speed")
    return result


if __name__ == "__main__":
    main()
