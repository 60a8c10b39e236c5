"""A new linear method is one file: registered with ``linear=True``, it gets derived thresholds and
exact expected dynamics from its own update, through the API and the nqm command, with no other
edit; a study's module brings it to the command line (``--import``, the ``nqm.plugins`` entry
point). The methods here (quasi-hyperbolic momentum, with ν an option or a swept hyperparameter)
live in this file only, or in the modules it writes."""

import os
import subprocess
import sys
import sysconfig
import textwrap
from typing import NamedTuple

import numpy as np
import pytest
import xarray as xr

import nqm
import nqm.expected
from nqm import io, validate
from nqm.cli import main
from nqm.optimizers import base, momentum


class QuasiHyperbolicHyper(NamedTuple):
    lr: object
    momentum: object


def quasi_hyperbolic(*, nu: float = 0.7) -> base.Optimizer:
    """Quasi-hyperbolic momentum: ``v_{t+1} = m v_t + g_t``, ``w_{t+1} = w_t − η ((1 − ν) g_t + ν v_{t+1})``.

    Args:
      nu: the weight of the velocity in the step (ν = 1 is SGDM, ν = 0 SGD).
    """

    def init(w0):
        return momentum.VelocityState(0.0 * w0)

    def step(hyper, state, w, g, ctx):
        del ctx
        v = hyper.momentum * state.velocity + g
        return w - hyper.lr * ((1.0 - nu) * g + nu * v), momentum.VelocityState(v), {}

    return base.Optimizer(QuasiHyperbolicHyper, init, step, (("nu", nu),), velocity=momentum.velocity, linear=True)


@pytest.fixture
def qhm():
    base.register("qhm", title="quasi-hyperbolic momentum")(quasi_hyperbolic)
    yield "qhm"
    base.unregister("qhm")


def test_its_derived_threshold_is_the_simulated_one(qhm, tmp_path):
    """``nqm threshold`` derives x* from the update; ``--simulate`` bisects the engine's runs."""
    derived, simulated = tmp_path / "derived.nc", tmp_path / "simulated.nc"
    common = ["threshold", "--method", qhm, "--delay", "0", "3", "--momentum", "0.5", "0.9", "--nu", "0.7"]
    assert main([*common, "--out", str(derived)]) == 0
    assert main([*common, "--simulate", "--steps", "20000", "--tol", "0.002", "--out", str(simulated)]) == 0
    x_derived, x_simulated = (io.load_dataset(path).threshold.values for path in (derived, simulated))
    assert np.all(np.isfinite(x_derived)) and np.all(x_derived > 0)
    np.testing.assert_allclose(x_simulated, x_derived, rtol=2e-3)  # the growth test reads through the budget


def test_its_exact_expected_loss_is_the_simulated_loss(qhm, tmp_path):
    """Without noise the expected loss is the loss: ``nqm expected`` and a float64 ``nqm sweep`` give
    the same steps and status in every cell, and the same loss to rounding."""
    grid = ["--method", qhm, "--lr", "geom:0.05:3:8", "--momentum", "0", "0.5", "0.9", "--delay", "2", "--dim", "30",
            "--max-steps", "3000", "--noise", "0"]
    exact, simulated = tmp_path / "exact.nc", tmp_path / "simulated.nc"
    assert main(["expected", *grid, "--out", str(exact)]) == 0
    assert main(["sweep", *grid, "--x64", "--no-progress", "--out", str(simulated)]) == 0
    a, b = io.load(exact), io.load(simulated)
    assert set(np.unique(a.status)) >= {-1, 1}  # both sides of the threshold are in the grid
    xr.testing.assert_equal(a.status, b.status)
    xr.testing.assert_equal(a.steps, b.steps)
    np.testing.assert_allclose(a.loss.values, b.loss.values, rtol=1e-9)


def test_it_leaves_the_registry_as_it_found_it(qhm):
    assert qhm in base.methods() and base.title(qhm) == "quasi-hyperbolic momentum"
    assert base.make(qhm).name == qhm and "nu" in base.options(qhm)


def test_a_method_registered_again_is_the_new_one_everywhere():
    """A notebook re-runs the cell that registers its method with changed code: the sweep, the
    derived threshold and the settling test use the new code, not what was built from the old."""
    import nqm
    from nqm.thresholds.derived import threshold

    def as_sgdm() -> base.Optimizer:  # the "edited" method: plain SGDM under another name
        return momentum.heavy_ball(linear=True)

    grid = dict(lr=[0.1, 0.6, 1.2], momentum=[0.0, 0.8], delay=2, max_steps=600, target=0.01, progress=False,
                problem=nqm.zhang(20))
    try:
        base.register("toy")(quasi_hyperbolic)
        first = nqm.sweep("toy", **grid), threshold("toy", momentum=0.8, delay=2)
        base.register("toy")(as_sgdm)
        second = nqm.sweep("toy", **grid), threshold("toy", momentum=0.8, delay=2)
    finally:
        base.unregister("toy")
    want = nqm.sweep("sgdm", **grid), threshold("sgdm", momentum=0.8, delay=2)
    np.testing.assert_array_equal(second[0].steps.values, want[0].steps.values)
    np.testing.assert_array_equal(second[0].status.values, want[0].status.values)
    np.testing.assert_allclose(second[1], want[1], rtol=1e-12)
    assert not np.array_equal(first[0].steps.values, second[0].steps.values) and first[1] != second[1]


class SweptNuHyper(NamedTuple):  # ν a hyperparameter of its own: swept as a grid, in the exact mode too
    lr: object
    momentum: object
    nu: object = 0.7


def quasi_hyperbolic_swept() -> base.Optimizer:
    """Quasi-hyperbolic momentum with ν per cell: ``w_{t+1} = w_t − η ((1 − ν) g_t + ν v_{t+1})``."""

    def init(w0):
        return momentum.VelocityState(0.0 * w0)

    def step(hyper, state, w, g, ctx):
        del ctx
        v = hyper.momentum * state.velocity + g
        return w - hyper.lr * ((1.0 - hyper.nu) * g + hyper.nu * v), momentum.VelocityState(v), {}

    return base.Optimizer(SweptNuHyper, init, step, (), velocity=momentum.velocity, linear=True)


@pytest.fixture
def qhm_nu():
    base.register("qhm-nu", domains={"nu": validate.UNIT})(quasi_hyperbolic_swept)
    yield "qhm-nu"
    base.unregister("qhm-nu")


def test_the_exact_mode_grids_a_methods_own_hyperparameter_as_the_sweep_does(qhm_nu, tmp_path):
    """Without noise the expected loss is the loss: the exact sweep over ν has nqm.sweep's layout and,
    cell by cell, a float64 simulation's steps and loss; evaluate and the command give the same cells."""
    grid = dict(lr=np.geomspace(0.05, 2.0, 6), momentum=[0.0, 0.6], nu=[0.0, 0.4, 1.0], delay=[0, 3], noise=0.0,
                problem=nqm.zhang(12), max_steps=2000, first_passage=True)
    exact = nqm.expected.sweep(qhm_nu, **grid)
    simulated = nqm.sweep(qhm_nu, x64=True, progress=False, **grid)
    assert exact.steps.dims == simulated.steps.dims and "nu" in exact.steps.dims
    assert set(np.unique(exact.status)) >= {-1, 1}  # both sides of the threshold are in the grid
    xr.testing.assert_equal(exact.steps, simulated.steps)
    xr.testing.assert_equal(exact.status, simulated.status)
    np.testing.assert_allclose(exact.loss.values, simulated.loss.values, rtol=1e-9)
    assert not exact.steps.sel(nu=0.4).equals(exact.steps.sel(nu=1.0))  # ν reaches the dynamics

    cells = exact.sel(delay=3, noise=0.0, seed=0).stack(point=("nu", "momentum", "lr"))
    points = nqm.expected.evaluate(qhm_nu, lr=cells.lr.values, momentum=cells.momentum.values, nu=cells.nu.values,
                                   delay=3, problem=grid["problem"], max_steps=2000, first_passage=True)
    np.testing.assert_array_equal(points.steps.values, cells.steps.values)
    np.testing.assert_array_equal(points.nu.values, cells.nu.values)

    out = tmp_path / "exact.nc"
    argv = ["expected", "--method", qhm_nu, "--nu", "0", "0.4", "1", "--lr", "geom:0.05:2:6", "--momentum", "0", "0.6",
            "--delay", "0", "3", "--dim", "12", "--max-steps", "2000", "--first-passage", "--out", str(out)]
    assert main(argv) == 0
    xr.testing.assert_equal(io.load(out).steps, exact.steps)


def _monte_carlo(lam, lr, m, nu, sigma, steps, runs, seed=0):
    """E[L(w_t)], t = 1 … steps, of quasi-hyperbolic momentum under iid delays uniform on {0, 1, 2}, and
    its standard error: a plain numpy loop of the model (w₀ = 1, earlier weights w₀), written anew here."""
    rng = np.random.default_rng(seed)
    w = np.ones((runs, lam.size))
    v, ring = np.zeros_like(w), np.stack([w] * 3)  # ring[s % 3] = w_s; w_{s<0} = w₀
    losses = np.empty((steps, runs))
    for t in range(steps):
        tau = rng.integers(0, 3, size=runs)
        g = lam * ring[(t - tau) % 3, np.arange(runs)] + sigma * np.sqrt(lam) * rng.standard_normal(w.shape)
        v = m * v + g
        w = w - lr * ((1.0 - nu) * g + nu * v)
        ring[(t + 1) % 3] = w
        losses[t] = 0.5 * (lam * w * w).sum(1)
    return losses


def test_its_exact_expected_loss_under_noise_and_iid_delays_is_a_monte_carlo_mean(qhm_nu):
    """The exact mode steps the second moment of the method's own update at the swept ν: its curve and
    steady state agree, within 4 standard errors, with 20,000 runs of an independent numpy loop."""
    lam = np.array([1.0, 0.5, 0.2, 0.1])
    lr, m, nu, sigma, steps = 0.4, 0.5, 0.5, 0.5, 400
    curve = nqm.expected.expected_loss(nqm.explicit(lam), lr=lr, momentum=m, delay="uniform:0:2", noise=sigma,
                                       steps=steps, method=qhm_nu, nu=nu)
    steady = nqm.expected.steady_state_loss(nqm.explicit(lam), qhm_nu, "uniform:0:2", lr, m, sigma, nu=nu)
    losses = _monte_carlo(lam, lr, m, nu, sigma, steps, runs=20_000)
    for t in (1, 3, 10, 30, 400):
        mean, error = losses[t - 1].mean(), losses[t - 1].std() / np.sqrt(losses.shape[1])
        assert abs(mean - curve[t - 1]) < 4 * error, (t, mean, curve[t - 1], error)
    late = losses[200:].mean(0)  # each run's time average: independent across runs
    assert abs(late.mean() - steady) < 4 * late.std() / np.sqrt(late.size), (late.mean(), steady)
    assert abs(curve[-1] / steady - 1) < 1e-6
    other = nqm.expected.steady_state_loss(nqm.explicit(lam), qhm_nu, "uniform:0:2", lr, m, sigma, nu=[0.0, 1.0])
    assert np.all(np.isfinite(other)) and abs(other[1] / steady - 1) > 0.01  # ν is read, per cell
    sweep = nqm.expected.sweep(qhm_nu, lr=lr, momentum=m, nu=[0.0, nu, 1.0], delay="uniform:0:2", noise=sigma,
                               problem=nqm.explicit(lam), max_steps=50)
    np.testing.assert_allclose(sweep.steady_state_loss.values.ravel(), [other[0], steady, other[1]], rtol=1e-12)


def test_what_the_exact_mode_cannot_take_is_one_line(qhm_nu):
    grid = dict(lr=0.1, momentum=0.5, problem=nqm.zhang(8), max_steps=100)
    for given, says in ((dict(nu=1.5), "nu=1.5 is invalid: each value must be a number in [0, 1]"),
                        (dict(rho=0.5), "'rho' is neither a hyperparameter nor an option of method 'qhm-nu' in the "
                                        "exact mode; it takes nu"),
                        (dict(x64=True), "x64 is a run setting that the exact mode does not take here")):
        with pytest.raises(nqm.NqmError, match="^" + says.replace("[", r"\[").replace("]", r"\]")):
            nqm.expected.sweep(qhm_nu, **grid, **given)

    class PowerHyper(NamedTuple):
        lr: object
        momentum: object
        k: object = 1.0

    def lr_to_the_k() -> base.Optimizer:  # the step is affine in η only at k = 1
        def step(hyper, state, w, g, ctx):
            v = hyper.momentum * state.velocity + g
            return w - hyper.lr ** hyper.k * v, momentum.VelocityState(v), {}

        return base.Optimizer(PowerHyper, lambda w0: momentum.VelocityState(0.0 * w0), step, (), linear=True)

    base.register("lr-power")(lr_to_the_k)
    try:
        assert nqm.expected.sweep("lr-power", k=1.0, **grid).steps.size == 1
        with pytest.raises(nqm.NqmError) as refused:
            nqm.expected.sweep("lr-power", k=[1.0, 2.0], **grid)
    finally:
        base.unregister("lr-power")
    line = str(refused.value)
    assert "\n" not in line and "at momentum=0.5, k=2" in line and line.endswith("simulate it with nqm sweep"), line


STUDY = """\
    from typing import NamedTuple

    from nqm.optimizers import base, momentum


    class Hyper(NamedTuple):
        lr: object
        momentum: object
        nu: object = 0.7


    @base.register("{name}", title="quasi-hyperbolic momentum, nu swept")
    def ours() -> base.Optimizer:
        \"\"\"Quasi-hyperbolic momentum with nu per cell.\"\"\"

        def step(hyper, state, w, g, ctx):
            v = hyper.momentum * state.velocity + g
            return w - hyper.lr * ((1.0 - hyper.nu) * g + hyper.nu * v), momentum.VelocityState(v), {{}}

        return base.Optimizer(Hyper, lambda w0: momentum.VelocityState(0.0 * w0), step, (), linear=True)
"""


def _nqm(*argv, cwd, env=None):
    """The installed ``nqm`` command as a process (its own sys.path: not the working directory)."""
    script = os.path.join(sysconfig.get_path("scripts"), "nqm")
    command = [script] if os.path.isfile(script) else [sys.executable, "-m", "nqm"]
    return subprocess.run([*command, *argv], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_a_method_a_module_registers_runs_from_the_command_line_with_import(tmp_path):
    """``nqm sweep --import mystudy --method ours``: the module, in the working directory, registers the
    method before the command builds its options; ν = 1 is SGDM and ν = 0 SGD, cell for cell."""
    (tmp_path / "mystudy.py").write_text(textwrap.dedent(STUDY.format(name="ours")))
    grid = ["--lr", "0.1", "0.5", "1.2", "--momentum", "0.5", "--delay", "2", "--dim", "10", "--max-steps", "600"]
    run = _nqm("sweep", "--import", "mystudy", "--method", "ours", "--nu", "0", "1", *grid, "--no-progress",
               "--out", "r.nc", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    result = io.load(tmp_path / "r.nc")
    assert result.attrs["method"] == "ours" and result.nu.values.tolist() == [0.0, 1.0]
    settings = dict(lr=[0.1, 0.5, 1.2], delay=2, problem=nqm.zhang(10), max_steps=600, progress=False)
    sgdm, sgd = nqm.sweep("sgdm", momentum=0.5, **settings), nqm.sweep("sgdm", momentum=0.0, **settings)
    np.testing.assert_array_equal(result.steps.sel(nu=1.0).values, sgdm.steps.values)
    np.testing.assert_array_equal(result.steps.sel(nu=0.0).values.ravel(), sgd.steps.values.ravel())

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "broken.py").write_text("import nqm\n\nraise ValueError('no such spectrum')\n")
    for module, says in (("mystudy", "nqm: error: --import mystudy: no module named 'mystudy' in the working "
                                     f"directory ({elsewhere})"),
                         (str(tmp_path / "broken.py"), f"nqm: error: --import {tmp_path / 'broken.py'} raised "
                                                       "ValueError at broken.py:3: no such spectrum")):
        refused = _nqm("sweep", "--import", module, "--method", "ours", *grid, "--out", "r.nc", cwd=elsewhere)
        assert refused.returncode == 2 and refused.stderr.startswith(says), refused.stderr
        assert len(refused.stderr.splitlines()) == 1 and not (elsewhere / "r.nc").exists()
    by_path = _nqm("threshold", "--import", str(tmp_path / "mystudy.py"), "--method", "ours", "--nu", "1",
                   "--momentum", "0.5", "--delay", "2", cwd=elsewhere)
    assert by_path.returncode == 0 and "0.280776" in by_path.stdout, by_path.stderr  # SGDM's x* at m = 0.5, D = 2


def test_import_is_read_off_the_command_line_before_argparse_in_each_of_its_spellings():
    """nqm.cli.plugins.requested: ``--import M``, ``--import=M`` and any prefix argparse would take
    (``--imp M``) give M, in order, and leave the rest of argv as it was; after ``--`` nothing is an
    option; a ``--import`` without a module is one line."""
    from nqm.cli import plugins
    from nqm.errors import NqmError

    argv = ["sweep", "--import", "a", "--lr", "0.1", "--import=b.py", "--imp", "c", "--", "--import", "d"]
    assert plugins.requested(argv) == (["a", "b.py", "c"], ["sweep", "--lr", "0.1", "--", "--import", "d"])
    assert plugins.requested(["--i", "x", "sweep"]) == ([], ["--i", "x", "sweep"])  # too short: not --import's prefix
    for bad in (["sweep", "--import"], ["sweep", "--import", "--lr", "1"], ["sweep", "--import="]):
        with pytest.raises(NqmError, match="--import needs a module"):
            plugins.requested(bad)


def test_an_installed_package_offers_its_methods_through_the_plugins_entry_point(tmp_path):
    """A package's ``nqm.plugins`` entry point is loaded by every command; one that raises is one line
    that names it."""
    site = tmp_path / "site"
    (site / "ourplugin-1.0.dist-info").mkdir(parents=True)
    (site / "ourplugin-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: ourplugin\nVersion: 1.0\n")
    (site / "ourplugin.py").write_text(textwrap.dedent(STUDY.format(name="plugged")))
    (site / "broken_plugin.py").write_text("raise RuntimeError('needs a GPU')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    entry = site / "ourplugin-1.0.dist-info" / "entry_points.txt"
    entry.write_text("[nqm.plugins]\nours = ourplugin\n")
    shown = _nqm("threshold", "--method", "plugged", "--nu", "1", "--momentum", "0.5", "--delay", "2", cwd=tmp_path,
                 env=env)
    assert shown.returncode == 0 and "0.280776" in shown.stdout, shown.stderr
    entry.write_text("[nqm.plugins]\nours = ourplugin\nbad = broken_plugin\n")
    broken = _nqm("summary", "--help", cwd=tmp_path, env=env)
    assert broken.returncode == 2 and len(broken.stderr.splitlines()) == 1, broken.stderr
    assert broken.stderr.startswith("nqm: error: the nqm.plugins entry point 'bad' (package ourplugin, broken_plugin) "
                                    "raised RuntimeError at broken_plugin.py:1: needs a GPU"), broken.stderr


def test_a_sweep_judges_a_new_linear_method_exactly_with_its_own_hyperparameter(qhm_nu, qhm):
    """A registered linear method — with an option of its own (ν of qhm) or a swept hyperparameter (ν
    of qhm-nu) — gets the exact settled test: its settled cells are those whose expected loss settles
    below the target, as the exact mode says."""
    grid = dict(lr=np.geomspace(0.05, 2.0, 6), momentum=[0.0, 0.6], delay=3, noise=[0.0, 0.3],
                problem=nqm.zhang(20), max_steps=3000)
    swept = nqm.sweep(qhm_nu, nu=[0.0, 0.4], progress=False, **grid)
    assert swept.attrs["settled_test"].startswith("3: exact")
    exact = nqm.expected.sweep(qhm_nu, nu=[0.0, 0.4], **grid)
    reached = np.isin(swept.status.values, (1, 2))
    np.testing.assert_array_equal(swept.status.values[reached] == 1, exact.status.values[reached] == 1)
    assert (swept.status == 1).any() and (swept.status == 2).any()
    assert nqm.sweep(qhm, nu=0.4, progress=False, **grid).attrs["settled_test"].startswith("3: exact")
