"""Giladi et al. 2020, Fig. 7: SGD with delay ~ uniform{1..b}, b = 1..64, 1/x* against E[τ]."""

import numpy as np

from nqm.plots.stability import figure_script, threshold_figure
from nqm.stability import threshold_dataset


def make_figure(smoke, dampening):
    del dampening  # SGD has no momentum
    b = np.arange(1, 9 if smoke else 65)
    ds = threshold_dataset("sgd", delays=b, delay_dist="uniform:1")
    constant = threshold_dataset("sgd", delays=np.arange(int(ds.mean_delay.max()) + 1))
    return threshold_figure(ds, "SGD with uniform random delay (Giladi Fig. 7)", against="mean_delay",
                            label="uniform{1..b} delay", asymptote=True, constant=constant)


if __name__ == "__main__":
    figure_script("fig_giladi7_uniform", __doc__, make_figure)
