"""Exact expected dynamics of the linear methods under constant or iid delays and noise, at engine speed.

In the eigenbasis each component w of a linear method follows an autoregression driven by
independent Gaussian noise (``g_t = λ w_{t−D} + σ √λ z_t``, ``w_{s≤0} = 1``; the recursions are in
:mod:`nqm.expected.recursion`): ``w_{t+1} = Σ_k a_k w_{t−k} + σ√λ (b_0 z_t + b_1 z_{t−1})``. Being
linear with independent noise, ``w_t = μ_t + σ√λ Σ_{s<t} ψ_{t−1−s} z_s``: the mean ``μ`` runs the
recursion without noise from the initial weights, and ``ψ_u = b_0 h_u + b_1 h_{u−1}`` comes from the
impulse response ``h`` of the same recursion (``h_0 = 1``). Hence, exactly,

    E[L(w_t)] = ½ Σ_j λ_j μ_{j,t}² + σ² V_t,    V_t = ½ Σ_j λ_j² Σ_{u<t} ψ_{j,u}²,

two scalar recursions per component, with ``V_t`` shared by every noise level: a grid over σ costs
one run. ``V_t`` never decreases. With σ = 0 this is the deterministic dynamics; the steady state
``σ² V_∞`` is ∞ where a component's recursion has a root on or outside the unit circle.

Why a loop of its own rather than the engine's: the engine steps weight vectors driven by noise
samples, in float32 by default; this steps *moments* — per component two scalar recursions (μ and
h) on a ring of their last p values, in float64, with several noise levels sharing one V — and,
being deterministic, it can skip what a closed form settles, which sampling cannot.

Modules, by responsibility:

- :mod:`~nqm.expected.recursion` — the autoregression written out for ``METHODS`` (sgdm, nesterov,
  shifted), which under a constant delay take the closed-form path;
- :mod:`~nqm.expected.steady` — stability and ``V_∞`` from reflection coefficients;
- :mod:`~nqm.expected.closed_form` — roots, the closed form, and what it proves before stepping;
- :mod:`~nqm.expected.stepping` — the jitted float64 loop over slots of cells;
- :mod:`~nqm.expected.autoregression` — the constant-delay evaluator that puts these together;
- :mod:`~nqm.expected.second_moment` — the iid-delay evaluator: the second-moment map of each state;
- :mod:`~nqm.expected.api` — ``sweep``, ``evaluate``, ``expected_loss``, ``steady_state_loss``.

An evaluator turns (method, delay, cells, spectrum, noise levels, limits) into steps, status,
loss, curve and ``V_∞`` per cell; :func:`nqm.expected.reduced.evaluate_process` picks it. Constant delays (a
one-hot pmf included) of the methods written out have the autoregression; every other linear method
(:func:`methods`: any registered with ``linear=True``) and every iid delay (``uniform:A:B``,
``gaussian:MU``, ``pmf:…``) have the second-moment map ``E[s sᵀ] ↦ Σ_d p_d A_d E[s sᵀ] A_dᵀ`` plus the noise, on the state
of :mod:`nqm.thresholds.derived` (:mod:`~nqm.expected.second_moment`). Worker pools have no pmf: no exact mode.
"""

from nqm.expected.api import evaluate, expected_loss, steady_state_loss, sweep
from nqm.expected.reduced import DEFAULT_BINS, methods
from nqm.expected.recursion import METHODS, Recursion, recursion
from nqm.expected.steady import stable

__all__ = ["DEFAULT_BINS", "METHODS", "Recursion", "evaluate", "expected_loss", "methods", "recursion", "stable",
           "steady_state_loss", "sweep"]
