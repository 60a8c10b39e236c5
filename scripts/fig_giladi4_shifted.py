"""Giladi et al. 2020, Fig. 4 (left): shifted momentum with constant delay, 1/x* against τ per m."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the family's code, beside this script
from _giladi import momentum  # noqa: E402

figure = momentum("fig_giladi4_shifted", "shifted", "Shifted momentum with delay (Giladi Fig. 4, left)", __doc__)
main, claims = figure.main, figure.claims

if __name__ == "__main__":
    raise SystemExit(main())
