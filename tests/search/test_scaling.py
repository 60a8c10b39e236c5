"""Steps against batch size (nqm.search.scaling): the best settled steps per batch size, perfect
scaling and the critical batch size, checked against a closed form and against Monte Carlo."""

import numpy as np
import pytest
import xarray as xr

import nqm
from nqm.cli import main
from nqm.search.scaling import critical_batch_size, scaling

PROBLEM = nqm.zhang(20)
SIZES = [1, 4, 16, 64, 256, 1024, 4096]
BOX = dict(lr=(1e-3, 2.0), momentum=0, problem=PROBLEM, max_steps=20_000, progress=False)


def sgd_first_passage(lam, sigma, b, lr, target, max_steps):
    """T of the expected loss of SGD without delay, from its closed form (w₀ = 1):
    E[L_t] = ½ Σ λ [c + (1 − c) r^{2t}], r = 1 − ηλ, c = ησ² / (B (2 − ηλ)) — decreasing in t where
    the run settles (c < 1), so bisection finds its first step below the target; ∞ if it never does."""
    r2, c = (1 - lr * lam) ** 2, lr * sigma ** 2 / (b * (2 - lr * lam))
    floor = 0.5 * np.sum(lam * c)
    level = lambda t: floor + 0.5 * np.sum(lam * (1 - c) * r2 ** t)
    if (r2 >= 1).any() or floor >= target or level(max_steps) >= target:
        return np.inf
    lo, hi = 0, max_steps
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if level(mid) < target else (mid, hi)
    return hi


def sgd_best_steps(b, sigma=1.0, target=0.01, max_steps=20_000):
    """The smallest such T over lr in the box: a fine log grid, then finer around its best."""
    lam = PROBLEM.eigenvalues
    lrs = np.geomspace(*BOX["lr"], 2000)
    with np.errstate(divide="ignore"):  # lr = 2 on λ = 1: the stability limit itself
        steps = np.array([sgd_first_passage(lam, sigma, b, x, target, max_steps) for x in lrs])
    i = int(np.argmin(steps))
    fine = np.geomspace(lrs[max(i - 1, 0)], lrs[min(i + 1, lrs.size - 1)], 400)
    return min(steps[i], min(sgd_first_passage(lam, sigma, b, x, target, max_steps) for x in fine))


@pytest.fixture(scope="module")
def exact():
    return scaling("sgd", batch_size=SIZES, noise=1.0, **BOX)


def test_sgd_without_delay_scales_as_its_closed_form_says(exact):
    reference = np.array([sgd_best_steps(b) for b in SIZES])
    np.testing.assert_allclose(exact.steps.values, reference, rtol=0.01)  # the search's own tolerance
    assert exact.attrs["critical_batch_size"] == pytest.approx(critical_batch_size(SIZES, reference), rel=0.02)
    assert 64 < exact.attrs["critical_batch_size"] < 1024
    # perfect scaling at first, diminishing returns past the critical batch size
    assert exact.steps.values[1] / exact.steps.values[0] == pytest.approx(0.25, rel=0.05)
    assert exact.steps.values[-1] / exact.steps.values[-2] > 0.8
    np.testing.assert_array_equal(exact.perfect.values, exact.steps.values[0] * SIZES[0] / np.array(SIZES))
    assert exact.attrs["evaluation"] == "exact expected dynamics" and (exact.momentum.values == 0).all()


def test_the_exact_steps_are_those_of_the_monte_carlo_mean_loss(exact):
    """At each batch size's best point, the mean loss of 400 independent runs first passes the target
    where the exact expected loss does, within three standard errors of that mean."""
    from nqm.engine import Cells, RunConfig, Trace, record, simulate
    from nqm.optimizers import make

    cells = 400
    for b, lr, steps in zip(SIZES[:4], exact.lr.values, exact.steps.values):
        config = RunConfig(target=1e-30, max_steps=int(2 * steps), independent_noise=True, progress=False)
        hyper = {"lr": np.full(cells, lr), "momentum": np.zeros(cells)}
        loss = simulate(PROBLEM, Cells(make("sgdm"), hyper, np.full(cells, 1.0 / np.sqrt(b)), uids=np.arange(cells)),
                        config, [Trace({"loss": record.loss})]).trace["loss"].astype(np.float64)
        mean, error = loss.mean(0), loss.std(0, ddof=1) / np.sqrt(cells)
        early = np.flatnonzero(mean - 3 * error < 0.01)[0] + 1  # steps 1, 2, …
        late = np.flatnonzero(mean + 3 * error < 0.01)[0] + 1
        assert early <= steps <= late, (b, early, steps, late)


def test_the_critical_batch_size_of_a_known_curve():
    """S(B) = a/B + c reaches twice perfect scaling from B₀ at B = (a + 2cB₀)/c exactly."""
    a, c, b0 = 4000.0, 10.0, 1.0
    sizes = np.geomspace(b0, 4096, 400)
    assert critical_batch_size(sizes, a / sizes + c) == pytest.approx((a + 2 * c * b0) / c, rel=1e-3)
    assert critical_batch_size(sizes[:50], a / sizes[:50] + c) == np.inf  # not reached within the list
    assert np.isnan(critical_batch_size([1, 2], [np.nan, np.nan]))  # nothing converged
    # the anchor is the first batch size that converged
    assert critical_batch_size([1, 2, 4, 8], [np.nan, 100, 50, 100]) == pytest.approx(np.exp((np.log(4) + np.log(8)) / 2))


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_size=[1, 4], noise=0.0), "noise must be the single-example noise scale sigma > 0"),
    (dict(batch_size=[4], noise=1.0), "at least two batch sizes"),
    (dict(batch_size=[0, 4], noise=1.0), "batch_size"),
])
def test_bad_input_is_one_line(kwargs, message):
    with pytest.raises(nqm.NqmError, match=message):
        scaling("sgd", **kwargs, **BOX)


def test_nqm_scaling_writes_the_curve_and_draws_it(tmp_path, capsys, exact):
    out, png = tmp_path / "s.nc", tmp_path / "s.png"
    assert main(["scaling", "--method", "sgdm", "--momentum", "0", "--lr", "0.001:2", "--noise", "1", "--batch-size",
                 "geom:1:4096:7", "--dim", "20", "--max-steps", "20000", "--out", str(out), "--plot", str(png),
                 "--json"]) == 0
    printed = capsys.readouterr().out
    ds = xr.load_dataset(out)
    np.testing.assert_array_equal(ds.steps.values, exact.steps.values)  # the exact mode, as the API chose it
    assert f"critical batch size: {exact.attrs['critical_batch_size']:,.1f}" in printed
    assert '"critical_batch_size": ' in printed.splitlines()[-1]
    assert png.stat().st_size > 10_000
    assert main(["scaling", "--method", "sgdm", "--momentum", "0", "--lr", "0.001:2", "--noise", "0", "--batch-size",
                 "1", "4", "--dim", "20", "--out", str(tmp_path / "z.nc")]) == 2
    assert "noise must be the single-example noise scale" in capsys.readouterr().err


def test_the_engine_scales_with_seeds_when_the_exact_mode_does_not_apply():
    """AB has no exact mode: each batch size is a Monte Carlo search over seeds, its spread kept."""
    ds = scaling("ab", batch_size=[1, 16], noise=1.0, lr=(1e-3, 2.0), momentum=0.5, rho=0.5, seeds=3, max_cells=200,
                 problem=PROBLEM, max_steps=20_000, progress=False)
    assert ds.attrs["evaluation"].startswith("Monte Carlo")
    assert (ds.steps_min.values <= ds.steps.values).all() and (ds.steps.values <= ds.steps_max.values).all()
    assert ds.steps.values[1] < ds.steps.values[0] / 4  # a batch of 16 is more than four times faster here
    assert set(ds.data_vars) >= {"lr", "momentum", "rho", "perfect"}


def _interrupted_after_one(real, calls: list):
    """``real`` (a batch size's search) that records its batch size in ``calls`` and is interrupted
    (Ctrl-C) at its second call."""
    def search(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(kwargs["batch_size"])
        return real(*args, **kwargs)
    return search


def test_an_interrupted_scaling_run_continues_where_it_stopped(tmp_path, monkeypatch):
    """Each batch size's search is kept as it finishes: Ctrl-C after the first, and the same call
    again searches only the others and gives the uninterrupted run's curve; other arguments are
    refused unless restarted."""
    from nqm.search import scaling as module

    kw = dict(batch_size=[1, 4, 16], noise=0.1, lr=(0.05, 1.0), momentum=0.5, rho=0.5, problem=nqm.zhang(10),
              max_steps=2000, max_cells=32, progress=False)
    whole = module.scaling("ab", **kw)
    partial = tmp_path / "run.partial"
    real, calls = module.answered_best, []
    monkeypatch.setattr(module, "answered_best", _interrupted_after_one(real, calls))
    with pytest.raises(KeyboardInterrupt):
        module.scaling("ab", **kw, checkpoint=partial)
    assert partial.is_file() and calls == [1]

    def counted(*args, **kwargs):
        calls.append(kwargs["batch_size"])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "answered_best", counted)
    with pytest.raises(nqm.NqmError, match="is of another scaling run.*--restart"):
        module.scaling("ab", **{**kw, "noise": 0.2}, checkpoint=partial)
    resumed = module.scaling("ab", **kw, checkpoint=partial)
    assert calls == [1, 4, 16] and not partial.exists()
    for name in ("steps", "answered", "lr", "momentum", "rho"):
        np.testing.assert_array_equal(resumed[name].values, whole[name].values, err_msg=name)
    assert resumed.attrs["critical_batch_size"] == whole.attrs["critical_batch_size"]


def test_the_figure_draws_the_curve_perfect_scaling_and_the_critical_batch_size(exact):
    """nqm.plots.scaling: on log-log axes, the result's best steps against B, its perfect scaling
    dotted in the same colour, and a marker on the curve at the critical batch size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nqm.plots.scaling import plot_scaling

    fig = plot_scaling(exact, labels=["sgd"])
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    curve, perfect, critical = ax.get_lines()[:3]
    np.testing.assert_array_equal(curve.get_xdata(), SIZES)
    np.testing.assert_array_equal(curve.get_ydata(), exact.steps.values)
    np.testing.assert_array_equal(perfect.get_ydata(), exact.perfect.values)
    assert perfect.get_linestyle() == ":" and perfect.get_color() == curve.get_color()
    b = exact.attrs["critical_batch_size"]
    assert critical.get_xdata()[0] == b and critical.get_marker() == "D"
    at = np.interp(np.log(b), np.log(SIZES), np.log(exact.steps.values))  # on the curve, log-log
    assert critical.get_ydata()[0] == pytest.approx(np.exp(at), rel=1e-12)
    assert ax.get_legend().get_texts()[0].get_text() == "sgd"
    plt.close(fig)


def test_ctrl_c_on_nqm_scaling_says_what_it_keeps_and_the_same_command_continues(tmp_path, monkeypatch, capsys):
    """``nqm scaling`` interrupted after its first batch size says that its checkpoint holds it
    (nqm.cli.scaling's ``interrupted``), and the same command then searches only the others."""
    from argparse import Namespace

    from nqm.cli import scaling as scaling_command
    from nqm.search import scaling as module

    out = tmp_path / "s.nc"
    argv = [scaling_command.NAME, "--method", "ab", "--lr", "0.05:1", "--momentum", "0.5", "--rho", "0.5", "--noise",
            "0.1", "--batch-size", "1", "4", "16", "--dim", "10", "--max-steps", "2000", "--max-cells", "32",
            "--no-progress", "--out", str(out)]
    assert scaling_command.interrupted(Namespace(out=str(out))) == ("no batch size had finished, nothing was kept: "
                                                                    "the run starts over when run again")
    real, calls = module.answered_best, []
    monkeypatch.setattr(module, "answered_best", _interrupted_after_one(real, calls))
    assert main(argv) == 130
    said = scaling_command.interrupted(Namespace(out=str(out)))
    assert said.startswith(f"the checkpoint {out}.partial holds every batch size searched so far")
    assert capsys.readouterr().err.strip().splitlines() == [f"nqm: interrupted; {said}"]
    monkeypatch.setattr(module, "answered_best", lambda *args, **kwargs: calls.append(kwargs["batch_size"]) or real(
        *args, **kwargs))
    assert main(argv) == 0 and calls == [1, 4, 16] and out.is_file()
