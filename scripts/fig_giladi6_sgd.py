"""Giladi et al. 2020, Fig. 6: SGD with constant delay, 1/x* against τ, numeric vs (2τ+1)/π."""

import numpy as np

from nqm.plots.stability import figure_script, threshold_figure
from nqm.stability import threshold_dataset


def make_figure(smoke, dampening):
    del dampening  # SGD has no momentum
    ds = threshold_dataset("sgd", delays=np.arange(9 if smoke else 65))
    return threshold_figure(ds, "SGD with delay: stability threshold (Giladi Fig. 6)", asymptote=True,
                            residual=True)


if __name__ == "__main__":
    figure_script("fig_giladi6_sgd", __doc__, make_figure)
