"""Giladi et al. 2020, Fig. 10: standard momentum with constant delay, 1/x* against τ per m."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the family's code, beside this script
from _giladi import momentum  # noqa: E402

figure = momentum("fig_giladi10_momentum", "sgdm", "Standard momentum with delay (Giladi Fig. 10)", __doc__)
main, claims = figure.main, figure.claims

if __name__ == "__main__":
    raise SystemExit(main())
