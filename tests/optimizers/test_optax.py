"""optax optimizers as nqm methods (the bridge), and Adaptive Braking around any of them: bridged
SGD with momentum is SGDM, braked bridged SGD is AB, bit for bit; Adam follows a numpy loop under a
delay; methods without a momentum take none; and the engine's entry points run them all."""

import dataclasses

import numpy as np
import optax
import pytest

import nqm
from nqm import engine, diagnostics, io
from nqm.cli import main
from nqm.optimizers import base, make, momentum
from nqm.optimizers.optax_bridge import from_optax

LAM = np.array([1.0, 0.5, 0.2, 0.05])
PROBLEM = nqm.explicit(LAM)
CONFIG = engine.RunConfig(target=-1.0, diverge_factor=np.inf, max_steps=150, chunk_steps=40, x64=True, progress=False)
SPECS = [3, "uniform:0:5", "workers:4:slow=0.25:3"]


@pytest.fixture(scope="module")
def bridged():
    """optax's SGD (momentum is its own hyperparameter), plain and braked, and Adam with b1 on the
    momentum axis, registered for this module only."""
    names = [from_optax("optax-sgd", optax.sgd, reductions=[({}, "sgdm", {}, 2)]),
             from_optax("ab-optax-sgd", optax.sgd, brake=True, reductions=[({}, "ab", {}, 2)]),
             from_optax("adam-m", optax.adam, momentum="b1", reductions=[({}, "adam", {"b1": 0.6}, 2)])]
    yield names
    for name in names:
        base.unregister(name)


def run(method, spec, values, config=CONFIG, noise=0.0, record=("loss",), **options):
    optimizer = make(method, delay=spec, **options)
    cells = len(values["lr"])
    values = {**{k: np.full(cells, v) for k, v in optimizer.hyper._field_defaults.items()}, **values}
    out = engine.simulate(PROBLEM, engine.Cells(optimizer, values, np.full(cells, noise), delay=spec, seed=5), config,
                          [engine.Trace({name: diagnostics.RECORDERS[name] for name in record})])
    return out


GRID = {"lr": np.array([0.05, 0.3, 0.9, 1.4, 0.3, 1.2]), "momentum": np.array([0.0, 0.5, 0.5, 0.6, 0.9, 0.9])}


@pytest.mark.parametrize("x64", [True, False])
@pytest.mark.parametrize("spec", SPECS)
def test_optax_sgd_with_momentum_is_sgdm_bit_for_bit(bridged, spec, x64):
    """optax.sgd: v ← g + m v, updates = −lr v (trace, then scale_by_learning_rate), so
    w + updates = w − lr v: nqm's heavy ball with c = 1, the same operations in the same order."""
    config = dataclasses.replace(CONFIG, x64=x64, target=0.05, diverge_factor=1e6)
    a, b = (run(m, spec, GRID, config, noise=0.01) for m in ("optax-sgd", "sgdm"))
    assert set(a.status) >= {1, -1}  # both sides of the threshold are in the grid
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.trace["loss"], b.trace["loss"])


def test_optax_sgd_sweeps_as_sgdm(bridged):
    grid = dict(lr=[0.1, 0.6, 1.5], momentum=[0.0, 0.7], delay=[0, 2], noise=[0.0, 0.05], problem=nqm.zhang(16),
                max_steps=3000, progress=False)
    a, b = nqm.sweep("optax-sgd", **grid), nqm.sweep("sgdm", **grid)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(a[name].values, b[name].values)
    assert a.attrs["optax"] == "optax.sgd" and a.attrs["momentum_axis"] == "momentum"


@pytest.mark.parametrize("group", ["global", "element", "blocks:3"])
@pytest.mark.parametrize("spec", SPECS)
def test_braked_optax_sgd_is_adaptive_braking_bit_for_bit(bridged, spec, group):
    """Both are the braking transform (nqm.optimizers.braking) of the same heavy ball: g scaled by
    α = 1 − ρ cos(g, v), v the trace, then v ← αg + m v (in optax's order), the same bits."""
    values = {**GRID, "rho": np.array([0.0, 0.5, 1.0, 1.5, 2.0, 0.8])}
    a, b = (run(m, spec, values, noise=0.1, record=("loss", "alpha"), group=group) for m in ("ab-optax-sgd", "ab"))
    for name in a.trace:
        np.testing.assert_array_equal(a.trace[name], b.trace[name], err_msg=name)
    assert np.ptp(a.trace["alpha"]) > 0.5  # the braking did act


@pytest.mark.parametrize("group", ["global", "element", "blocks:3"])
def test_one_braked_optax_sgd_step_is_one_ab_step_to_the_rounding_of_its_sum(bridged, group):
    """From the same state, cos(g, v) is the same to the rounding of its sums, and v_{t+1} = m v_t + α g_t
    differs at most by that and the rounding of that one sum (XLA may fuse it into an FMA in one
    program and not the other), so w too."""
    import jax

    rng = np.random.default_rng(0)
    cells, n = 64, 7
    w, g, v = (rng.normal(size=(cells, n)) for _ in range(3))
    v[::4] = g[::4] * rng.uniform(0.1, 3, size=(cells // 4, 1))  # aligned: strong braking
    hyper = dict(lr=rng.uniform(0.01, 1, cells), momentum=rng.uniform(0, 0.99, cells), rho=rng.uniform(0, 2, cells))
    a, b = make("ab-optax-sgd", group=group), make("ab", group=group)
    ctx = base.StepContext(0, 0, 0, None)

    def bridged_step(h, w, g, v):
        state = a.init(w)
        state = state._replace(inner_state=(optax.TraceState(trace=v), *state.inner_state[1:]))
        w_next, state, info = a.step(a.hyper(**h), state, w, g, ctx)
        return w_next, state.inner_state[0].trace, info["cosine"]

    def ab_step(h, w, g, v):
        w_next, state, info = b.step(b.hyper(**h), momentum.VelocityState(v), w, g, ctx)
        return w_next, state.velocity, info["cosine"]

    with jax.enable_x64(True):
        (wa, va, cos_a), (wb, vb, cos_b) = (jax.tree.map(np.asarray, jax.jit(jax.vmap(f))(hyper, w, g, v))
                                            for f in (bridged_step, ab_step))
    ulp = np.finfo(np.float64).eps
    assert np.all(np.abs(cos_a - cos_b) <= 4 * ulp)
    rho = hyper["rho"][:, None]
    terms = np.abs(hyper["momentum"][:, None] * v) + np.abs((1 - rho * cos_b) * g)
    bound = 2 * ulp * terms + rho * np.abs(cos_a - cos_b) * np.abs(g)
    assert np.all(np.abs(va - vb) <= bound)
    assert np.all(np.abs(wa - wb) <= 2 * ulp * (np.abs(w) + hyper["lr"][:, None] * (3 * terms + bound)))
    assert np.ptp(rho * cos_b) > 1  # the braking did act


def test_braking_clamps_alpha_as_ab_does(bridged):
    values = {**GRID, "rho": np.full(6, 1.5)}
    a = run("ab-optax-sgd", 2, values, record=("alpha",), alpha_min=0.2, alpha_max=1.0)
    b = run("ab", 2, values, record=("alpha",), alpha_min=0.2, alpha_max=1.0)
    np.testing.assert_array_equal(a.trace["alpha"], b.trace["alpha"])
    assert a.trace["alpha"].min() >= 0.2 and a.trace["alpha"].max() <= 1.0


@pytest.mark.parametrize("group", ["global", "element", "blocks:5"])
def test_braked_optax_sgd_sweeps_as_ab_bit_for_bit_over_a_grid(bridged, group):
    """The case that moved: zhang(50), lr 0.96, m 0.5, ρ 1, and a 192-cell grid around it."""
    grid = dict(lr=np.geomspace(0.01, 1.5, 12), momentum=[0.0, 0.3, 0.5, 0.9], rho=[0.0, 0.5, 1.0, 2.0], delay=2,
                problem=nqm.zhang(50), max_steps=3000, progress=False, first_passage=True, group=group)
    a, b = nqm.sweep("ab-optax-sgd", **grid), nqm.sweep("ab", **grid)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(a[name].values, b[name].values)
    one = dict(lr=0.96, momentum=0.5, rho=1.0, problem=nqm.zhang(50), steps=2500, group=group)
    np.testing.assert_array_equal(nqm.trajectory("ab-optax-sgd", **one).loss.values,
                                  nqm.trajectory("ab", **one).loss.values)


def test_braked_adam_at_rho_zero_sweeps_as_adam_bit_for_bit():
    grid = dict(lr=np.geomspace(0.001, 0.5, 6), b1=[0.0, 0.5, 0.9, 0.99], b2=[0.9, 0.999], delay=[0, 4],
                noise=[0.0, 0.05], problem=nqm.zhang(50), max_steps=3000, progress=False, first_passage=True)
    a, b = nqm.sweep("ab-adam", rho=[0.0], **grid).squeeze("rho", drop=True), nqm.sweep("adam", **grid)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(a[name].values, b[name].values)


@pytest.mark.parametrize("spec", SPECS)
def test_braked_adam_at_rho_zero_is_adam(spec):
    hyper = {"lr": np.array([0.01, 0.1, 0.5]), "b1": np.array([0.0, 0.9, 0.5]), "b2": np.array([0.999, 0.9, 0.0])}
    a = run("ab-adam", spec, {**hyper, "rho": np.zeros(3)}, noise=0.1)
    b = run("adam", spec, hyper, noise=0.1)
    np.testing.assert_array_equal(a.trace["loss"], b.trace["loss"])
    braked = run("ab-adam", spec, {**hyper, "rho": np.ones(3)}, noise=0.1)
    assert not np.array_equal(braked.trace["loss"], b.trace["loss"])


def adam_reference(lam, lr, b1, b2, eps, delay, steps):
    """Adam (Kingma & Ba, optax's form: ε outside the root) in numpy, under a constant delay D: the
    gradient of step t is H w_{max(0, t − D)}."""
    w, mu, nu, history, losses = np.ones_like(lam), np.zeros_like(lam), np.zeros_like(lam), [], []
    for t in range(steps):
        history.append(w.copy())
        g = lam * history[max(0, t - delay)]
        mu, nu = b1 * mu + (1 - b1) * g, b2 * nu + (1 - b2) * g * g
        mu_hat, nu_hat = mu / (1 - b1 ** (t + 1)), nu / (1 - b2 ** (t + 1))
        w = w - lr * mu_hat / (np.sqrt(nu_hat) + eps)
        losses.append(0.5 * np.sum(lam * w * w))
    return np.array(losses)


@pytest.mark.parametrize("delay", [0, 3])
def test_adam_follows_a_numpy_loop_under_a_constant_delay(delay):
    hyper = {"lr": np.array([0.01, 0.05]), "b1": np.array([0.9, 0.5]), "b2": np.array([0.999, 0.9]),
             "eps": np.array([1e-8, 1e-3])}
    got = run("adam", delay, hyper).trace["loss"]
    for i in range(2):
        want = adam_reference(LAM, *(hyper[k][i] for k in ("lr", "b1", "b2", "eps")), delay, CONFIG.max_steps)
        np.testing.assert_allclose(got[i], want, rtol=1e-10)


@pytest.mark.parametrize("delay", [0, 3])
def test_a_noisy_adam_cell_reaches_the_target_when_a_numpy_adam_on_its_noise_does(delay):
    """The same problem and noise: the numpy loop adds the engine's own noise draws, ξ_t = g_t − H w_{t−D}
    (the engine's recorded gradients less their noiseless part), and steps on its own; its first
    step below the target is the engine's, within one (float32 engine, float64 loop)."""
    hyper = {"lr": np.array([0.02, 0.05]), "b1": np.array([0.9, 0.5]), "b2": np.array([0.999, 0.99]),
             "eps": np.array([1e-8, 1e-8]), "eps_root": np.zeros(2)}
    config = dataclasses.replace(CONFIG, target=0.01, max_steps=3000, x64=False)
    optimizer = make("adam", delay=delay)
    out = engine.simulate(PROBLEM, engine.Cells(optimizer, hyper, np.full(2, 0.5), delay=delay, seed=5), config,
                          [engine.Trace({"g": lambda view: view.g, "w": lambda view: view.w})])
    quiet = engine.simulate(PROBLEM, engine.Cells(optimizer, hyper, np.zeros(2), delay=delay, seed=5), config)
    assert (out.status == nqm.REACHED).all() and (out.steps > quiet.steps + 5).all()  # the noise matters
    for i in range(2):
        g, w = (np.asarray(out.trace[k][i], np.float64) for k in ("g", "w"))  # at steps 0, 1, …
        noise = g - LAM * w[np.maximum(np.arange(len(g)) - delay, 0)]
        lr, b1, b2, eps = (hyper[k][i] for k in ("lr", "b1", "b2", "eps"))
        v, mu, nu, history = np.ones_like(LAM), np.zeros_like(LAM), np.zeros_like(LAM), []
        for t in range(len(g)):
            history.append(v.copy())
            grad = LAM * history[max(0, t - delay)] + noise[t]
            mu, nu = b1 * mu + (1 - b1) * grad, b2 * nu + (1 - b2) * grad * grad
            v = v - lr * (mu / (1 - b1 ** (t + 1))) / (np.sqrt(nu / (1 - b2 ** (t + 1))) + eps)
            if 0.5 * np.sum(LAM * v * v) < 0.01:
                break
        assert abs((t + 1) - int(out.steps[i])) <= 1, (i, t + 1, out.steps[i])


def test_a_momentum_axis_can_be_any_optax_hyperparameter(bridged):
    """``from_optax(..., momentum="b1")``: b1 is nqm's momentum axis (heatmap rows), same numbers."""
    grid = dict(lr=[0.02, 0.2], delay=3, problem=nqm.zhang(10), max_steps=400, progress=False)
    a = nqm.sweep("adam-m", momentum=[0.5, 0.9], **grid)
    b = nqm.sweep("adam", b1=[0.5, 0.9], **grid)
    np.testing.assert_array_equal(a.steps.values.ravel(), b.steps.values.ravel())
    assert "b1" not in a.dims and a.attrs["momentum_axis"] == "b1"


def test_a_moment_that_follows_the_updates_is_turned_along_the_gradient():
    """rmsprop's momentum trace accumulates −lr ĝ/√ν: braking must read it as pointing along g, so
    that small steps on a quadratic (gradients that keep their direction) brake (α < 1)."""
    name = from_optax("ab-rmsprop", optax.rmsprop, brake=True)
    try:
        out = run(name, 0, {"lr": np.array([1e-3]), "momentum": np.array([0.9]), "rho": np.array([0.5])},
                  record=("alpha",))
        assert (out.trace["alpha"][0, 2:60] < 1).all()  # (later, near the minimum, it oscillates)
    finally:
        base.unregister(name)


# ------------------------------------------------------------------ momentum: required or refused

def test_a_method_without_momentum_takes_none_and_has_the_single_momentum_zero():
    ds = nqm.sweep("adam", lr=[0.01, 0.1], b1=[0.8, 0.9], problem=nqm.zhang(10), max_steps=300, progress=False)
    assert ds.momentum.values.tolist() == [0.0] and ds.b1.values.tolist() == [0.8, 0.9]
    with pytest.raises(nqm.NqmError, match="method 'adam' has no momentum"):
        nqm.sweep("adam", lr=0.1, momentum=0.5, problem=nqm.zhang(10))
    with pytest.raises(nqm.NqmError, match="has no momentum"):
        nqm.sweep("lion", lr=0.1, momentum=0.0, problem=nqm.zhang(10))
    with pytest.raises(nqm.NqmError, match="method 'sgdm' needs a momentum"):
        nqm.sweep("sgdm", lr=0.1, problem=nqm.zhang(10))
    with pytest.raises(nqm.NqmError, match="method 'rmsprop' needs a momentum"):
        nqm.trajectory("rmsprop", lr=0.1, problem=nqm.zhang(10))


def test_the_command_line_takes_optax_names_and_refuses_a_momentum_where_there_is_none(tmp_path, capsys):
    out = tmp_path / "adam.nc"
    common = ["sweep", "--lr", "0.01", "0.1", "--dim", "10", "--max-steps", "300", "--no-progress"]
    assert main([*common, "--method", "adam", "--b1", "0.8", "0.9", "--eps", "1e-8", "1e-6", "--out", str(out)]) == 0
    ds = io.load(out)
    assert ds.b1.values.tolist() == [0.8, 0.9] and ds.eps.size == 2 and ds.momentum.values.tolist() == [0.0]
    assert main([*common, "--method", "adam", "--momentum", "0.5", "--out", str(tmp_path / "x.nc")]) != 0
    assert "has no momentum" in capsys.readouterr().err
    assert main([*common, "--method", "sgdm", "--out", str(tmp_path / "y.nc")]) != 0
    assert "needs a momentum" in capsys.readouterr().err
    # --eps is adam's hyperparameter (a grid) and ab's option (one value)
    ab = tmp_path / "ab.nc"
    assert main([*common, "--method", "ab", "--momentum", "0.5", "--eps", "1e-9", "--out", str(ab)]) == 0
    assert io.load(ab).attrs["eps"] == 1e-9
    assert main([*common, "--method", "ab", "--momentum", "0.5", "--eps", "1e-9", "1e-8", "--out", str(ab)]) != 0
    assert "--eps is an option of ab: give one value" in capsys.readouterr().err


# ------------------------------------------------------------------ the entry points run bridged methods

def test_trace_recorders_and_summaries_of_braked_adam():
    trace = nqm.trajectory("ab-adam", lr=0.05, rho=1.0, delay=2, noise=0.01, problem=nqm.zhang(10), steps=200,
                           record=diagnostics.TRACE, summaries=True)
    assert np.isfinite(trace.alpha).all() and float(np.ptp(trace.alpha.values)) > 0
    assert np.isfinite(trace.relative_energy_decay).all()
    plain = nqm.trajectory("adam", lr=0.05, delay=2, noise=0.01, problem=nqm.zhang(10), steps=200,
                           record=diagnostics.TRACE, summaries=True)
    assert (plain.alpha == 1).all() and np.isfinite(plain.velocity_norm).all()


def test_a_checkpointed_adam_sweep_resumes_mid_cell_to_the_same_bits(tmp_path, interrupt_at_store):
    # b2 = 0.9: a short memory keeps the settling runs (64 × memory) to a few chunks, each one stored here
    grid = dict(lr=list(np.geomspace(0.002, 0.2, 6)), b1=[0.5, 0.9], b2=[0.9], delay=3, noise=0.01,
                problem=nqm.zhang(64), target=1e-3, max_steps=3000, chunk_steps=100, progress=False)
    whole = nqm.sweep("ab-adam", **grid)
    path = tmp_path / "c.partial"
    interrupt_at_store(2)
    with pytest.raises(KeyboardInterrupt):
        nqm.sweep("ab-adam", checkpoint=path, checkpoint_every=0.0, **grid)
    interrupt_at_store.disarm()
    assert (tmp_path / "c.partial.cells.npz").exists()  # running cells, with Adam's state, were kept
    resumed = nqm.sweep("ab-adam", checkpoint=path, **grid)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(resumed[name].values, whole[name].values)


def test_best_and_simulated_threshold_run_adam():
    from nqm.search.simulated import simulated_threshold

    found = nqm.best("adam", lr=(0.005, 1.0), delay=2, problem=nqm.zhang(10), max_steps=500, max_cells=80, work_limit=600,
                     progress=False)
    answer = nqm.search.answer(found)
    assert 0 < answer["t_star"] < 500 and "b1" in found.attrs["parameters"].split(",")
    table = simulated_threshold("adam", delay=[0, 4], steps=400, tol=0.05, problem=nqm.zhang(10))
    x = table.threshold.values.ravel()
    # Adam's steps are bounded by about lr: without delay no rate is unstable here (∞); with one, some is
    assert table.momentum.values.tolist() == [0.0] and np.isfinite(x[1]) and x[1] < x[0]


def test_threshold_simulate_on_the_command_line(tmp_path):
    out = tmp_path / "t.nc"
    assert main(["threshold", "--simulate", "--method", "ab-adam", "--rho", "0", "1", "--delay", "4",
                 "--steps", "400", "--tol", "0.05", "--out", str(out)]) == 0
    assert io.load_dataset(out).threshold.dims == ("delay", "momentum", "b1", "b2", "eps", "eps_root", "rho")


# ------------------------------------------------------------------ bad input: one line that says how to fix it

@pytest.mark.parametrize("call, message", [
    (lambda: from_optax("x", optax.adam(1e-3)), "give the optax factory"),
    (lambda: from_optax("x", 3), "optax optimizer factory such as optax.adam is needed"),
    (lambda: from_optax("x", optax.scale_by_adam), "has no learning_rate parameter"),
    (lambda: from_optax("x", optax.adam, b3=0.5), r"optax.adam has no parameter\(s\) b3"),
    (lambda: from_optax("x", optax.adam, momentum="beta"), "momentum='beta' names none of optax.adam's"),
    (lambda: from_optax("x", optax.adagrad, brake=True), "keeps no first moment"),
    (lambda: from_optax("x", optax.adam, learning_rate=0.1), "learning_rate is nqm's lr axis"),
    (lambda: from_optax("x", lambda learning_rate, *, width: optax.sgd(learning_rate)), "could not be built"),
    (lambda: make("ab-adam", group="blocks:0"), "write blocks:K"),
    (lambda: make("ab-adam", alpha_min=1.0, alpha_max=0.5), "must not exceed"),
    (lambda: nqm.sweep("adam", lr=0.1, b3=0.5, problem=nqm.zhang(5)), "unknown option"),
    (lambda: nqm.sweep("adam", lr=0.1, b1=-0.5, problem=nqm.zhang(5)), "b1=-0.5 is invalid"),
    (lambda: nqm.sweep("adam", lr=-0.1, problem=nqm.zhang(5)), "lr=-0.1 is invalid"),
    (lambda: nqm.sweep("adam", lr=0.1, rho=0.5, problem=nqm.zhang(5)), "rho is not a hyperparameter of method 'adam'"),
])
def test_bad_input_is_one_line(call, message):
    with pytest.raises(nqm.NqmError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)
    assert "x" not in base.methods()


def test_a_state_the_hyperparameters_shape_is_each_cells_own():
    """rmsprop's ν starts at initial_scale: with decay 1 it stays there, so a cell at initial_scale s
    steps as SGDM at lr/√s — each cell of one batch with its own s."""
    scales = np.array([1.0, 4.0, 16.0])
    hyper = {"lr": np.full(3, 0.4), "momentum": np.full(3, 0.5), "decay": np.ones(3), "initial_scale": scales,
             "eps": np.zeros(3)}
    got = run("rmsprop", 2, hyper).trace["loss"]
    want = run("sgdm", 2, {"lr": 0.4 / np.sqrt(scales), "momentum": np.full(3, 0.5)}).trace["loss"]
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name", [5, "", " ", "two words", "-dash-first"])
def test_a_method_name_is_a_word_the_command_line_takes(name):
    with pytest.raises(nqm.NqmError, match="a method's name is letters, digits"):
        from_optax(name, optax.adamw)
    assert all(isinstance(m, str) for m in base.methods())


def test_a_registered_name_is_replaced_only_when_asked_and_then_everywhere():
    grid = dict(lr=[0.05, 0.3], max_steps=300, problem=nqm.zhang(10), progress=False)
    with pytest.raises(nqm.NqmError, match="'adam' is already a method"):
        from_optax("adam", optax.sgd)
    try:
        from_optax("mine", optax.adam)
        first = nqm.sweep("mine", **grid)
        with pytest.raises(nqm.NqmError, match="'mine' is already a method"):
            from_optax("mine", optax.sgd)
        from_optax("mine", optax.sgd, replace=True)
        second = nqm.sweep("mine", **grid, momentum=[0.0])
    finally:
        base.unregister("mine")
    want = nqm.sweep("sgdm", **grid, momentum=[0.0])
    np.testing.assert_array_equal(second.steps.values, want.steps.values)
    assert not np.array_equal(first.steps.values.ravel(), second.steps.values.ravel())


def test_a_factory_that_cannot_step_is_refused_at_registration():
    from nqm.validate import NONNEGATIVE

    with pytest.raises(nqm.NqmError, match="optax.noisy_sgd cannot take a step through the bridge.*random key"):
        from_optax("noisy", optax.noisy_sgd, domains={"eta": NONNEGATIVE, "gamma": NONNEGATIVE})
    assert "noisy" not in base.methods()
