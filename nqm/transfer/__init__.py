"""From a real model to its NQM and back: measure a model's spectrum, initial error and gradient
noise at a point (:mod:`nqm.transfer.measure`), train the model itself with nqm's optimizers under
nqm's delays (:mod:`nqm.transfer.train`), and set the NQM's prediction beside the model's outcome
(:func:`transfer`, :mod:`nqm.transfer.compare`), for the problems nqm ships or your own model."""

from nqm.transfer.compare import transfer
from nqm.transfer.measure import Measured, measure
from nqm.transfer.train import train

__all__ = ["Measured", "measure", "train", "transfer"]
