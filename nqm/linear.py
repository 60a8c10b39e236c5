"""Deprecated alias of :mod:`nqm.thresholds.derived` (thresholds derived from a linear method's own update), kept for one version: ``nqm.linear`` was
renamed in 0.2.0 and goes in 0.3.0."""

import warnings

from nqm.thresholds.derived import *  # noqa: F401,F403
from nqm.thresholds.derived import __all__  # noqa: F401

warnings.warn("nqm.linear is renamed nqm.thresholds.derived; the old name goes in nqm 0.3.0", DeprecationWarning, stacklevel=2)
