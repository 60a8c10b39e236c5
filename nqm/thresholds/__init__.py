"""Stability thresholds ``x* = λ·η*``, three ways, one module each:

* :mod:`~nqm.thresholds.polynomials` — the papers' characteristic polynomials (Giladi et al. 2020)
  for SGD, SGDM and shifted momentum, with Schur–Cohn tests; numpy and scipy only;
* :mod:`~nqm.thresholds.derived` — any linear method's thresholds derived from its own update
  (:mod:`~nqm.thresholds.matrices` builds its transition matrices, :mod:`~nqm.thresholds.rates` the
  mean, mean-square and almost-sure rates), and :mod:`~nqm.thresholds.agreement`, a sweep held
  against them;
* :mod:`~nqm.search.simulated` — any method's thresholds found by bisection with the engine.

Nothing is imported here, so that the polynomials load without JAX.
"""
