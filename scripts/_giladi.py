"""Giladi et al. 2020's threshold figures that differ only in their settings, as two families:
momentum under a constant delay (Figs. 4 and 10) and SGD under a random delay (Figs. 7 and 8).

Each figure keeps its own script (``figures/NAME.png`` is drawn by ``scripts/NAME.py``), which is
its docstring and its settings::

    figure = momentum("fig_giladi4_shifted", "shifted", "Shifted momentum with delay (Giladi Fig. 4, left)", __doc__)
"""

import numpy as np

from nqm.plots.script import FigureScript
from nqm.plots.stability import threshold_figure, with_constant_delay
from nqm.thresholds.polynomials import fit_inverse_threshold, threshold_dataset

MOMENTA = [0.0, 0.2, 0.4, 0.6, 0.8, 0.9]
UNDAMPENED = {"--undampened": dict(action="store_true",
                                   help="momentum v = m v + g instead of the paper's v = m v + (1-m) g")}


def momentum(name: str, method: str, title: str, doc: str) -> FigureScript:
    """``method``'s 1/x* against a constant delay τ = 0..64, one line per momentum of :data:`MOMENTA`."""

    def compute(smoke, undampened=False):
        return threshold_dataset(method, delays=np.arange(9 if smoke else 65),
                                 momenta=MOMENTA[::2] if smoke else MOMENTA, dampening=not undampened)

    def claims(ds):
        """Per momentum, the slope of the line fitted to 1/x* against τ."""
        return {f"slope_m{m:g}": fit_inverse_threshold(ds.delay, ds.threshold.sel(momentum=m))[0]
                for m in ds.momentum.values}

    return FigureScript(name, compute, lambda ds: threshold_figure(ds, title), claims, doc=doc, options=UNDAMPENED)


def random_delay(name: str, spec: str, full: range, small: range, title: str, label: str, doc: str,
                 means: dict | None = None) -> FigureScript:
    """SGD's 1/x* against the mean delay E[τ], one point per delay ``spec.format(k)`` for k in
    ``full`` (``small`` at the smoke size); ``means``: ``{claim key: delay}``, the delays whose E[τ]
    the claims quote beside the fitted line."""

    def compute(smoke):
        return with_constant_delay(threshold_dataset("sgd", delays=[spec.format(k) for k in (small if smoke else full)]))

    def claims(data):
        slope, intercept = fit_inverse_threshold(data.mean_delay, data.threshold.isel(momentum=0))
        quoted = {key: float(data.mean_delay.sel(delay=d)) for key, d in (means or {}).items() if d in data.delay}
        return {**quoted, "slope_vs_mean_delay": slope, "intercept": intercept}

    return FigureScript(name, compute, lambda data: threshold_figure(data, title, against="mean_delay", label=label,
                                                                     asymptote=True), claims, doc=doc)
