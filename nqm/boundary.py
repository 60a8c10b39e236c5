"""Deprecated alias of :mod:`nqm.thresholds.simulated` (thresholds simulated by bisection), kept for one version: ``nqm.boundary`` was
renamed in 0.2.0 and goes in 0.3.0."""

import warnings

from nqm.thresholds.simulated import *  # noqa: F401,F403
from nqm.thresholds.simulated import __all__  # noqa: F401

warnings.warn("nqm.boundary is renamed nqm.thresholds.simulated; the old name goes in nqm 0.3.0", DeprecationWarning, stacklevel=2)
