"""Giladi et al. 2020, Fig. 10: standard momentum with constant delay, 1/x* against τ per m."""

import numpy as np

from nqm.plots.stability import figure_script, threshold_figure
from nqm.stability import threshold_dataset

MOMENTA = [0.0, 0.2, 0.4, 0.6, 0.8, 0.9]


def make_figure(smoke, dampening):
    ds = threshold_dataset("sgdm", delays=np.arange(9 if smoke else 65),
                           momenta=MOMENTA[::2] if smoke else MOMENTA, dampening=dampening)
    return threshold_figure(ds, "Standard momentum with delay (Giladi Fig. 10)")


if __name__ == "__main__":
    figure_script("fig_giladi10_momentum", __doc__, make_figure)
