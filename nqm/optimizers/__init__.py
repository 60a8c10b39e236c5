"""Optimizer families, one file each, registered by name: ``make("ab", delay=4, group="element")``."""

import nqm._devices  # noqa: F401  (one CPU device per core, before any JAX computation)
from nqm.optimizers.base import Optimizer, convention, make, methods
from nqm.optimizers.sgdm import sgdm
from nqm.optimizers.ab import adaptive_braking
from nqm.optimizers.shifted import shifted

__all__ = ["Optimizer", "convention", "make", "methods", "sgdm", "adaptive_braking", "shifted"]
