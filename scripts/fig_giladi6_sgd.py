"""Giladi et al. 2020, Fig. 6: SGD with constant delay, 1/x* against τ, numeric vs (2τ+1)/π."""

import numpy as np

from nqm.plots.script import FigureScript
from nqm.plots.stability import threshold_figure
from nqm.thresholds.polynomials import fit_inverse_threshold, sgd_inverse_threshold_approx, threshold_dataset


def compute(smoke):
    return threshold_dataset("sgd", delays=np.arange(9 if smoke else 65))


def draw(ds):
    return threshold_figure(ds, "SGD with delay: stability threshold (Giladi Fig. 6)", asymptote=True,
                            residual=True)


def claims(ds):
    x = ds.threshold.isel(momentum=0)
    slope, intercept = fit_inverse_threshold(ds.delay, x)
    return {"slope": slope, "intercept": intercept,
            "max_abs_error_vs_eq7": float(np.abs(1 / x - sgd_inverse_threshold_approx(ds.delay)).max())}


main = FigureScript("fig_giladi6_sgd", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
