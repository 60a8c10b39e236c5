"""Giladi et al. 2020, Fig. 7: SGD with delay ~ uniform{1..b}, b = 1..64, 1/x* against E[τ]."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the family's code, beside this script
from _giladi import random_delay  # noqa: E402

figure = random_delay("fig_giladi7_uniform", "uniform:1:{}", range(1, 65), range(1, 9),
                      "SGD with uniform random delay (Giladi Fig. 7)", "uniform{1..b} delay", __doc__)
main, claims = figure.main, figure.claims

if __name__ == "__main__":
    raise SystemExit(main())
