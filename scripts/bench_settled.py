"""What the settled test costs: a sweep's time with it against the same sweep with ``--first-passage``.

Two measurements, each a ratio from one run of this script (settled time / first-passage time; the
target: at most 1.5):

* **the README's main job** — its first command's sweep, read from README.md, run as the user runs
  it (a process, the persistent compilation cache warm: one run of each first, not timed), with
  and without ``--first-passage``, alternated ``--repeat`` times; the best of each;
* **a grid** — 16 × 16 lr × momentum (``--quick``: 8 × 8) at D = 4, N = 1,000, a 20,000-step
  budget, where most cells reach the target, noiseless and σ = 0.05, for SGDM (the exact test) and
  AB at ρ = 0.5 (the continued test: the look, the window, the floor probe), each sweep timed in
  this process after one run to compile (best of ``--repeat``).

Printed beside each grid's ratio: how its reached cells were decided (exact, at the look, by the
window, undecided). ``--no-readme``: the grid only.

    python scripts/bench_settled.py [--quick] [--repeat 2] [--no-readme]
"""

import argparse
import json
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

import numpy as np

import nqm
from nqm import delays, jobs, settling
from nqm.bench import timed

ROOT = pathlib.Path(__file__).resolve().parent.parent


def readme_sweep() -> list[str]:
    """The arguments of the README's main job: the ``nqm sweep`` of its first command, without
    its ``--out`` and ``--plot`` (written to a scratch folder here)."""
    first = re.search(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S).group(1)
    words = shlex.split(first.split("&&", 1)[1])
    assert words[:2] == ["nqm", "sweep"], words
    kept, skip = [], False
    for word in words[2:]:
        if skip:
            skip = False
        elif word in ("--out", "--plot"):
            skip = True
        else:
            kept.append(word)
    return kept


def time_command(arguments: list[str], folder: str) -> float:
    """Seconds of one ``nqm sweep`` process with ``arguments`` (its result written into ``folder``)."""
    return timed(lambda: subprocess.run([sys.executable, "-m", "nqm", "sweep", *arguments, "--out", f"{folder}/r.nc",
                                         "--force", "--no-progress"], check=True, capture_output=True))[0]


def readme_ratio(repeat: int) -> dict:
    arguments = readme_sweep()
    with tempfile.TemporaryDirectory() as folder:
        for first in (True, False):  # warm the compilation cache, as a user's second run finds it
            time_command(arguments + ["--first-passage"] * first, folder)
        seconds = {"first_passage": [], "settled": []}
        for _ in range(repeat):
            seconds["first_passage"].append(time_command(arguments + ["--first-passage"], folder))
            seconds["settled"].append(time_command(arguments, folder))
    best = {k: min(v) for k, v in seconds.items()}
    row = {"command": "nqm sweep " + " ".join(arguments), **best, "ratio": best["settled"] / best["first_passage"],
           "runs": seconds}
    print(f"README's main job: first passage {best['first_passage']:.2f} s, settled {best['settled']:.2f} s = "
          f"{row['ratio']:.2f}× (best of {repeat}, alternated)")
    return row


def decided(method: str, grid: dict, extra: dict, noise: float) -> dict:
    """How each reached cell of the grid was decided: exact, at the look, by the window, undecided."""
    task, _ = jobs.job(method, grid["problem"], dict(max_steps=grid["max_steps"], progress=False, **extra))
    process = delays.process(grid["delay"])
    lr, m = (x.ravel() for x in np.meshgrid(grid["lr"], grid["momentum"]))
    values = dict(lr=lr, momentum=m, noise=np.full(lr.size, noise), **{k: np.full(lr.size, v) for k, v in extra.items()})
    test = settling.choose(task, process)
    test.prepare(values)
    outcome = task.run(process, values, 0, stop=test.rule(values))
    status = test.decide(values, outcome, 0)
    reached = np.isin(status, (1, 2, 3))
    early = np.zeros(lr.size, bool) if outcome.stop is None else np.asarray(outcome.stop.early) == 1
    exact = test.exact_cells(values)
    return {"reached": int(reached.sum()), "exact": int((reached & exact).sum()),
            "at_look": int((reached & early).sum()), "undecided": int((status == 3).sum()),
            "by_window": int((reached & ~exact & ~early & (status != 3)).sum())}


def main():
    nqm.use_every_core()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="an 8 × 8 grid")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-readme", action="store_true", help="the grid only")
    args = parser.parse_args()
    rows = {} if args.no_readme else {"readme": readme_ratio(args.repeat)}
    side = 8 if args.quick else 16
    grid = dict(lr=np.geomspace(0.02, 0.6, side), momentum=np.linspace(0.0, 0.9, side), delay=4,
                problem=nqm.zhang(1_000), max_steps=20_000, progress=False)
    for method, extra in (("sgdm", {}), ("ab", {"rho": 0.5})):
        for noise in (0.0, 0.05):
            run = lambda first: nqm.sweep(method, noise=noise, first_passage=first, **grid, **extra)
            seconds = {kind: timed(lambda: run(kind == "first_passage"), args.repeat, warm_up=True)[0]  # warm: compiled
                       for kind in ("first_passage", "settled")}
            how = decided(method, grid, extra, noise)
            row = rows[f"{method} sigma={noise:g}"] = dict(seconds, ratio=seconds["settled"] / seconds["first_passage"],
                                                          **how)
            print(f"{method:5s} σ = {noise:<4g}: first passage {seconds['first_passage']:6.2f} s, settled "
                  f"{seconds['settled']:6.2f} s = {row['ratio']:.2f}× (of {how['reached']} cells that reached the "
                  f"target, {how['exact']} exact, {how['at_look']} settled at the look, {how['by_window']} by the "
                  f"window, {how['undecided']} undecided)")
    print(json.dumps({"dim": 1_000, "cells": side * side, "budget": 20_000, "rows": rows}))


if __name__ == "__main__":
    main()
