"""Stability thresholds: closed forms, two independent root tests, simulation of the update rules."""

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from nqm import delays
from nqm.thresholds import polynomials
from nqm.pmfs import gaussian_pmf, uniform_pmf, validate_pmf
from nqm.errors import NqmError
from nqm.thresholds.polynomials import (
    char_poly, fit_inverse_threshold, lr_threshold, mean_delay, schur_cohn_stable, sgd_inverse_threshold_approx,
    sgd_threshold_closed_form, spectral_radius, threshold, threshold_dataset,
)

MOMENTA = np.array([0.0, 0.3, 0.6, 0.9, 0.999])
# (method, delay, momentum, dampening, pmf): one of each family, incl. momentum with random delay
CASES = [
    ("sgd", 5, 0.0, False, None),
    ("sgdm", 0, 0.9, True, None),
    ("sgdm", 4, 0.6, False, None),
    ("sgdm", 7, 0.9, True, None),
    ("shifted", 3, 0.6, False, None),
    ("shifted", 6, 0.9, True, None),
    ("sgdm", 5, 0.99999, True, None),  # m -> 1: the first crossing is close to z = 1
    ("shifted", 5, 0.999, False, None),
    ("sgd", None, 0.0, False, uniform_pmf(1, 9)),
    ("sgd", None, 0.0, False, gaussian_pmf(4)),
    ("sgdm", None, 0.5, True, uniform_pmf(0, 5)),
    ("shifted", None, 0.5, True, gaussian_pmf(3)),
]


def _poly(case, x):
    method, delay, m, damp, pmf = case
    return char_poly(x, method, delay, m, dampening=damp, pmf=pmf)


def _x_star(case):
    method, delay, m, damp, pmf = case
    return float(threshold(method, delay, m, dampening=damp, pmf=pmf))


def _rho(case, x):
    return float(spectral_radius(_poly(case, x)))


# ----------------------------------------------------------------------------- closed forms


def test_sgd_matches_closed_form():
    tau = np.arange(129)
    np.testing.assert_allclose(threshold("sgd", tau), sgd_threshold_closed_form(tau), rtol=1e-10)
    assert sgd_threshold_closed_form(0) == 2.0


def test_heavy_ball_closed_forms():
    np.testing.assert_allclose(threshold("sgdm", 0, MOMENTA), 2 * (1 + MOMENTA), rtol=1e-10)
    np.testing.assert_allclose(threshold("sgdm", 0, MOMENTA, dampening=True),
                               2 * (1 + MOMENTA) / (1 - MOMENTA), rtol=1e-10)
    # τ = 1: z² - (1+m) z + m + c x is stable iff m + c x < 1 (Jury), i.e. x < (1 - m)/c.
    np.testing.assert_allclose(threshold("sgdm", 1, MOMENTA), 1 - MOMENTA, rtol=1e-10)
    np.testing.assert_allclose(threshold("sgdm", 1, MOMENTA, dampening=True), 1.0, rtol=1e-10)


@pytest.mark.parametrize("dampening", [False, True])
def test_shifted_at_zero_delay_is_sgdm(dampening):
    np.testing.assert_allclose(threshold("shifted", 0, MOMENTA, dampening=dampening),
                               threshold("sgdm", 0, MOMENTA, dampening=dampening), rtol=1e-10)


@pytest.mark.parametrize("method", ["sgdm", "shifted"])
def test_dampening_only_rescales_x(method):
    # Both polynomials depend on x only through c·x, so x*_undampened = (1 - m) x*_dampened.
    tau = [1, 2, 5, 11]
    np.testing.assert_allclose(threshold(method, tau, MOMENTA),
                               (1 - MOMENTA) * threshold(method, tau, MOMENTA, dampening=True), rtol=1e-9)


def test_sgdm_with_zero_momentum_is_sgd():
    tau = np.arange(20)
    np.testing.assert_array_equal(threshold("sgdm", tau, 0.0), threshold("sgd", tau))


# ----------------------------------------------------------------------------- polynomials


@pytest.mark.parametrize("case", CASES, ids=str)
def test_char_poly_matches_the_paper_equations(case):
    method, delay, m, damp, pmf = case
    p = np.eye(delay + 1)[delay] if pmf is None else pmf
    c, x = (1 - m if damp else 1.0), 0.37
    z = np.exp(0.3 + 1j * np.linspace(0.1, 3.0, 7))  # off the unit circle, away from 0
    delayed = sum(pk * z ** -k for k, pk in enumerate(p))
    # Divide out the power of z the polynomial was multiplied by (eqs. 19, 26, 11).
    if method == "shifted":  # x_{t+1} - x_t + Σ p_k [(c x - m) x_{t-k} + m x_{t-k-1}] = 0
        expected = z - 1 + (c * x - m) * delayed + m * delayed / z
    else:  # x_{t+1} - (1+m) x_t + m x_{t-1} + c x Σ p_k x_{t-k} = 0
        expected = z - (1 + m) + m / z + c * x * delayed
    coeffs = _poly(case, x)
    np.testing.assert_allclose(np.polyval(coeffs, z) / z ** (coeffs.size - 2), expected, rtol=1e-12)


def test_schur_cohn_agrees_with_root_moduli():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(600):
        n = int(rng.integers(1, 16))
        if rng.random() < 0.5:  # roots placed around the unit circle, real-coefficient pairs
            r = rng.uniform(0.6, 1.4, n // 2) * np.exp(1j * rng.uniform(0, np.pi, n // 2))
            roots = np.r_[r, r.conj(), rng.uniform(-1.4, 1.4, n % 2)]
            coeffs = np.poly(roots).real * rng.uniform(0.5, 2)
        else:
            coeffs = rng.normal(size=n + 1) * rng.uniform(0.2, 5, n + 1)
        rho = np.abs(np.roots(coeffs)).max()
        if abs(rho - 1) < 1e-6:  # too close to the boundary for a clean verdict
            continue
        assert bool(schur_cohn_stable(coeffs)) == (rho < 1)
        assert spectral_radius(coeffs) == pytest.approx(rho, rel=1e-8)
        checked += 1
    assert checked > 550


def test_schur_cohn_batches_like_single_calls():
    rng = np.random.default_rng(1)
    coeffs = rng.normal(size=(5, 3, 8))
    single = [[bool(schur_cohn_stable(c)) for c in row] for row in coeffs]
    np.testing.assert_array_equal(schur_cohn_stable(coeffs), single)
    np.testing.assert_allclose(spectral_radius(coeffs), np.abs([[np.roots(c) for c in row]
                                                               for row in coeffs]).max(-1), rtol=1e-8)


# ----------------------------------------------------------------------------- thresholds


@pytest.mark.parametrize("case", CASES, ids=str)
def test_threshold_is_the_first_crossing(case):
    x_star = _x_star(case)
    assert _rho(case, x_star) == pytest.approx(1.0, abs=1e-9)
    assert _rho(case, x_star * (1 + 1e-5)) > 1
    below = np.linspace(0, x_star * (1 - 1e-6), 3001)[1:]
    assert schur_cohn_stable(_poly(case, below)).all()


def _grid_brentq_threshold(case, x_hi, n=400):
    """The textbook method: spectral radius on an x grid, brentq on the first bracket."""
    grid = np.linspace(0, x_hi, n + 1)[1:]
    above = spectral_radius(_poly(case, grid)) >= 1
    i = int(np.argmax(above))
    assert above[i], "no crossing on the grid"
    lo = grid[i - 1] if i else grid[0] / 2
    return brentq(lambda x: _rho(case, x) - 1, lo, grid[i], xtol=1e-14)


@pytest.mark.parametrize("case", CASES[1:6], ids=str)
def test_threshold_matches_grid_and_brentq(case):
    x_star = _x_star(case)
    assert _grid_brentq_threshold(case, 3 * x_star) == pytest.approx(x_star, rel=1e-7)


def test_threshold_when_the_stable_set_is_not_an_interval():
    # Delay 0 w.p. 3/4, 7 w.p. 1/4, heavy ball m = 0.9: unstable on a short x range, then stable again.
    case = ("sgdm", None, 0.9, False, np.r_[0.75, np.zeros(6), 0.25])
    grid = np.linspace(0, 1, 20001)[1:]
    stable = schur_cohn_stable(_poly(case, grid))
    changes = np.flatnonzero(np.diff(stable.astype(int)))
    assert changes.size >= 2, "the stable set should have more than one piece"
    x_star = _x_star(case)
    assert grid[changes[0]] <= x_star <= grid[changes[0] + 1]
    assert x_star == pytest.approx(_grid_brentq_threshold(case, 1.0, n=20000), rel=1e-7)


@pytest.mark.parametrize("method", ["sgd", "sgdm", "shifted"])
def test_uniform_on_one_value_is_constant_delay(method):
    m = 0.0 if method == "sgd" else 0.7
    for a in [0, 1, 4, 13]:
        assert threshold(method, momentum=m, pmf=uniform_pmf(a, a), dampening=True) == pytest.approx(
            threshold(method, a, m, dampening=True), rel=1e-12)


def test_sgd_inverse_threshold_grows_like_2_over_pi():
    tau = np.arange(1, 129)
    slope, intercept = fit_inverse_threshold(tau, threshold("sgd", tau))
    assert slope == pytest.approx(2 / np.pi, rel=0.05)
    # eq. 7: the error of the asymptote is O(1/τ); the paper quotes < 0.05 for τ >= 1.
    assert np.abs(1 / threshold("sgd", tau) - sgd_inverse_threshold_approx(tau)).max() < 0.05


@pytest.mark.parametrize("tau", [1, 2, 4, 8, 16])
def test_giladi_momentum_claims(tau):
    # Dampened convention (Giladi): shifted momentum's threshold rises with m, standard falls.
    m = np.array([0.0, 0.2, 0.4, 0.6, 0.8, 0.9])
    shifted = threshold("shifted", tau, m, dampening=True)
    standard = threshold("sgdm", tau, m, dampening=True)
    assert np.all(np.diff(shifted) > 0)
    assert np.all(np.diff(standard) < 0) if tau >= 2 else np.allclose(standard, 1.0)


def _simulate_growth(method, delay, m, dampening, x, steps=3000):
    """log max|w| over the last 200 steps minus over the 200 steps 1500 earlier (1-D, a = 1, η = x)."""
    x = np.asarray(x, dtype=float)
    c = 1 - m if dampening else 1.0
    w, v = np.ones((steps + 1, x.size)), np.zeros((steps + 1, x.size))
    for t in range(steps):  # README conventions: g_t = a w_{t-D}; shifted uses the worker's own v_{t-D}
        past = max(t - delay, 0)
        v[t + 1] = m * (v[past] if method == "shifted" else v[t]) + c * w[past]
        w[t + 1] = w[t] - x * v[t + 1]
    peak = lambda s: np.log(np.abs(w[s]).max(0))  # noqa: E731
    return peak(slice(steps - 199, None)) - peak(slice(steps - 1699, steps - 1499))


@pytest.mark.parametrize("method,delay,m,dampening",
                         [("sgdm", 3, 0.5, False), ("sgdm", 5, 0.6, True), ("shifted", 2, 0.5, False),
                          ("shifted", 4, 0.8, True)])
def test_simulated_update_rule_converges_below_and_diverges_above(method, delay, m, dampening):
    # Simulates the update rules themselves, so it checks the derivation of the polynomials.
    x = float(threshold(method, delay, m, dampening=dampening)) * np.array([0.97, 1.03])
    growth = _simulate_growth(method, delay, m, dampening, x)
    predicted = 1500 * np.log(spectral_radius(char_poly(x, method, delay, m, dampening=dampening)))
    assert growth[0] < 0 < growth[1]
    np.testing.assert_allclose(growth, predicted, rtol=0.05)


# ----------------------------------------------------------------------------- distributions, data


def test_gaussian_pmf_follows_appendix_c():
    for mu in [1, 2, 5, 30]:
        p = gaussian_pmf(mu)
        k = np.arange(1, 2 * mu + 1)
        raw = norm.cdf(k + 0.5, mu) - norm.cdf(k - 0.5, mu)
        np.testing.assert_allclose(p, np.r_[0.0, raw / raw.sum()], rtol=1e-12, atol=1e-15)
        # k = 1..2μ is symmetric about μ + ½, not μ: E[τ] = μ (App. C) only once the tails vanish.
        assert mean_delay(p) == pytest.approx(mu, abs=1e-4) if mu >= 5 else mean_delay(p) > mu


def test_pmfs_and_parser():
    np.testing.assert_allclose(uniform_pmf(2, 5), [0, 0, 0.25, 0.25, 0.25, 0.25])
    np.testing.assert_allclose(delays.pmf("uniform:2:5"), uniform_pmf(2, 5))
    np.testing.assert_allclose(delays.pmf(" gaussian:7 "), gaussian_pmf(7))
    np.testing.assert_allclose(validate_pmf([2, 0, 6, 0, 0]), [0.25, 0, 0.75])
    assert mean_delay(uniform_pmf(1, 8)) == pytest.approx(4.5)


def test_dataset_constant_delay():
    ds = threshold_dataset("shifted", delays=[0, 3, 9], momenta=[0.0, 0.5], dampening=True)
    assert ds.threshold.dims == ("delay", "momentum")
    np.testing.assert_array_equal(ds.threshold, threshold("shifted", [0, 3, 9], [0.0, 0.5], dampening=True))
    np.testing.assert_array_equal(ds.mean_delay, [0, 3, 9])
    assert ds.attrs["convention"] == "dampened: v = m v + (1-m) g" and ds.attrs["method"] == "shifted"
    assert threshold_dataset("sgdm", [2], [0.5]).attrs["convention"] == "undampened: v = m v + g"
    assert threshold_dataset("sgd").threshold.shape == (65, 1)


def test_dataset_delay_distributions():
    ds = threshold_dataset("sgd", delays=[f"uniform:1:{b}" for b in (1, 4, 8)])
    assert ds.threshold.dims == ("delay", "momentum")
    np.testing.assert_allclose(ds.mean_delay, [1, 2.5, 4.5])
    assert float(ds.threshold.sel(delay="uniform:1:4", momentum=0)) == float(threshold(pmf=uniform_pmf(1, 4)))
    mixed = threshold_dataset("sgdm", delays=[2, "gaussian:6", "pmf:0.5,0,0.5"], momenta=[0.0, 0.9], dampening=True)
    assert mixed.delay.values.tolist() == ["2", "gaussian:6", "pmf:0.5,0,0.5"]
    np.testing.assert_allclose(mixed.threshold[1], threshold("sgdm", momentum=[0.0, 0.9], dampening=True,
                                                             pmf=gaussian_pmf(6)))
    np.testing.assert_array_equal(mixed.threshold[0], threshold("sgdm", 2, [0.0, 0.9], dampening=True))


def test_lr_threshold():
    np.testing.assert_allclose(lr_threshold(threshold("sgd", [0, 1]), 4.0), [0.5, 0.25])


@pytest.mark.parametrize("call", [
    lambda: threshold("sgdm", 2, 1.2),
    lambda: threshold("sgdm", 2, -0.1),
    lambda: threshold("sgdm", 2, float("nan")),
    lambda: threshold("sgd", -1),
    lambda: threshold("sgd", 1.5),
    lambda: threshold("sgd", []),
    lambda: threshold("sgd", 2, 0.5),
    lambda: threshold("adam", 2),
    lambda: threshold("sgd", 2, pmf=[1.0]),
    lambda: threshold("sgd", pmf=[0.5, -0.1]),
    lambda: threshold("sgd", pmf=[0.0, 0.0]),
    lambda: threshold("sgd", pmf=[0.5, np.inf]),
    lambda: threshold_dataset("sgdm", momenta=[]),
    lambda: threshold_dataset("sgd", delays=[3, 3]),
    lambda: threshold_dataset("sgd", delays=["workers:4"]),
    lambda: uniform_pmf(5, 2),
    lambda: gaussian_pmf(0),
    lambda: delays.process("uniform:3"),
    lambda: delays.process("gaussian:1.5"),
    lambda: delays.process("poisson:4"),
    lambda: lr_threshold(1.0, 0.0),
])
def test_bad_input_raises_one_line_nqm_error(call):
    with pytest.raises(NqmError) as info:
        call()
    message = str(info.value)
    assert message and "\n" not in message


def test_parse_error_shows_the_syntax():
    with pytest.raises(NqmError, match="uniform:A:B.*gaussian:MU"):
        delays.process("uniform")


def test_threshold_figure_renders(tmp_path):
    import matplotlib.pyplot as plt

    from nqm.plots.stability import threshold_figure

    ds = threshold_dataset("sgd", delays=["uniform:1:1", "uniform:1:2", "uniform:1:3"])
    fig = threshold_figure(ds, "smoke", against="mean_delay", asymptote=True, residual=True,
                           constant=threshold_dataset("sgd", delays=[0, 1, 2]))
    assert "no momentum" in fig.axes[0].get_title()
    fig.savefig(tmp_path / "f.png", dpi=50)
    plt.close(fig)
    momentum = threshold_figure(threshold_dataset("shifted", [0, 4], [0.0, 0.9], dampening=True), "smoke")
    assert [t.get_text() for t in momentum.axes[0].get_legend().get_texts()] == ["m = 0", "m = 0.9"]
    assert "dampened" in momentum.axes[0].get_title()
    plt.close(momentum)


def test_threshold_memory_is_linear_in_the_delay():
    import tracemalloc

    tracemalloc.start()
    x = polynomials.threshold("sgdm", 30_000, 0.5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 300 * 2**20  # a dense (τ+1)² array alone would be 7 GB
    assert np.isfinite(x) and x > 0


def test_char_poly_refuses_several_delays():
    with pytest.raises(NqmError, match="one delay"):
        polynomials.char_poly(0.1, "sgdm", delay=[1, 2], momentum=0.5)


def test_thresholds_start_without_scipy_stats():
    import subprocess
    import sys

    code = "import sys, nqm.cli, nqm.thresholds.polynomials; print('scipy.stats' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()
    assert out == ["False", "False"]
