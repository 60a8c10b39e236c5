"""Converged means it stays converged: status 1 is *settled* (the run reached the target and its
long-run loss level is below it), 2 *transient* (it reached the target and does not stay), decided
asymptotically — never by the budget — and ``first_passage=True`` keeps the first passage alone."""

import itertools

import jax
import matplotlib.pyplot as plt

import numpy as np
import pytest
import reference

import nqm
from nqm.cli import main
from nqm.expected import steady_state_loss
from nqm.status import DIVERGED, SETTLED, TRANSIENT, stays_below
from nqm.thresholds import derived, polynomials

# The noiseless SGDM baseline of the methods-against-delay figure at D = 4 (N = 1,000): it touches
# the target at step 4,087 and diverges near step 24,500 — 1.24 × the derived stability limit.
BASELINE = dict(momentum=0.99732, delay=4, problem=nqm.zhang(1_000), progress=False)
UNSTABLE_LR = 8.35e-4


def test_a_run_that_touches_the_target_above_the_stability_limit_is_transient_whatever_the_budget():
    x_star = float(derived.threshold("sgdm", delay=4, momentum=BASELINE["momentum"]))
    stable_lr = 0.98 * x_star / BASELINE["problem"].eigenvalues.max()
    assert UNSTABLE_LR * BASELINE["problem"].eigenvalues.max() / x_star == pytest.approx(1.24, abs=0.01)
    ds = nqm.sweep("sgdm", lr=[UNSTABLE_LR, stable_lr], max_steps=20_000, **BASELINE)
    assert ds.status.values.ravel().tolist() == [TRANSIENT, SETTLED]
    first = int(ds.steps.values.ravel()[0])
    assert first == 4087
    short = nqm.sweep("sgdm", lr=UNSTABLE_LR, max_steps=first + 10, **BASELINE)  # long before it diverges
    assert short.status.values.ravel().tolist() == [TRANSIENT] and int(short.steps.values.ravel()[0]) == first
    literal = nqm.sweep("sgdm", lr=[UNSTABLE_LR, stable_lr], max_steps=20_000, first_passage=True, **BASELINE)
    assert literal.status.values.ravel().tolist() == [SETTLED, SETTLED]  # the AB paper's definition
    np.testing.assert_array_equal(literal.steps.values, ds.steps.values)  # T is the first passage either way
    assert "first passage" in literal.status.attrs["meaning"] and "transient" in ds.status.attrs["meaning"]


@pytest.mark.parametrize("delay", [2, 8])
def test_sgd_on_one_eigenvalue_settles_just_below_its_limit_and_not_just_above(delay):
    x_star = float(polynomials.sgd_threshold_closed_form(delay))  # 2 sin(π / (2(2D + 1)))
    ds = nqm.sweep("sgdm", lr=[0.99 * x_star, 1.01 * x_star], momentum=0, delay=delay, problem=nqm.explicit([1.0]),
                   max_steps=20_000, progress=False)
    assert ds.status.values.ravel().tolist() == [SETTLED, TRANSIENT]  # both reach 0.01 first


@pytest.mark.parametrize("level, want", [(1.2, TRANSIENT), (0.5, SETTLED)])
def test_with_noise_a_dip_below_the_target_settles_only_if_the_steady_level_is_below_it(level, want):
    """σ is set so that the exact stationary mean E[L_∞] is ``level`` × the target: above it, the
    runs that dip below are transient; below it, they settle."""
    problem, lr, m = nqm.zhang(4), 0.1, 0.5
    sigma = float(np.sqrt(level * 0.01 / steady_state_loss(problem, "sgdm", 2, lr, m, 1.0)))
    ds = nqm.sweep("sgdm", lr=lr, momentum=m, delay=2, noise=sigma, seed=[0, 1, 2], problem=problem, max_steps=5000,
                   progress=False)
    assert (ds.status.values == want).all()
    literal = nqm.sweep("sgdm", lr=lr, momentum=m, delay=2, noise=sigma, seed=[0, 1, 2], problem=problem,
                        max_steps=5000, progress=False, first_passage=True)
    assert (literal.status.values == SETTLED).all()


def test_noiseless_runs_under_iid_delays_settle_below_the_almost_sure_threshold():
    x_star = float(derived.threshold("sgdm", delay="uniform:0:4", momentum=0.5, criterion="almost-sure"))
    ds = nqm.sweep("sgdm", lr=[0.97 * x_star, 1.03 * x_star], momentum=0.5, delay="uniform:0:4",
                   problem=nqm.explicit([1.0]), max_steps=20_000, progress=False)
    status = ds.status.values.ravel()
    assert status[0] == SETTLED and status[1] in (TRANSIENT, DIVERGED)


def test_the_exact_mode_tells_settled_from_transient_as_the_simulation_does():
    """Without noise the expected loss is the loss: same statuses, transient cells included."""
    grid = dict(lr=np.geomspace(0.05, 2, 10), momentum=[0.0, 0.5, 0.9], delay=[0, 2], problem=nqm.zhang(20),
                max_steps=3000)
    exact = nqm.expected.sweep("sgdm", **grid)
    simulated = nqm.sweep("sgdm", x64=True, progress=False, **grid)
    assert (simulated.status == TRANSIENT).any()
    np.testing.assert_array_equal(exact.status.values, simulated.status.values)


# Answers of the methods-against-delay figure (N = 1,000, noiseless), found under the first passage.
CONTINUED = [
    # AB at D = 16: a dip below the target in a growing oscillation (the loss reaches 1e17 later).
    ("ab", dict(lr=1.857e-4, momentum=0.999, rho=0.2586, delay=16), TRANSIENT),
    # DC-ASGD at D = 4: after touching the target its loss rises back to ~0.1 and stays there.
    ("dc-asgd", dict(lr=0.3123, momentum=0.72616, lambda_dc=1.7783, delay=4), TRANSIENT),
    # AB at D = 4: it reaches the target and decays on.
    ("ab", dict(lr=0.0076155, momentum=0.99134, rho=0.77339, delay=4), SETTLED),
]


@pytest.mark.parametrize("method, point, want", CONTINUED, ids=["ab-d16-dip", "dc-asgd-d4-returns", "ab-d4-settles"])
def test_methods_without_an_exact_test_are_judged_by_continuing_the_run(method, point, want):
    ds = nqm.sweep(method, problem=nqm.zhang(1_000), max_steps=100_000, progress=False, **point)
    assert ds.status.values.ravel().tolist() == [want]
    assert ds.attrs["settled_test"].startswith(f"{point['delay']}: continued")
    literal = nqm.sweep(method, problem=nqm.zhang(1_000), max_steps=100_000, progress=False, first_passage=True,
                        **point)
    assert literal.status.values.ravel().tolist() == [SETTLED]  # every one of them "converged" before
    np.testing.assert_array_equal(literal.steps.values, ds.steps.values)


def test_worker_pools_are_judged_by_continuing_the_run_even_for_linear_methods():
    linear = nqm.sweep("sgdm", lr=0.1, momentum=0.5, delay=[2, "workers:3"], problem=nqm.zhang(10), max_steps=2000,
                       progress=False)
    assert linear.attrs["settled_test"].startswith("2: exact")
    assert "workers:3: continued" in linear.attrs["settled_test"]
    assert (linear.status.values == SETTLED).all()


def test_every_settling_window_and_look_fits_its_slots_and_device_and_host_agree_on_it():
    from nqm.settling.window import LOOK_SLOTS, WINDOW_SLOTS, horizons, looks
    from nqm.status import CONTINUE
    from nqm.validate import MAX_STEPS

    first = np.concatenate([np.arange(1, 2**21), MAX_STEPS - np.arange(2**12)])
    horizon, stride, n0, n1 = horizons(first)
    assert (horizon >= np.minimum(2 * first + CONTINUE, MAX_STEPS)).all()
    assert (stride * n0 > (first + horizon) / 2).all() and (stride * (n0 - 1) <= (first + horizon) / 2).all()
    assert (stride * n1 <= horizon).all() and (stride * (n1 + 1) > horizon).all()
    assert (n1 - n0 + 1).max() == WINDOW_SLOTS  # the slots are as many as the largest window, no more
    for span in (0, 1000, 64_000):  # the look: past T by a quarter of T (or the span) and 250, before the window
        after, look_stride, m0, m1 = looks(first[:2**20], span)
        at = first[:2**20] + after
        assert (after == np.maximum(first[:2**20] // 4, span) + 250).all() and (at < horizons(first[:2**20], span)[0]).all()
        assert (look_stride * m0 > (first[:2**20] + at) / 2).all() and (look_stride * m1 <= at).all()
        assert 26 <= (m1 - m0 + 1).min() and (m1 - m0 + 1).max() <= LOOK_SLOTS
    some = first[::997]
    for schedule in (horizons, looks):
        device = [np.asarray(x) for x in schedule(jax.numpy.asarray(some, jax.numpy.int32))]
        for host, dev in zip(schedule(some), device):
            np.testing.assert_array_equal(host, dev)


@pytest.mark.parametrize("noise", [0.0, 0.05])
@pytest.mark.parametrize("method, delay, extra", [("ab", 4, {"rho": 0.5}), ("sgdm", "workers:3", {})])
def test_a_settling_cell_samples_the_losses_a_separate_run_to_its_horizon_would_trace(method, delay, extra, noise):
    """The engine continues a reached cell in the run that found T: its look (and, past it, its
    window) holds, bit for bit, the losses a run of that cell to that step traces, its peaks the
    largest loss at any step of their second halves; its T, loss and the other cells are the
    first-passage run's."""
    import dataclasses

    from nqm import delays, engine, jobs, settling
    from nqm.engine import record
    from nqm.settling.window import horizons, looks

    task, grids = jobs.job(method, nqm.zhang(30), dict(max_steps=1500, progress=False, **extra))
    lr, m = (x.ravel() for x in np.meshgrid(np.geomspace(0.1, 2, 6), [0.0, 0.5, 0.9]))
    values = dict(lr=lr, momentum=m, noise=np.full(lr.size, noise), **{k: np.full(lr.size, v) for k, v in grids.items()})
    process = delays.process(delay)
    test = settling.choose(task, process)
    settled, literal = task.run(process, values, 3, stop=test.rule(values)), task.run(process, values, 3)
    np.testing.assert_array_equal(settled.steps, literal.steps)
    np.testing.assert_array_equal(settled.loss, literal.loss)
    reached = literal.status == SETTLED
    assert reached.sum() >= 5 and (settled.status[~reached] == literal.status[~reached]).all()
    assert np.isin(settled.status[reached], (SETTLED, TRANSIENT)).all()
    state = settled.stop
    early = state.early == 1
    for i in np.flatnonzero(settled.status == SETTLED):
        after, look_stride, m0, m1 = (int(x) for x in looks(settled.steps[i]))
        horizon, stride, n0, n1 = (int(x) for x in horizons(settled.steps[i]))
        end = settled.steps[i] + after if early[i] else horizon
        config = dataclasses.replace(task.config, max_steps=end)
        rerun = task._replace(config=config).run(process, {k: v[[i]] for k, v in values.items()}, 3,
                                                 [engine.Trace({"loss": record.loss})], stop=engine.ToHorizon(end))
        losses = rerun.trace["loss"][0]
        np.testing.assert_array_equal(state.look[i, :m1 - m0 + 1], losses[look_stride * m0 - 1:look_stride * m1:look_stride])
        look_at = settled.steps[i] + after
        assert state.look_peak[i] == losses[(settled.steps[i] + look_at) // 2:look_at].max()
        if early[i]:  # settled at its look: no window sampled
            assert np.isnan(state.window[i]).all() and state.peak[i] == 0
            continue
        np.testing.assert_array_equal(state.window[i, :n1 - n0 + 1], losses[stride * n0 - 1:stride * n1:stride])
        assert np.isnan(state.window[i, n1 - n0 + 1:]).all()
        # the peak: the largest loss at any step of the window's span, the second half of (T, H]
        every = losses[(settled.steps[i] + horizon) // 2:horizon]
        assert state.peak[i] == every.max() >= np.nanmax(state.window[i])
    assert early.any() and (reached & ~early).any() or method == "sgdm"


def test_the_window_test_reads_growth_and_level():
    t = np.arange(1000, 3000, 8.0)
    rng = np.random.default_rng(0)
    assert stays_below(0.005 * np.exp(-1e-3 * t), t, False, 0.01)  # decaying below
    assert stays_below(0.005 * (1.5 + np.cos(0.3 * t)) / 2.5, t, False, 0.01)  # ringing below, not growing
    assert not stays_below(1e-6 * np.exp(2e-3 * t), t, False, 0.01)  # growing, still below
    assert not stays_below(0.2 + 0.0 * t, t, False, 0.01)  # back above
    assert not stays_below(np.where(t > 2500, np.inf, 1e-3), t, False, 0.01)  # diverged
    noisy = lambda level: level * rng.chisquare(4, t.size) / 4
    assert stays_below(noisy(0.005), t, True, 0.01)  # a stationary mean at half the target
    assert not stays_below(noisy(0.012), t, True, 0.01)  # a mean above it, with dips below


def test_heatmaps_and_the_closing_lines_show_transient_cells_apart(tmp_path, capsys):
    out = tmp_path / "r.nc"
    assert main(["sweep", "--lr", "geom:0.3:3:4", "--momentum", "0", "0.9", "--delay", "2", "--dim", "20",
                 "--max-steps", "3000", "--no-progress", "--out", str(out)]) == 0
    assert "1 settled below the target, 1 transient (reached it, did not stay)" in capsys.readouterr().out
    ds = nqm.load(out)
    fig = nqm.plot_heatmaps(ds)
    hatched = [p for p in fig.axes[0].patches if p.get_hatch()]
    assert len(hatched) == int((ds.status == TRANSIENT).sum()) == 1
    assert "1 transient cell" in fig.axes[0].get_title()
    assert any("transient" in t.get_text() for t in fig.legends[0].get_texts())
    # a figure script's panels (draw_panels) say it too
    from nqm.plots.heatmap import draw_panels
    figure, axes = plt.subplots(1, 2)
    draw_panels(figure, axes, {"a": ds.squeeze(drop=True), "b": ds.squeeze(drop=True)})
    assert any("transient" in t.get_text() for t in figure.legends[0].get_texts())
    literal = nqm.sweep("sgdm", lr=ds.lr.values, momentum=ds.momentum.values, delay=2, problem=nqm.zhang(20),
                        max_steps=3000, progress=False, first_passage=True)
    fig = nqm.plot_heatmaps(literal)
    assert not [p for p in fig.axes[0].patches if p.get_hatch()] and "transient" not in fig.axes[0].get_title()


# Ringing settled noiseless SGDM cells at high momentum (N = 50, D = 2): their first dip below the
# target comes long before their last exit.
RINGING = dict(lr=[0.02, 0.05, 0.01], momentum=[0.95, 0.9, 0.98], delay=2, problem=nqm.zhang(50), max_steps=20_000)


def test_steps_stay_is_the_last_exit_of_a_long_float64_run_plus_one():
    from nqm import diagnostics, sweeps

    ds = sweeps.evaluate("sgdm", progress=False, stay=True, **RINGING)
    assert (ds.status.values == SETTLED).all()
    for j, (lr, m) in enumerate(zip(RINGING["lr"], RINGING["momentum"])):
        long = diagnostics.trajectory("sgdm", problem=RINGING["problem"], lr=lr, momentum=m, delay=2, steps=100_000,
                                      record=("loss",), x64=True).loss.values.ravel()  # L(w_1), L(w_2), …
        last_exit = np.flatnonzero(long >= 0.01)[-1] + 1
        assert ds.steps_stay.values[0, j] == last_exit + 1 > ds.steps.values[0, j] + 50  # it dipped long before
    noisy = sweeps.evaluate("sgdm", progress=False, stay=True, **dict(RINGING, noise=0.01))
    assert np.isnan(noisy.steps_stay.values).all()  # not defined for single noisy runs: said, not guessed


def test_steps_stay_proven_by_the_closed_form_is_what_doubled_horizons_find(monkeypatch):
    """nqm.settling.stay continues a linear method under a constant delay to the step its closed form
    proves the loss below the target from, and any other run over doubled horizons: for the ringing
    cells both find the same last exit."""
    from nqm import sweeps
    from nqm.settling import stay

    ringing = dict(RINGING, lr=RINGING["lr"][:2], momentum=RINGING["momentum"][:2])
    proven = sweeps.evaluate("sgdm", progress=False, stay=True, **ringing)
    real, proofs = stay._proven, []
    monkeypatch.setattr(stay, "_proven", lambda test, cells: proofs.append(real(test, cells)) or 0 * proofs[-1])
    doubled = sweeps.evaluate("sgdm", progress=False, stay=True, **ringing)
    assert len(proofs) == 1 and (proofs[0] > 0).all()  # the closed form proved each cell, and was not used here
    assert np.isfinite(proven.steps_stay.values).all()
    np.testing.assert_array_equal(doubled.steps_stay.values, proven.steps_stay.values)


def test_a_cells_steps_stay_does_not_depend_on_the_cells_beside_it():
    """Adam under delay can burst back above the target long after it first settled (its second
    moment decays with the gradient): how far a run is continued decides whether a burst is seen, so
    that horizon must come from the cell's own T, never from the slowest cell of its grid."""
    from nqm import sweeps

    problem = nqm.zhang(20)
    lr, b1 = np.geomspace(1e-3, 1, 8)[:5], np.array([0.0, 0.5, 0.9, 0.95])
    grid = sweeps.sweep("adam", lr=lr, b1=b1, b2=[0.99], delay=4, problem=problem, max_steps=2000, progress=False,
                        stay=True)
    stay = grid.steps_stay.transpose("b1", "lr", ...).values.reshape(b1.size, lr.size)
    assert np.isfinite(stay).sum() >= 5 and (stay > grid.steps.transpose("b1", "lr", ...).values.reshape(stay.shape)).any()
    for i, j in itertools.product(range(b1.size), range(lr.size)):
        alone = sweeps.evaluate("adam", lr=[lr[j]], b1=[b1[i]], b2=[0.99], delay=4, problem=problem, max_steps=2000,
                                progress=False, stay=True)
        np.testing.assert_array_equal(alone.steps_stay.values.ravel(), stay[i, j])


def test_the_exact_modes_steps_stay_of_more_points_than_its_slots_is_each_points_own():
    """A traced curve starts at the evaluator's step 0: with more points than it steps at once
    (20,000 // N slots untraced: 10 at N = 2,000) every point still gets its own curve's last exit,
    not a curve left by the point that held its slot before."""
    import nqm.expected

    problem = nqm.zhang(2000)
    lr, momentum = np.geomspace(0.1, 0.25, 6).repeat(2), np.tile([0.5, 0.7], 6)
    many = nqm.expected.evaluate("sgdm", lr=lr, momentum=momentum, delay=1, problem=problem, max_steps=20_000,
                                 stay=True)
    assert (many.status.values == SETTLED).all() and len(set(many.steps_stay.values)) == lr.size
    for i in range(lr.size):
        alone = nqm.expected.evaluate("sgdm", lr=[lr[i]], momentum=[momentum[i]], delay=1, problem=problem,
                                      max_steps=20_000, stay=True)
        assert alone.steps_stay.values[0] == many.steps_stay.values[i]


def test_a_point_proven_late_steps_only_its_own_octave_and_every_point_keeps_its_steps_stay():
    """The exact mode steps each curve to an octave of the step its closed form proves (shifted
    momentum, D = 4: from ~100 to ~28,000 here), not every curve to the latest: the same
    ``steps_stay`` as each point alone, and no group stepped past twice its points' reach."""
    import nqm.expected
    from nqm.expected.api import _octaves, stays_from

    problem = nqm.zhang(20)
    lr, momentum = (a.ravel() for a in np.meshgrid(np.linspace(0.1, 0.6, 12), np.linspace(0.5, 0.9, 12)))
    grid = nqm.expected.evaluate("shifted", lr=lr, momentum=momentum, delay=4, problem=problem, max_steps=5000)
    keep = np.flatnonzero(grid.status.values == SETTLED)
    reach = stays_from(problem, "shifted", 4, lr[keep], momentum[keep], target=0.01)
    assert reach.max() > 100 * reach.min() > 0
    groups = list(_octaves(np.arange(reach.size), reach))
    assert len(groups) >= 3 and sorted(np.concatenate([g for _, g in groups])) == list(range(reach.size))
    assert all((budget >= reach[g]).all() and (budget < 2 * reach[g]).all() for budget, g in groups)
    together = nqm.expected.evaluate("shifted", lr=lr[keep], momentum=momentum[keep], delay=4, problem=problem,
                                     max_steps=5000, stay=True).steps_stay.values
    for i in np.argsort(reach)[[0, reach.size // 2, -1]]:
        alone = nqm.expected.evaluate("shifted", lr=[lr[keep][i]], momentum=[momentum[keep][i]], delay=4,
                                      problem=problem, max_steps=5000, stay=True)
        assert alone.steps_stay.values[0] == together[i]


@pytest.mark.parametrize("method", ["sgdm", "nesterov", "shifted"])
def test_the_closed_form_proves_the_step_from_which_the_loss_stays_below_the_target(method):
    """``stays_from``: from S on, the loss of an independent float64 loop is below the target at
    every step (the closed form's envelope never increases), and S is close to the last exit."""
    from nqm.expected.api import stays_from

    problem, rng, checked = nqm.zhang(30), np.random.default_rng(1), 0
    for delay in (0, 2, 4):
        lr, momentum = np.exp(rng.uniform(np.log(0.01), np.log(1.5), 8)), 1 - np.exp(rng.uniform(np.log(3e-3), 0, 8))
        proven = stays_from(problem, method, delay, lr, momentum, target=0.01)
        for i in np.flatnonzero(proven):
            loss = reference.run(problem.eigenvalues, lr[i], momentum[i], delay, method=method, trace=True,
                                 max_steps=max(4 * int(proven[i]), 3000))  # L(w_1), L(w_2), …
            stay = np.flatnonzero(loss >= 0.01)[-1] + 2
            assert stay <= proven[i] <= 1.2 * stay + 10, (delay, lr[i], momentum[i])
            checked += 1
    assert checked >= 8
    assert stays_from(problem, method, 4, [1.5], [0.99], target=0.01)[0] == 0  # unstable: nothing proven


def test_the_exact_mode_gives_steps_stay_of_the_expected_loss_with_and_without_noise():
    """Without noise the expected loss is the loss: the engine's steps_stay in float64. With noise
    E[L_t] is still deterministic: its last exit on a long curve, plus one — where a single run has
    none. A grid gives each cell what a list of points gives."""
    import nqm.expected
    from nqm import sweeps

    exact = nqm.expected.evaluate("sgdm", stay=True, **RINGING)
    engine = sweeps.evaluate("sgdm", stay=True, x64=True, progress=False, **RINGING)
    np.testing.assert_array_equal(exact.steps_stay.values, engine.steps_stay.values[0])
    noisy = nqm.expected.evaluate("sgdm", stay=True, noise=0.01, **RINGING)
    assert (noisy.status.values == SETTLED).all()
    for j, (lr, m) in enumerate(zip(RINGING["lr"], RINGING["momentum"])):
        curve = nqm.expected.expected_loss(RINGING["problem"], lr=lr, momentum=m, delay=2, noise=0.01, steps=100_000)
        assert noisy.steps_stay.values[j] == np.flatnonzero(curve >= 0.01)[-1] + 2 > noisy.steps.values[j]
    grid = nqm.expected.sweep("sgdm", lr=[0.05, 1.0], momentum=[0.9], noise=[0.0, 0.01, 0.05], delay=2,
                              problem=RINGING["problem"], max_steps=20_000, stay=True)
    for noise in (0.0, 0.01, 0.05):
        cells = grid.sel(noise=noise, delay=2, seed=0, momentum=0.9)
        points = nqm.expected.evaluate("sgdm", lr=[0.05, 1.0], momentum=0.9, noise=noise, delay=2,
                                       problem=RINGING["problem"], max_steps=20_000, stay=True)
        np.testing.assert_array_equal(cells.steps_stay.values, points.steps_stay.values)
        assert (np.isnan(cells.steps_stay.values) == (cells.status.values != SETTLED)).all()
    assert (grid.status.values != SETTLED).any()  # lr = 1 diverges, σ = 0.05 does not settle at lr = 0.05
    with pytest.raises(nqm.NqmError, match="stay must be True or False"):
        nqm.expected.evaluate("sgdm", stay="yes", **RINGING)


def test_a_search_can_rank_by_the_step_after_which_the_loss_stays():
    box = dict(lr=(0.005, 0.1), momentum=(0.5, 0.98), delay=2, problem=nqm.zhang(50), max_steps=20_000,
               progress=False)
    first, stay = nqm.best("sgdm", **box), nqm.best("sgdm", objective="stay", **box)
    from nqm import expected, sweeps
    from nqm.search import answer

    found = answer(stay)
    again = sweeps.evaluate("sgdm", lr=found["point"]["lr"], momentum=found["point"]["momentum"], stay=True,
                            **{k: v for k, v in box.items() if k not in ("lr", "momentum")})
    assert found["t_star"] == again.steps_stay.values.item() >= answer(first)["t_star"]
    assert stay.attrs["objective"] == "stay"
    with pytest.raises(nqm.NqmError, match="noiseless runs"):
        nqm.best("sgdm", objective="stay", noise=0.01, **box)
    # The exact mode ranks by the step after which the expected loss stays, with noise too.
    exact = nqm.best("sgdm", objective="stay", noise=0.01, expected=True,
                     **{k: v for k, v in box.items() if k != "progress"})
    found = answer(exact)
    again = expected.evaluate("sgdm", lr=found["point"]["lr"], momentum=found["point"]["momentum"], stay=True,
                                  noise=0.01, delay=2, problem=box["problem"], max_steps=box["max_steps"])
    assert found["t_star"] == again.steps_stay.values.item() >= again.steps.values.item()


def test_noisy_cells_alone_under_iid_delays_are_settled_exactly():
    # Every reached cell noisy: no noiseless cell needs the almost-sure test (none to look at, not an error).
    ds = nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=0.0, delay="uniform:0:3", noise=0.05, problem=nqm.zhang(10),
                   max_steps=2000, target=1e-2, progress=False)
    level = steady_state_loss(nqm.zhang(10), "sgdm", "uniform:0:3", ds.lr.values, np.zeros(2), np.full(2, 0.05))
    assert np.isin(ds.status.values, (SETTLED, TRANSIENT)).all()
    np.testing.assert_array_equal(ds.status.values.ravel() == SETTLED, level < 1e-2)


def test_a_sweep_interrupted_while_cells_settle_resumes_bit_identical(tmp_path, monkeypatch):
    """Settling cells are part of a checkpoint's running cells: their window goes on where it was."""
    from nqm import checkpoint
    from nqm.status import CONTINUING

    grid = dict(lr=np.geomspace(0.1, 1, 4), momentum=[0.0, 0.5], rho=1.0, delay=2, noise=[0.0, 0.2],
                problem=nqm.zhang(30), max_steps=3000, chunk_steps=100, progress=False)
    whole = nqm.sweep("ab", **grid)
    original, settling_saved = checkpoint.Checkpointer.between_chunks, []

    def save_then_stop_once_cells_settle(self, key, todo, snapshot):
        taken = []
        original(self, key, todo, lambda: taken.append(snapshot()) or taken[-1])
        if taken and (np.asarray(taken[-1].cells.status) == CONTINUING).any():
            settling_saved.append(taken[-1].t)
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.Checkpointer, "between_chunks", save_then_stop_once_cells_settle)
    path = tmp_path / "ab.partial"
    with pytest.raises(KeyboardInterrupt):
        nqm.sweep("ab", checkpoint=path, checkpoint_every=0, **grid)
    monkeypatch.setattr(checkpoint.Checkpointer, "between_chunks", original)
    assert settling_saved  # it stopped with cells in their settling window
    resumed = nqm.sweep("ab", checkpoint=path, **grid)
    assert (resumed.status == TRANSIENT).any() and (resumed.status == SETTLED).any()
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(resumed[name].values, whole[name].values)


def test_nqm_expected_stay_writes_the_steps_after_which_the_expected_loss_stays(tmp_path):
    import nqm.expected

    out = tmp_path / "e.nc"
    assert main(["expected", "--lr", "0.02", "0.05", "--momentum", "0.9", "--noise", "0", "0.01", "--delay", "2",
                 "--dim", "50", "--max-steps", "20000", "--stay", "--out", str(out)]) == 0
    api = nqm.expected.sweep("sgdm", lr=[0.02, 0.05], momentum=0.9, noise=[0.0, 0.01], delay=2, problem=nqm.zhang(50),
                             max_steps=20_000, stay=True)
    np.testing.assert_array_equal(nqm.load(out).steps_stay.values, api.steps_stay.values)
    assert np.isfinite(api.steps_stay.values).all()


def test_a_sweep_gives_each_settled_noiseless_cell_its_steps_stay(tmp_path):
    """The grid's steps_stay is the points' (evaluate's) cell for cell; NaN where it is not defined."""
    from nqm import sweeps

    grid = dict(lr=[0.01, 0.02, 0.05], momentum=[0.9, 0.95, 0.98], delay=2, problem=RINGING["problem"],
                max_steps=20_000, progress=False)
    ds = nqm.sweep("sgdm", noise=[0.0, 0.01], stay=True, **grid)
    cells = ds.sel(noise=0.0, delay=2, seed=0)
    m, lr = (x.ravel() for x in np.meshgrid(cells.momentum.values, cells.lr.values, indexing="ij"))
    points = sweeps.evaluate("sgdm", lr=lr, momentum=m, stay=True, **{k: v for k, v in grid.items() if k not in ("lr", "momentum")})
    np.testing.assert_array_equal(cells.steps_stay.values.ravel(), points.steps_stay.values[0])
    assert (np.isfinite(cells.steps_stay.values) == (cells.status.values == SETTLED)).all()
    assert np.isnan(ds.steps_stay.sel(noise=0.01).values).all()  # single noisy runs: not defined
    out = tmp_path / "s.nc"
    assert main(["sweep", "--lr", "0.01", "0.02", "--momentum", "0.95", "--delay", "2", "--dim", "50", "--max-steps",
                 "20000", "--stay", "--no-progress", "--out", str(out)]) == 0
    np.testing.assert_array_equal(nqm.load(out).steps_stay.values.ravel(),
                                  ds.steps_stay.sel(noise=0.0, momentum=0.95, lr=[0.01, 0.02]).values.ravel())


# ------------------------------------------------------------------ methods that do not contract

ISSUE_ADAM = dict(lr=1e-3 * 500 ** (4 / 9), b1=0.9, delay=4, problem=nqm.zhang(100))  # lr = 0.0158


def test_adam_waits_out_its_second_moment_and_sees_the_bursts_that_follow():
    """Adam first passes at step 85 and settles into bursts once its second moment has forgotten the
    first passage's gradients (from step ~4,000, ~4/(1 − b2)): the float64 oracle leaves the target
    again; the settled test runs to past 64/(1 − b2) steps and reads every step's loss there."""
    from nqm.settling.window import MEMORIES, settling_span

    ds = nqm.sweep("adam", max_steps=20_000, progress=False, **ISSUE_ADAM)
    assert int(ds.steps.values.ravel()[0]) == 85 and ds.status.values.ravel().tolist() == [TRANSIENT]
    oracle = reference.long_runs("adam", ISSUE_ADAM["problem"].eigenvalues, {"lr": np.array([ISSUE_ADAM["lr"]]),
                                 "b1": np.array([0.9])}, delay=4, steps=20_000)
    assert oracle["first"][0] == 85 and 1000 < oracle["exit"][0] < 20_000
    adam = nqm.optimizers.make("adam")
    np.testing.assert_array_equal(settling_span(adam, {"lr": np.ones(2), "b1": np.full(2, 0.9),
                                                       "b2": np.array([0.99, 0.999])}), [MEMORIES * 100, MEMORIES * 1000])
    assert nqm.optimizers.make("sgdm").memory is None  # the heavy ball keeps no moment estimate


@pytest.mark.parametrize("x64", [False, True])
def test_a_noiseless_adam_run_that_collapses_is_judged_as_in_float64(x64):
    """At lr = 0.16 and b1 = 0 Adam collapses towards the minimum: float32 rounds it to 0 and stays
    there, float64 follows it below √v̂ < ε, where it steps by lr/ε and comes back above the target
    (the oracle). Either way the cell is transient."""
    lr = float(np.geomspace(1e-3, 0.5, 12)[9])
    ds = nqm.sweep("adam", lr=lr, b1=0.0, b2=0.999, problem=nqm.zhang(100), max_steps=20_000, progress=False, x64=x64)
    assert ds.status.values.ravel().tolist() == [TRANSIENT]
    oracle = reference.long_runs("adam", nqm.zhang(100).eigenvalues, {"lr": np.array([lr]), "b1": np.zeros(1)},
                                 steps=5000, blocks=50)
    assert oracle["exit"][0] > 0 and oracle["block_max"][0, 1:].max() > 0.01


# AB near its floor ‖g‖‖v‖ < ε = 1e-12 is SGDM, unstable at these settings. The three cells below escape
# from there and diverge (float64, steps 45,800–93,000; float32 used to sit at 1e-13 or 0 and call
# them settled); the fourth cycles near the floor (its float64 loss stays ~1e-13 for 195,000 steps).
ESCAPES = [(4, 0.0298), (4, 0.0492), (16, 0.0633)]
CYCLES = dict(lr=float(np.geomspace(0.01, 1.0, 12)[8]), momentum=0.5, rho=2.0, delay=4)


@pytest.mark.parametrize("x64", [False, True])
def test_ab_below_its_floor_gets_one_verdict_in_float32_and_float64(x64):
    for delay, lr in ESCAPES:
        ds = nqm.sweep("ab", lr=lr, momentum=0.98, rho=2.0, delay=delay, problem=nqm.zhang(100), max_steps=20_000,
                       progress=False, x64=x64)
        assert ds.status.values.ravel().tolist() == [TRANSIENT], (delay, lr)
    ds = nqm.sweep("ab", problem=nqm.zhang(100), max_steps=20_000, progress=False, x64=x64, **CYCLES)
    assert ds.status.values.ravel().tolist() == [SETTLED]
    unstable = steady_state_loss(nqm.zhang(100), "sgdm", 4, CYCLES["lr"], CYCLES["momentum"], 0.0)
    assert not np.isfinite(unstable)  # SGDM there is unstable: only running the floor tells


def test_the_oracle_sees_the_floor_escape_and_the_floor_cycle():
    lam = nqm.zhang(100).eigenvalues
    escape = reference.long_runs("ab", lam, {"lr": np.array([0.0633]), "momentum": np.array([0.98]),
                                             "rho": np.array([2.0])}, delay=16, steps=60_000)
    assert 0 < escape["floor"][0] < 30_000 and escape["diverged"][0]
    cycle = reference.long_runs("ab", lam, {k: np.array([CYCLES[k]]) for k in ("lr", "momentum", "rho")}, delay=4,
                                steps=20_000)
    assert 0 < cycle["floor"][0] < 10_000 and reference.level_after(cycle, noisy=False)[0] < 1e-9


def test_dc_asgd_near_the_minimum_is_sgdm_and_a_search_skips_what_cannot_settle():
    from nqm import delays, jobs
    from nqm.settling import choose

    task, _ = jobs.job("dc-asgd", nqm.zhang(20), dict(max_steps=1000, progress=False))
    values = dict(lr=np.array([0.1, 3.5]), momentum=np.array([0.5, 0.5]), lambda_dc=np.full(2, 0.5), noise=np.zeros(2))
    assert choose(task, delays.process(0)).cannot_settle(values).tolist() == [False, True]  # SGDM's limit: 2(1 + m)/λ
    ab, _ = jobs.job("ab", nqm.zhang(20), dict(max_steps=1000, progress=False))
    values = dict(lr=np.array([0.1, 3.5]), momentum=np.array([0.5, 0.5]), rho=np.full(2, 0.5), noise=np.zeros(2))
    assert not choose(ab, delays.process(0)).cannot_settle(values).any()  # a floor may hold it: only running tells
    # at ρ = 0 AB is SGDM: its exact test decides before running
    assert choose(ab, delays.process(0)).cannot_settle({**values, "rho": np.zeros(2)}).tolist() == [False, True]


def test_the_disagreement_table_in_the_docs_is_the_committed_check():
    """docs/conventions.md quotes, per method, figures/check_settled.json (scripts/check_settled.py against
    200,000-step float64 runs), and every method there keeps false settled verdicts at or below 1 %."""
    import json
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    check = json.loads((root / "figures" / "check_settled.json").read_text())
    assert check["regime"]["long_run"] == 200_000 and not check["regime"]["quick"]
    rows = re.findall(r"^  \| ([\w-]+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \([\d.]+ %\) \| (\d+) \| (\d+) \| "
                      r"(\d+) \| (\d+) \|$", (root / "docs" / "conventions.md").read_text(), re.M)
    assert {row[0] for row in rows} == set(check["table"]) >= {"adam", "ab-adam", "rmsprop", "lion", "ab", "dc-asgd",
                                                                "restart"}
    for name, *numbers in rows:
        row = check["table"][name]
        keys = ("compared", "agree", "settled", "settled_at_look", "false_settled", "false_transient",
                "false_settled_at_look", "undecided", "never_reached")
        assert [int(x) for x in numbers] == [row[k] for k in keys], name
        assert row["false_settled"] <= 0.01 * row["settled"], name
    assert check["table"]["ab"]["false_settled"] == 0  # AB: none at all


def test_a_long_delay_is_settled_by_continuing_not_by_an_hour_of_algebra(monkeypatch):
    """The exact steady state costs (D + 2)² per component: past EXACT_STEADY_WORK the continued test
    decides (a delay of 10⁶ is within the documented bounds), and the algebra is never started."""
    from nqm import delays, jobs, settling
    from nqm.settling import exact

    def refused(*args, **kwargs):
        raise AssertionError("the exact steady state was computed")

    monkeypatch.setattr(exact, "steady_state_loss", refused)
    exact._exact_for.cache_clear()
    task, _ = jobs.job("sgdm", nqm.zhang(50), {})
    test = settling.choose(task, delays.process(1_000_000))
    assert test.kind == "continued" and "would take hours" in test.description
    monkeypatch.undo()
    exact._exact_for.cache_clear()
    assert settling.choose(task, delays.process(16)).kind == "exact"  # a short delay: the exact test, as before


# SGDM across its stability edge and its noise floor (N = 40): of 48 cells, some diverge, some
# level out above the target with noise; DC-ASGD's noiseless cells end as SGDM near the minimum.
DECIDED = dict(lr=np.geomspace(0.02, 4, 8), momentum=[0.0, 0.9], delay=[0, 3], noise=[0.0, 0.1],
               problem=nqm.zhang(40), max_steps=4000, chunk_steps=500, progress=False)


@pytest.mark.parametrize("method", ["sgdm", "dc-asgd"])
def test_a_sweep_skips_only_cells_that_cannot_settle_and_keeps_every_settled_one(method, monkeypatch, tmp_path):
    from nqm import jobs
    from nqm.status import SKIPPED

    whole = nqm.sweep(method, **DECIDED)
    ran, original = [], jobs.Job.run
    monkeypatch.setattr(jobs.Job, "run", lambda self, process, values, *rest, **kw: ran.append(values["lr"].size)
                        or original(self, process, values, *rest, **kw))
    skipping = nqm.sweep(method, skip_decided=True, **DECIDED)
    skipped = skipping.status.values == SKIPPED
    assert skipped.any() and sum(ran) == skipping.status.size - skipped.sum()  # a skipped cell costs no step
    assert not (whole.status.values[skipped] == SETTLED).any()  # and could not have settled
    kept = ~skipped
    for name in ("steps", "status", "loss"):  # every other cell bit for bit
        np.testing.assert_array_equal(skipping[name].values[kept], whole[name].values[kept])
    assert (skipping.steps.values[skipped] == 0).all() and np.isnan(skipping.loss.values[skipped]).all()
    assert skipping.attrs["skip_decided"] == 1 and "-2: not run" in skipping.status.attrs["meaning"]
    assert "skip_decided" not in whole.attrs and "-2" not in whole.status.attrs["meaning"]
    # seeds agree on a skipped cell (it is decided before running), so their combination is skipped too
    from nqm.results import combine_seeds
    seeded = nqm.sweep(method, skip_decided=True, seed=[0, 1], **DECIDED)
    np.testing.assert_array_equal(combine_seeds(seeded).status.values == SKIPPED,
                                  skipping.status.isel(seed=0).values == SKIPPED)
    # its figure draws them apart, and says what they are
    fig = nqm.plot_heatmaps(skipping)
    assert any("not run" in t.get_text() for t in fig.legends[0].get_texts())
    assert not any("not run" in t.get_text() for t in nqm.plot_heatmaps(whole).legends[0].get_texts())
    # a checkpoint of the other definition is not resumed
    path = tmp_path / "s.partial"
    nqm.sweep(method, checkpoint=path, **{**DECIDED, "lr": DECIDED["lr"][:2]})
    with pytest.raises(nqm.NqmError, match="skip_decided"):
        nqm.sweep(method, checkpoint=path, skip_decided=True, **{**DECIDED, "lr": DECIDED["lr"][:2]})


def test_a_sweep_that_skips_resumes_bit_identical_after_an_interruption(tmp_path, monkeypatch):
    from nqm import checkpoint

    grid = {**DECIDED, "chunk_steps": 100}
    whole = nqm.sweep("sgdm", skip_decided=True, **grid)
    original, stops = checkpoint.Checkpointer.between_chunks, []

    def stop_once(self, key, todo, snapshot):
        original(self, key, todo, snapshot)
        if not stops:
            stops.append(key)
            raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.Checkpointer, "between_chunks", stop_once)
    path = tmp_path / "sgdm.partial"
    with pytest.raises(KeyboardInterrupt):
        nqm.sweep("sgdm", skip_decided=True, checkpoint=path, checkpoint_every=0, **grid)
    monkeypatch.setattr(checkpoint.Checkpointer, "between_chunks", original)
    resumed = nqm.sweep("sgdm", skip_decided=True, checkpoint=path, **grid)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(resumed[name].values, whole[name].values)


def test_skipping_needs_the_settled_definition(capsys):
    with pytest.raises(nqm.NqmError, match="skip_decided needs the settled definition"):
        nqm.sweep("sgdm", lr=0.1, momentum=0.5, problem=nqm.zhang(10), first_passage=True, skip_decided=True)
    assert main(["sweep", "--lr", "0.1", "--momentum", "0.5", "--dim", "10", "--first-passage", "--skip-decided",
                 "--out", "never.nc"]) != 0
    assert capsys.readouterr().err.count("\n") == 1
