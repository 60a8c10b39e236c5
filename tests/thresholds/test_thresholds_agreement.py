"""Engine and stability analysis together: the simulated divergence boundary sits on η*."""

import numpy as np
import pytest

import nqm
from nqm.thresholds import polynomials
from nqm.thresholds.agreement import agreement


def test_two_eigenvalue_sgdm_converges_below_and_diverges_above_threshold():
    """λ = (1, 0.1), SGDM, D = 4, m = 0.9: converges at 0.97 η*, diverges at 1.03 η*.

    Just above η* the unstable mode grows slowly from a tiny start: the loss first falls to ~1e-5
    and only then blows up, so the target is set below that dip.
    """
    problem = nqm.explicit([1.0, 0.1])
    eta_star = polynomials.lr_threshold(polynomials.threshold("sgdm", 4, 0.9), problem.lam_max)
    ds = nqm.sweep("sgdm", lr=[0.97 * eta_star, 1.03 * eta_star], momentum=0.9, delay=4, problem=problem,
                   target=1e-8, max_steps=200_000, chunk_steps=20_000, x64=True, progress=False)
    np.testing.assert_array_equal(ds.status.values.ravel(), [nqm.REACHED, nqm.DIVERGED])


@pytest.mark.parametrize("method,dampening", [("sgdm", False), ("shifted", False), ("sgdm", True), ("shifted", True)])
def test_sweep_status_agrees_with_linear_prediction_outside_the_band(method, dampening):
    problem = nqm.loguniform(6, 1e-2, 1.0)
    momentum = np.linspace(0.0, 0.9, 7)
    x = polynomials.threshold(method, [1, 4, 8], momentum, dampening=dampening)
    lr = np.geomspace(0.5 * x.min(), 1.6 * x.max(), 28)  # λ_max = 1: η* = x*
    ds = nqm.sweep(method, lr=lr, momentum=momentum, delay=[1, 4, 8], problem=problem, dampening=dampening,
                   target=1e-8, max_steps=100_000, chunk_steps=10_000, progress=False)
    report = agreement(ds, band=0.03)
    assert report["stable"] > 100 and report["unstable"] > 100
    assert report["fraction"] >= 0.99, report
