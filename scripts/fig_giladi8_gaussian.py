"""Giladi et al. 2020, Fig. 8: SGD with discretised Gaussian delay, μ = 1..30, 1/x* against E[τ]."""


from nqm.plots.script import FigureScript
from nqm.plots.stability import threshold_figure, with_constant_delay
from nqm.thresholds.polynomials import fit_inverse_threshold, threshold_dataset


def compute(smoke):
    return with_constant_delay(threshold_dataset("sgd", delays=[f"gaussian:{mu}" for mu in range(1, 6 if smoke else 31)]))


def draw(data):
    return threshold_figure(data, "SGD with Gaussian random delay (Giladi Fig. 8)", against="mean_delay",
                            label="Gaussian delay (App. C)", asymptote=True)


def claims(data):
    """The mean delay of the discretised Gaussian (it differs from μ for small μ) and the fitted slope."""
    slope, intercept = fit_inverse_threshold(data.mean_delay, data.threshold.isel(momentum=0))
    means = {f"mean_delay_mu{mu}": float(data.mean_delay.sel(delay=f"gaussian:{mu}")) for mu in (2, 4)
             if f"gaussian:{mu}" in data.delay}
    return {**means, "slope_vs_mean_delay": slope, "intercept": intercept}


main = FigureScript("fig_giladi8_gaussian", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
