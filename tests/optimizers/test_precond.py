"""precond: SGDM preconditioned by H^(−p). At p = 0 it is SGDM (the same steps, the loss to float32 rounding); at p = 1/2 it follows an
independent numpy loop, axis-aligned and rotated; its simulated threshold is SGDM's mapped by
x = η λ^(1−p); bad powers are one line at the API and the CLI."""

import numpy as np
import pytest
import xarray as xr

import nqm
from nqm import diagnostics, engine
from nqm.cli import main
from nqm.errors import NqmError
from nqm.optimizers import make
from nqm.thresholds.derived import precond_threshold, threshold
from nqm.search.simulated import simulated_threshold

LAM = np.array([2.0, 0.7, 0.3, 0.05])
STEPS = 150
CONFIG = engine.RunConfig(target=-1.0, diverge_factor=np.inf, max_steps=STEPS, chunk_steps=64, x64=True, progress=False)


def problem(rotate: bool):
    base = nqm.explicit(LAM)
    return base.with_rotation(5) if rotate else base


@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("delay", [3, "uniform:0:5"])
def test_power_zero_is_sgdm(delay, rotate):
    """Steps, status and loss, with noise (common random numbers), under constant and iid delays.

    The status compared is the first passage's: whether a run that reached the target stays there
    is decided for SGDM exactly from its dynamics (a linear method) and for precond by continuing
    the run, two tests that may disagree on a cell near its edge while the runs are the same bits."""
    kw = dict(lr=[0.05, 0.3, 0.9], momentum=[0.0, 0.6, 0.9], noise=[0.0, 0.05], seed=[0, 1],
              problem=problem(rotate), max_steps=400, target=0.02, progress=False)
    for first_passage in (False, True):
        ds = nqm.sweep("precond", power=0.0, delay=delay, first_passage=first_passage, **kw).squeeze("power", drop=True)
        want = nqm.sweep("sgdm", delay=delay, first_passage=first_passage, **kw)
        for name in ("steps",) + (("status",) if first_passage else ()):
            np.testing.assert_array_equal(ds[name].values, want[name].values, err_msg=name)
        # The same arithmetic in two programs: the compiler may contract a multiply-add into one
        # rounding in one of them (a noisy momentum-0 cell differs in its last bit on some CPUs)
        np.testing.assert_allclose(ds.loss.values, want.loss.values, rtol=4 * np.finfo(np.float32).eps)
    assert set(np.unique(want.status.values)) >= {-1, 1}  # the grid holds reached and diverged cells


def numpy_losses(lam, lr, momentum, power, delay, rotation=None, dampening=False, steps=STEPS):
    """An independent loop: v ← m v + c H^(−p) H w_{t−D}, w ← w − η v, H = Q diag(λ) Qᵀ."""
    q = np.eye(lam.size) if rotation is None else rotation
    hessian, precond = (q * lam) @ q.T, (q * lam ** -power) @ q.T
    w, v = q @ np.ones(lam.size), np.zeros(lam.size)
    history = [w.copy() for _ in range(delay + 1)]  # history[0] = w_{t−D}
    c = 1 - momentum if dampening else 1.0
    out = []
    for _ in range(steps):
        v = momentum * v + c * precond @ (hessian @ history[0])
        w = w - lr * v
        history = history[1:] + [w.copy()]
        out.append(0.5 * w @ hessian @ w)
    return np.array(out)


@pytest.mark.parametrize("dampening", [False, True])
@pytest.mark.parametrize("rotate", [False, True])
def test_power_half_follows_a_numpy_loop(rotate, dampening):
    prob, delay = problem(rotate), 2
    optimizer = make("precond", delay=delay, problem=prob, dampening=dampening)
    values = {"lr": [0.12], "momentum": [0.7], "power": [0.5]}
    got = engine.simulate(prob, engine.Cells(optimizer, values, [0.0], delay=delay), CONFIG,
                          [engine.Trace({"loss": diagnostics.loss})]).trace["loss"][0]
    want = numpy_losses(LAM, 0.12, 0.7, 0.5, delay, prob.rotation, dampening)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-300)
    plain = numpy_losses(LAM, 0.12, 0.7, 0.0, delay, prob.rotation, dampening)
    assert np.abs(got / plain - 1).max() > 0.1  # the preconditioner matters at these settings


def test_without_its_problem_it_cannot_step():
    optimizer = make("precond", delay=1)  # its hyperparameters are known without a problem ...
    assert optimizer.hyper._fields == ("lr", "momentum", "power")
    with pytest.raises(NqmError, match="problem="):  # ... but it cannot step
        engine.simulate(problem(False),
                        engine.Cells(optimizer, {"lr": [0.1], "momentum": [0.5], "power": [0.5]}, [0.0], delay=1),
                        CONFIG)
    other = make("precond", delay=1, problem=nqm.explicit([1.0, 0.5]))
    with pytest.raises(NqmError, match="dimension 2"):
        engine.simulate(problem(False),
                        engine.Cells(other, {"lr": [0.1], "momentum": [0.5], "power": [0.5]}, [0.0], delay=1), CONFIG)


@pytest.mark.parametrize("power", [0.5, 1.0])
def test_simulated_threshold_is_sgdms_mapped_by_the_power(power):
    """Per eigencomponent precond is SGDM at x = η λ^(1−p): η* = x*_sgdm / λ_max^(1−p)."""
    prob, momenta, delays = nqm.explicit([4.0, 1.0]), [0.0, 0.5], [0, 2]
    found = simulated_threshold("precond", momentum=momenta, delay=delays, power=[power], problem=prob,
                                steps=4000, tol=1e-3)
    eta = found.threshold.values[:, :, 0] / prob.lam_max  # simulated_threshold reports λ_max · η*
    sgdm = threshold("sgdm", momentum=momenta, delay=delays)
    np.testing.assert_allclose(eta, sgdm / 4.0 ** (1 - power), rtol=5e-3)
    np.testing.assert_allclose(precond_threshold(power=power, momentum=momenta, delay=delays, problem=prob),
                               sgdm / 4.0 ** (1 - power), rtol=1e-12)


BAD = ["-0.1", "1.5", "nan", "inf"]


@pytest.mark.parametrize("power", BAD)
def test_a_bad_power_is_one_line_at_the_api(power):
    with pytest.raises(NqmError, match="power") as caught:
        nqm.sweep("precond", lr=0.1, momentum=0.5, power=float(power), problem=problem(False), max_steps=10,
                  progress=False)
    assert "\n" not in str(caught.value) and "[0, 1]" in str(caught.value)
    with pytest.raises(NqmError, match="power"):
        precond_threshold(power=float(power), momentum=0.5)


@pytest.mark.parametrize("power", BAD + ["x"])
def test_a_bad_power_is_one_line_at_the_cli(power, tmp_path, capsys):
    out = tmp_path / "r.nc"
    code = main(["sweep", "--method", "precond", "--power", power, "--lr", "0.1", "--momentum", "0.5",
                 "--eigenvalues", "4", "1", "--max-steps", "20", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and not out.exists()
    assert "power" in err or power == "x"  # a word that is no number is refused as any grid value is


def test_the_cli_sweeps_the_power(tmp_path):
    out = tmp_path / "r.nc"
    code = main(["sweep", "--method", "precond", "--power", "0", "0.5", "1", "--lr", "0.1", "0.4", "--momentum", "0",
                 "0.5", "--delay", "0", "2", "--eigenvalues", "4", "1", "0.25", "--rotate", "3", "--max-steps", "300",
                 "--no-progress", "--out", str(out)])
    assert code == 0
    ds = xr.load_dataset(out, engine="h5netcdf")
    assert ds.attrs["method"] == "precond" and ds.power.values.tolist() == [0.0, 0.5, 1.0]
    assert (ds.status == 1).any() and not ds.steps.sel(power=0.5).equals(ds.steps.sel(power=0.0))


# ------------------------------------------------------------------ the exact mode: SGDM on a transformed spectrum

EXACT = dict(lr=[0.05, 0.2], momentum=[0.0, 0.5], problem=nqm.zhang(30), max_steps=5000)


@pytest.mark.parametrize("delay", [2, "uniform:0:3"])
def test_the_exact_mode_at_power_zero_is_sgdms(delay):
    import nqm.expected

    ds = nqm.expected.sweep("precond", power=0.0, noise=[0.0, 0.02], delay=delay, **EXACT)
    want = nqm.expected.sweep("sgdm", noise=[0.0, 0.02], delay=delay, **EXACT)
    for name in ("steps", "status", "loss", "steady_state_loss"):
        np.testing.assert_array_equal(ds[name].values, want[name].values)
    assert ds.attrs["method"] == "precond" and ds.attrs["power"] == 0.0


@pytest.mark.parametrize("delay", [0, 2])
def test_the_exact_mode_without_noise_gives_the_engines_steps(delay):
    """Without noise, under a constant delay, the expected loss is the loss: the engine's float64
    steps and statuses (under iid delays a run follows one drawn schedule, not their mean)."""
    import nqm.expected

    exact = nqm.expected.sweep("precond", power=0.5, delay=delay, **EXACT)
    engine_ = nqm.sweep("precond", power=0.5, delay=delay, x64=True, progress=False, **EXACT).squeeze("power", drop=True)
    np.testing.assert_array_equal(exact.steps.values, engine_.steps.values)
    np.testing.assert_array_equal(exact.status.values, engine_.status.values)


def test_the_exact_steady_state_is_the_closed_form_and_the_curve_the_monte_carlo_mean():
    """SGD at D = 0 preconditioned by H^(−p) is SGD on the curvature a = λ^(1−p) with noise N(0, a)
    in u = λ^(p/2) w: E[L∞] = ½ Σ a η σ² / (2 − η a). And its whole curve E[L_t] is the mean loss of
    400 independent engine runs, within three standard errors at every step."""
    import nqm.expected
    from nqm.engine import record

    p, lr, sigma, power = nqm.zhang(30), 0.3, 0.1, 0.5
    a = p.eigenvalues ** (1 - power)
    level = nqm.expected.steady_state_loss(p, "precond", 0, lr, 0.0, sigma, power=power)
    assert level == pytest.approx(0.5 * np.sum(a * lr * sigma**2 / (2 - lr * a)), rel=1e-12)
    curve = nqm.expected.expected_loss(p, method="precond", power=power, lr=lr, momentum=0.0, noise=sigma, delay=2,
                                       steps=300)
    cells = 400
    config = engine.RunConfig(target=1e-30, max_steps=300, independent_noise=True, progress=False)
    hyper = {"lr": np.full(cells, lr), "momentum": np.zeros(cells), "power": np.full(cells, power)}
    batch = engine.Cells(make("precond", problem=p), hyper, np.full(cells, sigma), delay=2, uids=np.arange(cells))
    runs = engine.simulate(p, batch, config, [engine.Trace({"loss": record.loss})]).trace["loss"].astype(np.float64)
    mean, error = runs.mean(0), runs.std(0, ddof=1) / np.sqrt(cells)
    assert (np.abs(mean - curve) <= 3 * error + 1e-6 * curve).mean() > 0.99  # 3 SE: a few of 300 steps may stray
    assert np.abs(mean - curve).max() <= 5 * error.max()


def test_the_exact_mode_refuses_a_power_it_cannot_take():
    import nqm.expected

    with pytest.raises(NqmError, match="power is precond's hyperparameter"):
        nqm.expected.sweep("sgdm", power=0.5, **EXACT)
    with pytest.raises(NqmError, match=r"power must be a number in \[0, 1\]"):
        nqm.expected.sweep("precond", power=1.5, **EXACT)


def test_nqm_expected_takes_precond_and_its_power(tmp_path):
    import nqm.expected

    out = tmp_path / "e.nc"
    assert main(["expected", "--method", "precond", "--power", "0.5", "--lr", "0.05", "0.2", "--momentum", "0", "0.5",
                 "--noise", "0.02", "--delay", "2", "--dim", "30", "--max-steps", "5000", "--out", str(out)]) == 0
    want = nqm.expected.sweep("precond", power=0.5, noise=0.02, delay=2, **EXACT)
    np.testing.assert_array_equal(nqm.load(out).steps.values, want.steps.values)
    assert main(["expected", "--method", "sgdm", "--power", "0.5", "--lr", "0.05", "--momentum", "0",
                 "--dim", "30", "--out", str(tmp_path / "x.nc")]) == 2
