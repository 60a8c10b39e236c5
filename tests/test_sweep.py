"""Sweeps: labelled results, agreement with the engine, save/load, resume, and bad input."""

import numpy as np
import pytest

import nqm
from nqm import engine
from nqm.optimizers import make

PROBLEM = nqm.zhang(300)
GRID = dict(lr=np.geomspace(0.05, 3, 5), momentum=[0.0, 0.9], delay=[0, 2], noise=[0.0, 0.02], seed=0)
FAST = dict(problem=PROBLEM, max_steps=2000, progress=False)


@pytest.fixture(scope="module")
def ab_result():
    return nqm.sweep("ab", rho=[0.0, 0.5], **GRID, **FAST)


def test_dimensions_coordinates_and_types(ab_result):
    ds = ab_result
    assert ds.steps.dims == ("delay", "noise", "rho", "seed", "momentum", "lr")
    assert ds.sizes == {"delay": 2, "noise": 2, "rho": 2, "seed": 1, "momentum": 2, "lr": 5}
    assert ds.steps.dtype == np.int32 and ds.status.dtype == np.int8
    assert set(np.unique(ds.status.values)) <= {-1, 0, 1, 2}
    np.testing.assert_allclose(ds.lr.values, GRID["lr"])
    sgdm = nqm.sweep("sgdm", lr=0.1, momentum=0.5, **FAST)
    assert "rho" not in sgdm.dims and sgdm.steps.dims == ("delay", "noise", "seed", "momentum", "lr")


def test_attributes_record_every_setting(ab_result):
    a = ab_result.attrs
    assert a["method"] == "ab" and a["group"] == "global" and a["micro_steps"] == 1 and a["mode"] == "both"
    assert a["convention"] == "undampened: v = m v + g" and a["dampening"] == 0
    assert a["spectrum"] == "zhang(1/j, N=300)" and a["dim"] == 300 and a["rotation_seed"] == -1
    assert a["target"] == 0.01 and a["max_steps"] == 2000 and a["seed"] == "0"
    assert a["nqm_version"] == nqm.__version__ and a["dtype"] == "float32"
    assert a["noise_mode"] == "common random numbers"


def test_each_cell_equals_a_direct_engine_run(ab_result):
    config = engine.RunConfig(max_steps=2000, progress=False)
    for delay in (0, 2):
        cell = ab_result.sel(delay=delay, noise=0.02, rho=0.5, seed=0, momentum=0.9)
        out = engine.simulate(PROBLEM,
                              engine.Cells(make("ab", delay=delay), {"lr": GRID["lr"], "momentum": np.full(5, 0.9),
                              "rho": np.full(5, 0.5)}, np.full(5, 0.02), delay=delay), config)
        np.testing.assert_array_equal(cell.steps.values, out.steps)
        np.testing.assert_array_equal(cell.status.values, out.status)


def test_a_cell_does_not_depend_on_the_grid_around_it(ab_result):
    small = nqm.sweep("ab", lr=GRID["lr"][[1, 3]], momentum=0.9, delay=2, noise=0.02, rho=0.5, **FAST)
    big = ab_result.sel(lr=small.lr, momentum=[0.9], delay=[2], noise=[0.02], rho=[0.5])
    np.testing.assert_array_equal(small.steps.values, big.steps.values)
    np.testing.assert_array_equal(small.loss.values, big.loss.values)


def test_seeds_are_a_dimension_and_reproducible():
    kw = dict(lr=[0.3, 1.0], momentum=0.5, noise=0.05, **FAST)
    a = nqm.sweep("sgdm", seed=[0, 1], **kw)
    b = nqm.sweep("sgdm", seed=[1], **kw)
    np.testing.assert_array_equal(a.sel(seed=[1]).loss.values, b.loss.values)
    assert not np.array_equal(a.sel(seed=0).loss.values, a.sel(seed=1).loss.values)


def test_save_and_load_round_trip(ab_result, tmp_path):
    path = tmp_path / "r.nc"
    nqm.save(ab_result, path)
    back = nqm.load(path)
    assert back.identical(ab_result)


def test_interrupted_sweep_resumes_without_lost_or_repeated_cells(tmp_path, monkeypatch, interrupt_at_store):
    kw = dict(lr=np.geomspace(0.05, 3, 6), momentum=[0.0, 0.5, 0.9], delay=[0, 3], noise=0.02,
              problem=PROBLEM, max_steps=1500, chunk_steps=50, progress=False)
    uninterrupted = nqm.sweep("sgdm", **kw)
    path = tmp_path / "partial.nc"
    interrupt_at_store(3)
    with pytest.raises(KeyboardInterrupt):
        nqm.sweep("sgdm", checkpoint=path, checkpoint_every=0.0, **kw)
    interrupt_at_store.disarm()
    saved = nqm.load(path)
    finished = int((saved.status.values != engine.RUNNING).sum())
    assert 0 < finished < saved.status.size

    simulated = []
    original_simulate = engine.simulate
    monkeypatch.setattr(engine, "simulate", lambda *a, **k: simulated.append(len(a[1].sigma)) or original_simulate(*a, **k))
    resumed = nqm.sweep("sgdm", checkpoint=path, **kw)
    assert sum(simulated) == saved.status.size - finished  # only the missing cells ran
    assert resumed.drop_attrs().identical(uninterrupted.drop_attrs())
    assert nqm.load(path).identical(resumed)


def test_checkpoint_of_another_sweep_is_refused(tmp_path):
    path = tmp_path / "c.nc"
    nqm.sweep("sgdm", lr=[0.1], momentum=0.5, checkpoint=path, **FAST)
    with pytest.raises(nqm.NqmError, match="different sweep"):
        nqm.sweep("sgdm", lr=[0.2], momentum=0.5, checkpoint=path, **FAST)


@pytest.mark.parametrize("kwargs,message", [
    (dict(lr=[0.1, -1.0]), "lr=-1 is invalid"),
    (dict(lr=0.0), "lr=0 is invalid"),
    (dict(lr=[np.nan]), "lr=nan is invalid"),
    (dict(momentum=1.0), "momentum=1 is invalid"),
    (dict(momentum=-0.1), "momentum=-0.1 is invalid"),
    (dict(delay=-1), "delay=-1 is invalid"),
    (dict(delay=1.5), "delay=1.5 is invalid"),
    (dict(noise=-0.1), "noise=-0.1 is invalid"),
    (dict(lr=[]), "lr is empty"),
    (dict(lr=[0.1, 0.1]), "repeated"),
    (dict(method="no-such-method"), "unknown method 'no-such-method'"),
    (dict(method="ab", rho=-0.5), "rho=-0.5 is invalid"),
    (dict(method="ab", group="rows"), "unknown group 'rows'"),
    (dict(method="ab", group="blocks:x"), "blocks:K"),
    (dict(method="ab", mode="sideways"), "unknown AB mode"),
    (dict(method="ab", micro_steps=0), "micro_steps"),
    (dict(rho=0.5), "rho is not a hyperparameter of method 'sgdm'"),
    (dict(group="element"), "do not apply to method 'sgdm'"),
    (dict(max_steps=0), "max_steps"),
    (dict(target=-1.0), "target"),
    (dict(colour="red"), "unknown option"),
])
def test_bad_input_is_a_one_line_error(kwargs, message):
    kw = dict(method="sgdm", lr=0.1, momentum=0.5, **FAST)
    kw.update(kwargs)
    with pytest.raises(nqm.NqmError, match=message) as info:
        nqm.sweep(kw.pop("method"), **kw)
    assert "\n" not in str(info.value)


def test_bad_problems_are_refused():
    for make_problem, message in [(lambda: nqm.explicit([1.0, -0.1]), "> 0"), (lambda: nqm.explicit([]), "non-empty"),
                                  (lambda: nqm.zhang(0), "dim must be an integer"), (lambda: nqm.loguniform(4, 1, 0.1), "lo <= hi"),
                                  (lambda: nqm.zhang(10_000).with_rotation(0), "dense")]:
        with pytest.raises(nqm.NqmError, match=message):
            make_problem()


def test_unreadable_files_are_refused(tmp_path):
    bad = tmp_path / "bad.nc"
    bad.write_text("not netcdf")
    with pytest.raises(nqm.NqmError, match="cannot read"):
        nqm.load(bad)
    with pytest.raises(nqm.NqmError, match="no such file"):
        nqm.load(tmp_path / "missing.nc")
    with pytest.raises(nqm.NqmError, match="does not exist"):
        nqm.save(nqm.sweep("sgdm", lr=0.1, momentum=0.5, **FAST), tmp_path / "no" / "r.nc")


def test_failed_save_leaves_the_previous_file_intact(tmp_path, monkeypatch, ab_result):
    path = tmp_path / "r.nc"
    nqm.save(ab_result, path)
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(type(ab_result), "to_netcdf", broken)
    with pytest.raises(OSError):
        nqm.save(ab_result, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.nc"]


def test_problem_loss_is_rotation_invariant_and_splits_by_component():
    plain = nqm.loguniform(6, 1e-2, 1.0)
    turned = plain.with_rotation(7)
    q = turned.rotation
    np.testing.assert_allclose(q.T @ q, np.eye(6), atol=1e-12)
    w = np.random.default_rng(0).standard_normal(6)
    np.testing.assert_allclose(turned.loss(q @ w), plain.loss(w), rtol=1e-12)
    np.testing.assert_allclose(turned.component_loss(q @ w), 0.5 * plain.eigenvalues * w**2, rtol=1e-10)
    assert turned.loss(turned.w0) == pytest.approx(turned.initial_loss, rel=1e-12)


def test_independent_noise_cell_identities_do_not_collide():
    from nqm.jobs import cell_uids

    lr, m = np.meshgrid(np.geomspace(1e-4, 10, 1000), np.linspace(0, 0.99, 300))
    uids = cell_uids({"lr": lr.ravel(), "momentum": m.ravel(), "noise": np.full(lr.size, 0.01)})
    assert uids.shape == (lr.size, 2)
    # 300,000 cells: a 32-bit identity would collide with probability ~ n²/2³³ ≈ 1 - e^-10.
    assert np.unique(uids, axis=0).shape[0] == lr.size
