"""Per-step diagnostics recorded by the engine's loop."""

import numpy as np

import nqm
import reference
from nqm import diagnostics

PROBLEM = nqm.loguniform(10, 1e-2, 1.0)


def test_loss_trace_matches_numpy_reference():
    ds = diagnostics.trajectory("ab", problem=PROBLEM, lr=0.15, momentum=0.8, rho=0.5, delay=3, steps=400, x64=True)
    expected = reference.run(PROBLEM.eigenvalues, 0.15, 0.8, 3, method="ab", rho=0.5, max_steps=400, trace=True)
    assert expected[-1] < 1e-2 * expected[0]  # a converging run: no chaotic amplification of rounding
    np.testing.assert_allclose(ds.loss.values, expected, rtol=1e-9)


def test_energy_of_heavy_ball_is_loss_plus_kinetic_term():
    ds = diagnostics.trajectory("sgdm", problem=PROBLEM, lr=0.3, momentum=0.7, delay=1, noise=0.01, steps=200,
                                record=("component_loss", "energy", "velocity_norm", "loss"), x64=True)
    kinetic = ds.energy - ds.component_loss  # ½ η v_k²
    np.testing.assert_allclose(kinetic.sum("component"), 0.5 * 0.3 * ds.velocity_norm**2, rtol=1e-9)
    np.testing.assert_allclose(ds.component_loss.sum("component"), ds.loss, rtol=1e-9)
    assert (ds.energy >= ds.component_loss).all()


def test_braking_diagnostics_are_neutral_without_braking():
    ds = diagnostics.trajectory("ab", problem=PROBLEM, lr=0.3, momentum=0.7, rho=0.0, delay=2, noise=0.01, steps=200,
                                record=("alpha", "energy_ratio"))
    np.testing.assert_array_equal(ds.alpha.values, 1.0)
    np.testing.assert_allclose(ds.energy_ratio.values, 1.0, rtol=1e-6)


def test_ab_dissipates_the_energy_of_an_unstable_sgdm_component():
    """AB paper Fig. 3: with delay, AB removes energy from the top component faster than SGDM."""
    lr, m = 0.5, 0.9
    ds = diagnostics.trajectory("ab", problem=PROBLEM, lr=lr, momentum=m, rho=0.5, delay=2, steps=300,
                                record=("energy_ratio", "alpha", "gradient_velocity_ratio"), x64=True)
    decay = np.exp(np.log(ds.energy_ratio).mean("step"))
    assert float(decay[0]) < 0.99
    assert float(ds.alpha.min()) >= 0.5 - 1e-12 and float(ds.alpha.max()) <= 1.5 + 1e-12
    assert np.isinf(ds.gradient_velocity_ratio[0]) and np.isfinite(ds.gradient_velocity_ratio[1:]).all()


def test_rotated_problem_reports_eigencomponents():
    turned = PROBLEM.with_rotation(2)
    a = diagnostics.trajectory("sgdm", problem=PROBLEM, lr=0.3, momentum=0.5, steps=50, record=("component_loss",), x64=True)
    b = diagnostics.trajectory("sgdm", problem=turned, lr=0.3, momentum=0.5, steps=50, record=("component_loss",), x64=True)
    np.testing.assert_allclose(b.component_loss, a.component_loss, rtol=1e-8, atol=1e-14)
