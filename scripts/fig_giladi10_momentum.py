"""Giladi et al. 2020, Fig. 10: standard momentum with constant delay, 1/x* against τ per m."""

import numpy as np

from nqm.plots.script import FigureScript
from nqm.plots.stability import threshold_figure
from nqm.thresholds.polynomials import fit_inverse_threshold, threshold_dataset

MOMENTA = [0.0, 0.2, 0.4, 0.6, 0.8, 0.9]
UNDAMPENED = {"--undampened": dict(action="store_true",
                                   help="momentum v = m v + g instead of the paper's v = m v + (1-m) g")}


def compute(smoke, undampened=False):
    return threshold_dataset("sgdm", delays=np.arange(9 if smoke else 65),
                             momenta=MOMENTA[::2] if smoke else MOMENTA, dampening=not undampened)


def draw(ds):
    return threshold_figure(ds, "Standard momentum with delay (Giladi Fig. 10)")


def claims(ds):
    """Per momentum, the slope of the line fitted to 1/x* against τ."""
    return {f"slope_m{m:g}": fit_inverse_threshold(ds.delay, ds.threshold.sel(momentum=m))[0]
            for m in ds.momentum.values}


main = FigureScript("fig_giladi10_momentum", compute, draw, claims, doc=__doc__, options=UNDAMPENED).main

if __name__ == "__main__":
    raise SystemExit(main())
