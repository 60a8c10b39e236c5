"""Per-panel summaries of a sweep, and the spread of T* over seeds and lr perturbations."""

import numpy as np
import pytest
import xarray as xr

import nqm
from nqm import summary
from nqm.cli import main
from nqm.errors import NqmError
from nqm.status import t_star


def _synthetic():
    rng = np.random.default_rng(0)
    shape = (2, 1, 3, 4, 5)  # delay, noise, seed, momentum, lr
    status = rng.choice([-1, 0, 1], size=shape)
    steps = rng.integers(10, 1000, size=shape).astype(np.int32)
    dims = ("delay", "noise", "seed", "momentum", "lr")
    coords = {"delay": [0, 4], "noise": [0.0], "seed": [0, 1, 2], "momentum": np.linspace(0, 0.9, 4),
              "lr": np.geomspace(0.01, 1, 5)}
    return xr.Dataset({"steps": (dims, steps), "status": (dims, status.astype(np.int8))}, coords=coords)


def test_the_summary_is_what_each_panel_says():
    ds = _synthetic()
    table = summary.summarize(ds, by_seed=True)
    for d, s in [(0, 1), (4, 2)]:
        panel = ds.sel(delay=d, noise=0.0, seed=s)
        row = table.sel(delay=d, noise=0.0, seed=s)
        reached = panel.status.values == 1
        assert int(row.converged) == reached.sum()
        assert float(row.converged_fraction) == reached.mean()
        assert float(row.t_star) == t_star(panel)
        best = panel.steps.where(panel.status == 1)
        where = best.argmin(...)
        assert float(row.best_steps) == float(best.min())
        assert float(row.best_lr) == float(panel.lr[where["lr"]])
        assert float(row.best_momentum) == float(panel.momentum[where["momentum"]])


def test_the_csv_round_trips(tmp_path):
    table = summary.summarize(_synthetic(), by_seed=True)
    summary.to_csv(table, tmp_path / "t.csv")
    import pandas as pd

    back = pd.read_csv(tmp_path / "t.csv").set_index(["delay", "noise", "seed"])
    np.testing.assert_allclose(back["t_star"].values, table.t_star.transpose("delay", "noise", "seed").values.ravel())
    np.testing.assert_array_equal(back["converged"].values, table.converged.values.ravel())


def test_spread_over_seeds_is_min_median_max():
    table = summary.summarize(_synthetic(), by_seed=True)
    out = summary.spread(table)
    np.testing.assert_array_equal(out.converged_max, table.converged.max("seed"))
    np.testing.assert_array_equal(out.converged_min, table.converged.min("seed"))
    with pytest.raises(NqmError, match="nothing to spread over"):
        summary.spread(table.isel(seed=0, drop=True))


def test_a_well_conditioned_panel_has_no_spread():
    out = summary.robustness("sgdm", lr=np.geomspace(0.05, 0.5, 4), momentum=[0.0, 0.5], seed=[0], x64=True,
                             problem=nqm.zhang(32), max_steps=5000, progress=False)
    assert out.sizes["perturbation"] == 5
    np.testing.assert_array_equal(out.t_star_min, out.t_star_max)
    np.testing.assert_array_equal(out.converged_min, out.converged_max)


def test_a_chaotic_element_wise_ab_cell_moves_under_a_1e_15_perturbation():
    # Fig. 14's problem (32 components log-uniform on [1e-4, 1], target 1e-5, D = 1, no noise).
    # First passages (on settled runs the cell is transient: its float64 run bursts back above the
    # target from step ~134,700, after cycling near its floor; tests/settling/test_settled.py has such cells).
    out = summary.robustness("ab", lr=[np.geomspace(0.05, 2.0, 16)[13]], momentum=[np.linspace(0, 0.95, 8)[2]],
                             rho=0.5, group="element", perturbations=(0.0, 1e-15), seed=[0], delay=1, x64=True,
                             problem=nqm.loguniform(32), target=1e-5, max_steps=30_000, progress=False,
                             first_passage=True)
    assert out.converged_min.item() == 1
    assert out.t_star_max.item() > out.t_star_min.item()


def test_summary_cli(tmp_path, capsys):
    from nqm.cli import summary as summary_command

    path = tmp_path / "r.nc"
    nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.3], momentum=[0.0, 0.5], seed=[0, 1], noise=0.01, problem=nqm.zhang(16),
                       max_steps=2000, progress=False), path)
    assert main([summary_command.NAME, str(path), "--csv", str(tmp_path / "s.csv"), "--spread"]) == 0
    out = capsys.readouterr().out
    assert "t_star" in out and "t_star_median" in out and (tmp_path / "s.csv").exists()
    # nqm.cli.summary prints nqm.summary's table first, the spread over seeds after it, and the CSV it wrote last
    table = summary.summarize(nqm.load(path))
    printed = summary.format_table(table)
    assert out.startswith(printed + "\n") and out.index("t_star_median") > len(printed)
    assert out.strip().splitlines()[-1] == f"wrote {tmp_path / 's.csv'}"


def test_one_t_star_in_the_closing_lines_the_summary_and_the_figure(tmp_path, capsys):
    """A panel's T* is one number wherever it is printed: the sweep's closing lines, `nqm summary`
    and the heatmap's title (several seeds combined the same way everywhere)."""
    import matplotlib

    matplotlib.use("Agg")
    from nqm.plots.heatmap import plot_heatmaps
    from nqm.status import format_t_star

    path = tmp_path / "r.nc"
    assert main(["sweep", "--lr", "geom:0.05:1.5:6", "--momentum", "0", "0.6", "--delay", "0", "3", "--noise", "0.02",
                 "--seed", "0", "1", "--dim", "16", "--max-steps", "3000", "--no-progress", "--out", str(path)]) == 0
    closing = capsys.readouterr().out
    assert main(["summary", str(path)]) == 0
    printed = capsys.readouterr().out
    ds = nqm.load(path)
    table = summary.summarize(ds)
    titles = [ax.get_title() for ax in plot_heatmaps(ds).axes if ax.get_title()]
    for delay, title in zip(ds.delay.values, titles):
        t = float(table.t_star.sel(delay=delay).squeeze())
        assert format_t_star(t) in title
        row = [line for line in printed.splitlines() if line.split()[:1] == [str(delay)]]
        assert row and f"{t:.4g}" in row[0] and row[0] in closing  # the same row in both tables
        assert t >= float(table.best_steps.sel(delay=delay).squeeze())  # a percentile is not below the minimum
    assert "1st percentile of T over the panel's converged cells" in printed


@pytest.mark.parametrize("percentile", [-1, 101, float("nan"), "1"])
def test_t_star_refuses_a_percentile_outside_0_100(percentile):
    ds = xr.Dataset({"steps": ("lr", [5, 7]), "status": ("lr", [1, 1])})
    with pytest.raises(NqmError, match=r"percentile must be a number in \[0, 100\]"):
        nqm.t_star(ds, percentile)


def test_the_legend_counts_what_its_columns_count():
    """converged counts settled cells (status 1) and says so; the transient and undecided cells that
    also reached the target have columns of their own, so the rows add up to the closing lines."""
    import nqm.summary

    ds = nqm.sweep("ab", lr=np.geomspace(0.05, 1.0, 5), momentum=[0.0, 0.5], rho=1.0, delay=2, noise=[0.0, 0.2],
                   problem=nqm.zhang(30), max_steps=3000, progress=False)
    table = nqm.summary.summarize(ds)
    status = ds.status.values
    assert int(table.converged.sum()) == int((status == 1).sum())
    assert int(table.transient.sum()) == int((status == 2).sum()) > 0
    assert int(table.undecided.sum()) == int((status == 3).sum())
    text = nqm.summary.format_table(table)
    assert "converged: cells that settled below the target" in text and "transient:" in text
