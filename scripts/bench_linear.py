"""Seconds of the derived threshold tables (nqm.thresholds.derived) per linear method: delays 0..64 × momenta
{0, 0.5, 0.9}, mean criterion, as the first call in a fresh process (compilations included) and
again (matrices cached); Giladi's polynomial tables (nqm.thresholds.polynomials) for the same grids, and the
ratios, measured in the same run. Then the mean-square criterion at a few iid pmfs, with its
ratio to the mean threshold."""

import argparse
import json

import numpy as np

import nqm
from nqm.bench import timed
from nqm.thresholds import derived, polynomials

METHODS = ("sgd", "sgdm", "nesterov", "staleness", "shifted", "dana", "ormo", "ormo-da")
PMFS = ("uniform:1:4", "uniform:1:8", "gaussian:4", "uniform:0:16")


def main(argv=None):
    nqm.use_every_core()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="delays 0..4 and one pmf (for CI)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=METHODS)
    parser.add_argument("--max-delay", type=int, default=64)
    args = parser.parse_args(argv)
    delays = np.arange(5 if args.smoke else args.max_delay + 1)
    rows = []
    for method in args.methods:
        momenta = [0.0] if method == "sgd" else [0.0, 0.5, 0.9]
        first, table = timed(lambda: derived.threshold_table(method, delays=delays, momenta=momenta))
        again, _ = timed(lambda: derived.threshold_table(method, delays=delays, momenta=momenta))
        row = {"method": method, "cells": table.threshold.size, "first_s": round(first, 2), "again_s": round(again, 2)}
        if method in polynomials.METHODS:
            polynomial, reference = timed(lambda: polynomials.threshold_dataset(method, delays, momenta))
            row.update(polynomial_s=round(polynomial, 2), ratio_first=round(first / polynomial, 1),
                       max_rel_diff=float(np.abs(table.threshold.values / reference.threshold.values - 1).max()))
        rows.append(row)
        print(json.dumps(row), flush=True)
    for spec in PMFS[:1] if args.smoke else PMFS:
        seconds, (square, mean) = timed(lambda: [derived.threshold("sgdm", delay=spec, momentum=[0.0, 0.5], criterion=c)
                                                 for c in ("mean-square", "mean")])
        print(json.dumps({"mean_square": spec, "method": "sgdm", "momentum": [0.0, 0.5], "seconds": round(seconds, 2),
                          "ratio_to_mean": np.round(square / mean, 4).tolist()}), flush=True)


if __name__ == "__main__":
    main()
