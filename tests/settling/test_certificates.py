"""The settled test as one object (nqm.settling): chosen once, handed to the engine as a stop rule
the engine knows nothing of by name, its certificates (exact cells, the look, the subspace probe)
and the work limit that bounds every cell, with the undecided status it leaves."""

import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import nqm
from nqm import delays, engine, jobs, settling
from nqm.status import REACHED, SETTLED, TRANSIENT, UNDECIDED

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_engine_holds_no_settling_field_or_branch():
    """The kernel, loop, layout and run know a stop rule only through its interface: no word of the
    settled test (its window, peak, spans, floor or probe, transient or undecided) is in the engine."""
    words = re.compile(r"settl|window|peak|\bspans?\b|floor|probe|transient|undecided", re.I)
    found = [f"{path.name}:{n}: {line.strip()}" for path in sorted((ROOT / "nqm" / "engine").glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if words.search(line)]
    assert found == []


def test_the_settled_test_is_chosen_once_per_delay(monkeypatch):
    """A sweep decides each delay's test once (nqm.settling.choose), whatever its seeds and batches,
    and the decision's parts — the exact test's applicability — are made only there."""
    from nqm import sweeps
    from nqm.settling import exact

    chosen, asked = [], []
    original, applies = settling.choose, exact.applies
    monkeypatch.setattr(sweeps, "choose", lambda task, process: chosen.append(process.label) or original(task, process))
    monkeypatch.setattr(exact, "applies", lambda *a: asked.append(a[1].label) or applies(*a))
    nqm.sweep("ab", lr=np.geomspace(0.05, 1, 6), momentum=[0.0, 0.9], rho=[0.0, 0.5], delay=[0, 2, "uniform:0:3"],
              noise=[0.0, 0.02], seed=[0, 1], problem=nqm.zhang(20), max_steps=1500, chunk_steps=100, progress=False)
    assert chosen == ["0", "2", "uniform:0:3"]
    assert sorted(set(asked)) == sorted(chosen) and len(asked) <= 3 * len(chosen)  # ab, sgdm at ρ = 0, its floor


def test_ab_at_rho_zero_is_judged_exactly_as_sgdm_is_and_stops_at_its_first_passage():
    grid = dict(lr=np.geomspace(0.05, 2.5, 8), momentum=[0.0, 0.6, 0.95], delay=[0, 3], noise=[0.0, 0.05],
                problem=nqm.zhang(50), max_steps=3000, progress=False)
    ab = nqm.sweep("ab", rho=0.0, **grid).squeeze("rho", drop=True)
    sgdm = nqm.sweep("sgdm", **grid)
    for name in ("steps", "status"):
        np.testing.assert_array_equal(ab[name].values, sgdm[name].values)
    assert "cells at rho = 0 (sgdm): exact" in ab.attrs["settled_test"]
    task, _ = jobs.job("ab", nqm.zhang(50), dict(max_steps=3000, progress=False))
    test = settling.choose(task, delays.process(3))
    values = dict(lr=np.array([0.1, 0.1]), momentum=np.array([0.5, 0.5]), rho=np.array([0.0, 0.5]), noise=np.zeros(2))
    rule = test.rule(values)
    assert rule.going.tolist() == [False, True]  # the exact cell is not run past T


def test_a_reduction_that_the_options_break_is_not_used():
    """AB at ρ = 0 is SGDM only where its options keep α = 1: micro-stepped with a clamp below 1, every
    step is scaled (plain AB hands the base g itself at ρ = 0, clamp or not)."""
    clamped, _ = jobs.job("ab", nqm.zhang(10), dict(alpha_max=0.5, micro_steps=2))
    plain, _ = jobs.job("ab", nqm.zhang(10), {})
    assert settling.choose(plain, delays.process(2)).reduced == (("rho", 0.0),)
    assert settling.choose(clamped, delays.process(2)).reduced == ()


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_a_cell_settled_at_its_look_decays_clearly_there_and_its_window_agrees(noise):
    """The look settles a cell only where what its trace shows over the look's second half is a clear
    decay below the target (with noise: a level clearly below it); running such a cell on through
    the window it skipped gives the same verdict without noise, and with noise a level below the
    target there too (the window's growth test on a noisy log-loss also fails stationary runs at
    a few per cent of the target now and then: there the look is the better judge)."""
    import dataclasses

    from nqm.engine import Trace, record
    from nqm.settling.window import horizons, looks
    from nqm.status import slope, stays_below

    task, grids = jobs.job("ab", nqm.zhang(40), dict(max_steps=4000, progress=False))
    lr, m = (x.ravel() for x in np.meshgrid(np.geomspace(0.05, 1.5, 6), [0.0, 0.5, 0.9]))
    values = dict(lr=lr, momentum=m, rho=np.full(lr.size, 0.5), noise=np.full(lr.size, noise))
    process = delays.process(2)
    test = settling.choose(task, process)
    out = task.run(process, values, 0, stop=test.rule(values))
    early = np.flatnonzero(np.asarray(out.stop.early) == 1)
    assert early.size >= 4
    for i in early:
        first = int(out.steps[i])
        horizon = int(horizons(first)[0])
        after = int(looks(first)[0])
        config = dataclasses.replace(task.config, max_steps=horizon)
        run = task._replace(config=config).run(process, {k: v[[i]] for k, v in values.items()}, 0,
                                               [Trace({"loss": record.loss})], stop=engine.ToHorizon(horizon))
        loss = run.trace["loss"][0]
        half = loss[(2 * first + after) // 2:first + after]
        t = np.arange(half.size, dtype=float)
        if noise:
            assert half.mean() < task.config.target and slope(t, np.log(half))[0] < 0.05
        else:
            rate, error = slope(t, np.log(half))
            assert rate + 3 * error < 0 and half.max() < task.config.target
        _, stride, n0, n1 = (int(x) for x in horizons(first))
        window = stride * np.arange(n0, n1 + 1)  # as the window samples it
        if noise:
            assert loss[window - 1].mean() < task.config.target
        else:
            assert stays_below(loss[window - 1], window, False, task.config.target)


def test_the_subspace_probe_depends_on_the_cells_settings_alone_and_is_run_once_per_part(monkeypatch):
    """A floor probe (AB noiseless, SGDM unstable below its floor) runs on the unstable eigenvalues
    only, once for every cell of a sweep's part that may need it."""
    from nqm.settling import floor

    calls, subspace = [], floor.subspace
    monkeypatch.setattr(floor, "subspace", lambda task, process, cells, *a, **k: calls.append(
        np.size(cells["lr"])) or subspace(task, process, cells, *a, **k))
    grid = dict(lr=np.geomspace(0.3, 1.0, 4), momentum=[0.0, 0.3], rho=0.5, delay=4, problem=nqm.zhang(200),
                max_steps=20_000, progress=False)
    ds = nqm.sweep("ab", **grid)
    assert len(calls) == 1 and calls[0] >= 2  # one run for the part
    again = nqm.sweep("ab", **{**grid, "lr": grid["lr"][::-1]})  # the same cells in another order: the same verdicts
    np.testing.assert_array_equal(again.status.values[..., ::-1], ds.status.values)


def _work_spy(monkeypatch):
    """Every engine run of a sweep: its problem's dimension and the last step any of its cells may reach."""
    runs, simulate = [], engine.simulate
    monkeypatch.setattr(engine, "simulate", lambda problem, cells, config, observers=(), stop=engine.FirstPassage(): (
        runs.append((problem.dim, stop.horizon(config.max_steps), config.max_steps))
        or simulate(problem, cells, config, observers, stop)))
    return runs


def test_no_cell_takes_more_than_its_work_limit_however_far_its_floor(monkeypatch):
    """The README's quick-start cells whose floor the old probe reached after up to 437,875 steps
    (AB ρ = 0.5, D = 4, noiseless, budget 20,000): every run of the sweep — the cells' own and their
    floor probe's, a probe step on k of N eigencomponents counting k/N — ends within work_limit ×
    the budget, and every cell is decided."""
    runs = _work_spy(monkeypatch)
    ds = nqm.sweep("ab", lr=np.geomspace(0.01, 4, 16)[4:9], momentum=np.linspace(0, 0.98, 12)[[0, 3, 6]], rho=0.5,
                   delay=4, problem=nqm.zhang(1000), max_steps=20_000, progress=False)
    limit = 16 * 20_000
    main = [end for dim, end, _ in runs if dim == 1000]
    probes = [end * dim / 1000 for dim, end, _ in runs if dim < 1000]  # every round of every probe, added up
    assert main and probes and max(main) <= limit and max(main) + sum(probes) <= limit
    assert (ds.status == SETTLED).any() and not (ds.status == UNDECIDED).any()


def test_a_cell_whose_verdict_does_not_fit_its_work_limit_is_undecided_counted_and_drawn(monkeypatch, tmp_path, capsys):
    runs = _work_spy(monkeypatch)
    grid = dict(lr=np.geomspace(0.05, 1.0, 5), momentum=[0.0, 0.5], rho=0.5, delay=2, noise=[0.0, 0.02],
                problem=nqm.zhang(30), max_steps=3000, progress=False)
    free = nqm.sweep("ab", **grid)
    runs.clear()
    bound = nqm.sweep("ab", work_limit=1.2, **grid)
    assert runs and max(end * dim / 30 for dim, end, _ in runs) <= 1.2 * 3000  # not one step past it
    reached = np.isin(free.status.values, (SETTLED, TRANSIENT))
    undecided = bound.status.values == UNDECIDED
    assert undecided.any() and (undecided <= reached).all()  # only cells that reached the target
    same = ~undecided
    np.testing.assert_array_equal(bound.status.values[same], free.status.values[same])  # a verdict, or none
    np.testing.assert_array_equal(bound.steps.values, free.steps.values)
    assert bound.attrs["work_limit"] == 1.2 and "3: undecided" in bound.status.attrs["meaning"]
    fig = nqm.plot_heatmaps(bound)
    assert any("undecided" in t.get_text() for t in fig.legends[0].get_texts())
    assert any("undecided" in ax.get_title() for ax in fig.axes)
    assert not any("undecided" in t.get_text() for t in nqm.plot_heatmaps(free).legends[0].get_texts())
    from nqm.cli import main
    out = tmp_path / "u.nc"
    assert main(["sweep", "--method", "ab", "--rho", "0.5", "--lr", "0.05", "0.2", "1.0", "--momentum", "0", "0.5",
                 "--delay", "2", "--noise", "0", "0.02", "--dim", "30", "--max-steps", "3000", "--work-limit", "1.2",
                 "--out", str(out), "--no-progress"]) == 0
    assert re.search(r"\d+ undecided \(reached it, no verdict within 1\.2 × the budget", capsys.readouterr().out)


def test_the_work_limit_is_a_number_of_at_least_one(capsys):
    with pytest.raises(nqm.NqmError, match="work_limit must be a number between 1 and"):
        nqm.sweep("ab", lr=0.1, momentum=0.5, problem=nqm.zhang(5), work_limit=0.5, progress=False)
    from nqm.cli import main
    assert main(["sweep", "--lr", "0.1", "--momentum", "0.5", "--work-limit", "nan", "--out", "x.nc"]) == 2
    assert "work_limit must be a number between 1 and" in capsys.readouterr().err


def test_an_iid_delay_sweep_too_large_for_the_exact_test_runs_without_first_passage(tmp_path):
    """The exact test's second-moment map under uniform:0:30 on 1,000 eigenvalues needs 12.5 GiB: the
    continued test decides instead, and the result says why (the command as a process)."""
    out = tmp_path / "u.nc"
    done = subprocess.run([sys.executable, "-m", "nqm", "sweep", "--method", "sgdm", "--lr", "geom:0.01:1:6", "--momentum",
                           "lin:0:0.9:6", "--noise", "0.05", "--dim", "1000", "--max-steps", "20000", "--delay-dist",
                           "uniform:0:30", "--out", str(out), "--no-progress"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    ds = nqm.load(out)
    assert "continued" in ds.attrs["settled_test"] and "12.5 GiB" in ds.attrs["settled_test"]
    assert (ds.status == SETTLED).any()


def test_the_probe_of_the_floor_tells_the_escapes_from_the_cycle_without_running_the_decay(monkeypatch):
    """tests/settling/test_settled.py's floor cells (AB ρ = 2 near SGDM's instability): the subspace probe steps
    only the unstable eigenvalues, from w₀ on them, never the cell's decay to its floor."""
    runs = _work_spy(monkeypatch)
    ds = nqm.sweep("ab", lr=0.0298, momentum=0.98, rho=2.0, delay=4, problem=nqm.zhang(100), max_steps=20_000,
                   progress=False)
    assert ds.status.values.ravel().tolist() == [TRANSIENT]
    dims = [dim for dim, _, _ in runs]
    assert dims[0] == 100 and all(dim < 100 for dim in dims[1:]) and len(dims) == 2


def test_a_probe_not_yet_decided_is_probed_again_longer_and_the_floor_cycle_stays(monkeypatch):
    """Figure 1 at the paper's scale, AB ρ = 0.5, D = 4, noiseless (N = 10⁴, budget 500,000): at
    (m 0.190, lr 0.477) the probe's first window (2¹⁴ steps) catches a slow cycle on its rise, far
    below the target; at (m 0.98, lr 0.0147) a ringing decay from w₀ still above it. Neither is an
    escape: probed again four times longer, both stay — as float64 long runs of the whole problem
    show (2,000,000 steps: the loss cycles at 9.2e-13 and 3.4e-13 from steps 258,313 and 174,998)."""
    from nqm.settling import floor

    task, _ = jobs.job("ab", nqm.zhang(10_000), dict(max_steps=500_000, progress=False))
    process = delays.process(4)
    known = settling.choose(task, process).near_zero
    rounds, kept_run = [], floor._kept_run
    monkeypatch.setattr(floor, "_kept_run", lambda job, process, cells, seed, rule, *a: rounds.append(
        (rule.longest, np.size(cells["lr"]))) or kept_run(job, process, cells, seed, rule, *a))
    cells = dict(lr=np.array([0.47725268621986117, 0.014718882492760507]), momentum=np.array([0.18967741935483867, 0.98]),
                 rho=np.array([0.5, 0.5]), noise=np.zeros(2))
    from nqm.engine import loop

    programs = loop.advance._cache_size()
    stays, undecided = floor.subspace(task, process, cells, 0, known, 16 * 500_000)
    assert stays.tolist() == [True, True] and not undecided.any()
    assert rounds[0][0] == floor.PROBE_STEPS and len(rounds) > 1 and rounds[1][0] == 4 * floor.PROBE_STEPS
    # ... by one compiled program (both subproblems hold 8 eigenvalues): the horizon is the cells' state
    assert loop.advance._cache_size() - programs <= 1


def test_the_look_needs_a_clear_decay_a_flat_or_growing_loss_goes_on_to_the_window():
    from nqm.settling.window import LOOK_SLOTS, State, _look_stays

    def judged(samples, noisy=False, peak=None):
        look = np.full((1, LOOK_SLOTS), np.nan, np.float32)
        look[0, :samples.size] = samples
        top = np.float32(samples.max() if peak is None else peak)
        state = State(*(np.zeros(1),) * 4, None, None, look, np.array([top]), None, None, None, None)
        state = state._replace(noisy=np.array([noisy]))
        return bool(np.asarray(_look_stays(state, np.array([samples.size]), np.float32(0.01)))[0])

    t = np.arange(32)
    assert judged(0.008 * np.exp(-0.05 * t))  # a clear decay below the target
    assert not judged(0.008 * np.exp(+0.01 * t))  # growing
    assert not judged(0.008 + 0 * t)  # flat: the window must tell
    assert not judged(0.008 * np.exp(-0.05 * t), peak=0.02)  # above the target between two samples
    assert judged(np.zeros(32))  # rounded to 0: decayed past the precision
    rng = np.random.default_rng(0)
    assert judged(0.004 * rng.chisquare(4, 32) / 4, noisy=True)  # a level well below the target
    assert not judged(0.009 * rng.chisquare(4, 32) / 4, noisy=True)  # too near it to tell at the look
