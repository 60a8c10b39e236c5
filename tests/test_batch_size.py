"""Batch size as an axis: a batch of B runs with the noise σ/√B of the single-example scale σ, bit
for bit the cell of that noise without a batch size, in the engine, the exact mode and a search."""

from unittest import mock

import numpy as np
import pytest

import nqm
import nqm.expected
from nqm import conventions
from nqm.checkpoint import Checkpointer, StaleCheckpoint
from nqm.cli import main

GRID = dict(lr=[0.1, 0.5, 1.5], momentum=[0.0, 0.5], problem=nqm.zhang(10), max_steps=2000, target=1e-2,
            progress=False)
NOISE, SIZES = [0.03, 0.2], [1, 4, 16]
CLI = ["--lr", "0.1", "0.5", "--momentum", "0", "0.5", "--dim", "10", "--max-steps", "500", "--target", "0.01"]


@pytest.fixture(scope="module")
def batched():
    return nqm.sweep("sgdm", delay=[0, 2, "uniform:0:3"], noise=NOISE, batch_size=SIZES, seed=[0, 1], **GRID)


def test_a_batch_runs_as_the_cell_of_its_noise(batched):
    assert batched.steps.dims == ("delay", "noise", "batch_size", "seed", "momentum", "lr")
    assert batched.batch_size.values.tolist() == SIZES and batched.noise.values.tolist() == NOISE
    assert batched.attrs["batch_noise"] == conventions.BATCH_NOISE
    for sigma in NOISE:
        for size in SIZES:
            plain = nqm.sweep("sgdm", delay=[0, 2, "uniform:0:3"], noise=sigma / np.sqrt(size), seed=[0, 1], **GRID)
            for name in ("steps", "status", "loss"):
                np.testing.assert_array_equal(batched[name].sel(noise=sigma, batch_size=size).values,
                                              plain[name].isel(noise=0).values, err_msg=f"{name} σ={sigma} B={size}")
    # The batch changes the numbers: σ/√B is not σ (a broken conversion would give equal losses).
    loss = batched.loss.sel(delay=0, noise=0.2, seed=0).values
    assert not np.array_equal(loss[0], loss[2])


def test_batch_size_one_is_the_plain_sweep_and_a_plain_sweep_keeps_its_layout(batched):
    plain = nqm.sweep("sgdm", delay=[0, 2, "uniform:0:3"], noise=NOISE, seed=[0, 1], **GRID)
    assert "batch_size" not in plain.dims and "batch_size" not in plain.coords and "batch_noise" not in plain.attrs
    assert plain.steps.dims == ("delay", "noise", "seed", "momentum", "lr")
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(batched[name].sel(batch_size=1).values, plain[name].values)


def test_the_conversion():
    assert conventions.batch_noise(0.3, 1) == 0.3
    assert conventions.batch_noise(0.3, 4) == 0.15
    np.testing.assert_array_equal(conventions.batch_noise([0.2], [1, 16]), [0.2, 0.05])


def test_the_exact_mode_runs_a_batch_as_the_noise_level_of_its_batch():
    kw = dict(lr=[0.1, 0.5, 1.5], momentum=[0.0, 0.5], delay=[0, "uniform:0:2"], problem=nqm.zhang(10),
              max_steps=2000, target=1e-2)
    ex = nqm.expected.sweep("sgdm", noise=NOISE, batch_size=SIZES, **kw)
    assert ex.steps.dims == ("delay", "noise", "batch_size", "seed", "momentum", "lr")
    # The same noise levels in the same order as one noise axis: the same numbers to the bit.
    flat = nqm.expected.sweep("sgdm", noise=[s / np.sqrt(b) for s in NOISE for b in SIZES], **kw)
    for name in ("steps", "status", "loss", "steady_state_loss", "reachable"):
        stacked = ex[name].stack(level=("noise", "batch_size")).transpose("level", ...).values
        np.testing.assert_array_equal(stacked, flat[name].transpose("noise", ...).values, err_msg=name)
    # E[L_∞] = σ² V_∞: a batch of 16 has 1/16 of the single example's level where it is finite.
    level = ex.steady_state_loss.sel(delay=0, noise=0.2, seed=0)
    finite = np.isfinite(level.sel(batch_size=1).values)
    assert finite.any()
    np.testing.assert_allclose(level.sel(batch_size=16).values[finite], level.sel(batch_size=1).values[finite] / 16,
                               rtol=1e-12)


def test_a_search_at_a_batch_size_is_the_search_at_its_noise():
    kw = dict(lr=(0.05, 2.0), momentum=0.5, delay=1, problem=nqm.zhang(10), max_steps=500, max_cells=40,
              target=1e-2)
    batch = nqm.best("sgdm", noise=0.2, batch_size=4, progress=False, **kw)
    plain = nqm.best("sgdm", noise=0.1, progress=False, **kw)
    for name in ("steps", "status", "loss", "lr"):
        np.testing.assert_array_equal(batch[name].values, plain[name].values, err_msg=name)
    assert (batch.attrs["batch_size"], batch.attrs["noise"]) == (4, 0.2) and "batch_size" not in plain.attrs
    assert "batch size 4" in nqm.search.describe(batch)
    exact = nqm.best("sgdm", noise=0.2, batch_size=4, expected=True, **kw)
    np.testing.assert_array_equal(exact.steps.values, nqm.best("sgdm", noise=0.1, expected=True, **kw).steps.values)


BAD = [0, -2, 2.5, float("nan"), float("inf"), "4", True, [4, 4], []]


def test_a_near_integer_is_shown_in_full():
    with pytest.raises(nqm.NqmError, match=r"batch_size=7\.999999999999999 is invalid"):
        nqm.sweep("sgdm", lr=0.1, momentum=0.0, batch_size=[1, 7.999999999999999], progress=False)


@pytest.mark.parametrize("bad", BAD)
def test_bad_batch_sizes_are_one_line(bad):
    for call in (lambda: nqm.sweep("sgdm", lr=0.1, momentum=0.0, noise=0.1, batch_size=bad, progress=False),
                 lambda: nqm.expected.sweep("sgdm", lr=0.1, momentum=0.0, noise=0.1, batch_size=bad)):
        with pytest.raises(nqm.NqmError) as info:
            call()
        assert "batch_size" in str(info.value) and "\n" not in str(info.value)
    if np.ndim(bad) == 0:
        with pytest.raises(nqm.NqmError, match="batch_size"):
            nqm.best("sgdm", lr=(0.1, 1.0), momentum=0.0, noise=0.1, batch_size=bad, progress=False)


def test_a_batch_noise_the_precision_does_not_hold_is_refused():
    with pytest.raises(nqm.NqmError, match="noise/sqrt"):
        nqm.sweep("sgdm", lr=0.1, momentum=0.0, noise=1e-37, batch_size=10**6, progress=False)
    # In float64 it is a number: the same grid runs.
    ds = nqm.sweep("sgdm", lr=0.1, momentum=0.0, noise=1e-37, batch_size=10**6, x64=True, problem=nqm.zhang(10),
                   max_steps=10, progress=False)
    assert ds.batch_size.values.tolist() == [10**6]


@pytest.mark.parametrize("command", ["sweep", "expected", "best"])
@pytest.mark.parametrize("bad", ["0", "2.5", "nan"])
def test_bad_batch_sizes_on_the_command_line(tmp_path, capsys, command, bad):
    out = tmp_path / "r.nc"
    args = ["--lr", "0.1:1", "--momentum", "0.5", "--dim", "10"] if command == "best" else CLI
    assert main([command, *args, "--batch-size", bad, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nqm: error: ") and "batch_size" in err and err.count("\n") == 1
    assert not out.exists()


def test_the_command_line_sweeps_batch_sizes_and_summarises_them(tmp_path, capsys):
    out, fig = tmp_path / "r.nc", tmp_path / "h.png"
    assert main(["sweep", *CLI, "--noise", "0.2", "--batch-size", "1", "4", "--no-progress", "--out", str(out),
                 "--plot", str(fig)]) == 0
    ds = nqm.load(out)
    api = nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=[0.0, 0.5], noise=0.2, batch_size=[1, 4], problem=nqm.zhang(10),
                    max_steps=500, target=0.01, progress=False)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(ds[name].values, api[name].values)
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    assert "batch_size" in capsys.readouterr().out
    # A geometric range of batch sizes is the integers it stands for (geomspace gives 7.999999999999999).
    assert main(["expected", *CLI, "--noise", "0.2", "--batch-size", "geom:1:64:7", "--out", str(tmp_path / "e.nc")]) == 0
    assert nqm.load(tmp_path / "e.nc").batch_size.values.tolist() == [1, 2, 4, 8, 16, 32, 64]


def test_heatmap_titles_name_the_batch_size(batched):
    from nqm.plots.heatmap import plot_heatmaps

    fig = plot_heatmaps(batched.sel(delay=[0], noise=[0.2]))
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [t.splitlines()[0] for t in titles] == [f"D = 0, σ = 0.2, B = {b}" for b in SIZES]


GRID_RESUME = dict(lr=list(np.geomspace(0.002, 0.05, 3)), momentum=[0.0, 0.9], delay=[0, 3], noise=0.02,
                   batch_size=[1, 4], problem=nqm.zhang(300), target=1e-3, max_steps=20_000, chunk_steps=500,
                   progress=False)


def test_a_batched_sweep_interrupted_mid_cell_resumes_bit_identical(tmp_path):
    checkpoint = tmp_path / "run.partial"
    uninterrupted = nqm.sweep("sgdm", **GRID_RESUME)
    calls = []
    original = Checkpointer.between_chunks

    def stop_on_third(self, key, todo, snapshot):
        calls.append(key)
        if len(calls) == 3:
            self.stop = True  # as SIGINT does: save the running cells at this chunk boundary and stop
        return original(self, key, todo, snapshot)

    with mock.patch.object(Checkpointer, "between_chunks", stop_on_third), pytest.raises(KeyboardInterrupt):
        nqm.sweep("sgdm", checkpoint=checkpoint, checkpoint_every=1e9, **GRID_RESUME)
    assert (tmp_path / "run.partial.cells.npz").exists()  # mid-cell: running cells were kept
    resumed = nqm.sweep("sgdm", checkpoint=checkpoint, **GRID_RESUME)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(resumed[name].values, uninterrupted[name].values)
    with pytest.raises(StaleCheckpoint, match="grid differs"):
        nqm.sweep("sgdm", checkpoint=checkpoint, **{**GRID_RESUME, "batch_size": [1, 16]})
