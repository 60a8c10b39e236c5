"""Giladi et al. 2020, Fig. 7: SGD with delay ~ uniform{1..b}, b = 1..64, 1/x* against E[τ]."""


from nqm.plots.script import FigureScript
from nqm.plots.stability import threshold_figure, with_constant_delay
from nqm.thresholds.polynomials import fit_inverse_threshold, threshold_dataset


def compute(smoke):
    return with_constant_delay(threshold_dataset("sgd", delays=[f"uniform:1:{b}" for b in range(1, 9 if smoke else 65)]))


def draw(data):
    return threshold_figure(data, "SGD with uniform random delay (Giladi Fig. 7)", against="mean_delay",
                            label="uniform{1..b} delay", asymptote=True)


def claims(data):
    slope, intercept = fit_inverse_threshold(data.mean_delay, data.threshold.isel(momentum=0))
    return {"slope_vs_mean_delay": slope, "intercept": intercept}


main = FigureScript("fig_giladi7_uniform", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
