"""Claims of the AB-paper figures, checked at small size."""

import importlib.util
import pathlib

import numpy as np
import pytest

import nqm
from nqm import diagnostics

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("rho", [0.0, 2.0])
def test_fig11_geometry_matches_the_engine_step_by_step(rho):
    fig11 = _script("fig_ab11_alignment")
    c, r, measured = fig11.measured(rho, 0.9, steps=200, dim=40, x64=True)
    np.testing.assert_allclose(fig11.alignment(c, r, 0.9, rho), measured, atol=1e-9)


def test_element_wise_alpha_is_one_minus_rho_sign_of_g_times_v():
    from nqm.optimizers import make
    from nqm.optimizers.base import StepContext
    from nqm.optimizers.momentum import VelocityState

    ab = make("ab", group="element")
    g = np.array([1.0, -2.0, 3.0, 0.0, 1.0])
    v = np.array([2.0, 1.0, 0.5, 1.0, 0.0])
    rho = 0.7
    _, state, info = ab.step(ab.hyper(0.1, 0.0, rho), VelocityState(v), np.zeros(5), g, StepContext(0, 0, 0, g))
    alpha = 1 - rho * np.sign(g * v)
    np.testing.assert_allclose(np.asarray(state.velocity), alpha * g, rtol=1e-6)  # m = 0: v_next = α g
    np.testing.assert_allclose(float(info["alpha"]), alpha.mean(), rtol=1e-6)


def test_energy_of_a_noiseless_sgd_step_on_one_component():
    lam, lr = 0.6, 0.3
    ds = diagnostics.trajectory("sgdm", problem=nqm.explicit([lam]), lr=lr, momentum=0.0, steps=5, record=("energy",), x64=True)
    u = (1 - lr * lam) ** np.arange(1, 6)  # u_t from u_0 = 1
    du = u - np.r_[1.0, u[:-1]]
    np.testing.assert_allclose(ds.energy.values[:, 0], 0.5 * lam * u**2 + 0.5 * du**2 / lr, rtol=1e-12)


@pytest.mark.parametrize("method, options, invariant", [("sgdm", {}, True), ("ab", {"group": "global"}, True),
                                                        ("ab", {"group": "element"}, False)])
def test_rotation_leaves_rotation_invariant_methods_unchanged(method, options, invariant):
    problem = nqm.loguniform(32)
    kw = dict(lr=np.geomspace(0.3, 1.8, 6), momentum=[0.5, 0.9], delay=1, target=1e-3, max_steps=20_000,
              x64=True, progress=False, **options)
    axis = nqm.sweep(method, problem=problem, **kw)
    rotated = nqm.sweep(method, problem=problem.with_rotation(3), **kw)
    same_status = np.array_equal(axis.status.values, rotated.status.values)
    close_steps = np.all(np.abs(axis.steps.values - rotated.steps.values) <= 1)
    if invariant:  # the same dynamics in another basis: T equal up to float64 rounding at the target
        assert same_status and close_steps
    else:
        assert not (same_status and close_steps)


def test_fig13_micro_stepping_extends_the_stable_learning_rates():
    results = _script("fig_ab13_microsteps").panels(side=8, dim=50, steps=1_000)
    largest = {name: float(ds.lr.where(ds.status == 1).max()) for name, ds in results.items()}
    s1, s16 = largest["AB ρ = 1, S = 1"], largest["AB ρ = 1, S = 16"]
    assert s16 > 2 * s1 and s16 > largest["SGDM"]


def test_fig14_element_wise_ab_is_fastest_and_basis_dependent():
    results = _script("fig_ab14_elementwise").panels(side=8, steps=16_000)  # SGDM's T* is about 12,300
    ts = {name: nqm.t_star(ds) for name, ds in results.items()}
    names = list(ts)
    assert ts[names[2]] < ts[names[1]] < ts[names[0]]  # element-wise < global < SGDM
    assert not np.array_equal(results[names[2]].steps.values, results[names[3]].steps.values)


def test_fig2_cell_ab_reaches_the_target_and_sgdm_does_not():
    results = _script("fig_ab2_noise").runs(dim=1000, steps=20_000, stride=100)
    assert int(results[0.5].steps_to_target) > 0 and int(results[0.0].steps_to_target) == 0
    assert float(results[0.5].relative_energy_decay[0]) < 1  # AB damps the largest component


def test_fig3_cell_sgdm_diverges_and_ab_converges():
    results = _script("fig_ab3_delay").runs(dim=1000, steps=5_000, stride=50)
    sgdm, ab = results[0.0], results[0.5]
    assert not (sgdm.loss.values <= 1e6 * float(sgdm.loss[0])).all()  # past the divergence bound
    assert int(ab.steps_to_target) > 0


def test_noise_question_searches_share_a_box_and_find_nothing_above_the_noise_floor():
    """Both methods are searched over the same lr box (ρ for AB only), and at σ = 1, whose
    steady-state loss is above the target, no point of either search reaches it."""
    from nqm.search import answers
    script = _script("fig_noise_question")
    jobs = script.jobs(dict(script.SMOKE, sigmas=[1.0], budget=400))
    assert jobs["sgdm_s1"]["lr"] == jobs["ab_s1"]["lr"] and "rho" in jobs["ab_s1"] and "rho" not in jobs["sgdm_s1"]
    found = answers.run(jobs, log=lambda line: None)
    assert all(f["t_star"] is None and f["robust_t_star"] is None for f in found.values())


def test_rho_searches_share_one_regime_and_braking_pays_under_delay():
    """Per (D, σ) the SGDM and fixed-ρ AB searches differ only in the method and ρ (same lr ×
    momentum box, delay, noise, budget, seeds, δ, cells, problem); the rounds over ρ bisect around
    the best ρ (its mirror image at the end of the range); and the claims read the best ρ off the
    landscape, inside the range it is best over."""
    script = _script("fig_rho_landscape")
    size = dict(script.SMOKE, delays=[4], sigmas=[0.05], first_passage=True)
    jobs = script.jobs(size)
    sgdm = jobs["sgdm_d4_s0.05"]
    fixed = [jobs[f"rho{rho:g}_d4_s0.05"] for rho in size["rhos"]]
    assert [job["rho"] for job in fixed] == size["rhos"] and "rho" not in sgdm
    for job in fixed:
        assert job["method"] == "ab" and set(job) == set(sgdm) | {"rho"}
        for name in set(sgdm) - {"method", "problem"}:
            assert job[name] == sgdm[name], name
        assert job["problem"].describe() == sgdm["problem"].describe()

    def outcome(t):
        return {"robust_t_star": t}
    found = {"rho0.5_d4_s0": outcome(10), "rho1_d4_s0": outcome(5), "rho2_d4_s0": outcome(8),
             "rho4_d4_s0.05": outcome(3)}
    assert script.next_rhos(found, 4, 0.0) == [0.707, 1.41]
    found["rho1_d4_s0"] = outcome(None)  # no robust point: not the best
    assert script.next_rhos(found, 4, 0.0) == [1.41, 4.0]  # best at the end: its mirror image, in the box

    data = script.collect(size)
    for found in data["searches"].values():  # the smoke size's searches are cell-limited: read them as found
        found["answered"] = True
    claims = script.claims(data)
    assert np.isfinite(claims["d4_s0.05_speedup"]) and claims["d4_s0.05_best_rho"] in size["rhos"] + [0.707, 1.41]
    assert claims["d4_s0.05_within_lo"] <= claims["d4_s0.05_best_rho"] <= claims["d4_s0.05_within_hi"]


def test_fig1_paper_counts_the_time_of_a_run_as_it_goes_and_of_one_interrupted(tmp_path):
    """The paper-scale figure runs for hours over several sessions: its clock gains each run's time
    while the run goes (a run killed outright loses at most one tick) and when it is interrupted."""
    import json
    import time

    script, clock = _script("fig1_paper"), str(tmp_path / "fig.seconds")

    def compute(seconds):  # CPU time: what the clock counts (a sleep is not compute)
        start = time.process_time()
        while time.process_time() - start < seconds:
            pass

    with pytest.raises(KeyboardInterrupt), script._timed(clock, "ab", every=0.05):
        deadline = time.monotonic() + 10
        while "ab" not in (json.loads(open(clock).read()) if (tmp_path / "fig.seconds").exists() else {}):
            assert time.monotonic() < deadline, "no tick while the run went"
            compute(0.01)
        compute(0.2)
        raise KeyboardInterrupt
    spent = json.loads(open(clock).read())["ab"]
    with script._timed(clock, "sgdm", every=60):
        time.sleep(0.3)  # waiting: no compute time
        compute(0.1)
    total = json.loads(open(clock).read())
    assert spent >= 0.2 and total["ab"] == spent and 0.1 <= total["sgdm"] < 0.3


def test_fig1_paper_keeps_each_finished_piece_and_sweeps_only_the_missing_ones(tmp_path, monkeypatch):
    """The paper-scale figure outlives a session piece by piece: a finished piece (a block of a
    panel's momentum rows) is kept, to be committed, read back instead of swept again, refused when
    it is not that piece (another grid, budget, panel or version of nqm, in one line that names
    what differs); and the pieces joined are the sweep of the whole grid, cell for cell."""
    from nqm.errors import NqmError

    script = _script("fig1_paper")
    grid = dict(lr=np.geomspace(0.01, 4.0, 3), momentum=np.linspace(0.0, 0.98, 5), problem=nqm.zhang(16),
                max_steps=400, progress=False)
    checkpoint, kept = str(tmp_path / "fig1_paper.nc.partial"), tmp_path / "pieces"
    plan = {key: piece for key, piece in script.pieces(5).items() if key.startswith("ab_")}
    assert len(plan) == 4 * script.ROW_BLOCKS and "ab_d4_s0.05_m0-1" in plan
    found = [script._piece(key, *piece, grid, checkpoint, kept) for key, piece in plan.items()]
    assert sorted(p.name for p in kept.iterdir()) == sorted(f"{key}.nc" for key in plan)
    assert all(ds.attrs["compute_seconds"] > 0 for ds in found)

    whole = nqm.sweep("ab", rho=script.RHO, delay=[0, script.DELAY], noise=[0.0, script.NOISE], **grid)
    joined = script._joined(found)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(joined[name].transpose(*whole[name].dims).values, whole[name].values)

    monkeypatch.setattr(nqm, "sweep", lambda *a, **k: pytest.fail("a kept piece was swept again"))
    again = script._piece("ab_d4_s0.05_m0-1", *plan["ab_d4_s0.05_m0-1"], grid, checkpoint, kept)
    np.testing.assert_array_equal(again.steps.values, found[-script.ROW_BLOCKS].steps.values)
    with pytest.raises(NqmError, match="is not this piece: its max_steps is 400, this run's 500"):
        script._piece("ab_d4_s0.05_m0-1", *plan["ab_d4_s0.05_m0-1"], {**grid, "max_steps": 500}, checkpoint, kept)
    other = kept / "ab_d0_s0.05_m0-1.nc"  # another panel's piece under this one's name
    other.replace(kept / "ab_d4_s0.05_m0-1.nc")
    with pytest.raises(NqmError, match="is not this piece: its delay is \\[0\\], this run's \\[4\\]"):
        script._piece("ab_d4_s0.05_m0-1", *plan["ab_d4_s0.05_m0-1"], grid, checkpoint, kept)


def test_fig1_paper_only_sweeps_the_pieces_it_names_and_draws_once_every_piece_is_kept(tmp_path, monkeypatch, capsys):
    """``--only`` sends some pieces to another machine (a GPU beside the CPU's run): that run sweeps and
    keeps only the pieces it names, draws nothing while others are missing and leaves the checkpoint
    of the pieces it does not do as it was; a later run draws from the kept pieces, sweeping none twice."""
    script = _script("fig1_paper")
    monkeypatch.setitem(script.SIZES, "paper", dict(dim=12, side=4, max_steps=300))
    png, kept = tmp_path / "fig1_paper.png", tmp_path / "fig1_paper_pieces"
    other = tmp_path / "fig1_paper.nc.partial.elsewhere"  # as another piece's saved state, cleared with the rest
    other.write_bytes(b"state")
    swept = []
    sweep = nqm.sweep
    monkeypatch.setattr(nqm, "sweep", lambda *a, **k: swept.append(a[0]) or sweep(*a, **k))

    assert script.main(["--out", str(png), "--no-progress", "--only", "ab_d4_*", "ab_d0_s0.05_m3-3"]) == 0
    named = {"ab_d0_s0.05_m3-3"} | {f"ab_d4_s{n}_m{r}-{r}" for n in ("0", "0.05") for r in range(4)}
    assert {p.stem for p in kept.iterdir()} == named
    assert not png.exists() and other.read_bytes() == b"state" and swept == ["ab"] * 9
    assert script.main(["--out", str(png), "--only", "ab_d5*"]) == 2
    assert "no piece has such a name" in capsys.readouterr().err

    assert script.main(["--out", str(png), "--no-progress"]) == 0
    assert png.exists() and len(list(kept.iterdir())) == 32 and swept.count("ab") == 16 and len(swept) == 32
    assert not other.exists()  # the figure is drawn: its checkpoint is cleared


def test_the_paper_scale_figure_is_its_committed_pieces(tmp_path, monkeypatch):
    """figures/fig1_paper.nc, whose claims the README and the docs quote, is its 32 committed pieces
    joined, cell for cell, with their compute times: the figure holds nothing that is not committed."""
    script = _script("fig1_paper")
    (tmp_path / script.PIECES_DIR).symlink_to(ROOT / "figures" / script.PIECES_DIR)
    monkeypatch.setattr(nqm, "sweep", lambda *a, **k: pytest.fail("a piece of the figure is not committed"))
    committed = nqm.load(ROOT / "figures" / "fig1_paper.nc")
    # Joined as the version of nqm that swept them joins them (a kept piece must be this version's).
    monkeypatch.setattr(nqm, "__version__", committed.attrs["nqm_version"])
    joined = script.compute(False, no_progress=True, checkpoint=str(tmp_path / "fig1_paper.nc.partial"))
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(joined[name].transpose(*committed[name].dims).values, committed[name].values)
    times = {k: v for k, v in joined.attrs.items() if k.startswith("compute_seconds")}
    assert len(times) == 10 and times == {k: committed.attrs[k] for k in times}


def test_the_paper_scale_figures_changed_cells_are_its_cells_with_their_evidence():
    """figures/fig1_paper.changed_cells.json lists the cells whose status the settled test of 0.4.0
    changed: each holds in the committed figure the new status it lists, under at most 0.5 % of the
    cells, and carries its float64 long run's verdict, which the new status agrees with."""
    import json

    listed = json.loads((ROOT / "figures" / "fig1_paper.changed_cells.json").read_text())
    committed = nqm.load(ROOT / "figures" / "fig1_paper.nc")
    assert listed["cells"] == committed.status.size and listed["changed"] == len(listed["cells_changed"])
    assert listed["changed"] <= 0.005 * listed["cells"]
    for cell in listed["cells_changed"]:
        at = {"method": cell["method"], "delay": cell["delay"], "noise": cell["noise"], "seed": 0}
        status = committed.status.sel(at).sel(momentum=cell["momentum"], lr=cell["lr"])
        assert int(status) == cell["new"] != cell["old"]
        assert cell["long_run_settled"] == (cell["level"] < 0.01)
        assert cell["new_verdict_right"] and (cell["new"] == 1) == cell["long_run_settled"]


def test_the_main_jobs_changed_cells_are_its_cells_with_their_evidence():
    """figures/quickstart.changed_cells.json (scripts/changed_cells.py) lists exactly the cells of the
    README's main job whose status differs between nqm 0.3.0's result and 0.4.0's, both committed
    beside it: under 0.5 % of them, each with float64 evidence that its new verdict is right."""
    import json

    listed = json.loads((ROOT / "figures" / "quickstart.changed_cells.json").read_text())
    old, new = (nqm.load(ROOT / "figures" / listed[side]) for side in ("old", "new"))
    assert (old.attrs["nqm_version"], new.attrs["nqm_version"]) == (listed["old_version"], listed["new_version"])
    found = _script("changed_cells").changed(old, new)
    keys = ("delay", "noise", "rho", "momentum", "lr", "old", "new", "steps")
    assert [{k: c[k] for k in keys} for c in found] == [{k: c[k] for k in keys} for c in listed["cells_changed"]]
    assert listed["changed"] == len(found) <= 0.005 * listed["cells"] == 0.005 * new.status.size
    for cell in listed["cells_changed"]:
        assert cell["new_verdict_right"] and (cell["new"] == 1) == cell["settled_by_definition"]
        if "exact_steady_loss" not in cell:  # a nonlinear cell: its long run decides
            assert cell["settled_by_definition"] == (cell["level"] < new.attrs["target"])
