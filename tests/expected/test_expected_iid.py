"""The exact expected dynamics under iid delays (the second-moment map of nqm.expected.second_moment)
against a second-moment recursion written here by hand, the engine's own step over thousands of
independent delay schedules, the constant-delay evaluator, the mean-square spectral radius and the CLI."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqm
from nqm import delays, diagnostics, engine, expected
from nqm.thresholds import derived
from nqm.engine.step import Inputs, Spec, cell_step, init_cells, model as engine_model
from nqm.expected import autoregression, forward, second_moment
from nqm.optimizers import make
from nqm.status import BUDGET, DIVERGED, REACHED

PROBLEM = nqm.loguniform(4, 0.05, 1.0)


def hand_expected_loss(lam, lr, momentum, pmf, sigma, steps, sgd=False):
    """E[L_t], t = 1 … steps, by the second-moment recursion of the state (w_t, …, w_{t−K}, v_t)
    written out here: v' = m v + λ w_{t−d} + σ√λ z, w' = w − η v' (sgd: w' = w − η(λ w_{t−d} + σ√λ z))."""
    K = len(pmf) - 1
    n = K + 2
    total = np.zeros(steps)
    for l in lam:
        s0 = np.r_[np.ones(K + 1), 0.0]
        X = np.outer(s0, s0)
        As, kick = [], np.zeros(n)
        for d in range(K + 1):
            A = np.zeros((n, n))
            for j in range(1, K + 1):
                A[j, j - 1] = 1.0  # the ring moves down
            if sgd:
                A[0, 0], A[0, d] = 1.0, A[0, d] - lr * l
                kick[0] = -lr
            else:
                A[n - 1, n - 1], A[n - 1, d] = momentum, l  # v' = m v + λ w_{t−d}
                A[0] = np.eye(n)[0] - lr * A[n - 1]  # w' = w − η v'
                kick[0], kick[n - 1] = -lr, 1.0
            As.append(A)
        for t in range(steps):
            X = sum(p * A @ X @ A.T for p, A in zip(pmf, As)) + sigma**2 * l * np.outer(kick, kick)
            total[t] += 0.5 * l * X[0, 0]
    return total


@pytest.mark.parametrize("method, delay", [("sgd", "uniform:1:3"), ("sgdm", "uniform:0:2"), ("sgdm", "pmf:0.5,0,0.2,0.3")])
def test_equals_a_second_moment_recursion_written_by_hand(method, delay):
    lr, m, sigma = 0.25, (0.0 if method == "sgd" else 0.6), 0.3
    exact = expected.expected_loss(PROBLEM, lr=lr, momentum=m, delay=delay, noise=sigma, steps=200, method=method)
    hand = hand_expected_loss(PROBLEM.eigenvalues, lr, m, delays.pmf(delay), sigma, 200, sgd=method == "sgd")
    np.testing.assert_allclose(exact, hand, rtol=1e-10)
    target = float(np.sort(hand)[40])  # a target the loss first crosses well inside the horizon
    ds = expected.evaluate(method, lr=lr, momentum=m, delay=delay, noise=sigma, problem=PROBLEM, target=target,
                           max_steps=200)
    assert int(ds.status[0]) == REACHED
    assert abs(int(ds.steps[0]) - (1 + np.argmax(hand < target))) <= 1
    assert ds.attrs["delay"] == delay


def engine_losses(method, delay, lr, momentum, sigma, steps, schedules, uids, noise_seed, dampening=False):
    """The loss at steps 1 … steps of cells run by the engine's own step (``cell_step``), cell i under
    the delay schedule drawn from seed ``schedules[i]`` and the independent noise of uid ``uids[i]``:
    thousands of independent delay schedules in one vmapped scan (a sweep draws one per seed and run)."""
    process = delays.process(delay)
    optimizer = make("sgdm" if method == "sgd" else method, delay=process, dampening=dampening)
    plans = [process.schedule(int(s), steps) for s in schedules]
    tau, worker = (np.stack([p[i] for p in plans]) for i in (0, 1))
    slots = process.history(tau).slots
    cells = len(schedules)
    spec = Spec(optimizer, slots, False, steps, cells, True, None)
    with jax.enable_x64(True):
        model = engine_model(PROBLEM, jnp.float64)
        state = init_cells(spec, model, np.asarray(PROBLEM.w0, np.float64), np.ones(cells, bool))
        inputs = Inputs(optimizer.hyper(lr=np.full(cells, lr), momentum=np.full(cells, momentum)),
                        np.full(cells, sigma), np.stack([np.asarray(uids, np.uint32), np.zeros(cells, np.uint32)], 1))
        limits = (np.float64(-1.0), np.float64(np.inf), np.int32(steps))
        step = jax.vmap(functools.partial(cell_step, spec), in_axes=(None, 0, 0, 0, None, None, None, None))
        key = jax.random.key(noise_seed)

        @jax.jit
        def run(state, tau, worker):
            def one(state, t):
                state, _, _ = step(t, (tau[:, t], worker[:, t]), state, inputs, model, None, key, limits)
                return state, state.loss

            return jax.lax.scan(one, state, jnp.arange(steps, dtype=jnp.int32))[1].T

        return np.asarray(run(state, tau, worker))


def test_the_harness_is_the_engine():
    """engine_losses steps exactly what nqm's engine runs for the same seed, cell and delay."""
    kw = dict(method="sgdm", delay="uniform:1:3", lr=0.3, momentum=0.5, sigma=0.4, steps=30)
    config = engine.RunConfig(target=1e-300, diverge_factor=1e300, max_steps=30, chunk_steps=30,
                              independent_noise=True, x64=True, progress=False)
    for seed in (0, 7):
        process = delays.process(kw["delay"])
        cells = engine.Cells(make("sgdm", delay=process), {"lr": np.full(2, 0.3), "momentum": np.full(2, 0.5)},
                             np.full(2, 0.4), delay=process, seed=seed, uids=np.array([3, 11]))
        out = engine.simulate(PROBLEM, cells, config, [engine.Trace({"loss": diagnostics.loss})])
        ours = engine_losses(**kw, schedules=[seed, seed], uids=[3, 11], noise_seed=seed)
        np.testing.assert_allclose(ours, out.trace["loss"], rtol=1e-12)


@pytest.mark.parametrize("method, delay, dampening", [("sgdm", "uniform:1:4", False), ("nesterov", "gaussian:2", True),
                                                      ("shifted", "uniform:0:3", False), ("shifted", "pmf:0.6,0,0.4", True),
                                                      ("sgd", "uniform:1:3", False)])
def test_monte_carlo_mean_loss_within_three_standard_errors(method, delay, dampening):
    """4,000 independent delay schedules and noise streams: the mean loss at several steps matches the exact value."""
    cells, steps, lr, m, sigma = 4000, 80, 0.25, (0.0 if method == "sgd" else 0.5), 0.4
    losses = engine_losses(method, delay, lr, m, sigma, steps, range(cells), range(cells), 5, dampening)
    exact = expected.expected_loss(PROBLEM, lr=lr, momentum=m, delay=delay, noise=sigma, steps=steps, method=method,
                                   dampening=dampening)
    # an off-by-one in which past weights a delay reads: every delay one step longer
    later = "pmf:0," + ",".join(repr(float(p)) for p in delays.pmf(delay))
    off_by_one = expected.expected_loss(PROBLEM, lr=lr, momentum=m, delay=later, noise=sigma, steps=steps,
                                        method=method, dampening=dampening)
    apart = []
    for t in (3, 10, 30, 79):
        mean, se = losses[:, t].mean(), losses[:, t].std(ddof=1) / np.sqrt(cells)
        assert abs(mean - exact[t]) < 3 * se, (t, mean, exact[t], se)
        apart.append(abs(exact[t] - off_by_one[t]) / se)
    # not vacuous: the test tells the engine's convention from its nearest neighbour
    assert max(apart) > 10, apart


@pytest.mark.parametrize("method", ["sgdm", "nesterov", "shifted", "sgd"])
def test_a_one_hot_pmf_is_the_constant_delay(method):
    kw = dict(lr=np.geomspace(0.05, 1.5, 6), momentum=[0.0] if method == "sgd" else [0.0, 0.5, 0.9],
              noise=[0.0, 0.05, 0.3], problem=nqm.zhang(20), max_steps=3000, dampening=method == "nesterov")
    constant = expected.sweep(method, delay=2, **kw)
    as_pmf = expected.sweep(method, delay=["pmf:0,0,1", "constant:2"], **kw)
    for name in ("steps", "status", "loss", "steady_state_loss"):
        for label in ("pmf:0,0,1", "2"):
            np.testing.assert_array_equal(as_pmf[name].sel(delay=label).values, constant[name].sel(delay=2).values)
    # the second-moment evaluator on the same one-hot pmf agrees with the autoregression
    problem = kw.pop("problem")
    lam, weight = problem.eigenvalues, np.ones(problem.dim)
    lr, m = (x.ravel() for x in np.meshgrid(kw["lr"], kw["momentum"]))
    sigma, damp = np.array(kw["noise"]), kw["dampening"]
    limits = dict(target=0.01, bound=1e6 * 0.5 * lam.sum(), max_steps=3000)
    ours = second_moment.run(method, "pmf:0,0,1", lr, m, damp, lam, weight, sigma, **limits)
    theirs = autoregression.run(method, 2, lr, m, damp, lam, weight, sigma, **limits)
    statuses = set(theirs[1].ravel())
    assert {REACHED, DIVERGED, BUDGET} <= statuses  # every ending is compared
    assert np.abs(ours[0] - theirs[0]).max() <= 1
    np.testing.assert_array_equal(ours[1], theirs[1])
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-9)
    np.testing.assert_allclose(ours[4], theirs[4], rtol=1e-9)


def test_a_constant_delay_steady_state_comes_from_the_state_not_the_map():
    """Under a constant delay the second moment's steady state is a Lyapunov sum on the n-entry state
    (n × n per component), not a solve of the m × m map (m = n(n+1)/2): equal to the written
    autoregression (sgdm) and to the map (dana, where it fits), and answered where the map would
    need 17.7 GiB (dana, D = 16, N = 1,000: the settled test of a sweep needs it)."""
    big, small = nqm.zhang(1000), nqm.zhang(30)
    lr, m = np.geomspace(1e-4, 0.05, 6), np.full(6, 0.9)
    P, Q, b, _, _ = second_moment._matrices("sgdm", delays.process(16), lr, m, False)
    state = second_moment._lyapunov(P[:, 0], Q[:, 0], b[:, 0], big.eigenvalues, np.ones(1000), np.ones(6, bool))
    written = expected.steady_state_loss(big, "sgdm", 16, lr, m, 1.0)
    assert np.isfinite(written).sum() >= 3 and np.isinf(written).sum() >= 1
    np.testing.assert_array_equal(np.isinf(state), np.isinf(written))
    np.testing.assert_allclose(state[np.isfinite(state)], written[np.isfinite(written)], rtol=1e-8)
    lr4, m4 = np.geomspace(0.01, 1.5, 8), np.tile([0.0, 0.9], 4)
    P, Q, b, pmf, _ = second_moment._matrices("dana", delays.process(4), lr4, m4, False)
    K, noise = second_moment._operators(P, Q, b, pmf, small.eigenvalues)
    mapped = second_moment._steady(K, noise, small.eigenvalues, np.ones(30))[1]
    ours = expected.steady_state_loss(small, "dana", 4, lr4, m4, 1.0)
    assert np.isfinite(mapped).sum() >= 2 and np.isinf(mapped).sum() >= 2
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(mapped))
    np.testing.assert_allclose(ours[np.isfinite(ours)], mapped[np.isfinite(mapped)], rtol=1e-9)
    with pytest.raises(nqm.NqmError, match="more than the 2 GiB budget"):
        second_moment.check_size("dana", delays.process(16), False, 1000)
    noiseless = expected.steady_state_loss(big, "dana", 16, lr, m, 0.0)
    assert set(noiseless) <= {0.0, np.inf} and np.isfinite(noiseless).sum() >= 3


@pytest.mark.parametrize("method, delay", [("sgdm", "uniform:1:3"), ("shifted", "pmf:0.5,0,0.5"), ("nesterov", "gaussian:2")])
def test_steady_state_is_infinite_exactly_where_the_mean_square_radius_reaches_one(method, delay):
    problem = nqm.explicit([1.0, 0.3])
    lrs, m = np.geomspace(0.01, 2.0, 40), 0.5
    radius = np.max([derived.spectral_radius(method, lr=lrs * lam, momentum=m, delay=delay, criterion="mean-square",
                                            lam=1.0) for lam in problem.eigenvalues], axis=0)
    steady = expected.steady_state_loss(problem, method, delay, lrs, m, 0.1)
    clear = np.abs(radius - 1) > 1e-6
    assert (radius[clear] < 1).sum() >= 5 and (radius[clear] > 1).sum() >= 5
    np.testing.assert_array_equal(np.isinf(steady[clear]), radius[clear] >= 1)
    # a finite steady state is where the recursion settles
    fast = np.flatnonzero(radius < 0.95)[-1]
    curve = expected.expected_loss(problem, lr=lrs[fast], momentum=m, delay=delay, noise=0.1, steps=3000, method=method)
    np.testing.assert_allclose(curve[-1], steady[fast], rtol=1e-9)


def test_a_states_future_by_doubling_is_its_sum_of_powers():
    """nqm.expected.forward's doublings against plain numpy loops: ``power(A, k)`` is ``(A^k,
    Σ_{u<k} (A^u)ᵀ e₀ e₀ᵀ A^u)``, ``series`` the infinite sums ``Σ A^u X (A^u)ᵀ`` (and transposed) of
    a stable A, and ``gramian`` that of ``e eᵀ`` at an index, NaN where A is not stable."""
    rng = np.random.default_rng(1)
    A = rng.standard_normal((2, 3, 4, 4))
    A /= 1.25 * np.abs(np.linalg.eigvals(A)).max(-1)[..., None, None]  # spectral radius 0.8
    X = rng.standard_normal((2, 3, 4, 4))
    X = X @ np.swapaxes(X, -1, -2)
    e0 = np.zeros((4, 4))
    e0[0, 0] = 1.0
    for k in (0, 1, 5, 37):
        taken, partial = forward.power(A, k)
        Ak = np.linalg.matrix_power(A, k)
        np.testing.assert_allclose(taken, Ak, atol=1e-13)
        loop = sum((np.swapaxes(np.linalg.matrix_power(A, u), -1, -2) @ e0 @ np.linalg.matrix_power(A, u)
                    for u in range(k)), np.zeros(A.shape))
        np.testing.assert_allclose(partial, loop, rtol=1e-10, atol=1e-13)
    powers = [np.linalg.matrix_power(A, u) for u in range(400)]  # 0.8^400: nothing left to add
    sums = sum(P @ X @ np.swapaxes(P, -1, -2) for P in powers)
    np.testing.assert_allclose(forward.series(A, X), sums, rtol=1e-10)
    np.testing.assert_allclose(forward.series(A, X, transposed=True),
                               sum(np.swapaxes(P, -1, -2) @ X @ P for P in powers), rtol=1e-10)
    e2 = np.zeros((4, 4))
    e2[2, 2] = 1.0
    np.testing.assert_allclose(forward.gramian(A, 2), sum(np.swapaxes(P, -1, -2) @ e2 @ P for P in powers), rtol=1e-10)
    unstable = A.copy()
    unstable[1, 2] *= 2.0  # spectral radius 1.6 in one cell and component
    gram = forward.gramian(unstable, 0)
    assert np.isnan(gram[1, 2]).all() and np.isfinite(np.delete(gram.reshape(6, 4, 4), 5, 0)).all()


def test_budget_cells_settled_without_stepping_are_what_stepping_gives():
    """A long budget: levels that provably never reach the target are settled by fast-forwarding, with
    the loss at the budget that stepping every step gives (the curve's last value)."""
    kw = dict(lr=0.2, momentum=0.5, delay="uniform:1:3", noise=0.5, problem=PROBLEM)
    ds = expected.evaluate(target=0.01, max_steps=5000, **kw)
    assert int(ds.status[0]) == BUDGET and int(ds.steps[0]) == 5000
    curve = expected.expected_loss(PROBLEM, steps=5000, **{k: v for k, v in kw.items() if k != "problem"})
    np.testing.assert_allclose(float(ds.loss[0]), curve[-1], rtol=1e-10)


def test_cli_writes_the_spec_label_and_refuses_worker_pools(tmp_path, capsys, earlier_result):
    from nqm import cli

    out = tmp_path / "iid.nc"
    assert cli.main(["expected", "--delay-dist", "uniform:1:4", "--lr", "0.1", "0.3", "--momentum", "0.5",
                     "--noise", "0", "0.05", "--dim", "20", "--bins", "8", "--max-steps", "2000", "--out", str(out)]) == 0
    ds = nqm.load(out)
    assert list(ds.delay.values) == ["uniform:1:4"] and float(ds.mean_delay[0]) == 2.5
    direct = expected.sweep(lr=[0.1, 0.3], momentum=0.5, noise=[0, 0.05], delay="uniform:1:4", problem=nqm.zhang(20),
                            bins=8, max_steps=2000)
    np.testing.assert_array_equal(ds.steps.values, direct.steps.values)
    capsys.readouterr()
    kept = tmp_path / "kept.nc"
    kept.write_bytes(earlier_result)
    try:
        code = cli.main(["expected", "--delay-dist", "workers:4", "--lr", "0.1", "--momentum", "0.5", "--dim", "20",
                         "--out", str(kept)])
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "worker pool" in err[0] and "nqm sweep" in err[0]
    assert kept.read_bytes() == earlier_result


@pytest.mark.parametrize("call", [lambda: expected.sweep(lr=0.1, momentum=0.5, delay="workers:4"),
                                  lambda: expected.evaluate(lr=0.1, momentum=0.5, delay=["uniform:1:3", 2]),
                                  lambda: expected.expected_loss(PROBLEM, lr=0.1, momentum=0.5, delay=[1, 2]),
                                  lambda: expected.steady_state_loss(PROBLEM, "sgdm", "uniform:3:1", 0.1, 0.5, 0.1)])
def test_bad_delays_are_one_line_errors(call):
    from nqm.errors import NqmError

    with pytest.raises(NqmError) as info:
        call()
    assert "\n" not in str(info.value)


def test_the_second_moment_loop_shows_its_progress(progress_bars):
    """A cell may step 10⁸ times: a bar over the cells, the step in its postfix (on a terminal)."""
    bars = progress_bars
    expected.sweep("sgdm", lr=[1e-3, 1e-2], momentum=0, delay="uniform:1:3", problem=nqm.zhang(5), max_steps=5000)
    assert len(bars) == 1 and bars[0].total == bars[0].n == 2 and "step" in bars[0].postfix
