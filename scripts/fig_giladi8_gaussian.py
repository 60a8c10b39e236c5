"""Giladi et al. 2020, Fig. 8: SGD with discretised Gaussian delay, μ = 1..30, 1/x* against E[τ]."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the family's code, beside this script
from _giladi import random_delay  # noqa: E402

# The claims quote the mean delay of the discretised Gaussian at μ = 2 and 4: it differs from μ for small μ.
figure = random_delay("fig_giladi8_gaussian", "gaussian:{}", range(1, 31), range(1, 6),
                      "SGD with Gaussian random delay (Giladi Fig. 8)", "Gaussian delay (App. C)", __doc__,
                      means={"mean_delay_mu2": "gaussian:2", "mean_delay_mu4": "gaussian:4"})
main, claims = figure.main, figure.claims

if __name__ == "__main__":
    raise SystemExit(main())
