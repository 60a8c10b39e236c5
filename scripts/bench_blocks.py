"""What blocks buy on an accelerator: Figure 1's AB panel at the paper's scale (ρ = 0.5, D = 4,
σ = 0.05, 32 × 32 lr × momentum, N = 10⁴, 500,000 steps, first passage) in the automatic blocks
against one block of all the cells per device, in one process, each compiled inside its own time.

One block carries every finished cell along to the last one's step (nothing to repack); blocks of
about 2²⁰ elements (``nqm.engine.layout.ACCELERATOR_BLOCK_ELEMENTS``) let the cells that stop be
repacked away. Prints both times, their ratio and whether every status and T agree; on a CPU the
automatic blocks are cache-sized and the comparison says little. ``--smoke``: a 4 × 4 grid at
N = 100, 2,000 steps.

    python scripts/bench_blocks.py [--smoke] [--out DIR]
"""

import argparse
import json
import math

import jax
import numpy as np

import nqm
from nqm.bench import timed


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a 4 x 4 grid at N = 100, 2,000 steps")
    parser.add_argument("--out", help="a folder for both results (netCDF)")
    args = parser.parse_args(argv)
    side, dim, steps = (4, 100, 2000) if args.smoke else (32, 10_000, 500_000)
    grid = dict(lr=np.geomspace(0.01, 4.0, side), momentum=np.linspace(0.0, 0.98, side), delay=4, noise=0.05,
                rho=0.5, problem=nqm.zhang(dim), max_steps=steps, first_passage=True, progress=False)
    one_block = math.ceil(side * side / len(jax.devices()))
    seconds, results = {}, {}
    for name, block in (("automatic", None), ("one_block", one_block)):
        seconds[name], results[name] = timed(lambda: nqm.sweep("ab", block_cells=block, batch_cells=block, **grid))
        print(f"{name} blocks: {seconds[name]:.1f} s", flush=True)
        if args.out:
            nqm.save(results[name], f"{args.out}/blocks_{name}.nc")
    a, b = results["automatic"], results["one_block"]
    row = {"backend": jax.devices()[0].platform, "cells": side * side, "dim": dim, "steps": steps,
           "automatic_s": round(seconds["automatic"], 1), "one_block_s": round(seconds["one_block"], 1),
           "speedup": round(seconds["one_block"] / seconds["automatic"], 2),
           "same_status": int((a.status.values == b.status.values).sum()),
           "same_t": int((a.steps.values == b.steps.values).sum())}
    print(json.dumps(row))
    return row


if __name__ == "__main__":
    main()
