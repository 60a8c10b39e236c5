"""The same sweep computed on two machines (say a GPU and a CPU), compared cell by cell: how many
cells end with the same status, and by how many steps their T differ where both reached the target.

Two results compare when they are the same computation (``nqm.results.difference``) over the
coordinates they share: a panel cut out of a larger sweep holds the same cells, since a cell's
numbers do not depend on the grid around it. Their last bits may differ (each machine picks its own
kernels and reduction order, see ``nqm.machine``); this says whether any verdict or T does.

    python scripts/compare_machines.py A.nc B.nc [A2.nc B2.nc ...] [--out JSON]

Prints one line per pair and panel, and writes them all as JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import numpy as np
import xarray as xr

from nqm import NqmError, results
from nqm.io import load

GRID_ATTRS = ("delay_processes", "delay_sha256", "seed", "settled_test")  # list the whole grid's, per delay or seed
RUN_RECORDS = ("compute_seconds",)  # how long a figure's piece took to compute: a record of the run, not a setting


def compare(a: xr.Dataset, b: xr.Dataset) -> list[dict]:
    """Per panel (every dimension but lr and momentum) of the cells ``a`` and ``b`` share: cells,
    equal statuses, cells both reached, equal T among them and the largest |ΔT|."""
    a, b = xr.align(a, b, join="inner")
    if not a.sizes or min(a.sizes.values()) == 0:
        raise NqmError("the two results share no cell: compare results of the same grid")
    b = b.assign_attrs({k: a.attrs[k] for k in GRID_ATTRS if k in a.attrs})
    a, b = (ds.drop_attrs(deep=False).assign_attrs({k: v for k, v in ds.attrs.items() if k not in RUN_RECORDS})
            for ds in (a, b))
    if (why := results.difference(a, b)) is not None:
        raise NqmError(f"not the same computation: {why}")
    panel_dims = [d for d in a.status.dims if d not in ("lr", "momentum")]
    rows = []
    for values in itertools.product(*(a[d].values.tolist() for d in panel_dims)):
        at = dict(zip(panel_dims, values))
        sa, sb = a.status.sel(at).values, b.status.sel(at).values
        both = (sa >= 1) & (sb >= 1)
        dt = np.abs(a.steps.sel(at).values[both].astype(np.int64) - b.steps.sel(at).values[both])
        rows.append({**at, "cells": int(sa.size), "same_status": int((sa == sb).sum()), "reached_both": int(both.sum()),
                     "same_t": int((dt == 0).sum()), "max_abs_dt": int(dt.max(initial=0))})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="pairs of results: A B [A2 B2 ...]")
    parser.add_argument("--out", help="write every row as JSON")
    args = parser.parse_args(argv)
    if len(args.files) % 2:
        parser.error("give the results in pairs: A B [A2 B2 ...]")
    table = []
    try:
        for first, second in zip(args.files[::2], args.files[1::2]):
            a, b = load(first), load(second)
            for row in compare(a, b):
                table.append({"a": first, "b": second, "method": a.attrs["method"], **row})
                print(", ".join(f"{k} {v}" for k, v in table[-1].items()))
    except NqmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
