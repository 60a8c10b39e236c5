"""Giladi et al. 2020, Fig. 8: SGD with discretised Gaussian delay, μ = 1..30, 1/x* against E[τ]."""

import numpy as np

from nqm.plots.stability import figure_script, threshold_figure
from nqm.stability import threshold_dataset


def make_figure(smoke, dampening):
    del dampening  # SGD has no momentum
    ds = threshold_dataset("sgd", delays=np.arange(1, 6 if smoke else 31), delay_dist="gaussian")
    constant = threshold_dataset("sgd", delays=np.arange(int(ds.mean_delay.max()) + 1))
    return threshold_figure(ds, "SGD with Gaussian random delay (Giladi Fig. 8)", against="mean_delay",
                            label="Gaussian delay (App. C)", asymptote=True, constant=constant)


if __name__ == "__main__":
    figure_script("fig_giladi8_gaussian", __doc__, make_figure)
