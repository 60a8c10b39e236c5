"""Deprecated alias of :mod:`nqm.thresholds.polynomials` (the papers' characteristic polynomials), kept for one version: ``nqm.stability`` was
renamed in 0.2.0 and goes in 0.3.0."""

import warnings

from nqm.thresholds.polynomials import *  # noqa: F401,F403
from nqm.thresholds.polynomials import __all__  # noqa: F401

warnings.warn("nqm.stability is renamed nqm.thresholds.polynomials; the old name goes in nqm 0.3.0", DeprecationWarning, stacklevel=2)
