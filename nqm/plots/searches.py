"""Deprecated alias of :mod:`nqm.search.answers` (many searches kept in one file, and readers of
their answers), kept for one version: ``nqm.plots.searches`` was renamed in 0.2.0 and goes in 0.3.0."""

import warnings

from nqm.search.answers import *  # noqa: F401,F403
from nqm.search.answers import __all__  # noqa: F401

warnings.warn("nqm.plots.searches is renamed nqm.search.answers; the old name goes in nqm 0.3.0", DeprecationWarning,
              stacklevel=2)
