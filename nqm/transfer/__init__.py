"""From a real model to its NQM and back: measure a model's spectrum and gradient noise at a point
(:mod:`nqm.transfer.measure`)."""

from nqm.transfer.measure import Measured, measure

__all__ = ["Measured", "measure"]
