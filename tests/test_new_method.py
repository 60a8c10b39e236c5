"""A new linear method is one file: registered with ``linear=True``, it gets derived thresholds and
exact expected dynamics from its own update, through the API and the nqm command, with no other
edit. The method here (quasi-hyperbolic momentum) lives in this file only."""

from typing import NamedTuple

import numpy as np
import pytest
import xarray as xr

from nqm import io
from nqm.cli import main
from nqm.optimizers import base, momentum


class QuasiHyperbolicHyper(NamedTuple):
    lr: object
    momentum: object


def quasi_hyperbolic(*, nu: float = 0.7) -> base.Optimizer:
    """Quasi-hyperbolic momentum: ``v_{t+1} = m v_t + g_t``, ``w_{t+1} = w_t − η ((1 − ν) g_t + ν v_{t+1})``.

    Args:
      nu: the weight of the velocity in the step (ν = 1 is SGDM, ν = 0 SGD).
    """

    def init(w0):
        return momentum.VelocityState(0.0 * w0)

    def step(hyper, state, w, g, ctx):
        del ctx
        v = hyper.momentum * state.velocity + g
        return w - hyper.lr * ((1.0 - nu) * g + nu * v), momentum.VelocityState(v), {}

    return base.Optimizer(QuasiHyperbolicHyper, init, step, (("nu", nu),), velocity=momentum.velocity, linear=True)


@pytest.fixture
def qhm():
    base.register("qhm", title="quasi-hyperbolic momentum")(quasi_hyperbolic)
    yield "qhm"
    base.unregister("qhm")


def test_its_derived_threshold_is_the_simulated_one(qhm, tmp_path):
    """``nqm threshold`` derives x* from the update; ``--simulate`` bisects the engine's runs."""
    derived, simulated = tmp_path / "derived.nc", tmp_path / "simulated.nc"
    common = ["threshold", "--method", qhm, "--delay", "0", "3", "--momentum", "0.5", "0.9", "--nu", "0.7"]
    assert main([*common, "--out", str(derived)]) == 0
    assert main([*common, "--simulate", "--steps", "20000", "--tol", "0.002", "--out", str(simulated)]) == 0
    x_derived, x_simulated = (io.load_dataset(path).threshold.values for path in (derived, simulated))
    assert np.all(np.isfinite(x_derived)) and np.all(x_derived > 0)
    np.testing.assert_allclose(x_simulated, x_derived, rtol=2e-3)  # the growth test reads through the budget


def test_its_exact_expected_loss_is_the_simulated_loss(qhm, tmp_path):
    """Without noise the expected loss is the loss: ``nqm expected`` and a float64 ``nqm sweep`` give
    the same steps and status in every cell, and the same loss to rounding."""
    grid = ["--method", qhm, "--lr", "geom:0.05:3:8", "--momentum", "0", "0.5", "0.9", "--delay", "2", "--dim", "30",
            "--max-steps", "3000", "--noise", "0"]
    exact, simulated = tmp_path / "exact.nc", tmp_path / "simulated.nc"
    assert main(["expected", *grid, "--out", str(exact)]) == 0
    assert main(["sweep", *grid, "--x64", "--no-progress", "--out", str(simulated)]) == 0
    a, b = io.load(exact), io.load(simulated)
    assert set(np.unique(a.status)) >= {-1, 1}  # both sides of the threshold are in the grid
    xr.testing.assert_equal(a.status, b.status)
    xr.testing.assert_equal(a.steps, b.steps)
    np.testing.assert_allclose(a.loss.values, b.loss.values, rtol=1e-9)


def test_it_leaves_the_registry_as_it_found_it(qhm):
    assert qhm in base.methods() and base.title(qhm) == "quasi-hyperbolic momentum"
    assert base.make(qhm).name == qhm and "nu" in base.options(qhm)


def test_a_method_registered_again_is_the_new_one_everywhere():
    """A notebook re-runs the cell that registers its method with changed code: the sweep, the
    derived threshold and the settling test use the new code, not what was built from the old."""
    import nqm
    from nqm.thresholds.derived import threshold

    def as_sgdm() -> base.Optimizer:  # the "edited" method: plain SGDM under another name
        return momentum.heavy_ball(linear=True)

    grid = dict(lr=[0.1, 0.6, 1.2], momentum=[0.0, 0.8], delay=2, max_steps=600, target=0.01, progress=False,
                problem=nqm.zhang(20))
    try:
        base.register("toy")(quasi_hyperbolic)
        first = nqm.sweep("toy", **grid), threshold("toy", momentum=0.8, delay=2)
        base.register("toy")(as_sgdm)
        second = nqm.sweep("toy", **grid), threshold("toy", momentum=0.8, delay=2)
    finally:
        base.unregister("toy")
    want = nqm.sweep("sgdm", **grid), threshold("sgdm", momentum=0.8, delay=2)
    np.testing.assert_array_equal(second[0].steps.values, want[0].steps.values)
    np.testing.assert_array_equal(second[0].status.values, want[0].status.values)
    np.testing.assert_allclose(second[1], want[1], rtol=1e-12)
    assert not np.array_equal(first[0].steps.values, second[0].steps.values) and first[1] != second[1]
