"""From a real model to its NQM and back: measure a model's spectrum and gradient noise at a point
(:mod:`nqm.transfer.measure`), and train the model itself with nqm's optimizers under nqm's delays
(:mod:`nqm.transfer.train`)."""

from nqm.transfer.measure import Measured, measure
from nqm.transfer.train import train

__all__ = ["Measured", "measure", "train"]
