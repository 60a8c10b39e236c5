"""Optimizer families, one file each, registered by name: ``make("ab", delay=4, group="element")``."""

from nqm.conventions import convention
from nqm.optimizers.base import Optimizer, make, methods
from nqm.optimizers.sgdm import sgd, sgdm
from nqm.optimizers.ab import adaptive_braking
from nqm.optimizers.shifted import shifted
from nqm.optimizers.nesterov import nesterov
from nqm.optimizers.staleness import staleness
from nqm.optimizers.restart import restart
from nqm.optimizers.dc_asgd import dc_asgd
from nqm.optimizers.dana import dana
from nqm.optimizers.ormo import ormo, ormo_da
from nqm.optimizers.optax_bridge import from_optax
from nqm.optimizers.precond import precond

__all__ = ["Optimizer", "convention", "make", "methods", "sgd", "sgdm", "adaptive_braking", "shifted", "nesterov",
           "staleness", "restart", "dc_asgd", "dana", "ormo", "ormo_da", "from_optax", "precond"]
