"""Thresholds and the exact mode where they used to break: extreme pmf weights, ARPACK's failures,
an almost-sure scan at tiny x and states that collapse to 0, delays whose matrices do not fit in
memory, and simulated thresholds whose budget no gradient outlives."""

import numpy as np
import pytest

import nqm
from nqm import delays, expected
from nqm.cli import main
from nqm.errors import NqmError
from nqm.optimizers import make, methods
from nqm.thresholds import derived, matrices, polynomials, rates
from nqm.search import simulated
from nqm.validate import BOUNDS


def _table(capsys, argv) -> list[str]:
    """Run ``nqm threshold …``: exit 0, nothing on stderr; the printed table's lines."""
    code = main(["threshold", *argv])
    out, err = capsys.readouterr()
    assert code == 0 and err.strip() == "", err
    return out.strip().splitlines()


def _refused(capsys, argv, files=()) -> str:
    """Run ``argv``: exit 2, one error line, no traceback, ``files`` byte-identical."""
    before = {p: p.read_bytes() for p in files}
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("nqm: error: ") and "Traceback" not in err[0], err
    assert {p: p.read_bytes() for p in files} == before
    return err[0]


# ----------------------------------------------------------------------------- pmf weights (finding 5)


@pytest.mark.parametrize("weights", ["1e308,0,1e308", "1e-320,0,1e-320", "1.7e308,0,1.7e308"])
def test_pmf_weights_whose_sum_overflows_or_underflows_are_normalised(weights):
    process = delays.process(f"pmf:{weights}")
    np.testing.assert_array_equal(process.pmf(), [0.5, 0.0, 0.5])
    lags, _ = process.schedule(0, 1000)
    assert set(np.unique(lags)) == {0, 2}  # not every step at delay 0
    assert derived.threshold("sgd", delay=f"pmf:{weights}") == derived.threshold("sgd", delay="pmf:1,0,1")
    same = [expected.steady_state_loss(nqm.explicit([1.0, 0.1]), "sgdm", spec, 0.3, 0.5, 0.1)
            for spec in (f"pmf:{weights}", "pmf:1,0,1")]
    assert same[0] == same[1]


def test_ordinary_pmf_weights_keep_their_bits():
    p = np.array([0.2, 0.0, 0.5, 0.3, 0.0])
    np.testing.assert_array_equal(delays.validate_pmf(p), p[:4] / p.sum())


def test_a_weight_that_underflows_when_normalised_is_dropped():
    np.testing.assert_array_equal(delays.pmf("pmf:1e308,0,1e-300"), [1.0])


def test_threshold_and_expected_take_huge_pmf_weights(capsys, tmp_path):
    lines = _table(capsys, ["--method", "sgd", "--delay-dist", "pmf:1e308,0,1e308", "pmf:1,0,1"])
    assert lines[-2].split()[-1] == lines[-1].split()[-1] == "2"
    out = tmp_path / "e.nc"
    code = main(["expected", "--method", "sgd", "--lr", "0.1", "--momentum", "0", "--dim", "20",
                 "--delay-dist", "pmf:1e308,0,1e308", "--max-steps", "200", "--out", str(out)])
    assert code == 0 and "Traceback" not in capsys.readouterr().err


# ----------------------------------------------------------------------------- mean-square (finding 6)


def test_mean_square_at_constant_delays_is_the_closed_form():
    d = np.arange(12)  # ARPACK used to fail at D = 6
    got = derived.threshold("sgd", delay=d, criterion="mean-square")
    np.testing.assert_allclose(got, polynomials.sgd_threshold_closed_form(d), rtol=1e-9)


def _dense_mean_square(method, spec, x):
    """``ρ(Σ_d p_d A_d ⊗ A_d)^{1/2}`` of the rotating-frame matrices, written here."""
    T = derived.transitions(method, lr=x, momentum=0.0, delay=spec, rotating=True)
    K = sum(p * np.kron(a, a) for p, a in zip(T.pmf, T.A[0]))
    return np.sqrt(np.abs(np.linalg.eigvals(K)).max())


@pytest.mark.parametrize("spec", ["gaussian:3", "pmf:0.5,0,0,0,0,0,0.5"])
def test_mean_square_survives_arpack_failures(spec):
    xs = 2.0 ** np.arange(-12.0, 2.0)  # ARPACK's error 3 at most of these
    got = derived.spectral_radius("sgd", lr=xs, momentum=0.0, delay=spec, criterion="mean-square")
    np.testing.assert_allclose(got, [_dense_mean_square("sgd", spec, x) for x in xs], rtol=1e-10)
    x = derived.threshold("sgd", delay=spec, criterion="mean-square")
    assert _dense_mean_square("sgd", spec, x * (1 - 1e-6)) < 1 < _dense_mean_square("sgd", spec, x * (1 + 1e-6))


@pytest.mark.parametrize("spec", ["gaussian:3", "pmf:0.5,0,0,0,0,0,0.5"])
def test_the_per_step_rates_are_the_dense_radii_written_here(spec):
    """nqm.thresholds.rates on its system: the mean rate is ρ(Σ_d p_d A_d), the mean-square rate
    ρ(Σ_d p_d A_d ⊗ A_d)^{1/2}, of the matrices written out densely here; with one delay the three
    criteria are the mean's."""
    xs = np.array([0.05, 0.3, 1.0, 1.7])
    system = matrices.systems("sgd", (), delays.process(spec), 1.0, ((),))[0]
    written = [derived.transitions("sgd", lr=x, momentum=0.0, delay=spec, rotating=True) for x in xs]
    mean = [np.abs(np.linalg.eigvals(sum(p * a for p, a in zip(T.pmf, T.A[0])))).max() for T in written]
    np.testing.assert_allclose(rates.per_step(system, xs, "mean", 0, 0), mean, rtol=1e-10)
    np.testing.assert_allclose(rates.per_step(system, xs, "mean-square", 0, 0),
                               [_dense_mean_square("sgd", spec, x) for x in xs], rtol=1e-10)
    one = matrices.systems("sgd", (), delays.process(2), 1.0, ((),))[0]
    assert len(one.lags) == 1
    for criterion in ("mean-square", "almost-sure"):
        np.testing.assert_array_equal(rates.per_step(one, xs, criterion, 100, 0), rates.mean_rate(one, xs))


# ----------------------------------------------------------------------------- almost-sure (findings 4 and 7)


@pytest.mark.parametrize("method", ["ormo", "ormo-da"])
def test_almost_sure_scan_is_not_fooled_at_tiny_x(method, capsys):
    """At x = 2⁻³² the estimated rate is 1 + 4e-8, far inside its error: not a crossing."""
    square = derived.threshold(method, delay="pmf:0.5,0,0.5", momentum=0.5, criterion="mean-square")
    sure, error = derived.threshold(method, delay="pmf:0.5,0,0.5", momentum=0.5, criterion="almost-sure",
                                   with_error=True)
    assert square == pytest.approx(0.6276, abs=1e-4)
    assert sure == pytest.approx(1.1535, abs=1e-3) and 0 < error < 0.01  # simulated, 5 seeds: 0.95 … 1.15
    line = _table(capsys, ["--method", method, "--momentum", "0.5", "--delay-dist", "pmf:0.5,0,0.5",
                           "--criterion", "almost-sure"])[-1]
    assert float(line.split()[-2]) == pytest.approx(sure, rel=1e-5)


@pytest.mark.parametrize("method, momentum, spec", [
    ("sgd", 0.0, "uniform:0:4"), ("sgd", 0.0, "pmf:0.5,0,0.5"), ("staleness", 0.0, "uniform:0:4"),
    ("nesterov", 0.5, "pmf:0.5,0,0.5"), ("ormo", 0.5, "uniform:0:4")])
def test_a_state_that_collapses_to_zero_contracts(method, momentum, spec):
    """At x = 1 the delay-0 step of SGD maps w to exactly 0: the rate is 0, not 0/0."""
    rate = derived.spectral_radius(method, lr=[0.5, 1.0], momentum=momentum, delay=spec, criterion="almost-sure")
    assert np.all(np.isfinite(rate)) and np.all(rate < 1)
    square = derived.threshold(method, delay=spec, momentum=momentum, criterion="mean-square")
    sure = derived.threshold(method, delay=spec, momentum=momentum, criterion="almost-sure")
    assert 0 < square <= sure < np.inf


# ----------------------------------------------------------------------------- memory (finding 8)


def test_a_long_constant_delay_takes_the_polynomial_never_the_matrices(monkeypatch, capsys):
    """sgd at D = 1000: its matrices would take 94 GiB (they grow like D³); Giladi's polynomial gives
    the same threshold (tested at small D) from its roots, in bounded memory."""
    assert matrices.footprint("sgdm", (), delays.process(1000)) > BOUNDS["matrix_bytes"]
    assert matrices.footprint("sgdm", (), delays.process(64)) < BOUNDS["matrix_bytes"] / 10

    def refuse(*args, **kwargs):
        raise AssertionError("built transition matrices")

    monkeypatch.setattr(derived, "systems", refuse)
    d = np.array([1000, 10**6])
    np.testing.assert_allclose(derived.threshold("sgd", delay=d), 2 * np.sin(np.pi / (2 * (2 * d + 1))), rtol=1e-9)
    for c in derived.CRITERIA:
        line = _table(capsys, ["--method", "sgd", "--delay", "1000", "--criterion", c])[-1]
        assert float(line.split()[-1]) == pytest.approx(2 * np.sin(np.pi / 4002), rel=1e-5)
    np.testing.assert_allclose(derived.threshold("shifted", delay=2000, momentum=[0.0, 0.9], dampening=True),
                               polynomials.threshold("shifted", 2000, [0.0, 0.9], dampening=True), rtol=0)


@pytest.mark.parametrize("argv, words", [
    (["threshold", "--method", "nesterov", "--delay", "1000"], "need 93.9 GiB, more than the 2 GiB budget"),
    (["threshold", "--method", "sgd", "--delay-dist", "uniform:0:100", "--criterion", "mean-square"],
     "more than the 2 GiB budget"),
    (["expected", "--dim", "50", "--delay-dist", "uniform:0:100", "--lr", "0.01", "--momentum", "0.5"],
     "more than the 2 GiB budget"),
    (["expected", "--delay-dist", "uniform:0:30", "--lr", "0.01", "--momentum", "0.5"],
     "needs 125 GiB for 10,000 components (32 state entries), more than the 2 GiB budget; group the eigenvalues "
     "into at most 160 bins"),
])
def test_what_does_not_fit_is_refused_in_one_line_before_any_work(argv, words, capsys, tmp_path, earlier_result):
    out = tmp_path / "out.nc"
    out.write_bytes(earlier_result)
    err = _refused(capsys, argv + ["--out", str(out)], [out])
    assert words in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.nc"]


def test_the_rows_of_a_table_are_built_in_groups_that_fit(monkeypatch):
    """Many momenta at once would exceed the budget: built in groups, the same thresholds."""
    m = np.linspace(0, 0.9, 8)
    want = derived.threshold("nesterov", delay=20, momentum=m)
    monkeypatch.setitem(BOUNDS, "matrix_bytes", matrices.footprint("nesterov", (), delays.process(20), 2))
    matrices.systems.cache_clear()
    np.testing.assert_array_equal(derived.threshold("nesterov", delay=20, momentum=m), want)
    matrices.systems.cache_clear()


# ----------------------------------------------------------------------------- simulated (finding 12)


@pytest.mark.parametrize("delay", [["--delay", "1000000"], ["--delay", "2000"], ["--delay-dist", "pmf:0,0,1"]])
def test_a_delay_the_budget_never_outlives_is_refused(delay, capsys, tmp_path, earlier_result):
    """Every gradient would be taken at w₀: x* = 0.2503 was reported without a word."""
    out = tmp_path / "t.nc"
    out.write_bytes(earlier_result)
    steps = "2" if delay[-1] == "pmf:0,0,1" else "2000"
    err = _refused(capsys, ["threshold", "--simulate", *delay, "--steps", steps, "--out", out], [out])
    assert "never below the budget" in err and "--steps" in err
    with pytest.raises(NqmError, match="never below the budget"):
        simulated.simulated_threshold("sgdm", momentum=0.0, delay=int(steps) * 10, steps=int(steps))


# ----------------------------------------------------------------------------- the criteria over iid delays


SPECS = ["uniform:0:4", "uniform:1:8", "gaussian:3", "pmf:0.5,0,0.5"]


def _agree(method, momenta, specs, seeds):
    """Every criterion without a traceback, ordered (mean-square below the other two), and the
    almost-sure threshold within the spread of simulated ones (5 seeds, 20,000 steps, unstable =
    growing), widened by three standard errors of the almost-sure estimate."""
    values = {c: derived.threshold(method, delay=specs, momentum=momenta, criterion=c, with_error=True)
              for c in derived.CRITERIA}
    (mean, _), (square, _), (sure, error) = (values[c] for c in derived.CRITERIA)
    assert np.all(np.isfinite(mean) & np.isfinite(square) & np.isfinite(sure) & (square > 0))
    assert np.all(square <= mean * (1 + 1e-9)) and np.all(square <= sure + 3 * error)
    sim = simulated.simulated_threshold(method, momentum=momenta, delay=specs, seeds=seeds)
    low, high = sim.threshold_min.values - 3 * error, sim.threshold_max.values + 3 * error
    assert np.all((low <= sure) & (sure <= high)), (sure, sim.threshold_min.values, sim.threshold_max.values)


def test_the_criteria_agree_with_simulation_on_a_small_sweep():
    _agree("ormo", [0.5], ["uniform:0:4", "pmf:0.5,0,0.5"], seeds=2)


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m in methods() if make(m).linear])
def test_the_criteria_agree_with_simulation_for_every_linear_method(method):
    _agree(method, [0.0, 0.5, 0.9], SPECS, seeds=5)
