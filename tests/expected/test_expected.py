"""The exact expected dynamics (nqm.expected) against the engine's Monte Carlo means, the deterministic
trajectory, a dense second-moment reference, closed forms and themselves on other grids."""

import numpy as np
import pytest

import nqm
import reference
from nqm import diagnostics, engine, expected
from nqm.expected import autoregression, closed_form, reduced, steady, stepping
from nqm.expected.recursion import recursion
from nqm.optimizers import make

PROBLEM = nqm.loguniform(4, 0.05, 1.0)


@pytest.mark.parametrize("method", ["sgdm", "nesterov", "shifted"])
def test_noiseless_expectation_is_the_trajectory(method):
    exact = expected.expected_loss(PROBLEM, lr=0.3, momentum=0.6, delay=3, steps=300, method=method)
    traced = reference.run(PROBLEM.eigenvalues, 0.3, 0.6, 3, method=method, max_steps=300, trace=True)
    np.testing.assert_allclose(exact, traced, rtol=1e-10)


@pytest.mark.parametrize("method,delay,dampening", [
    ("sgdm", 0, False), ("sgdm", 4, True), ("shifted", 3, False), ("nesterov", 4, True),
    *(pytest.param(*case, marks=pytest.mark.slow)  # more of the same: under `pytest -m slow`
      for case in [("sgdm", 2, False), ("shifted", 0, True), ("shifted", 4, False), ("nesterov", 0, False)])])
def test_monte_carlo_mean_loss_within_three_standard_errors(method, delay, dampening):
    """4,000 cells with independent noise: the mean loss at several steps matches the exact value."""
    cells, steps, lr, m, sigma = 4000, 120, 0.3, 0.5, 0.4
    config = engine.RunConfig(target=-1.0, diverge_factor=np.inf, max_steps=steps, chunk_steps=steps,
                              independent_noise=True, x64=True, progress=False)
    runs = engine.Cells(make(method, delay=delay, dampening=dampening), {"lr": np.full(cells, lr),
                        "momentum": np.full(cells, m)}, np.full(cells, sigma), delay=delay, seed=5, uids=np.arange(cells))
    out = engine.simulate(PROBLEM, runs, config, [engine.Trace({"loss": diagnostics.loss})])
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


@pytest.mark.parametrize("method", ["sgdm", "nesterov", "shifted"])
def test_the_fast_recursion_equals_the_dense_second_moment_reference(method):
    kw = dict(lr=0.3, momentum=0.6, delay=3, noise=0.2, steps=150, method=method)
    np.testing.assert_allclose(expected.expected_loss(PROBLEM, **kw), reference.expected_loss(PROBLEM, **kw), rtol=1e-11)


@pytest.mark.parametrize("method, dampening", [("sgdm", False), ("sgdm", True), ("nesterov", False), ("shifted", False)])
def test_without_noise_the_expected_sweep_is_the_engine_in_float64(method, dampening):
    kw = dict(lr=np.geomspace(0.02, 2.0, 7), momentum=[0.0, 0.5, 0.9], delay=[0, 4], problem=nqm.zhang(40),
              target=0.01, max_steps=4000, dampening=dampening)
    exact = expected.sweep(method, **kw)
    mc = nqm.sweep(method, x64=True, progress=False, **kw)
    assert (exact.status == 1).sum() >= 5 and (exact.status == -1).sum() >= 5
    np.testing.assert_array_equal(exact.steps.values, mc.steps.values)
    np.testing.assert_array_equal(exact.status.values, mc.status.values)


def test_steady_state_closed_form_for_sgd():
    lam, lr, sigma = np.array([1.0, 0.3, 0.05]), 0.4, 0.3
    problem = nqm.explicit(lam)
    steady = expected.steady_state_loss(problem, "sgdm", 0, [lr], [0.0], [sigma])[0]
    assert steady == pytest.approx(np.sum(sigma**2 * lr * lam / (2 * (2 - lr * lam))), rel=1e-12)


@pytest.mark.parametrize("method, delay", [("sgdm", 0), ("sgdm", 4), ("nesterov", 0), ("nesterov", 3), ("shifted", 4)])
def test_steady_state_is_the_long_run_average(method, delay):
    problem = nqm.loguniform(5, 0.05, 1.0)
    curve = expected.expected_loss(problem, lr=0.1, momentum=0.5, delay=delay, noise=0.1, steps=8000, method=method)
    steady = expected.steady_state_loss(problem, method, delay, [0.1], [0.5], [0.1])[0]
    assert curve[-1] == pytest.approx(steady, rel=1e-6)
    unstable = expected.steady_state_loss(problem, method, delay, [5.0], [0.5], [0.1])[0]
    assert unstable == np.inf


def test_expected_sweep_marks_cells_that_can_never_reach_the_target_and_plots(tmp_path):
    ds = expected.sweep("sgdm", lr=np.geomspace(0.05, 1.5, 6), momentum=[0.0, 0.9], noise=[0.0, 0.5],
                        problem=nqm.zhang(30), target=0.01, max_steps=3000, bins=10)
    unreachable = ds.reachable.values == 0
    assert unreachable.any() and not (ds.status.values[unreachable] == 1).any()
    nqm.save(ds, tmp_path / "e.nc")
    from nqm.cli import main

    assert main(["plot", str(tmp_path / "e.nc"), "--out", str(tmp_path / "e.png"), "--threshold"]) == 0


def test_binning_is_close_to_exact():
    kw = dict(lr=np.geomspace(0.05, 1.5, 6), momentum=[0.0, 0.9], delay=2, noise=0.05, problem=nqm.zhang(2000),
              target=0.05, max_steps=10_000)
    exact, binned = expected.sweep("sgdm", **kw), expected.sweep("sgdm", bins=200, **kw)
    both = (exact.status == 1) & (binned.status == 1)
    assert both.sum() >= 3
    rel = np.abs(binned.steps - exact.steps).where(both) / exact.steps.where(both)
    assert float(rel.max()) < 0.05


def test_the_benchmark_runs_at_smoke_size():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "bench_expected.py"
    spec = importlib.util.spec_from_file_location("bench_expected", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--smoke"])
    for cache in ("cold", "warm"):  # a first run, then one from the compilation cache it filled
        assert result[cache]["exact_s"] > 0 and result[cache]["binned_s"] > 0


def test_cells_and_noise_levels_are_independent_of_the_grid_and_the_slots(monkeypatch):
    """Same numbers whatever grid a cell is in, however the slots are sized and refilled, and
    whether its noise levels run together or alone; and the same steps and status (the loss to
    rounding) whether a cell ends in the numpy head start, goes on from it in the compiled loop, or
    is stepped by the compiled loop from the start."""
    kw = dict(delay=3, problem=nqm.zhang(50), target=0.02, max_steps=3000)
    grid = dict(lr=np.geomspace(0.02, 1.5, 5), momentum=[0.0, 0.6, 0.9], noise=[0.0, 0.05, 0.3])
    handed = []
    original_head = stepping.head_start
    def head_start(*args, **kwargs):  # note (cells that took it, cells it handed over)
        going = original_head(*args, **kwargs)
        handed.append((len(args[2]), len(going)))
        return going

    monkeypatch.setattr(stepping, "head_start", head_start)
    full = expected.sweep("sgdm", **grid, **kw)
    assert {-1, 0, 1} <= set(np.unique(full.status))  # settled, budget and diverged cells (and transient)
    assert handed[0][0] > 5 and handed[0][1] == 0  # all of them ended in the head start
    original = autoregression.run
    for work in (0, 15 * 50 * 60):  # the compiled loop from the start; from step 60 on
        monkeypatch.setattr(stepping, "HEAD_WORK", work)
        handed.clear()
        compiled = expected.sweep("sgdm", **grid, **kw)
        taken, going = handed[0]
        assert 0 < going < taken if work else going == taken
        np.testing.assert_array_equal(compiled.steps.values, full.steps.values)
        np.testing.assert_array_equal(compiled.status.values, full.status.values)
        np.testing.assert_allclose(compiled.loss.values, full.loss.values, rtol=1e-12)
        # one slot, refilled cell after cell; a few, refilled every 7 steps; on one device, or on each
        for slots, one_device in ((1, stepping.ONE_DEVICE), (3, stepping.ONE_DEVICE), (1, 0), (3, 0))[: 1 if work else 4]:
            monkeypatch.setattr(stepping, "ONE_DEVICE", one_device)
            monkeypatch.setattr(autoregression, "run",
                                lambda *a, **k: original(*a, **{**k, "slot_size": slots * 50, "chunk_steps": 7}))
            small = expected.sweep("sgdm", **grid, **kw)
            for name in ("steps", "status", "loss"):
                np.testing.assert_array_equal(small[name].values, compiled[name].values)
        monkeypatch.setattr(autoregression, "run", original)
    monkeypatch.undo()
    alone = expected.sweep("sgdm", lr=grid["lr"][3], momentum=0.6, noise=0.05, **kw)
    cell = full.sel(lr=grid["lr"][3], momentum=0.6, noise=0.05)
    for name in ("steps", "status", "loss", "steady_state_loss"):
        assert alone[name].values.item() == cell[name].values.item()


@pytest.mark.parametrize("method, delay", [("sgdm", 3), ("nesterov", 2), ("shifted", 3)])
def test_what_the_closed_form_settles_is_what_stepping_gives(method, delay, monkeypatch):
    """Slow cells and cells held above the target by their noise alone are settled unstepped, and
    cells that reach the target late are stepped only from where they first can; stepping every
    cell from the start instead gives the same steps and status, and the same loss."""
    kw = dict(lr=np.geomspace(0.002, 1.5, 6), momentum=[0.0, 0.6, 0.9], noise=[0.0, 0.05, 0.4], delay=delay,
              problem=nqm.zhang(60), target=0.02, max_steps=4000)
    cuts = []
    original = closed_form.shortcut
    monkeypatch.setattr(closed_form, "shortcut", lambda *a: cuts.append(original(*a)) or cuts[-1])
    fast = expected.sweep(method, **kw)
    monkeypatch.setattr(closed_form, "shortcut", lambda *a: None)
    stepped = expected.sweep(method, **kw)
    cuts = [cut for cut in cuts if cut is not None]
    assert sum(int(cut.proven.sum()) for cut in cuts) >= 10  # slow cells (small η) and noisy ones (σ = 0.4)
    assert sum(cut.start > 0 for cut in cuts) >= 3  # and some stepped from later on
    assert {1, 0} <= set(np.unique(stepped.status.values))
    np.testing.assert_array_equal(fast.steps.values, stepped.steps.values)
    np.testing.assert_array_equal(fast.status.values, stepped.status.values)
    np.testing.assert_allclose(fast.loss.values, stepped.loss.values, rtol=1e-8)


def test_stability_of_the_recursion_is_the_threshold():
    from nqm.thresholds import polynomials

    problem = nqm.explicit([1.0, 0.1])
    for delay, m in ((0, 0.0), (3, 0.5), (6, 0.9)):
        x_star = float(polynomials.threshold("sgdm", delay, m))
        lr = x_star * np.array([0.99, 1.01])
        rec = expected.recursion("sgdm", delay, lr, np.full(2, m))
        np.testing.assert_array_equal(expected.stable(rec, problem.eigenvalues), [True, False])


def test_the_heavy_balls_recursion_and_steady_state_are_the_textbook_ar2():
    """nqm.expected.recursion writes SGDM at D = 0 as ``w_{t+1} = (1 + m − ηλ) w_t − m w_{t−1} − η σ√λ z_t``,
    and nqm.expected.steady's reflection coefficients give its stationary variance, for the AR(2)
    with φ₁ = 1 + m − ηλ, φ₂ = −m: γ(0) = (1 − φ₂) / ((1 + φ₂)((1 − φ₂)² − φ₁²)) (Box, Jenkins &
    Reinsel §3.2.4), so V_∞ = ½ Σ λ² η² γ(0); ∞ where a root leaves the unit circle."""
    lam = PROBLEM.eigenvalues
    lr, m = np.array([0.3, 0.8, 5.0]), np.array([0.6, 0.0, 0.5])
    rec = recursion("sgdm", 0, lr, m)
    for cell in range(3):
        written = np.stack([np.ones_like(lam), -(1 + m[cell] - lr[cell] * lam), np.full_like(lam, m[cell])], -1)
        np.testing.assert_allclose(rec.polynomial(cell, lam), written, rtol=1e-15)
    stable, unit = steady.analyse(rec, lam, np.ones_like(lam))
    phi1, phi2 = 1 + m[:, None] - lr[:, None] * lam, -m[:, None]
    gamma0 = (1 - phi2) / ((1 + phi2) * ((1 - phi2) ** 2 - phi1 ** 2))
    np.testing.assert_array_equal(stable, [True, True, False])
    np.testing.assert_allclose(unit[:2], 0.5 * np.sum(lam ** 2 * lr[:2, None] ** 2 * gamma0[:2], -1), rtol=1e-12)
    assert unit[2] == np.inf
    np.testing.assert_array_equal(steady.stable(rec, lam), stable)


def test_cli_knows_every_linear_method_and_the_default_bins(tmp_path):
    import argparse

    from nqm import cli
    from nqm.cli import expected as expected_command

    parse = cli.build_parser("expected").parse_args
    for method in expected.methods():  # the CLI's choices are nqm.expected's own
        assert parse(["expected", "--method", method, "--lr", "1", "--momentum", "0", "--out", "x.nc"]).method == method
    own = expected_command.add_parser(argparse.ArgumentParser().add_subparsers()).parse_args
    assert own(["--lr", "1", "--momentum", "0", "--out", "x.nc", "--bins"]).bins == expected.DEFAULT_BINS  # alone
    assert own(["--lr", "1", "--momentum", "0", "--out", "x.nc"]).bins is None  # no binning unless asked
    out = tmp_path / "e.nc"
    assert cli.main(["expected", "--method", "nesterov", "--lr", "0.1", "0.3", "--momentum", "0.5", "--dim", "30",
                     "--max-steps", "500", "--bins", "--out", str(out)]) == 0
    ds = nqm.load(out)
    assert ds.attrs["method"] == "nesterov" and ds.attrs["bins"] == expected.DEFAULT_BINS


@pytest.mark.parametrize("bad, message", [(dict(lr=-0.1), "learning rate > 0"), (dict(momentum=1.0), "momentum in [0, 1)"),
                                          (dict(delay=-1), "integer delay"), (dict(lr=float("nan")), "learning rate > 0"),
                                          (dict(lr=[]), "is empty"), (dict(noise=-1.0), "noise scale >= 0"),
                                          (dict(bins=0), "bins must be"), (dict(max_steps=0), "max_steps"),
                                          (dict(method="ab"), "linear methods")])
def test_bad_input_is_one_line_at_the_api_and_the_cli(bad, message, tmp_path, capsys):
    from nqm import cli
    from nqm.errors import NqmError

    kw = dict(method="sgdm", lr=0.1, momentum=0.5, problem=nqm.zhang(10), max_steps=100) | bad
    with pytest.raises(NqmError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        expected.sweep(kw.pop("method"), **kw)
    out = tmp_path / "kept.nc"
    out.write_bytes(b"earlier results")
    flags = {"lr": "--lr", "momentum": "--momentum", "delay": "--delay", "noise": "--noise", "bins": "--bins",
             "max_steps": "--max-steps", "method": "--method"}
    argv = ["expected", "--lr", "0.1", "--momentum", "0.5", "--dim", "10", "--out", str(out)]
    (name, value), = bad.items()
    argv += [flags[name]] + ([str(value)] if value != [] else [])
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("nqm: error:")
    assert out.read_bytes() == b"earlier results"


def test_the_singular_point_eta_lambda_one_runs_and_has_the_closed_form_steady_state():
    """η λ = 1 at m = 0 and D = 0 makes the recursion nilpotent (a double root at 0): every cell still
    runs, its steps and status are the engine's, and E[L_∞] is the SGD closed form
    σ² Σ η λ / (2 (2 − η λ)) (the λ = 1 component's share σ²/2)."""
    lam, sigma = np.array([1.0, 0.5, 0.1]), 0.3
    steady = expected.steady_state_loss(nqm.explicit(lam), "sgd", 0, [1.0], [0.0], [sigma])[0]
    assert steady == pytest.approx(np.sum(sigma**2 * lam / (2 * (2 - lam))), rel=1e-12)
    kw = dict(lr=[0.5, 1.0, 2.5], momentum=[0.0, 0.5], noise=[0.0, 0.05], problem=nqm.explicit(lam), max_steps=400)
    ds = expected.sweep("sgdm", delay=[0, 1, 4], **kw)
    mc = nqm.sweep("sgdm", x64=True, progress=False, delay=[0, 1, 4], **{**kw, "noise": 0.0})
    np.testing.assert_array_equal(ds.steps.sel(noise=0.0).values, mc.steps.sel(noise=0.0).values)
    np.testing.assert_array_equal(ds.status.sel(noise=0.0).values, mc.status.sel(noise=0.0).values)
    steady = ds.steady_state_loss.values
    assert np.isfinite(steady).any() and np.isinf(steady).any() and (ds.reachable.values[np.isinf(steady)] == 0).all()


@pytest.mark.parametrize("delay", [0, 4, 64, pytest.param(1, marks=pytest.mark.slow), pytest.param(16, marks=pytest.mark.slow)])
def test_every_cell_of_the_figure_grid_runs_at_any_delay(delay):
    """Figure 1's box (32 × 32) on a small spectrum: no cell raises; where there is no steady state
    (a root on or outside the unit circle) steady_state_loss is ∞ and the cell is not reachable."""
    ds = expected.sweep("sgdm", lr=np.geomspace(0.01, 4, 32), momentum=np.linspace(0, 0.98, 32), delay=delay,
                        noise=0.05, problem=nqm.zhang(20), max_steps=300)
    steady = ds.steady_state_loss.values
    assert not np.isnan(steady).any() and (steady >= 0).all()
    assert (ds.reachable.values[np.isinf(steady)] == 0).all()
    assert set(np.unique(ds.status.values)) <= {-1, 0, 1, 2} and np.isinf(steady).any()


@pytest.mark.parametrize("bad, message", [
    (dict(method="sgd", momentum=[0.5, 0.9]), "sgd has no momentum"),
    (dict(bins=2.5), "bins must be an integer"), (dict(bins="x"), "bins must be an integer"),
    (dict(bins=True), "bins must be an integer"),
    (dict(problem="zhang"), "problem must be an nqm.Problem"),
    (dict(target="0.01"), "target must be a number"), (dict(max_steps="100"), "max_steps must be an integer"),
    (dict(max_steps=2.5), "max_steps must be an integer"), (dict(diverge_factor=None), "diverge_factor must be"),
])
def test_wrong_types_are_one_line_errors(bad, message):
    from nqm.errors import NqmError

    kw = dict(method="sgdm", lr=0.1, momentum=0.0, problem=nqm.zhang(10), max_steps=100) | bad
    method = kw.pop("method")
    with pytest.raises(NqmError, match=message):
        expected.sweep(method, **kw)
    with pytest.raises(NqmError, match=message):
        expected.evaluate(method, **kw)


@pytest.mark.parametrize("steps", [np.inf, np.nan, 0, 2.5, "10"])
def test_expected_loss_refuses_a_bad_number_of_steps(steps):
    from nqm.errors import NqmError

    with pytest.raises(NqmError, match="steps must be an integer"):
        expected.expected_loss(PROBLEM, lr=0.1, momentum=0.5, steps=steps)


@pytest.mark.parametrize("bad, message", [(dict(lr=-1.0), "learning rate"), (dict(delay=1.5), "integer delay"),
                                          (dict(method="sgd", momentum=0.5), "sgd has no momentum"),
                                          (dict(problem="zhang"), "problem must be")])
def test_expected_loss_and_steady_state_check_their_arguments(bad, message):
    from nqm.errors import NqmError

    kw = dict(problem=PROBLEM, lr=0.1, momentum=0.5, delay=2, method="sgdm") | bad
    with pytest.raises(NqmError, match=message):
        expected.expected_loss(kw.pop("problem"), **kw)
    kw = dict(problem=PROBLEM, method="sgdm", delay=2, lr=[0.1], momentum=[0.5], sigma=[0.1]) | bad
    with pytest.raises(NqmError, match=message):
        expected.steady_state_loss(kw.pop("problem"), kw.pop("method"), kw.pop("delay"), kw.pop("lr"),
                                   kw.pop("momentum"), kw.pop("sigma"))


@pytest.mark.parametrize("method, delay", [("sgdm", 4), ("nesterov", 2), ("shifted", 6)])
def test_seeded_roots_are_the_companion_eigenvalues(method, delay):
    """The roots polished from a few seeds are, component by component, those of numpy's eigvals."""
    from nqm.thresholds import polynomials

    lam = nqm.zhang(2000).eigenvalues  # log-spaced seeds every 0.05 over [log 1/2000, 0]: 153 ≪ 2000 components
    rec = expected.recursion(method, delay, np.array([0.05, 0.8]), np.array([0.9, 0.3]))
    for cell in range(2):
        fast, slow = closed_form.roots(rec, cell, lam), polynomials.roots(rec.polynomial(cell, lam))
        assert fast.shape == slow.shape
        distance = np.abs(fast[:, :, None] - slow[:, None, :]).min(-1).max()
        assert distance < 1e-7, (cell, distance)


def test_bins_are_capped_at_the_distinct_eigenvalues():
    """As many bins as distinct eigenvalues (or more: 10⁹ costs nothing) is the exact spectrum, each
    eigenvalue weighted by its multiplicity: the same steps and losses as no binning."""
    problem = nqm.explicit([1.0, 0.5, 0.5, 0.1, 0.1, 0.1])
    kw = dict(lr=[0.1, 0.9], momentum=[0.0, 0.6], problem=problem, max_steps=3000)
    exact = expected.sweep("sgdm", **kw)
    for bins in (3, 10**9):
        binned = expected.sweep("sgdm", **kw, bins=bins)
        np.testing.assert_array_equal(binned.steps.values, exact.steps.values)
        np.testing.assert_allclose(binned.loss.values, exact.loss.values, rtol=1e-12)
    assert not np.array_equal(expected.sweep("sgdm", **kw, bins=2).loss.values, exact.loss.values)  # fewer: merged
    # what nqm.expected.reduced steps: the distinct eigenvalues weighted by their multiplicities, or bins
    # holding each eigenvalue once (their weights count them; their λ the mean of theirs)
    for bins in (3, 10**9):
        lam, weight = reduced.spectrum(problem, bins)
        np.testing.assert_array_equal(lam, [0.1, 0.5, 1.0])
        np.testing.assert_array_equal(weight, [3, 2, 1])
    lam, weight = reduced.spectrum(problem, 2)
    assert weight.sum() == problem.dim and lam @ weight == pytest.approx(problem.eigenvalues.sum(), rel=1e-14)
    assert lam.size == 2 and not np.isin(lam, problem.eigenvalues).all()


@pytest.mark.parametrize("delay", [4, 200])
def test_the_cost_estimate_counts_the_eigenvalue_problems_solved(delay, monkeypatch):
    """The exact mode's up-front estimate, on which its refusals rest, covers the companion
    eigenvalue problems a sweep really solves (10 p³ operations each, at their order p), and is no
    more than twice them where every cell is stable (the case it assumes)."""
    from nqm.thresholds import polynomials

    solved, eigvals = [], np.linalg.eigvals
    monkeypatch.setattr(polynomials.np.linalg, "eigvals", lambda a: solved.append(np.shape(a)) or eigvals(a))
    problem, lr, momentum = nqm.zhang(8), [1e-3, 2e-3], [0.0, 0.5]
    expected.sweep("sgdm", lr=lr, momentum=momentum, delay=delay, noise=0.05, problem=problem, max_steps=200)
    ops, _ = autoregression.cost("sgdm", delay, problem.eigenvalues, cells=4)
    done = sum(autoregression.EIGEN_OPS * np.prod(s[:-2]) * s[-1] ** 3 for s in solved)
    assert done > 0 and done <= ops <= 2 * done + autoregression.STEP_DOWN_OPS * 4 * 8 * (delay + 2) ** 2
