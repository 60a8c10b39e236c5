"""Iterate averaging (ema=γ) and learning-rate schedules: the engine against independent numpy loops,
the exact mode against them and against Monte Carlo, the settled test in a schedule's final regime,
bit-identity where neither is asked for, and one-line errors."""

import numpy as np
import optax
import pytest

import nqm
import nqm.expected
import reference
from nqm import schedules
from nqm.cli import main
from nqm.errors import NqmError
from nqm.expected import augmented, choices
from nqm.status import BUDGET, DIVERGED, REACHED, TRANSIENT

PROBLEM = nqm.zhang(12)
LAM = PROBLEM.eigenvalues
LRS, MOMENTA, GAMMAS = [0.05, 0.3, 0.9, 1.6], [0.0, 0.5, 0.9], [0.0, 0.6, 0.95]
STEP = "step:25:0.4"


def _step(t):  # step:25:0.4 written out
    return 1.0 if t < 25 else 0.4


def test_no_average_and_the_constant_schedule_are_the_run_without_them_bit_for_bit():
    # ema=0 and schedule="constant" as coordinates: every variable equals the plain sweep's, noise, a random
    # delay and a continued method (AB) included; the averaged cells beside them change nothing.
    kw = dict(lr=[0.1, 0.6], momentum=[0.0, 0.7], delay=[0, "uniform:1:3"], noise=[0.0, 0.05], problem=PROBLEM,
              max_steps=400, progress=False)
    for method, extra in (("sgdm", {}), ("ab", {"rho": 0.5})):
        plain = nqm.sweep(method, **kw, **extra)
        chosen = nqm.sweep(method, **kw, **extra, ema=[0.0, 0.9], schedule=["constant", STEP])
        cell = chosen.sel(ema=0.0, schedule="constant", drop=True)
        for name in ("steps", "status", "loss"):
            np.testing.assert_array_equal(cell[name].values, plain[name].values, err_msg=f"{method} {name}")
        assert not np.array_equal(chosen.steps.sel(ema=0.9).values, chosen.steps.sel(ema=0.0).values)


def test_noiseless_sgdm_with_an_average_and_a_step_schedule_equals_the_numpy_loop_cell_for_cell():
    ds = nqm.sweep("sgdm", lr=LRS, momentum=MOMENTA, delay=[0, 3], ema=GAMMAS, schedule=["constant", STEP],
                   problem=PROBLEM, max_steps=3000, x64=True, progress=False)
    exact = nqm.expected.sweep("sgdm", lr=LRS, momentum=MOMENTA, delay=[0, 3], ema=GAMMAS,
                               schedule=["constant", STEP], problem=PROBLEM, max_steps=3000)
    seen = set()
    for d in (0, 3):
        for g in GAMMAS:
            for label, f in (("constant", None), (STEP, _step)):
                for m in MOMENTA:
                    for lr in LRS:
                        T, status = reference.run_averaged(LAM, lr, m, d, ema=g, schedule=f, max_steps=3000)
                        for result in (ds, exact):
                            cell = result.sel(delay=d, ema=g, schedule=label, momentum=m, lr=lr, noise=0.0, seed=0)
                            assert int(cell.steps) == T, (d, g, label, m, lr)
                            # the loop's 1 is a first passage; nqm says settled (1) or transient (2)
                            got = int(cell.status)
                            assert (got in (REACHED, TRANSIENT)) == (status == 1) and (got == DIVERGED) == (status == -1)
                        seen.add((status, int(ds.status.sel(delay=d, ema=g, schedule=label, momentum=m, lr=lr,
                                                            noise=0.0, seed=0))))
    assert {(1, REACHED), (1, TRANSIENT), (-1, DIVERGED)} <= seen  # the table covers each outcome


def test_an_average_that_reaches_the_target_while_its_raw_iterate_diverges_is_transient():
    # lr = 0.57 at m = 0, D = 3 is unstable (x* = 2 sin(π/14) ≈ 0.445): the raw iterate never reaches the
    # target, its average (γ = 0.9) dips below it on the way.
    kw = dict(lr=0.57, momentum=0.0, delay=3, problem=PROBLEM, max_steps=2000)
    ds = nqm.sweep("sgdm", ema=[0.0, 0.9], progress=False, **kw)
    exact = nqm.expected.sweep("sgdm", ema=[0.0, 0.9], **kw)
    for result in (ds, exact):
        assert result.status.sel(ema=0.0).item() == DIVERGED
        assert result.status.sel(ema=0.9).item() == TRANSIENT
    assert reference.run_averaged(LAM, 0.57, 0.0, 3, ema=0.9, max_steps=2000) == (ds.steps.sel(ema=0.9).item(), 1)


def _monte_carlo(lam, lr, m, delay, sigma, *, ema=0.0, schedule=None, steps=300, runs=3000, seed=0, pmf=None):
    """E[L(ŵ_t)] of SGDM with an average and a schedule, by ``runs`` vectorised numpy runs (their mean and
    standard error): the rules written out, independently of the package."""
    rng = np.random.default_rng(seed)
    w = np.ones((runs, lam.size))
    avg, v = w.copy(), np.zeros_like(w)
    depth = delay if pmf is None else len(pmf) - 1
    history = [w.copy() for _ in range(depth + 1)]  # history[-1 - k] = w_{t−k}
    losses = np.empty((steps, runs))
    for t in range(steps):
        d = np.full(runs, delay) if pmf is None else rng.choice(len(pmf), size=runs, p=pmf)
        stale = np.stack(history)[-1 - d, np.arange(runs)]
        g = lam * stale + sigma * np.sqrt(lam) * rng.standard_normal(w.shape)
        v = m * v + g
        w = w - lr * (1.0 if schedule is None else schedule(t)) * v
        avg = ema * avg + (1 - ema) * w
        history = history[1:] + [w.copy()]
        losses[t] = 0.5 * (lam * avg * avg).sum(1)
    return losses.mean(1), losses.std(1, ddof=1) / np.sqrt(runs)


@pytest.mark.parametrize("delay, ema, schedule", [(2, 0.9, None), (2, 0.0, STEP), (2, 0.8, STEP),
                                                  ("pmf:0.3,0.4,0.3", 0.85, STEP)])
def test_the_exact_expected_loss_with_an_average_or_a_step_schedule_is_the_monte_carlo_mean(delay, ema, schedule):
    lam = nqm.zhang(6).eigenvalues
    curve = nqm.expected.expected_loss(nqm.zhang(6), lr=0.15, momentum=0.5, delay=delay, noise=0.3, steps=120,
                                       ema=ema, schedule=schedule)
    pmf = None if isinstance(delay, int) else [0.3, 0.4, 0.3]
    mean, error = _monte_carlo(lam, 0.15, 0.5, delay if pmf is None else 0, 0.3, ema=ema, steps=120,
                               schedule=None if schedule is None else _step, pmf=pmf)
    at = np.array([5, 20, 40, 80, 119])
    z = (curve[at] - mean[at]) / error[at]
    assert np.abs(z).max() < 4, z  # five looks at 4 standard errors
    assert curve[119] < curve[5]  # the curve decays: the test says something


def test_the_averages_steady_state_is_its_closed_form():
    # SGD at D = 0, per component a = 1 − ηλ: the average's stationary variance is the iterate's times
    # (1 − γ)(1 + γa) / ((1 + γ)(1 − γa)), and the iterate's is η²σ²λ / (1 − a²).
    lr, sigma = 0.3, 0.2
    for gamma in (0.0, 0.5, 0.99):
        a = 1 - lr * LAM
        raw = lr**2 * sigma**2 * LAM / (1 - a**2)
        closed = 0.5 * np.sum(LAM * raw * (1 - gamma) * (1 + gamma * a) / ((1 + gamma) * (1 - gamma * a)))
        got = nqm.expected.steady_state_loss(PROBLEM, "sgd", 0, lr, 0.0, sigma, ema=gamma)
        np.testing.assert_allclose(got, closed, rtol=1e-10)
        # nqm.expected.augmented's state with the average in front, its V_∞ (E[L_∞] = σ² V_∞)
        front = augmented.parts("sgd", 0, np.array([lr]), np.array([0.0]), False, ema=np.array([gamma]))
        assert front.averaged and front.raw == 1  # ŵ at entry 0, w behind it
        np.testing.assert_allclose(sigma**2 * augmented.steady(front, LAM, np.ones_like(LAM)), [closed], rtol=1e-10)
    # and it is what the long run of the exact curve tends to
    curve = nqm.expected.expected_loss(PROBLEM, lr=lr, momentum=0.0, noise=sigma, steps=3000, method="sgd", ema=0.9)
    np.testing.assert_allclose(curve[-1], nqm.expected.steady_state_loss(PROBLEM, "sgd", 0, lr, 0.0, sigma, ema=0.9),
                               rtol=1e-8)


def test_the_level_and_the_settled_status_every_exact_result_shares():
    """nqm.expected.choices: E[L_∞] = σ² V_∞ per cell and noise level, ∞ where there is no steady state
    (even noiseless: the run does not settle); a cell that reached the target settles only where that
    level is below it, else it is transient; other statuses stay."""
    unit, sigma = np.array([2.0, np.inf, 0.5]), np.array([0.0, 0.1])
    level = choices.level(unit, sigma)
    np.testing.assert_allclose(level, [[0.0, 0.02], [np.inf, np.inf], [0.0, 0.005]], rtol=1e-15)  # ∞·0: ∞, not NaN
    status = np.array([REACHED, REACHED, REACHED, BUDGET, DIVERGED])
    np.testing.assert_array_equal(choices.settled(status, np.array([0.005, 0.01, np.inf, 0.0, 0.0]), 0.01),
                                  [REACHED, TRANSIENT, TRANSIENT, BUDGET, DIVERGED])
    with pytest.raises(NqmError, match=choices.NO_STAY):
        nqm.expected.sweep("sgdm", lr=0.1, momentum=0.0, ema=0.5, stay=True, problem=PROBLEM)


def _ones(t):  # a custom schedule of factor 1: the second moments stepped with every step's coefficients
    return np.ones(np.shape(t))


@pytest.mark.parametrize("method", ["sgdm", "nesterov", "staleness"])
def test_the_exact_paths_agree_rings_impulse_responses_segments_and_second_moments(method):
    # sgdm, nesterov: the scalar autoregression on rings; staleness: the state's impulse response; a
    # step past the end: the segments; a custom schedule: the full second moments; an iid pmf: its map.
    kw = dict(lr=0.3, momentum=0.4, noise=0.1, steps=150, method=method)
    fast = nqm.expected.expected_loss(PROBLEM, delay=3, ema=0.9, **kw)
    for other in (dict(delay=3, schedule="step:100000:0.5"), dict(delay=3, schedule=_ones),
                  dict(delay="pmf:0,0,0.5,0.5", schedule=_ones)):
        got = nqm.expected.expected_loss(PROBLEM, ema=0.9, **other, **kw)
        if other["delay"] == 3:
            np.testing.assert_allclose(got, fast, rtol=1e-11)
    iid = nqm.expected.expected_loss(PROBLEM, delay="pmf:0,0,0.5,0.5", ema=0.9, **kw)
    np.testing.assert_allclose(got, iid, rtol=1e-11)
    plain = nqm.expected.expected_loss(PROBLEM, delay=3, **kw)
    for same in (dict(ema=0.0), dict(schedule="constant")):
        np.testing.assert_allclose(nqm.expected.expected_loss(PROBLEM, delay=3, **same, **kw), plain, rtol=1e-11)


def test_a_step_schedule_settles_a_cell_whose_constant_rate_is_too_noisy():
    # E[L∞] at lr is above the target, at lr·R below it: the first passage comes on the decay at the
    # step, and the settled test reads the final regime.
    kw = dict(lr=0.5, momentum=0.0, noise=0.25, problem=PROBLEM, max_steps=20_000)
    level = nqm.expected.steady_state_loss(PROBLEM, "sgdm", 0, 0.5, 0.0, 0.25)
    low = nqm.expected.steady_state_loss(PROBLEM, "sgdm", 0, 0.5 * 0.05, 0.0, 0.25)
    assert low < 0.01 < level
    exact = nqm.expected.sweep("sgdm", schedule=["constant", "step:200:0.05"], **kw)
    assert int(exact.status.sel(schedule="constant").item()) != REACHED
    assert int(exact.status.sel(schedule="step:200:0.05").item()) == REACHED
    np.testing.assert_allclose(exact.steady_state_loss.sel(schedule="step:200:0.05").item(), low, rtol=1e-10)


def test_a_schedule_that_ends_at_zero_is_judged_where_it_stopped():
    # cosine:S freezes the weights at step S: the level is E[L(w_S)]; the average tends to w_S.
    kw = dict(lr=0.5, momentum=0.0, problem=PROBLEM, max_steps=5000)
    exact = nqm.expected.sweep("sgdm", schedule=["cosine:40", "cosine:400"], noise=[0.0, 0.1], ema=[0.0, 0.9], **kw)
    for label, steps in (("cosine:40", 40), ("cosine:400", 400)):
        frozen = nqm.expected.expected_loss(PROBLEM, lr=0.5, momentum=0.0, noise=0.1, steps=steps,
                                            schedule=label)[-1]
        for gamma in (0.0, 0.9):
            level = exact.steady_state_loss.sel(schedule=label, noise=0.1, ema=gamma).item()
            np.testing.assert_allclose(level, frozen, rtol=1e-10)
    status = exact.status.sel(noise=0.1, ema=0.0, delay=0, seed=0, momentum=0.0, lr=0.5)
    assert status.sel(schedule="cosine:40").item() == BUDGET  # frozen at step 40 above the target: never reaches it
    assert status.sel(schedule="cosine:400").item() == REACHED


def test_the_continued_tests_look_and_window_come_after_twice_the_last_breakpoint():
    from nqm import delays
    from nqm.jobs import job
    from nqm.settling import choose

    task, _ = job("ab", PROBLEM, {"max_steps": 500})
    values = {"lr": np.array([0.1, 0.2]), "momentum": np.array([0.5, 0.5]), "rho": np.array([0.5, 0.5]),
              "noise": np.zeros(2)}
    plain = choose(task, delays.process(2)).rule(values)
    scheduled = choose(task._replace(schedule=schedules.schedule("step:300:0.5")), delays.process(2)).rule(values)
    assert plain.spans.max() == 0 and np.all(scheduled.spans == 600)
    assert choose(task._replace(schedule=schedules.schedule("step:300:0.5")), delays.process(2)).near_zero is None
    ds = nqm.sweep("ab", lr=[0.1, 0.3], momentum=0.5, rho=0.5, delay=2, schedule=["step:300:0.5"], problem=PROBLEM,
                   max_steps=500, progress=False)
    assert set(np.unique(ds.status.values)) <= {REACHED, TRANSIENT}
    assert "step:300:0.5" in ds.attrs["settled_test"]


def test_an_optax_schedule_is_the_spec_it_spells_and_one_not_at_one_is_refused():
    kw = dict(lr=[0.3, 0.9], momentum=[0.0, 0.5], delay=2, problem=PROBLEM, max_steps=2000, progress=False)
    spec = nqm.sweep("sgdm", schedule="step:25:0.4", **kw)
    fn = nqm.sweep("sgdm", schedule=optax.piecewise_constant_schedule(1.0, {25: 0.4}), **kw)
    np.testing.assert_array_equal(fn.steps.values, spec.steps.values)
    np.testing.assert_array_equal(fn.status.values, spec.status.values)
    assert schedules.schedule(optax.cosine_decay_schedule(1.0, 50)).regime(1000) == (50, 0.0)
    with pytest.raises(NqmError, match="1 at step 0"):
        nqm.sweep("sgdm", schedule=optax.linear_schedule(0.5, 1.0, 10), **kw)
    with pytest.raises(NqmError, match="one per run"):
        nqm.sweep("sgdm", schedule=[STEP, optax.constant_schedule(1.0)], **kw)


def test_the_built_in_schedules_factors():
    t = np.arange(6)
    np.testing.assert_array_equal(schedules.schedule("step:3:0.5").factors(0, 6), [1, 1, 1, 0.5, 0.5, 0.5])
    np.testing.assert_allclose(schedules.schedule("warmup:4").factors(0, 6), np.minimum(t, 4) / 4)
    np.testing.assert_allclose(schedules.schedule("cosine:4").factors(0, 6),
                               np.asarray(optax.cosine_decay_schedule(1.0, 4)(t)), rtol=1e-6)
    np.testing.assert_allclose(schedules.schedule("warmup:4").factors(0, 6),
                               np.asarray(optax.linear_schedule(0.0, 1.0, 4)(t)), rtol=1e-6)
    assert [schedules.schedule(s).regime(100) for s in ("constant", "step:3:0.5", "warmup:4", "cosine:4")] == \
        [(0, 1.0), (3, 0.5), (4, 1.0), (4, 0.0)]


def test_a_trajectory_reads_the_average_and_keeps_the_raw_loss():
    kw = dict(lr=0.5, momentum=0.5, delay=1, problem=PROBLEM, steps=200, target=0.01, record=("loss", "raw_loss"),
              x64=True)
    trace = nqm.trajectory("sgdm", ema=0.8, schedule=STEP, **kw)
    losses = reference.run_averaged(LAM, 0.5, 0.5, 1, ema=0.8, schedule=_step, max_steps=200, trace=True)
    np.testing.assert_allclose(trace.loss.values, losses[:, 0], rtol=1e-9)
    np.testing.assert_allclose(trace.raw_loss.values, losses[:, 1], rtol=1e-9)
    T = nqm.sweep("sgdm", lr=0.5, momentum=0.5, delay=1, ema=0.8, schedule=STEP, problem=PROBLEM, max_steps=200,
                  x64=True, progress=False).steps.item()
    assert int(trace.steps_to_target) == T


def test_a_search_takes_the_average_fixed_or_searched():
    kw = dict(lr=(0.05, 2.0), momentum=0.0, noise=0.2, problem=PROBLEM, max_steps=4000, expected=True, progress=False)
    plain = nqm.best("sgd", **kw)
    averaged = nqm.best("sgd", ema=(0.0, 0.99), **kw)
    assert averaged.attrs["searched"] == "lr,ema" and 0 <= averaged.attrs["best_ema"] < 0.99
    assert averaged.attrs["best_steps"] <= plain.attrs["best_steps"]  # γ = 0 is in the box


BAD = [("--ema", "1"), ("--ema", "-0.2"), ("--ema", "nan"), ("--ema", "x"), ("--schedule", "linear:5"),
       ("--schedule", "step:5"), ("--schedule", "step:0:0.5"), ("--schedule", "step:-3:0.5"),
       ("--schedule", "step:5:0"), ("--schedule", "step:5:-1"), ("--schedule", "warmup:0"), ("--schedule", "cosine:x"),
       ("--schedule", "cosine:2.5")]


@pytest.mark.parametrize("command", ["sweep", "expected", "trace", "best"])
@pytest.mark.parametrize("flag, value", BAD, ids=["=".join(b) for b in BAD])
def test_bad_averaging_or_schedule_is_one_line_exit_2(command, flag, value, tmp_path, capsys):
    out = tmp_path / "out.nc"
    budget = ["--steps", "10"] if command == "trace" else ["--max-steps", "20"]
    argv = [command, "--lr", "0.01:1" if command == "best" else "0.1", "--momentum", "0", "--dim", "4", *budget]
    assert main(argv + [flag, value, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nqm: error: ") and ("ema" in err[0] or "schedule" in err[0]), err
    assert not out.exists()


@pytest.mark.parametrize("call", [
    lambda: nqm.sweep("sgdm", lr=0.1, momentum=0.0, ema=1.0, problem=PROBLEM, progress=False),
    lambda: nqm.sweeps.evaluate("sgdm", lr=[0.1], momentum=[0.0], ema=[-0.5], problem=PROBLEM),
    lambda: nqm.trajectory("sgdm", lr=0.1, momentum=0.0, ema=[0.1, 0.2], problem=PROBLEM),
    lambda: nqm.expected.sweep("sgdm", lr=0.1, momentum=0.0, ema=[0.5, 0.5], problem=PROBLEM),
    lambda: nqm.expected.expected_loss(PROBLEM, lr=0.1, momentum=0.0, schedule="step:10"),
    lambda: nqm.expected.steady_state_loss(PROBLEM, "sgdm", 0, 0.1, 0.0, 0.1, schedule="cosine:0"),
    lambda: nqm.sweep("sgdm", lr=0.1, momentum=0.0, schedule=["step:5:2", "step:5:2"], problem=PROBLEM, progress=False),
    lambda: nqm.sweep("sgdm", lr=0.1, momentum=0.0, schedule=42, problem=PROBLEM, progress=False),
    lambda: nqm.sweep("sgdm", lr=0.1, momentum=0.0, ema=0.5, stay=True, problem=PROBLEM, progress=False),
    lambda: nqm.best("sgdm", lr=(0.01, 1.0), momentum=0.0, ema=(0.5, 1.0), problem=PROBLEM, progress=False),
])
def test_bad_averaging_or_schedule_at_the_api_is_one_nqm_error(call):
    with pytest.raises(NqmError) as info:
        call()
    assert "\n" not in str(info.value)


def test_a_cell_settled_in_the_budget_without_stepping_has_the_stepped_loss():
    # staleness takes the impulse responses: a noise part at the target ends the cell at once, in the
    # budget, with the loss that stepping to the budget gives.
    kw = dict(lr=[0.2, 0.05], momentum=[0.5, 0.9], delay=2, noise=1.0, problem=PROBLEM, max_steps=3000)
    ds = nqm.expected.evaluate("staleness", ema=[0.9, 0.5], **kw)
    assert (ds.status.values == BUDGET).all() and (ds.steps.values == 3000).all()
    for i, (lr, m, g) in enumerate(zip(kw["lr"], kw["momentum"], [0.9, 0.5])):
        curve = nqm.expected.expected_loss(PROBLEM, lr=lr, momentum=m, delay=2, noise=1.0, steps=3000, ema=g,
                                           method="staleness")
        np.testing.assert_allclose(ds.loss.values[i], curve[-1], rtol=1e-12)


def test_a_sweep_with_schedules_resumes_from_its_checkpoint(tmp_path):
    kw = dict(lr=[0.1, 0.5], momentum=[0.0, 0.5], delay=[0, 2], ema=[0.0, 0.8], schedule=["constant", STEP],
              problem=PROBLEM, max_steps=500, progress=False)
    first = nqm.sweep("sgdm", checkpoint=tmp_path / "c.nc", **kw)
    again = nqm.sweep("sgdm", checkpoint=tmp_path / "c.nc", **kw)  # every cell from the checkpoint
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(again[name].values, first[name].values)
    assert again.attrs["schedule_identity"] == f"constant; {STEP}"
    with pytest.raises(NqmError, match="schedule"):
        nqm.sweep("sgdm", checkpoint=tmp_path / "c.nc", **{**kw, "schedule": ["constant", "step:25:0.5"]})
