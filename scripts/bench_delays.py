"""Delay processes against a constant delay: whole `nqm sweep` commands, as a user runs them.

One grid, SGDM, lr geometric over [0.01, 1] × m linear over [0, 0.9] (6 × 6), σ = 0.05, zhang
N = 1,000, budget 20,000, one command per delay:

    --delay 15 | --delay-dist uniform:0:30 | workers:16 | workers:16:slow=0.25:4

Each command runs in a fresh interpreter, timed from outside (import, compilation and writing the
result included). The rate of a command is its element-steps per second: Σ over cells of the steps
each cell ran (its T, the step it diverged at, or the budget), times N, over the wall seconds. The
ratios are each process's rate over the constant delay's (≥ 1: as fast); CPU seconds beside (less
sensitive to other work on the machine). ``--check`` exits with status 1 unless every ratio ≥ 0.8.

    python scripts/bench_delays.py [--quick] [--check] [--json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

DELAYS = {"constant 15": ["--delay", "15"], "uniform:0:30": ["--delay-dist", "uniform:0:30"],
          "workers:16": ["--delay-dist", "workers:16"],
          "workers:16:slow=0.25:4": ["--delay-dist", "workers:16:slow=0.25:4"]}
FULL = dict(side=6, dim=1000, steps=20_000)
QUICK = dict(side=3, dim=100, steps=2_000)
LEAST_RATIO = 0.8


def run(side, dim, steps):
    """``{delay: (wall seconds, CPU seconds, element-steps)}``, one fresh command each."""
    import nqm
    from nqm.bench import children_cpu_seconds, timed

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    grid = ["--method", "sgdm", "--lr", f"geom:0.01:1:{side}", "--momentum", f"lin:0:0.9:{side}", "--noise", "0.05",
            "--dim", str(dim), "--max-steps", str(steps), "--no-progress"]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, delay in DELAYS.items():
            path = Path(tmp) / f"{len(out)}.nc"
            cpu = children_cpu_seconds()
            wall, _ = timed(lambda: subprocess.run([sys.executable, "-m", "nqm", "sweep", *grid, *delay, "--out", str(path)],
                                                   check=True, env=env, stdout=subprocess.DEVNULL))
            cpu = children_cpu_seconds() - cpu
            ds = nqm.load(path)
            out[name] = (wall, cpu, float(np.sum(ds.steps.values, dtype=np.float64)) * dim)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"a tiny grid ({QUICK}); ratios without verdicts")
    parser.add_argument("--check", action="store_true", help=f"exit 1 unless every ratio >= {LEAST_RATIO}")
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON, the last line")
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    found = run(**size)
    base_wall, base_cpu, base_work = found["constant 15"]
    print(f"SGDM, {size['side']} × {size['side']} cells, zhang N = {size['dim']:,}, σ = 0.05, budget {size['steps']:,}; "
          "whole commands, start-up included")
    print(f"{'delay':<24}{'wall s':>8}{'CPU s':>8}{'Gelem-steps':>13}{'rate ratio':>12}{'CPU ratio':>11}")
    ratios = {}
    for name, (wall, cpu, work) in found.items():
        ratio, cpu_ratio = (work / wall) / (base_work / base_wall), (work / cpu) / (base_work / base_cpu)
        ratios[name] = ratio
        print(f"{name:<24}{wall:>8.1f}{cpu:>8.1f}{work / 1e9:>13.2f}{ratio:>11.2f}×{cpu_ratio:>10.2f}×")
    failed = [name for name, r in ratios.items() if r < LEAST_RATIO]
    if not args.quick:
        print("all processes at least 0.8× the constant delay's rate" if not failed else f"below 0.8×: {', '.join(failed)}")
    if args.json:
        print(json.dumps({"size": size, "seconds": {k: v[0] for k, v in found.items()}, "ratios": ratios}))
    return 1 if args.check and not args.quick and failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
