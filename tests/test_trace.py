"""Traces: strided recorders, on-device summaries, and agreement with the sweep's T."""

import numpy as np
import pytest
import xarray as xr

import nqm
from nqm import diagnostics, engine
from nqm.cli import main
from nqm.optimizers import methods
from nqm.optimizers.base import hyperparameters
from nqm.problem import zhang

PROBLEM = zhang(48)


@pytest.mark.parametrize("noise, independent", [(0.0, False), (0.03, False), (0.03, True)])
@pytest.mark.parametrize("method, extra", [("sgdm", {}), ("ab", {"rho": 0.7}), ("shifted", {})])
def test_a_trace_reaches_the_target_at_the_step_the_sweep_reports(method, extra, noise, independent):
    lr, m, delay, target = np.geomspace(0.1, 1.0, 5), 0.6, 2, 0.02
    ds = nqm.sweep(method, lr=lr, momentum=m, delay=delay, noise=noise, seed=4, problem=PROBLEM, target=target,
                   max_steps=3000, independent_noise=independent, progress=False, **extra)
    reached = ds.status.values.reshape(-1) == 1
    assert reached.sum() >= 2
    for i in np.flatnonzero(reached):
        trace = diagnostics.trajectory(method, problem=PROBLEM, lr=lr[i], momentum=m, delay=delay, noise=noise, seed=4,
                                       steps=3000, stride=50, target=target, independent_noise=independent, **extra)
        assert int(trace.steps_to_target) == int(ds.steps.values.reshape(-1)[i])


def test_a_strided_trace_is_the_full_trace_at_those_steps():
    kw = dict(lr=0.3, momentum=0.8, rho=0.5, delay="uniform:0:3", noise=0.02, steps=230, record=("loss", "alpha", "energy"))
    full = diagnostics.trajectory("ab", problem=PROBLEM, **kw)
    strided = diagnostics.trajectory("ab", problem=PROBLEM, stride=7, **kw)
    assert strided.step.values.tolist() == list(range(7, 231, 7))
    for name in ("loss", "alpha", "energy"):
        np.testing.assert_array_equal(strided[name].values, full[name].sel(step=strided.step).values)


def test_summaries_equal_what_the_full_trace_gives():
    kw = dict(lr=0.4, momentum=0.7, rho=0.8, delay=1, noise=0.01, steps=300, x64=True)
    full = diagnostics.trajectory("ab", problem=PROBLEM, record=("energy_ratio", "alpha"), **kw)
    summary = diagnostics.trajectory("ab", problem=PROBLEM, record=(), summaries=True, stride=100, **kw)
    np.testing.assert_allclose(summary.relative_energy_decay, np.exp(np.log(full.energy_ratio).mean("step")),
                               rtol=1e-10)
    np.testing.assert_allclose(float(summary.alpha_mean), float(full.alpha.mean()), rtol=1e-12)  # exact, not binned
    counts = summary.alpha_histogram.values
    assert counts.sum() == 300
    expected = np.bincount(np.searchsorted(diagnostics.ALPHA_EDGES, full.alpha.values, side="right"),
                           minlength=counts.size)
    np.testing.assert_array_equal(counts, expected)
    p5, p50, p95 = (diagnostics.histogram_percentile(summary.alpha_histogram, q) for q in (5, 50, 95))
    assert p5 <= p50 <= p95 and abs(p50 - float(full.alpha.median())) <= 0.02  # to the bins' resolution


def test_the_relative_energy_decay_of_a_diverging_run_covers_the_steps_before_it_diverged(tmp_path, capsys):
    """Not NaN for every component: the geometric mean over the steps before the first non-finite
    energy ratio, with their number (an independent numpy mean over the full trace checks it)."""
    kw = dict(lr=10.0, momentum=0.9, rho=0.5, delay=2, steps=300)
    full = diagnostics.trajectory("ab", problem=PROBLEM, record=("energy_ratio", "loss"), **kw)
    summary = diagnostics.trajectory("ab", problem=PROBLEM, record=(), summaries=True, **kw)
    ratio = full.energy_ratio.values.astype(np.float64)
    finite = np.isfinite(ratio).all(axis=1)
    covered = int(np.argmin(finite)) if not finite.all() else ratio.shape[0]
    assert 0 < covered < 300 and not np.isfinite(full.loss.values[-1])  # it does diverge, after some steps
    decay = summary.relative_energy_decay
    assert decay.attrs["steps"] == covered and f"only the {covered:,} steps" in decay.attrs["long_name"]
    np.testing.assert_allclose(decay.values, np.exp(np.log(ratio[:covered]).mean(axis=0)), rtol=1e-5)
    calm = diagnostics.trajectory("ab", problem=PROBLEM, record=(), summaries=True, **dict(kw, lr=0.1))
    assert calm.relative_energy_decay.attrs["steps"] == 300 and "only" not in calm.relative_energy_decay.attrs["long_name"]
    assert main(["trace", "--method", "ab", "--lr", "10", "--momentum", "0.9", "--delay", "2", "--dim", "48",
                 "--steps", "300", "--out", str(tmp_path / "t.nc")]) == 0
    assert f"covers the {covered:,} steps before" in capsys.readouterr().out


@pytest.mark.parametrize("method", ["ab", "sgdm", "shifted"])
def test_without_braking_the_relative_energy_decay_is_exactly_one(method):
    extra = {"rho": 0.0} if method == "ab" else {}
    ds = diagnostics.trajectory(method, problem=PROBLEM, lr=0.2, momentum=0.5, delay=0, noise=0.05, steps=200,
                                record=(), summaries=True, **extra)
    np.testing.assert_array_equal(ds.relative_energy_decay.values, 1.0)  # shifted at D = 0 is SGDM


@pytest.mark.parametrize("method", methods())
def test_every_recorder_runs_for_every_method(method):
    momentum = {"momentum": 0.5} if "momentum" in hyperparameters(method)._fields else {}  # none for adam
    ds = diagnostics.trajectory(method, problem=PROBLEM, lr=0.1, **momentum, delay=2, noise=0.01, steps=20,
                                record=tuple(diagnostics.RECORDERS) + ("energy_ratio",), summaries=True)
    for name in diagnostics.RECORDERS:
        assert np.isfinite(ds[name].values[3:]).all(), name  # v = 0 until every worker has stepped


def test_a_recorder_compiles_once():
    kw = dict(momentum=0.5, delay=1, steps=50, record=("loss", "energy_ratio"), summaries=True, target=0.1)
    diagnostics.trajectory("sgdm", problem=PROBLEM, lr=0.1, **kw)
    before = engine.loop.advance._cache_size()
    diagnostics.trajectory("sgdm", problem=PROBLEM, lr=0.2, **kw)
    diagnostics.trajectory("sgdm", problem=PROBLEM, lr=0.3, noise=0.1, **kw)
    assert engine.loop.advance._cache_size() == before


def test_trace_cli_writes_the_documented_variables(tmp_path, capsys):
    from nqm.cli import trace as trace_command

    out, fig = tmp_path / "trace.nc", tmp_path / "trace.png"
    code = main([trace_command.NAME, "--method", "ab", "--lr", "0.3", "--momentum", "0.8", "--delay", "2", "--noise",
                 "0.01", "--rho", "0.5", "--dim", "32", "--steps", "400", "--stride", "4", "--out", str(out), "--plot",
                 str(fig)])
    assert code == 0
    # nqm.cli.trace writes what trajectory() gives for that cell, and says where its loss ended
    direct = diagnostics.trajectory("ab", problem=zhang(32), lr=0.3, momentum=0.8, rho=0.5, delay=2, noise=0.01,
                                    steps=400, stride=4, record=diagnostics.TRACE, summaries=True)
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[0].startswith(f"400 steps: loss {float(direct.loss[-1]):.3g} at the end; ")
    assert f"wrote {out}" in printed and printed[-1] == f"wrote {fig}"  # the figure last
    np.testing.assert_array_equal(xr.load_dataset(out, engine="h5netcdf").loss.values, direct.loss.values)
    ds = xr.load_dataset(out, engine="h5netcdf")
    for name in diagnostics.TRACE:  # under their RECORDERS names, as trajectory() returns them
        assert name in diagnostics.RECORDERS and ds[name].dims == ("step",) and ds.sizes["step"] == 100
    assert set(ds.data_vars) == {*diagnostics.TRACE, *diagnostics.SUMMARIES, "steps_to_target"}
    assert ds.relative_energy_decay.dims == ("component",) and "eigenvalue" in ds.coords
    assert fig.stat().st_size > 5_000


def test_plot_trace_draws_a_trace_of_some_recorders_and_says_what_was_not_recorded():
    import matplotlib

    matplotlib.use("Agg")
    from nqm.plots.trace import plot_trace

    ds = diagnostics.trajectory("sgdm", problem=zhang(8), lr=0.1, momentum=0.5, steps=50, record=("loss", "alpha"))
    fig = plot_trace(ds)
    np.testing.assert_array_equal(fig.axes[0].get_lines()[0].get_ydata(), ds.loss.values)
    np.testing.assert_array_equal(fig.axes[1].get_lines()[0].get_ydata(), ds.alpha.values)
    said = [t.get_text() for ax in fig.axes[2:] for t in ax.texts]
    assert said[0] == "not recorded: velocity_norm, gradient_velocity_ratio" and len(said) == 4


def test_plot_trace_draws_what_trajectory_returns():
    import matplotlib

    matplotlib.use("Agg")
    from nqm.plots.trace import plot_trace

    ds = diagnostics.trajectory("ab", problem=PROBLEM, lr=0.3, momentum=0.8, rho=0.5, delay=2, noise=0.01, steps=200,
                                stride=2, record=diagnostics.TRACE, summaries=True, target=0.05)
    fig = plot_trace(ds)
    loss, ratio = fig.axes[0].get_lines()[0], fig.axes[2].get_lines()[1]
    np.testing.assert_array_equal(loss.get_ydata(), ds.loss.values)
    np.testing.assert_array_equal(ratio.get_xdata(), ds.step.values)
    np.testing.assert_array_equal(ratio.get_ydata(), ds.gradient_velocity_ratio.values)
    assert int(ds.steps_to_target) > 0 and any(f"T = {int(ds.steps_to_target):,}" in t.get_text()
                                               for t in fig.axes[0].get_legend().get_texts())


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "steps"),
    (["--stride", "0"], "stride"),
    (["--stride", "500"], "stride"),
    (["--lr", "-1"], "lr=-1 is invalid"),
    (["--momentum", "1"], "momentum=1 is invalid"),
    (["--delay", "1.5"], "delay"),
    (["--lr", "0.1", "0.2"], "one cell"),
    (["--group", "element"], "do not apply to method 'sgdm'"),
])
def test_trace_cli_bad_input(argv, message, tmp_path, capsys):
    base = {"--lr": "0.1", "--momentum": "0.5", "--dim": "16", "--steps": "100", "--out": str(tmp_path / "t.nc")}
    base = [token for option, value in base.items() if option not in argv for token in (option, value)]
    assert main(["trace", *base, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nqm: error:") and message in err[0]
    assert not (tmp_path / "t.nc").exists()


def test_group_cosine_is_the_braking_groups_alignment():
    kw = dict(lr=0.3, momentum=0.5, rho=0.5, delay=2, steps=40, x64=True, record=("group_cosine", "gradient_velocity_cosine"))
    whole = diagnostics.trajectory("ab", problem=PROBLEM, **kw)
    np.testing.assert_allclose(whole.group_cosine.values[3:], whole.gradient_velocity_cosine.values[3:, None] *
                               np.ones(PROBLEM.dim), rtol=1e-12)
    blocks = diagnostics.trajectory("ab", problem=PROBLEM, group="blocks:4", **kw)
    per_block = blocks.group_cosine.values.reshape(40, 4, -1)
    np.testing.assert_array_equal(per_block, per_block[:, :, :1] * np.ones_like(per_block))  # one value per block
    assert np.ptp(per_block[10:, :, 0], axis=1).max() > 1e-3  # and the blocks differ
