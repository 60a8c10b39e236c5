"""nqm: the Noisy Quadratic Model under gradient delay."""

__version__ = "0.1.0"
