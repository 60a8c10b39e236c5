"""Monte Carlo means of the engine against the exact second-moment recursion (nqm.expected)."""

import dataclasses

import numpy as np
import pytest

import nqm
import reference
from nqm import diagnostics, engine, expected
from nqm.optimizers import make

PROBLEM = nqm.loguniform(4, 0.05, 1.0)


@pytest.mark.parametrize("method", ["sgdm", "shifted"])
def test_noiseless_expectation_is_the_trajectory(method):
    exact = expected.expected_loss(PROBLEM, lr=0.3, momentum=0.6, delay=3, steps=300, method=method)
    traced = reference.run(PROBLEM.eigenvalues, 0.3, 0.6, 3, method=method, max_steps=300, trace=True)
    np.testing.assert_allclose(exact, traced, rtol=1e-10)


@pytest.mark.parametrize("method,delay,dampening", [("sgdm", 2, False), ("shifted", 3, False), ("sgdm", 4, True)])
def test_monte_carlo_mean_loss_within_three_standard_errors(method, delay, dampening):
    """4,000 cells with independent noise: the mean loss at several steps matches the exact value."""
    cells, steps, lr, m, sigma = 4000, 120, 0.3, 0.5, 0.4
    config = engine.RunConfig(target=-1.0, diverge_factor=np.inf, max_steps=steps, chunk_steps=steps,
                              independent_noise=True, x64=True, progress=False)
    out = engine.simulate(PROBLEM, make(method, delay=delay, dampening=dampening),
                          {"lr": np.full(cells, lr), "momentum": np.full(cells, m)}, np.full(cells, sigma),
                          delay=delay, seed=5, uids=np.arange(cells), config=config,
                          record={"loss": diagnostics.loss})
    exact = expected.expected_loss(PROBLEM, lr=lr, momentum=m, delay=delay, noise=sigma, steps=steps,
                                   method=method, dampening=dampening)
    losses = out.trace["loss"]
    for t in (5, 20, 60, 119):
        mean, se = losses[:, t].mean(), losses[:, t].std(ddof=1) / np.sqrt(cells)
        assert abs(mean - exact[t]) < 3 * se, (t, mean, exact[t], se)
    noiseless = expected.expected_loss(PROBLEM, lr=lr, momentum=m, delay=delay, steps=steps, method=method,
                                       dampening=dampening)
    # not vacuous: the noise's share of the final loss is far larger than the test's tolerance
    assert exact[-1] - noiseless[-1] > 10 * se
