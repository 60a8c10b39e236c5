"""Exact expected sweeps against the Monte Carlo sweep, same grid, same run.

Two grids over Figure 1's box (lr log-spaced over [0.01, 4] × m over [0, 0.98]), SGDM, N = 10⁴
(Zhang's spectrum), D = 4, σ = 0.05: 16 × 16 with a 20k budget, and 32 × 32 with a 100k budget
(Figure 1's). Each command runs in a fresh interpreter, timed from outside as a user sees it
(``python -m nqm sweep …`` against ``python -m nqm expected …``, with and without ``--bins``):
import, compilation and writing the result included. The ``nqm`` command keeps its compiled
programs in JAX's persistent compilation cache, so each command runs twice: *cold*, in an empty
cache directory of its own (a first run), then *warm*, from what the first run left there (every
later run). Prints the seconds of each, the ratios MC / exact and MC / binned (above 1: the exact
mode is faster), the same in CPU seconds (less sensitive to other work on the machine), how the
cells ended, and the T error that binning causes against exact. ``--check`` exits with status 1
unless, cold and warm, exact >= 2x (16 × 16) and >= 3x (32 × 32), and binned >= 8x (16 × 16) and
>= 20x (32 × 32) the Monte Carlo speed. ``--cold`` runs each command once, cold.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import nqm
from nqm import expected
from nqm.bench import children_cpu_seconds, timed

GRIDS = {16: 20_000, 32: 100_000}  # side: budget
TARGETS = {16: (2.0, 8.0), 32: (3.0, 20.0)}  # side: (exact, binned) least speed-up over Monte Carlo
SMOKE = (4, 200, 500)  # side, N, budget


def binning_error(exact, binned):
    """How far binned T is from exact T: relative error over the cells both reach, and status changes."""
    both = ((exact.status == 1) & (binned.status == 1)).values
    relative = np.abs(binned.steps.values[both] / exact.steps.values[both] - 1.0)
    return {"reached_both": int(both.sum()), "median_T_error": float(np.median(relative)) if both.any() else 0.0,
            "max_T_error": float(relative.max(initial=0.0)),
            "status_differs": int((exact.status != binned.status).sum())}


def _command(name, side, dim, steps, bins, out):
    grid = ["--lr", f"geom:0.01:4:{side}", "--momentum", f"lin:0:0.98:{side}", "--delay", "4", "--noise", "0.05",
            "--dim", str(dim), "--max-steps", str(steps), "--out", str(out)]
    mode = {"monte_carlo": ["sweep"], "exact": ["expected"], "binned": ["expected", "--bins", str(bins)]}[name]
    return [sys.executable, "-m", "nqm", *mode, *grid]


def run_grid(side, dim, steps, bins, only=None, cache_runs=("cold", "warm")):
    """Wall and CPU seconds of each command, by cache state (``times[cache][name]``), and its result."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # the command's own cache
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    times, cpu, runs = {c: {} for c in cache_runs}, {c: {} for c in cache_runs}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("monte_carlo", "exact", "binned"):
            if only and name not in only:
                continue
            out = Path(tmp) / f"{name}.nc"
            env["NQM_COMPILATION_CACHE"] = str(Path(tmp) / f"cache-{name}")  # empty before the cold run
            for cache in cache_runs:
                cpu_start = children_cpu_seconds()
                times[cache][name], _ = timed(lambda: subprocess.run(_command(name, side, dim, steps, bins, out),
                                                                     check=True, env=env, stdout=subprocess.DEVNULL))
                cpu[cache][name] = children_cpu_seconds() - cpu_start
                runs[name] = nqm.load(out).load()
                ended = {k: int((runs[name].status == k).sum()) for k in (1, 0, -1)}
                print(f"{side}x{side} {name} ({cache}): {times[cache][name]:.1f} s ({cpu[cache][name]:.1f} CPU s); "
                      f"cells reached {ended[1]}, budget {ended[0]}, diverged {ended[-1]}; steps summed over cells "
                      f"{int(runs[name].steps.sum()):,}", flush=True)
    return times, cpu, runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="a tiny grid (for CI)")
    parser.add_argument("--grid", choices=("16", "32", "both"), default="both", help="which grid (side)")
    parser.add_argument("--dim", type=int, default=10_000)
    parser.add_argument("--bins", type=int, default=expected.DEFAULT_BINS)
    parser.add_argument("--check", action="store_true", help="exit with status 1 below the targets")
    parser.add_argument("--only", nargs="+", choices=("monte_carlo", "exact", "binned"), default=None,
                        help="time only these (the ratios need all three)")
    parser.add_argument("--cold", action="store_true", help="run each command once, in an empty compilation cache")
    args = parser.parse_args(argv)
    sides = [SMOKE[0]] if args.smoke else ([16, 32] if args.grid == "both" else [int(args.grid)])
    cache_runs = ("cold",) if args.cold else ("cold", "warm")
    results, missed = [], []
    for side in sides:
        dim, steps = SMOKE[1:] if args.smoke else (args.dim, GRIDS[side])
        times, cpu, runs = run_grid(side, dim, steps, args.bins, args.only, cache_runs)
        if "exact" in runs and "binned" in runs:
            error = binning_error(runs["exact"], runs["binned"])
            print(f"binning (B={args.bins}) against exact: T differs by {error['median_T_error']:.2%} (median), "
                  f"{error['max_T_error']:.2%} (max) over the {error['reached_both']} cells both reach; "
                  f"status differs in {error['status_differs']} of {runs['exact'].status.size} cells", flush=True)
        if args.only:
            results.append(times)
            continue
        result = {"side": side, "dim": dim, "steps": steps, "bins": args.bins, **error}
        exact_target, binned_target = TARGETS.get(side, (0.0, 0.0))
        for cache in cache_runs:
            t, c = times[cache], cpu[cache]
            result[cache] = {**{f"{k}_s": v for k, v in t.items()}, **{f"{k}_cpu_s": v for k, v in c.items()},
                             "exact_speedup": t["monte_carlo"] / t["exact"],
                             "binned_speedup": t["monte_carlo"] / t["binned"],
                             "exact_cpu_ratio": c["monte_carlo"] / c["exact"],
                             "binned_cpu_ratio": c["monte_carlo"] / c["binned"]}
            r = result[cache]
            print(f"{side}x{side} cells, N={dim}, D=4, sigma=0.05, budget {steps:,}, {cache} cache: Monte Carlo "
                  f"{t['monte_carlo']:.1f} s, exact {t['exact']:.1f} s ({r['exact_speedup']:.2f}x), "
                  f"binned B={args.bins} {t['binned']:.1f} s ({r['binned_speedup']:.2f}x); in CPU seconds "
                  f"{c['monte_carlo']:.1f}, {c['exact']:.1f} ({r['exact_cpu_ratio']:.2f}x), "
                  f"{c['binned']:.1f} ({r['binned_cpu_ratio']:.2f}x)")
            if not (r["exact_speedup"] >= exact_target and r["binned_speedup"] >= binned_target):
                missed.append(f"{side}x{side} ({cache}): exact >= {exact_target}x and binned >= {binned_target}x")
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.check and missed:
        raise SystemExit("targets missed: " + "; ".join(missed))
    return results[0] if len(results) == 1 else results


if __name__ == "__main__":
    main()
