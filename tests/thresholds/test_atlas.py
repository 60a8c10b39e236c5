"""Claims of the stability atlas that must hold, checked at small size: braking widens the stable
range under delay; DC-ASGD converges only below SGDM's threshold (its correction is cubic in w, so
it linearises to SGDM at the minimum) though its runs stay bounded far above it."""

import numpy as np
import pytest

import nqm
from nqm import sweeps
from nqm.thresholds import derived
from nqm.search.simulated import simulated_threshold
from nqm.status import BUDGET, DIVERGED, REACHED


def test_braking_widens_the_stable_range_under_delay():
    ab = simulated_threshold("ab", momentum=[0.0, 0.5, 0.9], delay=4, rho=[0.5, 1.0], problem=nqm.zhang(20),
                             steps=5_000, tol=1e-2).threshold.sel(delay=4)
    sgdm = derived.threshold("sgdm", momentum=[0.0, 0.5, 0.9], delay=4)
    assert np.all(ab.sel(rho=0.5).values > 1.5 * sgdm)  # about 2× at every momentum
    assert float(ab.sel(rho=1.0, momentum=0.5)) > 3 * sgdm[1]


@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.9])
def test_dc_asgd_converges_only_below_sgdm_threshold(momentum):
    x = float(derived.threshold("sgdm", momentum=momentum, delay=4))
    kw = dict(momentum=momentum, delay=4, problem=nqm.explicit([1.0]), target=1e-30, max_steps=20_000, progress=False)
    ds = sweeps.evaluate("dc-asgd", lr=[0.8 * x, 1.25 * x, 2 * x], **kw).isel(seed=0)
    status, loss = ds.status.values, ds.loss.values
    assert status[0] == REACHED  # below: to the smallest float32 losses
    # above: neither converged nor diverged; bounded by the cubic correction, the run oscillates
    assert np.all(status[1:] == BUDGET) and np.all(loss[1:] > 1e-3) and DIVERGED not in status
