"""scripts/compare_machines.py: the same sweep from two machines, cell by cell; and the committed
GPU-against-CPU comparison (figures/gpu_h200/) is what its data says."""

import json
import pathlib
import runpy

import pytest
import xarray as xr

import nqm
from nqm.status import REACHED, TRANSIENT

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "compare_machines.py"))
GPU = ROOT / "figures" / "gpu_h200"


@pytest.fixture(scope="module")
def result():
    return nqm.sweep("sgdm", lr=[0.1, 0.5, 1.5], momentum=[0.0, 0.5], delay=[0, 2], noise=[0.0, 0.1],
                     problem=nqm.zhang(20), max_steps=400, progress=False)


def test_a_result_agrees_with_itself_and_a_changed_cell_shows(result):
    rows = SCRIPT["compare"](result, result.copy(deep=True))
    assert len(rows) == 4 and all(r["same_status"] == r["cells"] == 6 for r in rows)
    assert all(r["same_t"] == r["reached_both"] and r["max_abs_dt"] == 0 for r in rows)
    assert sum(r["reached_both"] for r in rows) > 0
    other = result.copy(deep=True)
    reached = (other.status.values >= 1).nonzero()
    first = tuple(i[0] for i in reached)
    other.steps.values[first] += 7
    other.status.values[tuple(i[-1] for i in reached)] = -1
    changed = SCRIPT["compare"](result, other)
    assert sum(r["cells"] - r["same_status"] for r in changed) == 1
    assert max(r["max_abs_dt"] for r in changed) == 7


def test_a_panel_cut_out_of_a_larger_sweep_compares_with_it(result):
    panel = nqm.sweep("sgdm", lr=[0.1, 0.5, 1.5], momentum=[0.0, 0.5], delay=2, noise=0.1, problem=nqm.zhang(20),
                      max_steps=400, progress=False)
    (row,) = SCRIPT["compare"](result, panel)
    assert (row["delay"], row["noise"], row["same_status"], row["max_abs_dt"]) == (2, 0.1, 6, 0)


def test_another_computation_is_refused_in_one_line(result, tmp_path, capsys):
    other = nqm.sweep("nesterov", lr=[0.1, 0.5, 1.5], momentum=[0.0, 0.5], problem=nqm.zhang(20), max_steps=400,
                      progress=False)
    with pytest.raises(nqm.NqmError, match="not the same computation"):
        SCRIPT["compare"](result, other)
    nqm.save(result, tmp_path / "a.nc")
    nqm.save(other, tmp_path / "b.nc")
    assert SCRIPT["main"]([str(tmp_path / "a.nc"), str(tmp_path / "b.nc")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_recorded_compute_time_is_not_a_setting(result):
    timed = result.assign_attrs(compute_seconds=12.5)  # as a figure's piece records it
    assert all(r["same_status"] == r["cells"] for r in SCRIPT["compare"](result, timed))
    with pytest.raises(nqm.NqmError, match="max_steps"):
        SCRIPT["compare"](result, timed.assign_attrs(max_steps=401))


@pytest.mark.parametrize("method", ["sgdm", "ab"])
def test_a_paper_scale_panel_in_pieces_is_the_gpus_cell_for_cell(method):
    """Figure 1's panel (D = 4, σ = 0.05) as its four pieces swept on an AVX2 CPU by nqm 0.3.0 (kept in
    figures/gpu_h200/avx2_pieces/: the figure's pieces before its 0.4.0 recompute), against
    the H200's run of the whole panel: all 1,024 statuses the same, AB's settled verdicts included
    (each reached cell continued past its first passage), and every settled cell's T. A transient
    cell's T is a first passage at a loss that hovers at the target, which the machines' last bits
    may move: SGDM's are all equal too, one of AB's is not."""
    gpu = nqm.load(GPU / f"{method}_d4_settled.nc")
    pieces = [nqm.load(p) for p in sorted((GPU / "avx2_pieces").glob(f"{method}_d4_s0.05_m*.nc"))]
    rows = [row for piece in pieces for row in SCRIPT["compare"](gpu, piece)]
    reached = int(gpu.status.isin([REACHED, TRANSIENT]).sum())
    assert sum(r["cells"] for r in rows) == 1024 and sum(r["reached_both"] for r in rows) == reached > 300
    assert all(r["same_status"] == r["cells"] for r in rows)
    for piece in pieces:
        a, b = xr.align(gpu, piece, join="inner")
        assert ((a.steps == b.steps) | (a.status != REACHED)).all()
    assert all(r["same_t"] == r["reached_both"] for r in rows) or method == "ab"
    assert all("avx2" in piece.attrs["platform"] for piece in pieces)


def test_the_committed_gpu_comparison_is_its_data_and_every_verdict_and_t_agrees():
    committed = json.loads((GPU / "agreement.json").read_text())
    recomputed = []
    for pair in dict.fromkeys((row["a"], row["b"]) for row in committed):
        a, b = (nqm.load(GPU / name) for name in pair)
        recomputed += [{"a": pair[0], "b": pair[1], "method": a.attrs["method"], **row}
                       for row in SCRIPT["compare"](a, b)]
    assert recomputed == committed
    assert all(r["same_status"] == r["cells"] and r["same_t"] == r["reached_both"] for r in committed)
    for row in committed:  # two machines: the GPU's host and the CPU that ran its counterpart
        assert nqm.load(GPU / row["a"]).attrs["platform"] != nqm.load(GPU / row["b"]).attrs["platform"]


def test_the_gpu_panel_in_128_cell_blocks_is_the_one_block_panel():
    """On the H200, Figure 1's AB panel in the blocks an accelerator now gets (128 cells at N = 10⁴)
    against one block of all its cells: every status and T the same."""
    (row,) = SCRIPT["compare"](nqm.load(GPU / "ab_d4_first_passage_blocks128.nc"), nqm.load(GPU / "ab_d4_first_passage.nc"))
    assert row["same_status"] == row["cells"] == 1024 and row["same_t"] == row["reached_both"] == 480


def test_the_settled_gpu_panel_in_blocks_agrees_where_it_finished():
    """The settled panel in 128-cell blocks, stopped by its time limit (a checkpoint: status 3 is a
    cell still running): every cell it finished has the one-block run's status and T."""
    part = xr.open_dataset(GPU / "ab_d4_settled_blocks128_stopped.nc", engine="h5netcdf").squeeze()
    whole = nqm.load(GPU / "ab_d4_settled.nc").squeeze()
    done = part.status.values != 3
    assert done.sum() == 942 and (part.status.values[done] == 2).sum() == 75
    assert (part.status.values[done] == whole.status.values[done]).all()
    assert (part.steps.values[done] == whole.steps.values[done]).all()


def test_the_bench_in_accelerator_blocks_is_its_data():
    """The second H200 bench (engine blocks of ≥ 2²⁰ elements) kept more of its cell-steps useful
    than the first (one block per device)."""
    first, blocks = (json.loads((GPU / name).read_text()) for name in ("bench.json", "bench_blocks.json"))
    assert blocks["backend"] == "gpu" and blocks["early_exit_efficiency"] > 0.6 and first["early_exit_efficiency"] < 0.45
    assert blocks["ab_vs_probe_ab"] == blocks["ab_elem_steps_per_s"] / blocks["probe_ab_elem_steps_per_s"]
