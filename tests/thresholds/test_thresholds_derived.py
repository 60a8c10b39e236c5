"""Thresholds derived from each method's own update: closed forms, Giladi's polynomials, matrices
written here from the update rules, the engine's trajectories, and the order of the criteria."""

from typing import NamedTuple

import numpy as np
import pytest
from scipy.optimize import brentq

import nqm
from nqm import delays, diagnostics, engine
from nqm.thresholds import derived, polynomials
from nqm.errors import NqmError
from nqm.optimizers import base

LINEAR = ["sgdm", "nesterov", "shifted", "staleness", "dana", "ormo", "ormo-da"]
RTOL = 1e-9


def _first_crossing(radius, grid):
    """Reference: the first x of a fine grid at which ``radius`` reaches 1, refined by Brent."""
    rho = np.array([radius(x) for x in grid])
    i = np.flatnonzero(rho >= 1)[0]
    return brentq(lambda x: radius(x) - 1, grid[i - 1], grid[i], xtol=1e-15, rtol=1e-13)


# ----------------------------------------------------------------------------- closed forms, polynomials


def test_sgd_equals_the_closed_form():
    d = np.arange(9)
    np.testing.assert_allclose(derived.threshold("sgd", delay=d), polynomials.sgd_threshold_closed_form(d), rtol=RTOL)


@pytest.mark.parametrize("method", ["sgdm", "shifted"])
@pytest.mark.parametrize("dampening", [False, True])
def test_constant_delay_equals_giladis_polynomials(method, dampening):
    d, m = [0, 1, 4, 9], [0.0, 0.3, 0.9]
    got = derived.threshold(method, delay=d, momentum=m, dampening=dampening)
    np.testing.assert_allclose(got, polynomials.threshold(method, d, m, dampening=dampening), rtol=RTOL)


@pytest.mark.parametrize("spec", ["uniform:1:4", "gaussian:3", "pmf:0.5,0,0.5", "uniform:0:6"])
@pytest.mark.parametrize("dampening", [False, True])
def test_iid_delays_equal_giladis_mean_dynamics(spec, dampening):
    pmf, m = delays.pmf(delays.process(spec)), [0.0, 0.5, 0.9]
    got = derived.threshold("sgdm", delay=spec, momentum=m, dampening=dampening)
    np.testing.assert_allclose(got, polynomials.threshold("sgdm", None, m, dampening=dampening, pmf=pmf), rtol=RTOL)


def _nesterov(x, d, m, c):
    """Nesterov's update (v' = m v + c g, w' = w − η (c g + m v')) on (w_t, …, w_{t−d}, η v_t)."""
    A = np.zeros((d + 2, d + 2))
    A[1:d + 1, :d] = np.eye(d)
    A[0, 0], A[0, d + 1], A[d + 1, d + 1] = 1.0, -m * m, m
    A[0, d] -= c * x * (1 + m)
    A[d + 1, d] += c * x
    return A


@pytest.mark.parametrize("d, m, dampening", [(0, 0.5, False), (3, 0.9, False), (5, 0.6, True), (2, 0.0, False)])
def test_nesterov_equals_its_matrix_written_here(d, m, dampening):
    c = 1 - m if dampening else 1.0
    radius = lambda x: np.abs(np.linalg.eigvals(_nesterov(x, d, m, c))).max()  # noqa: E731
    want = _first_crossing(radius, np.geomspace(1e-4, 100, 3000))
    assert derived.threshold("nesterov", delay=d, momentum=m, dampening=dampening) == pytest.approx(want, rel=RTOL)


def test_ormo_with_one_worker_is_sgdm():
    m = [0.0, 0.5, 0.9]
    np.testing.assert_allclose(derived.threshold("ormo", momentum=m), derived.threshold("sgdm", momentum=m), rtol=RTOL)
    ormo, sgdm = (derived.transitions(name, lr=0.3, momentum=0.7) for name in ("ormo", "sgdm"))
    np.testing.assert_allclose(ormo.A, sgdm.A, rtol=1e-14)


def test_dana_with_one_worker_is_nesterov():
    m = [0.0, 0.5, 0.9, 0.99]
    np.testing.assert_allclose(derived.threshold("dana", momentum=m), derived.threshold("nesterov", momentum=m), rtol=RTOL)


@pytest.mark.parametrize("dampening", [False, True])
def test_staleness_is_sgdm_with_the_step_divided_by_the_delay(dampening):
    d, m = np.array([0, 1, 3, 6]), [0.0, 0.8]
    got = derived.threshold("staleness", delay=d, momentum=m, dampening=dampening)
    want = derived.threshold("sgdm", delay=d, momentum=m, dampening=dampening) * np.maximum(1, d)[:, None]
    np.testing.assert_allclose(got, want, rtol=RTOL)


# ----------------------------------------------------------------------------- the matrices are the engine's


@pytest.mark.parametrize("spec", [3, "pmf:0.2,0,0.5,0.3"])
@pytest.mark.parametrize("method", LINEAR)
def test_matrices_reproduce_the_engine(method, spec):
    lam, lr, m, steps, seed = np.array([1.0, 0.3, 0.05]), 0.2, 0.6, 40, 5
    ds = diagnostics.trajectory(method, problem=nqm.explicit(lam), lr=lr, momentum=m, delay=spec, steps=steps, seed=seed,
                                x64=True, record=("loss",))
    lags, _ = delays.process(spec).schedule(seed, steps)
    for rotating in (False, True):
        loss = np.zeros(steps)
        for curvature in lam:
            T = derived.transitions(method, lr=lr, momentum=m, delay=spec, lam=curvature, rotating=rotating)
            s, column = T.initial, {d: j for j, d in enumerate(T.delays)}
            for t in range(steps):
                s = T.A[t % T.period, column[lags[t]]] @ s
                loss[t] += 0.5 * curvature * (T.readout @ s) ** 2
        np.testing.assert_allclose(loss, ds.loss.values, rtol=1e-10)


def test_the_rotating_frame_is_the_period_product():
    for method in ("shifted", "dana"):
        engine_frame = derived.transitions(method, lr=0.3, momentum=0.7, delay=3)
        rotating = derived.transitions(method, lr=0.3, momentum=0.7, delay=3, rotating=True)
        assert (engine_frame.period, rotating.period, rotating.rotating) == (4, 1, True)
        product = np.linalg.multi_dot(engine_frame.A[::-1, 0])
        np.testing.assert_allclose(product, np.linalg.matrix_power(rotating.A[0, 0], 4), atol=1e-14)


@pytest.mark.parametrize("method, spec", [("shifted", "pmf:0.3,0.2,0,0.5"), ("ormo", "pmf:0.3,0.2,0,0,0,0,0.5")])
def test_rates_are_those_of_the_transitions(method, spec):
    """Mean and mean-square rates over a period of the engine-frame matrices (8 states), with dense
    Kronecker products written here, against the averaged, rotating-frame and low-rank paths."""
    lr, m = 0.2, 0.5
    T = derived.transitions(method, lr=lr, momentum=m, delay=spec)
    mean = np.linalg.multi_dot([np.einsum("d,dij->ij", T.pmf, a) for a in T.A[::-1]])
    square = np.linalg.multi_dot([np.einsum("d,dij,dkl->ikjl", T.pmf, a, a).reshape(64, 64) for a in T.A[::-1]])
    want = [np.abs(np.linalg.eigvals(M)).max() ** (1 / (k * T.period)) for M, k in ((mean, 1), (square, 2))]
    got = [derived.spectral_radius(method, lr=lr, momentum=m, delay=spec, criterion=c) for c in ("mean", "mean-square")]
    assert T.A.shape[-2:] == (8, 8) and T.period == len(T.A) > 1
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_noise_enters_where_the_gradient_does():
    T = derived.transitions("sgdm", lr=0.3, momentum=0.7, delay=2, dampening=True)
    assert T.labels == ("w[t]", "w[t-1]", "w[t-2]", "velocity")
    np.testing.assert_allclose(T.B[0, 0], [-0.3 * 0.3, 0, 0, 0.3])  # v += (1 − m) ξ, w −= η (1 − m) ξ
    dana = derived.transitions("dana", lr=0.3, momentum=0.7, delay=1)
    assert dana.labels[dana.readout.argmax()] == "w[t]" and dana.period == 2


# ----------------------------------------------------------------------------- the three criteria


def test_mean_square_equals_mean_at_a_constant_delay():
    for method, d in (("sgdm", 2), ("sgdm", 9), ("shifted", 4), ("ormo", 3)):
        mean, square = (derived.threshold(method, delay=d, momentum=0.5, criterion=c) for c in ("mean", "mean-square"))
        assert square == pytest.approx(mean, rel=1e-9)


def test_mean_square_of_sgd_under_uniform_delays_equals_its_kronecker_map():
    """SGD under τ ~ unif{1..4} on (w_t, …, w_{t−4}): the map Σ_d p_d A_d ⊗ A_d written here."""
    def radius(x):
        K = 0
        for d in range(1, 5):
            A = np.eye(5, k=-1)
            A[0, 0], A[0, d] = 1.0, A[0, d] - x
            K = K + np.kron(A, A) / 4
        return np.abs(np.linalg.eigvals(K)).max()

    want = _first_crossing(radius, np.linspace(0.3, 0.7, 401))
    square, mean = (derived.threshold("sgd", delay="uniform:1:4", criterion=c) for c in ("mean-square", "mean"))
    assert square == pytest.approx(want, rel=1e-9)
    assert square / mean == pytest.approx(0.8804, abs=1e-4)  # mean-square is 12.0 % below the mean threshold


@pytest.mark.parametrize("method, spec", [("sgdm", "uniform:1:8"), ("shifted", "pmf:0.5,0,0.5"), ("dana", "gaussian:2")])
def test_the_criteria_are_ordered(method, spec):
    mean, square = (derived.threshold(method, delay=spec, momentum=0.5, criterion=c) for c in ("mean", "mean-square"))
    sure, error = derived.threshold(method, delay=spec, momentum=0.5, criterion="almost-sure", steps=10_000,
                                   with_error=True)
    assert square < mean and square < sure - 3 * error and 0 < error < 0.02 * sure


def test_almost_sure_is_exact_at_a_constant_delay():
    x, error = derived.threshold("shifted", delay=5, momentum=0.6, criterion="almost-sure", with_error=True)
    assert error == 0 and x == pytest.approx(derived.threshold("shifted", delay=5, momentum=0.6), rel=1e-12)


@pytest.mark.slow
def test_almost_sure_threshold_is_where_long_runs_start_to_diverge():
    """SGD on λ = 1 under τ ~ unif{1..4}, noiseless, 16 other schedules of 60k steps: every run's
    loss shrinks 4 errors below x* and grows 4 errors above (a run's own exponent: ±0.8 error)."""
    x, error = derived.threshold("sgd", delay="uniform:1:4", criterion="almost-sure", with_error=True)
    lrs = x + np.array([-4, 4]) * error
    config = engine.RunConfig(target=1e-300, diverge_factor=1e300, max_steps=60_000, x64=True, progress=False)
    optimizer = base.make("sgdm", delay="uniform:1:4")
    for seed in range(1, 17):
        cells = engine.Cells(optimizer, {"lr": lrs, "momentum": [0.0, 0.0]}, [0.0, 0.0], delay="uniform:1:4", seed=seed)
        out = engine.simulate(nqm.explicit([1.0]), cells, config)
        grew = (out.status == engine.DIVERGED) | (out.loss > 0.5)
        assert list(grew) == [False, True]


# ----------------------------------------------------------------------------- a method nqm never heard of


class _ScaleHyper(NamedTuple):
    lr: object
    momentum: object
    scale: object = 1.0


def _curved(*, workers: int = 1):
    """SGD whose step η + s η²/2 is not affine in η (linear in the weights)."""
    del workers
    step = lambda h, state, w, g, ctx: (w - (h.lr + h.scale * h.lr**2 / 2) * g, state, {})  # noqa: E731
    return base.Optimizer(_ScaleHyper, lambda w0: (), step, (), linear=True, name="curved")


def test_a_new_linear_method_gets_its_threshold_for_free():
    base.register("curved")(_curved)
    try:
        table = derived.threshold_table("curved", delays=[0, 3], scale=[0.5, 1.0])
    finally:
        base.unregister("curved")
    x = polynomials.sgd_threshold_closed_form([0, 3])[:, None, None]
    s = np.array([0.5, 1.0])
    np.testing.assert_allclose(table.threshold, (np.sqrt(1 + 2 * s * x) - 1) / s, rtol=RTOL)  # η + s η²/2 = x
    assert table.threshold.dims == ("delay", "momentum", "scale")


# ----------------------------------------------------------------------------- tables and bad input


def test_table_layout():
    table = derived.threshold_table("sgdm", delays=[2, "uniform:1:4"], momenta=[0.0, 0.5], criterion="mean-square",
                                   dampening=True)
    assert table.threshold.dims == ("delay", "momentum")
    assert list(table.delay.values) == ["2", "uniform:1:4"] and list(table.mean_delay.values) == [2.0, 2.5]
    assert table.attrs["criterion"] == "mean-square" and table.attrs["convention"].startswith("dampened")
    ints = derived.threshold_table("sgd", delays=range(3))
    assert ints.delay.dtype.kind == "i" and ints.attrs["convention"] == "no momentum"


@pytest.mark.parametrize("call", [
    lambda: derived.threshold("ab"),
    lambda: derived.threshold("dc-asgd"),
    lambda: derived.threshold_table("restart", delays=[1]),
    lambda: derived.threshold("adam"),
    lambda: derived.threshold("sgdm", momentum=1.0),
    lambda: derived.threshold("sgdm", momentum=-0.1),
    lambda: derived.threshold("sgd", momentum=0.5),
    lambda: derived.threshold("sgdm", delay=-1),
    lambda: derived.threshold("sgdm", delay=[]),
    lambda: derived.threshold("sgdm", delay="workers:4"),
    lambda: derived.threshold("sgdm", delay="poisson:3"),
    lambda: derived.threshold("sgdm", delay=[2, 2]),
    lambda: derived.threshold("sgdm", criterion="median"),
    lambda: derived.threshold("sgdm", rho=0.5),
    lambda: derived.threshold("ormo", dampening=True),
    lambda: derived.threshold("sgdm", delay="uniform:1:4", criterion="almost-sure", steps=0),
    lambda: derived.transitions("sgdm", lr=-0.1, momentum=0.5),
    lambda: derived.transitions("sgdm", lr=[0.1, 0.2], momentum=0.5),
    lambda: derived.transitions("sgdm", lr=0.1, momentum=0.5, lam=0),
    lambda: derived.transitions("sgdm", lr=0.1, momentum=0.5, lam="x"),
    lambda: derived.transitions("sgdm", lr=0.1, momentum=[0.5, 0.6]),
    lambda: derived.spectral_radius("sgdm", lr=float("nan"), momentum=0.5),
])
def test_bad_input_is_one_line(call):
    with pytest.raises(NqmError) as error:
        call()
    assert "\n" not in str(error.value)


def test_nonlinear_methods_point_at_the_simulated_threshold():
    with pytest.raises(NqmError, match="not linear.*--simulate"):
        derived.threshold("ab")
