"""nqm.transfer, and a problem that starts where a model starts: on models whose Hessian and
gradient noise are known exactly, measure finds them with the model's initial error (exactly for a
small model; by Lanczos and stochastic Lanczos quadrature, within its stated uncertainty, for a
larger one); train runs nqm's optimizers under nqm's delays on a model; nqm transfer sets the NQM's
prediction beside the model's outcome, exact where the model is a quadratic; an nqm.Problem carries
its own initial error, which the engine and the exact mode start from."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import nqm
import nqm.expected
import nqm.io
import nqm.transfer
from nqm.transfer import measure


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _regression(examples=2000, d=60, seed=0):
    """Least squares: the Hessian is XᵀX/n and the per-example gradient x (x·w − y), exactly."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((examples, d)) * np.geomspace(1.0, 0.05, d)
    y = x @ rng.standard_normal(d) + 0.3 * rng.standard_normal(examples)
    w = rng.standard_normal(d) * 0.1
    loss = lambda p, b: 0.5 * jnp.mean((b["x"] @ p["w"] - b["y"]) ** 2)
    return loss, {"w": jnp.asarray(w)}, {"x": jnp.asarray(x), "y": jnp.asarray(y)}, (x, y, w)


def _known_spectrum(lam, noise=0.3, seed=0):
    """Least squares with a known spectrum and as many parameters as eigenvalues: example i reads
    the i-th coordinate of R w (R an orthogonal DCT with random signs, so that the eigenvectors are
    dense) scaled by √(n λ_i), so that the Hessian is Rᵀ diag(λ) R exactly; labels with noise. The
    minimiser is R w = y / s, so the initial error in the eigenbasis is R w₀ − y / s."""
    from jax.scipy.fft import dct

    n = lam.size
    rng = np.random.default_rng(seed)
    signs = jnp.asarray(rng.choice([-1.0, 1.0], n))
    rotate = lambda w: dct(signs * w, norm="ortho")
    scale = np.sqrt(n * lam)
    y = scale * np.asarray(rotate(jnp.asarray(rng.standard_normal(n)))) + noise * rng.standard_normal(n)
    loss = lambda w, b: 0.5 * jnp.mean((b["s"] * rotate(w)[b["i"]] - b["y"]) ** 2)
    w0 = jnp.asarray(rng.standard_normal(n))
    data = {"i": jnp.arange(n), "s": jnp.asarray(scale), "y": jnp.asarray(y)}
    residual = scale * np.asarray(rotate(w0)) - y
    trace_c = np.mean(residual**2 * scale**2) - np.sum((residual * scale / n) ** 2)  # per-example gradients' tr C
    return loss, w0, data, {"initial": np.asarray(rotate(w0)) - y / scale, "sigma": np.sqrt(trace_c / lam.sum())}


def test_a_small_model_is_measured_exactly():
    """A model of at most a few thousand parameters is measured with its dense Hessian: every
    eigenvalue, the initial error along each eigenvector (the Newton step, which for least squares
    is the distance to the minimiser), the noise along each and σ² = tr C / tr H, to rounding; its
    NQM starts at the model's loss above its minimum."""
    loss, params, data, (x, y, w) = _regression()
    found = measure(loss, params, data, top=8)
    assert found.how["method"].startswith("exact") and (found.uncertainty == 0).all()
    lam, vectors = np.linalg.eigh(x.T @ x / x.shape[0])
    lam, vectors = lam[::-1], vectors[:, ::-1]
    np.testing.assert_allclose(found.eigenvalues, lam, rtol=1e-10)
    np.testing.assert_allclose(found.top, lam[:8], rtol=1e-10)
    sign = np.sign(np.sum(found.vectors * vectors[:, :8], 0))
    np.testing.assert_allclose(np.abs(sign * np.sum(found.vectors * vectors[:, :8], 0)), 1.0, rtol=1e-8)
    minimum = np.linalg.lstsq(x, y, rcond=None)[0]
    error = vectors.T @ (w - minimum)
    np.testing.assert_allclose(found.initial[:8] * sign, error[:8], rtol=1e-7)
    np.testing.assert_allclose(np.abs(found.initial), np.abs(error), rtol=1e-6, atol=1e-9)
    gradients = x * (x @ w - y)[:, None]
    covariance = np.cov(gradients.T, bias=True)
    variance = np.einsum("ik,ij,jk->k", vectors, covariance, vectors)
    np.testing.assert_allclose(found.variance, variance, rtol=1e-8)
    np.testing.assert_allclose(found.sigma_components, np.sqrt(variance / lam), rtol=1e-8)
    sigma = np.sqrt(np.trace(covariance) / lam.sum())
    assert found.sigma == pytest.approx(sigma, rel=1e-10)
    assert found.sigma_spread == pytest.approx(np.sqrt(np.sum(lam * (np.sqrt(variance / lam) - sigma) ** 2) / lam.sum()),
                                               rel=1e-8)
    above = float(loss(params, data)) - 0.5 * np.mean((x @ minimum - y) ** 2)
    assert found.problem().initial_loss == pytest.approx(above, rel=1e-9)


def test_lanczos_on_a_known_spectrum():
    """5,000 parameters, measured by Lanczos: 8 outliers and a bulk over 1.5 decades. The top
    eigenvalues to 1e-6 (and their stated residuals as small), every bulk quantile within 5 % of the
    true eigenvalue (1.2 % here) and 90 % within their stated uncertainty, no top eigenvalue again in
    the bulk; σ within its stated spread (and within 1 %); the initial error along the top exact and
    in the bulk by share."""
    n = 5000
    lam = np.concatenate([np.geomspace(10, 3, 8), np.geomspace(1, 10**-1.5, n - 8)])
    loss, w0, data, truth = _known_spectrum(lam)
    found = measure(loss, w0, data, top=8)
    assert found.how["method"].startswith("Lanczos") and found.eigenvalues.size == n
    np.testing.assert_allclose(found.top, lam[:8], rtol=1e-6)
    assert (found.uncertainty[:8] < 1e-6).all()
    bulk, error = found.eigenvalues[8:], np.abs(found.eigenvalues[8:] / lam[8:] - 1)
    assert bulk[0] < 0.5 * found.top[-1]  # the deflated top is not in the bulk
    assert error.max() < 0.05 and np.mean(error <= found.uncertainty[8:]) >= 0.9, (error.max(), found.uncertainty[8:])
    assert abs(found.sigma - truth["sigma"]) <= found.sigma_spread and found.sigma == pytest.approx(truth["sigma"], rel=0.01)
    # an eigenvector comes with either sign, and its error with it
    np.testing.assert_allclose(np.abs(found.initial[:8]), np.abs(truth["initial"][:8]), rtol=1e-6)
    energy, true_energy = np.cumsum(found.initial[8:] ** 2), np.cumsum(truth["initial"][8:] ** 2)
    quarters = (np.array([0.25, 0.5, 0.75, 1.0]) * (n - 8)).astype(int) - 1
    np.testing.assert_allclose(energy[quarters], true_energy[quarters], rtol=0.05)


def test_lanczos_finds_the_bulk_of_a_small_model_without_the_top():
    """By Lanczos on 60 parameters with the top 5 found: the bulk's first value is the 6th
    eigenvalue, not the 5th again, and the bulk follows the true spectrum (the largest gap between
    the distribution functions of log λ is small)."""
    loss, params, data, (x, _, _) = _regression()
    found = measure(loss, params, data, top=5, exact=False)
    lam = np.linalg.eigvalsh(x.T @ x / x.shape[0])[::-1]
    assert found.eigenvalues[5] < found.top[4] and found.eigenvalues[5] == pytest.approx(lam[5], rel=0.1)
    truth, ours = np.log(lam), np.log(found.eigenvalues)
    grid = np.linspace(truth.min(), truth.max(), 400)
    cdf = lambda v: np.searchsorted(np.sort(v), grid, side="right") / v.size
    assert found.eigenvalues.size == 60 and np.abs(cdf(ours) - cdf(truth)).max() < 0.1


@pytest.mark.parametrize("exact", [True, False])
def test_an_nqm_written_as_a_model_measures_as_itself(exact):
    """Per example ½ wᵀHw − σ (√H z_i)ᵀ w with whitened z: Hessian H and per-example gradient noise
    σ √H z_i, whose covariance is σ² H exactly: the NQM's own spectrum, start (w₀ = 1) and σ come
    back, with no spread."""
    lam, sigma, examples = np.array([1.0, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01, 0.005]), 0.3, 512
    z = np.random.default_rng(1).standard_normal((examples, lam.size))
    z -= z.mean(0)
    z = z @ np.linalg.inv(np.linalg.cholesky(z.T @ z / examples)).T  # sample covariance exactly I
    loss = lambda p, b: jnp.mean(0.5 * jnp.sum(lam * p**2) - sigma * (b * jnp.sqrt(lam)) @ p)
    found = measure(loss, jnp.ones(lam.size), jnp.asarray(z), top=5, probes=4, steps=8, exact=exact)
    np.testing.assert_allclose(found.top, lam[:5], rtol=1e-10)
    np.testing.assert_allclose(found.sigma_components[:5], sigma, rtol=1e-8)
    assert found.sigma == pytest.approx(sigma, rel=1e-8 if exact else 1e-3) and found.sigma_spread < 1e-6
    np.testing.assert_allclose(np.abs(found.initial[:5]), 1.0, rtol=1e-8)
    problem = found.problem()
    assert isinstance(problem, nqm.Problem) and problem.dim == lam.size
    np.testing.assert_allclose(problem.eigenvalues[:5], lam[:5], rtol=1e-10)
    if exact:
        np.testing.assert_allclose(problem.eigenvalues, lam, rtol=1e-10)
        np.testing.assert_allclose(np.abs(problem.u0), 1.0, rtol=1e-10)  # the convention's own start


def test_negative_curvature_is_dropped_and_counted():
    """At a saddle the NQM keeps the positive curvature only, and says what it dropped: how many,
    their sum, the lowest eigenvalue and the share of the gradient along them."""
    scale = jnp.array([2.0, 1.0, 0.5, -0.3, -0.1, 0.2])
    loss = lambda p, b: jnp.mean(0.5 * jnp.sum(scale * p**2) + b @ p)
    found = measure(loss, jnp.zeros(6), jnp.ones((4, 6)), top=3)  # the gradient at 0: all ones
    np.testing.assert_allclose(found.eigenvalues, [2.0, 1.0, 0.5, 0.2], rtol=1e-12)
    np.testing.assert_allclose(np.abs(found.initial), [0.5, 1.0, 2.0, 5.0], rtol=1e-12)  # g / λ
    how = found.how
    assert (how["dropped"], how["dropped_share"]) == (2, pytest.approx(2 / 6))
    assert how["dropped_curvature"] == pytest.approx(-0.4) and how["lowest_eigenvalue"] == pytest.approx(-0.3)
    assert how["dropped_gradient_share"] == pytest.approx(2 / 6)


def test_one_parameter_is_measured_exactly():
    loss = lambda p, b: jnp.mean(1.5 * p**2 + b * p)
    found = measure(loss, jnp.array([0.5]), jnp.full(3, 2.0))
    np.testing.assert_allclose(found.eigenvalues, [3.0], rtol=1e-12)
    np.testing.assert_allclose(found.initial, [(3.0 * 0.5 + 2.0) / 3.0], rtol=1e-12)  # w₀ − w* = g / λ


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("case, message", [
    (dict(loss=lambda p, b: jnp.mean(b @ p) + 1.0), "no curvature"),
    (dict(loss=lambda p, b: jnp.mean(-0.5 * jnp.sum(p**2) + b @ p) + 1.0), "only negative curvature"),
    (dict(loss=lambda p, b: jnp.mean(jnp.sum(jnp.abs(p) ** 1.5) + b @ p) + 1.0), "Hessian of the loss is not finite"),
    (dict(params=jnp.zeros(5, jnp.int32)), "floating-point"),
    (dict(params={}), "holds no arrays"),
    (dict(params=jnp.zeros(2), exact=False), "at least 3 parameters"),
])
def test_degenerate_models_are_one_line(case, message, exact):
    """One line each, whichever way the model is measured (what scipy or JAX would raise: k >= N,
    ARPACK -9 and -9999, an integer gradient)."""
    arguments = dict(loss=lambda p, b: jnp.mean(0.5 * jnp.sum(p**2) + b @ p), params=jnp.zeros(5), exact=exact) | case
    arguments["data"] = jnp.ones((4, max(1, np.size(arguments["params"]))))
    with pytest.raises(nqm.NqmError, match=message) as error:
        measure(**arguments)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("case, message", [
    (dict(top=61), "top"),
    (dict(floor=1.0), "floor"),
    (dict(seed=-1), "seed"),
    (dict(exact="yes"), "exact"),
    (dict(loss=lambda p, b: b["x"] @ p["w"]), "scalar"),
    (dict(loss=lambda p, b: jnp.nan * jnp.sum(p["w"])), "not finite"),
    (dict(data={"x": jnp.ones((3, 60)), "y": jnp.ones(4)}), "example axis"),
])
def test_bad_input_is_one_line(case, message):
    loss, params, data, _ = _regression(examples=50)
    arguments = dict(loss=loss, params=params, data=data) | case
    with pytest.raises(nqm.NqmError, match=message) as error:
        measure(**arguments)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------ training a model with nqm's optimizers

LAM = nqm.zhang(24).eigenvalues


def _nqm_as_model(w, batch):
    """The NQM itself written as a model (noiseless): ½ wᵀ diag(λ) w, whatever the batch."""
    return 0.5 * jnp.vdot(w, jnp.asarray(LAM) * w) + 0.0 * jnp.sum(batch)


@pytest.mark.parametrize("method, delay, extra", [
    ("sgdm", 3, {}), ("ab", 3, {"rho": [0.5, 1.0]}), ("shifted", 3, {}), ("dana", 2, {}),
    ("sgdm", "uniform:0:4", {}), ("sgdm", "workers:4", {}), ("adam", 2, {"b1": [0.0, 0.9]}),
])
def test_training_the_nqm_as_a_model_gives_the_engines_steps(method, delay, extra):
    """The trainer runs the optimizers' own steps under the delay processes' own schedules: on the
    NQM written as a model it finds, cell by cell, the first passage nqm.sweep finds (float64)."""
    momentum = None if method == "adam" else [0.0, 0.5, 0.9]
    grid = dict(lr=[0.05, 0.2, 0.6], momentum=momentum, delay=delay, **extra)
    ours = nqm.transfer.train(_nqm_as_model, jnp.ones(LAM.size), jnp.zeros((1, 1)), method, steps=2000, target=0.01,
                              **grid)
    ref = nqm.sweep(method, **grid, problem=nqm.explicit(LAM), max_steps=2000, first_passage=True, x64=True,
                    progress=False).isel(delay=0, noise=0, seed=0).squeeze()
    expected = np.where(ref.status.values == 1, ref.steps.values, 0)
    assert (expected > 0).sum() >= 3
    np.testing.assert_array_equal(ours.steps.values.squeeze(), expected)


def test_training_statuses_and_minibatches():
    """Least squares with minibatches: the same seed gives the same numbers, another seed other
    minibatches; a small learning rate settles (status 1), a huge one diverges (−1)."""
    loss, params, data, _ = _regression(examples=400, d=10)
    floor = float(loss({"w": jnp.asarray(np.linalg.lstsq(np.asarray(data["x"]), np.asarray(data["y"]), rcond=None)[0])},
                       data))
    kw = dict(lr=[0.05, 30.0], momentum=[0.5], steps=1500, target=1.5 * floor, batch_size=32)
    once, again = (nqm.transfer.train(loss, params, data, "sgdm", **kw) for _ in range(2))
    other = nqm.transfer.train(loss, params, data, "sgdm", **kw, seed=1)
    np.testing.assert_array_equal(once.curve.values, again.curve.values)
    assert not np.array_equal(once.curve.values, other.curve.values)
    assert once.status.values.ravel().tolist() == [1, -1], once.status.values
    from nqm.transfer.train import STATUS_MEANING  # what nqm.transfer.train's statuses mean, in its results

    assert once.attrs["status_meaning"] == STATUS_MEANING
    assert "1: settled" in STATUS_MEANING and "-1: diverged" in STATUS_MEANING
    assert once.curve.dims == ("momentum", "lr", "step") and once.curve.sizes["step"] == 1500 // once.attrs["stride"]


def test_a_loss_falling_without_bound_is_diverged():
    """A loss that falls past every bound (−∞ in the end) passes the target on its way down: that is
    divergence, not settling, whatever the budget leaves of it."""
    loss = lambda w, b: 1.0 - 0.5 * jnp.sum(w**2) + 0.0 * jnp.sum(b)
    ds = nqm.transfer.train(loss, jnp.full(3, 0.1), jnp.zeros((1, 1)), "sgdm", lr=[0.5], momentum=[0.0], steps=200,
                            target=0.5)
    assert ds.status.values.ravel().tolist() == [-1] and 0 < int(ds.diverged_at.squeeze()) < 200
    assert float(ds.loss.squeeze()) < -1e6 * ds.attrs["initial_loss"]


@pytest.mark.parametrize("case, message", [
    (dict(method="nosuch"), "nosuch"),
    (dict(lr=-0.1), "lr"),
    (dict(momentum=1.0), "momentum"),
    (dict(batch_size=10_000), "batch_size"),
    (dict(rho=0.5), "rho"),
    (dict(max_steps=10), "max_steps"),
])
def test_training_bad_input_is_one_line(case, message):
    loss, params, data, _ = _regression(examples=50, d=5)
    arguments = dict(method="sgdm", lr=0.1, momentum=0.5, steps=20, target=0.01) | case
    with pytest.raises(nqm.NqmError, match=message) as error:
        nqm.transfer.train(loss, params, data, **arguments)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------ prediction against outcome (nqm transfer)

def test_the_nqm_of_an_nqm_predicts_its_own_stability_boundary():
    """Where the model is an NQM, its measured NQM is itself: the same cells go out of bounds, so
    the predicted stability boundary is the observed one for every method, delay and momentum, and
    a linear method's derived threshold lies between the grid's last stable lr and the next."""
    from nqm.transfer.compare import transfer

    lr = np.geomspace(0.1, 3.0, 7)
    ds = transfer("quadratic", lr=lr, momentum=[0.0, 0.5], delays=[0, 2], steps=3000, x64=True)
    np.testing.assert_array_equal(ds.status_predicted.values, ds.status_observed.values)
    assert (ds.status_observed.values == -1).sum() >= 10
    np.testing.assert_array_equal(ds.lr_stable_ratio.values, 1.0)
    linear = ds.sel({"method": ["sgdm", "shifted"]})
    edge, threshold = linear.lr_stable_observed.values, linear.lr_threshold.values
    assert ((edge <= threshold * (1 + 1e-9)) & (threshold < edge * lr[1] / lr[0])).all(), (edge, threshold)
    assert ds.attrs["lam_max"] == pytest.approx(1.0, rel=1e-10)
    # and so are the fastest cells: the methods rank alike, with the same fastest
    np.testing.assert_array_equal(ds.best_steps_predicted.values, ds.best_steps_observed.values)
    assert (ds.best_steps_observed.values[np.isfinite(ds.best_steps_observed.values)] > 0).all()
    assert np.isfinite(ds.best_steps_observed.values).sum() >= 8 and (ds.same_fastest.values == 1).all()


def test_several_braking_coefficients_and_seeds_compare_ranks_and_the_best_rho():
    """AB once per ρ; each seed its own comparison (the same as a call with that seed alone)."""
    from nqm.transfer.compare import transfer

    grid = dict(lr=np.geomspace(0.1, 3.0, 5), momentum=[0.0, 0.5], delays=[0, 2], steps=500, x64=True)
    ds = transfer("quadratic", rho=[0.25, 1.0], seed=[0, 3], **grid)
    assert list(ds.method.values) == ["sgdm", "ab:rho=0.25", "ab:rho=1", "shifted"] and ds.sizes["seed"] == 2
    np.testing.assert_array_equal(ds.rho.values[1:3], [0.25, 1.0])
    alone = transfer("quadratic", rho=[0.25, 1.0], seed=3, **grid)
    for name in ("status_observed", "best_steps_predicted", "rank_correlation", "best_rho_observed"):
        np.testing.assert_array_equal(ds[name].sel(seed=3).values, alone[name].values)
    assert ds.lam_max.dims == ("seed",) and "lam_max" not in ds.attrs
    # an NQM predicts itself: the best ρ and the ranks (Spearman 1 wherever the ranks are not all tied)
    np.testing.assert_array_equal(ds.best_rho_predicted.values, ds.best_rho_observed.values)
    assert np.isfinite(ds.best_rho_observed.values).all()
    correlation = ds.rank_correlation.values
    assert np.isfinite(correlation).any() and (correlation[np.isfinite(correlation)] == pytest.approx(1.0))


@pytest.mark.parametrize("problem", ["digits-logistic", "digits-mlp"])
def test_nqm_transfer_runs_end_to_end_on_the_digits(problem, tmp_path, capsys):
    from nqm.cli import main

    out = tmp_path / "t.nc"
    argv = ["transfer", "--problem", problem, "--method", "sgdm", "ab", "--lr", "0.5", "4", "--momentum", "0.9",
            "--delay", "0", "2", "--steps", "30", "--out", str(out)]
    assert main(argv) == 0
    ds = nqm.io.load_dataset(out)
    assert ds.lr_stable_predicted.dims == ("method", "delay", "momentum") and ds.sizes["lr"] == 2
    assert ds.attrs["problem"] == problem and ds.attrs["lam_max"] > 0
    assert "stability boundary" in capsys.readouterr().out


@pytest.mark.parametrize("case, message", [
    (dict(rho=[-0.5]), "rho=-0.5 is invalid"),
    (dict(seed=[1, 1]), "seeds must be distinct"),
    (dict(seed=[]), "non-empty list of seeds"),
    (dict(methods=["adam"]), "with a momentum"),
])
def test_transfer_bad_input_is_one_line(case, message):
    from nqm.transfer.compare import transfer

    with pytest.raises(nqm.NqmError, match=message) as error:
        transfer("quadratic", lr=[0.1], momentum=[0.0], steps=10, **case)
    assert "\n" not in str(error.value)


def test_the_nqm_of_a_noisy_nqm_predicts_its_critical_batch_size_under_delay():
    """Minibatches of a noisy NQM written as a model: its NQM (as many examples, the same noise) runs
    the same cells at every batch size, so the critical batch sizes are the model's."""
    from nqm.transfer.compare import transfer

    sizes = [4, 16, 64, 128]
    ds = transfer("quadratic-noisy", methods=["sgdm"], lr=np.geomspace(0.003, 3.0, 12), momentum=[0.0, 0.9],
                  delays=[0, 4], steps=3000, x64=True, batch_size=sizes)
    np.testing.assert_array_equal(ds.status_predicted.values, ds.status_observed.values)
    assert ds.fastest_steps_observed.dims == ("method", "delay", "batch_size")
    fastest = ds.fastest_steps_observed.values
    from nqm.transfer.compare import RISE
    assert np.isfinite(fastest).all() and (fastest[..., 1:] <= RISE * fastest[..., :-1]).all()  # less noise: fewer
    critical = ds.critical_batch_size_observed.values
    assert (ds.consistent_observed.values == 1).all() and np.isfinite(critical).all()
    np.testing.assert_array_equal(ds.critical_batch_size_ratio.values, 1.0)
    from nqm.search.scaling import critical_batch_size
    assert critical[0, 1] == critical_batch_size(sizes, fastest[0, 1]) and sizes[0] < critical[0, 1] < sizes[-1]


def test_a_curve_that_rises_with_the_batch_size_has_no_critical_batch_size_and_both_share_an_anchor():
    from nqm.search.scaling import critical_batch_size
    from nqm.transfer.compare import RISE, critical_batch_sizes

    curves = np.array([[[800.0, 400, 300, 260]], [[800.0, 400, 400 * RISE * 1.01, 260]],  # (method, delay, B)
                       [[800.0, 400, 300, 260]]])
    observed = curves.copy()
    observed[2, 0, 0] = np.nan  # the model settles from B = 2 on: both sides are read from there
    ds = xr.Dataset({f"best_steps_{side}": (("method", "delay", "batch_size", "momentum"), c[..., None])
                     for side, c in (("predicted", curves), ("observed", observed))},
                    coords={"method": ["a", "b", "c"], "delay": [0], "batch_size": [1, 2, 4, 8], "momentum": [0.0]})
    out = xr.Dataset(critical_batch_sizes(ds))
    assert out.consistent_observed.values.ravel().tolist() == [1, 0, 1]
    assert out.critical_batch_size_observed.values[0, 0] == critical_batch_size([1, 2, 4, 8], curves[0, 0])
    assert np.isnan(out.critical_batch_size_observed.values[1, 0])  # a miss is no value
    assert out.critical_batch_size_predicted.values[2, 0] == critical_batch_size([2, 4, 8], curves[2, 0, 1:])
    assert out.critical_batch_size_ratio.values[2, 0] == 1.0


def test_nqm_transfer_compares_several_seeds_and_batch_sizes(tmp_path, capsys):
    from nqm.cli import main

    out = tmp_path / "t.nc"
    argv = ["transfer", "--problem", "quadratic-noisy", "--method", "sgdm", "ab", "--rho", "0.25", "1",
            "--lr", "geom:0.01:1:3", "--momentum", "0.5", "--delay", "0", "2", "--steps", "200",
            "--batch-size", "8", "64", "--seed", "0", "1", "--out", str(out)]
    assert main(argv) == 0
    ds = nqm.io.load_dataset(out)
    assert dict(ds.sizes) == {"seed": 2, "batch_size": 2, "method": 3, "delay": 2, "momentum": 1, "lr": 3}
    printed = capsys.readouterr().out
    assert "seed 1: B = 64: " in printed and "seed 1: critical batch size" in printed and "best ρ" in printed


# ------------------------------------------------------------------ your model (nqm transfer --model)

LEAST_SQUARES = """
import jax.numpy as jnp
import numpy as np


def build(noise=0.0):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((240, 24)) * np.geomspace(1.0, 0.1, 24)
    y = x @ rng.standard_normal(24) + noise * rng.standard_normal(240)
    loss = lambda p, b: 0.5 * jnp.mean((b["x"] @ p["w"] - b["y"]) ** 2)
    return loss, {"w": jnp.zeros(24)}, {"x": jnp.asarray(x), "y": jnp.asarray(y)}


def noisy():
    return build(noise=0.3)
"""


def test_your_least_squares_model_is_predicted_exactly(tmp_path, monkeypatch, capsys):
    """nqm transfer --model MODULE:FUNCTION on least squares with 24 parameters and no label noise:
    its NQM (measured exactly, from the model's own initial error) predicts SGDM's best steps at
    D ∈ {0, 4}, m ∈ {0, 0.9} within 2 % in every cell where both settle (here: every cell, to the
    step), and the same stability boundaries; the report shows both sides and the threshold."""
    from nqm.cli import main

    (tmp_path / "lsq.py").write_text(LEAST_SQUARES)
    monkeypatch.chdir(tmp_path)
    argv = ["transfer", "--model", "lsq:build", "--method", "sgdm", "--delay", "0", "4", "--momentum", "0", "0.9",
            "--lr", "geom:0.01:3:25", "--steps", "4000", "--target", "0.001", "--out", "t.nc"]
    assert main(argv) == 0
    ds = nqm.io.load_dataset("t.nc")
    predicted, observed = ds.best_steps_predicted.values, ds.best_steps_observed.values
    both = np.isfinite(predicted) & np.isfinite(observed)
    assert both.all() and (np.abs(predicted / observed - 1) <= 0.02).all(), (predicted, observed)
    np.testing.assert_array_equal(ds.lr_stable_predicted.values, ds.lr_stable_observed.values)
    assert ds.attrs["problem"] == "lsq:build" and ds.attrs["nqm_initial_loss"] == pytest.approx(
        ds.attrs["initial_loss"], rel=1e-5)
    printed = capsys.readouterr().out
    assert "nan" not in printed and "threshold 0.0276" in printed and "none dropped" in printed
    assert f"steps {predicted[0, 1, 1]:.0f} / {observed[0, 1, 1]:.0f}" in printed


def test_a_model_with_a_floor_asks_its_nqm_for_the_same_decrease(tmp_path):
    """With label noise the least-squares loss has a floor L* > 0 and the NQM's is 0: its target is
    the model's less L* (the same decrease from the start), so the prediction is exact again; a
    target below L* is out of reach of both, and the NQM says why."""
    import importlib
    import sys

    from nqm.transfer.compare import transfer

    (tmp_path / "lsq_floor.py").write_text(LEAST_SQUARES)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("lsq_floor")
    finally:
        sys.path.remove(str(tmp_path))
    loss, params, data = module.noisy()
    x, y = np.asarray(data["x"]), np.asarray(data["y"])
    floor = 0.5 * np.mean((x @ np.linalg.lstsq(x, y, rcond=None)[0] - y) ** 2)
    grid = dict(methods=["sgdm"], delays=[0, 4], momentum=[0.0, 0.9], lr=np.geomspace(0.01, 3, 25), steps=4000,
                x64=True)
    ds = transfer(model=module.noisy, target=floor + 0.001, **grid)
    assert ds.attrs["nqm_target"] == pytest.approx(0.001, rel=1e-6)
    predicted, observed = ds.best_steps_predicted.values, ds.best_steps_observed.values
    assert np.isfinite(observed).all() and (np.abs(predicted / observed - 1) <= 0.02).all(), (predicted, observed)
    below = transfer(model=(loss, params, data), target=0.9 * floor, **grid)
    assert below.attrs["nqm_target"] < 0 and "no NQM run reaches it" in below.attrs["nqm_target_rule"]
    assert not np.isin(below.status_predicted.values, [1, 2]).any()
    assert not np.isin(below.status_observed.values, [1, 2]).any()  # nor does the model: L* is above the target


def test_a_result_of_nqm_transfer_is_read_by_nqm_load_and_its_readers(tmp_path, capsys):
    """nqm.load reads a comparison as it was written; nqm summary and nqm plot describe it or name
    it for what it is, in one line, writing nothing."""
    from nqm.cli import main
    from nqm.transfer.compare import transfer

    path = tmp_path / "t.nc"
    ds = transfer("quadratic", methods=["sgdm"], delays=[0], lr=[0.5], momentum=[0.0], steps=50)
    nqm.io.save(ds, path)
    loaded = nqm.load(path)
    np.testing.assert_array_equal(loaded.status_observed.values, ds.status_observed.values)
    assert loaded.attrs["problem"] == "quadratic"
    for argv in (["summary", str(path)], ["plot", str(path), "--out", str(tmp_path / "f.png")]):
        capsys.readouterr()
        code = main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 0 or (code == 2 and len(err) == 1 and "transfer" in err[0]), (code, err)
    assert sorted(p.name for p in tmp_path.iterdir()) in (["t.nc"], ["f.png", "t.nc"])


# ------------------------------------------------------------------ a problem that starts where the model starts

def test_a_problem_without_an_initial_error_is_the_convention_to_the_bit():
    lam = nqm.zhang(20).eigenvalues
    plain, ones = nqm.zhang(20), nqm.explicit(lam, initial=np.ones(20))
    assert plain.initial is None and ones.initial is None  # all ones is the convention, stored as such
    assert ones.describe() == nqm.explicit(lam).describe() and "initial_sha256" not in plain.describe()
    np.testing.assert_array_equal(plain.w0, np.ones(20))
    assert plain.initial_loss == float(0.5 * lam.sum())


def test_the_engine_and_the_exact_mode_start_from_a_problems_initial_error():
    """SGD without noise and delay is (1 − ηλ)^t per component from u₀: T in closed form, which the
    engine finds, and under delay the engine and the exact mode agree; another start, other T."""
    lam, u = nqm.zhang(12).eigenvalues, np.linspace(3.0, -0.2, 12)
    problem = nqm.explicit(lam, initial=u)
    assert problem.initial_loss == pytest.approx(0.5 * np.sum(lam * u**2), rel=1e-15)
    assert {"initial_sha256", "initial_loss"} <= set(problem.describe())
    rotated = problem.with_rotation(3)
    np.testing.assert_allclose(rotated.to_eigenbasis(rotated.w0), u, atol=1e-12)
    lr = np.array([0.3, 1.0, 1.5])
    sgd = nqm.sweep("sgdm", lr=lr, momentum=0.0, problem=problem, max_steps=3000, x64=True, first_passage=True,
                    progress=False).steps.values.ravel()
    t = np.arange(1, 3001)
    loss = 0.5 * np.sum(lam * u**2 * (1 - lr[:, None, None] * lam) ** (2 * t[:, None]), -1)
    np.testing.assert_array_equal(sgd, 1 + np.argmax(loss < 0.01, -1))
    grid = dict(lr=[0.3, 1.0, 1.9], momentum=[0.0, 0.5], delay=2, max_steps=3000)
    engine = nqm.sweep("sgdm", problem=problem, x64=True, progress=False, **grid)
    exact = nqm.expected.sweep("sgdm", problem=problem, **grid)
    np.testing.assert_array_equal(engine.steps.values, exact.steps.values)
    np.testing.assert_array_equal(engine.status.values, exact.status.values)
    ones = nqm.sweep("sgdm", problem=nqm.explicit(lam), x64=True, progress=False, **grid)
    assert (ones.steps.values != engine.steps.values).any()


@pytest.mark.parametrize("initial, message", [
    (np.ones(3), "one value per eigenvalue"), ([1.0, np.nan, 1.0, 1.0], "finite"), (np.zeros(4), "not all zero"),
    ("ones", "1-D list of numbers"),
])
def test_a_bad_initial_error_is_one_line(initial, message):
    with pytest.raises(nqm.NqmError, match=message) as error:
        nqm.explicit([1.0, 0.5, 0.25, 0.1], initial=initial)
    assert "\n" not in str(error.value)


def test_the_nqm_measured_exactly_runs_as_the_model_trains(tmp_path, monkeypatch):
    """A least-squares model's NQM, measured exactly, is an nqm.Problem that starts where the
    model starts: nqm.sweep on it reaches the target at the step the model does, cell by cell."""
    from nqm.transfer.problems import model

    (tmp_path / "lsq_sweep.py").write_text(LEAST_SQUARES)
    monkeypatch.chdir(tmp_path)
    real = model("lsq_sweep:build", target=1e-3)
    problem = measure(real.loss, real.params, real.data).problem()
    grid = dict(lr=np.geomspace(0.01, 0.5, 6), momentum=[0.0, 0.9], delay=4)
    trained = nqm.transfer.train(real.loss, real.params, real.data, "sgdm", steps=4000, target=1e-3, **grid)
    swept = nqm.sweep("sgdm", problem=problem, max_steps=4000, target=1e-3, x64=True, first_passage=True,
                      progress=False, **grid).squeeze()
    reached = trained.steps.values > 0
    assert reached.sum() >= 5
    np.testing.assert_array_equal(swept.steps.values[reached], trained.steps.values[reached])
