"""nqm.search.best: the smallest T over a box, checked against brute-force sweeps run here."""

import itertools
import json

import numpy as np
import pytest
import xarray as xr

import nqm
from nqm import expected, sweeps
from nqm.engine import loop
from nqm.errors import NqmError
from nqm.search import answer, describe, setup
from nqm.search.api import best
from nqm.status import SKIPPED

# A smooth edge (log-uniform spectrum): no converged islands beyond it for a fine grid to hit by luck.
PROBLEM = nqm.loguniform(60, 1e-2, 1)
RUN = dict(problem=PROBLEM, max_steps=3000, progress=False)
BOX = dict(lr=(0.01, 4.0), momentum=(0.0, 0.99))
SMALL = dict(problem=nqm.zhang(20), max_steps=1000, progress=False)


def t_of(ds):
    """T of every cell of a sweep: its steps where it reached the target, else ∞."""
    return np.where(ds.status.values == nqm.REACHED, ds.steps.values, np.inf)


def sweep_at(point, method="sgdm", **kw):
    """``(status, steps)`` of ``nqm.sweep`` at one point (each parameter a one-value grid)."""
    ds = nqm.sweep(method, **{k: [v] for k, v in point.items()}, **kw)
    return int(ds.status.values.item()), int(ds.steps.values.item())


def nudges(point, delta):
    """Every combination of lr(1 ± δ), 1 − (1 − m)(1 ± δ) (≥ 0) and p(1 ± δ) of the searched ones."""
    options = []
    for name, value in point.items():
        if name == "momentum":
            options.append([value, max(0.0, 1 - (1 - value) * (1 - delta)), max(0.0, 1 - (1 - value) * (1 + delta))])
        else:
            options.append([value, value * (1 - delta), value * (1 + delta)])
    return [dict(zip(point, combo)) for combo in itertools.product(*options)]


@pytest.fixture(scope="module")
def searched():
    return best("sgdm", **BOX, delay=4, max_cells=230, **RUN)


@pytest.fixture(scope="module")
def robust():
    return best("sgdm", **BOX, delay=4, robust=0.1, max_cells=3000, **RUN)


def test_beats_a_fine_grid_with_a_tenth_of_its_cells(searched):
    n = 48
    grid = nqm.sweep("sgdm", lr=np.geomspace(0.01, 4.0, n), momentum=1 - np.geomspace(1.0, 0.01, n), delay=4, **RUN)
    found = answer(searched)
    assert found["cells"] <= n * n // 10 and int((searched.status != SKIPPED).sum()) == found["cells"]
    assert found["t_star"] <= t_of(grid).min()


def test_the_reported_point_gives_the_reported_t_in_a_sweep(searched):
    found = answer(searched)
    assert sweep_at(found["point"], delay=4, **RUN) == (nqm.REACHED, found["t_star"])
    # ... and it is the smallest T among the evaluated points, every one of them in the box
    assert found["t_star"] == searched.median_steps.min()
    inside = (searched.lr >= 0.01) & (searched.lr <= 4.0) & (searched.momentum >= 0) & (searched.momentum <= 0.99)
    assert bool(inside.all())


def test_points_are_distinct_and_the_search_deterministic(searched):
    rows = np.stack([searched.lr.values, searched.momentum.values], 1)
    assert np.unique(rows, axis=0).shape[0] == rows.shape[0]
    assert int((searched.round_number == 0).sum()) == setup.COARSE[2] ** 2  # round 0: the default coarse grid
    xr.testing.assert_identical(best("sgdm", **BOX, delay=4, max_cells=230, **RUN), searched)


def test_every_neighbour_of_the_robust_point_converges_within_its_robust_t(robust):
    found = answer(robust)
    assert set(found) == {"t_star", "point", "robust_t_star", "robust_point", "cells"}
    around = [sweep_at(p, delay=4, **RUN) for p in nudges(found["robust_point"], 0.1)]
    assert len(around) == 9
    assert all(status == nqm.REACHED for status, _ in around)
    assert max(steps for _, steps in around) == found["robust_t_star"] >= found["t_star"]


def test_a_knife_edge_point_is_never_robust(robust):
    found = answer(robust)
    # The plain best sits on the edge: a nudge of it diverges, so it cannot be the robust answer.
    edge = [sweep_at(p, delay=4, **RUN) for p in nudges(found["point"], 0.1)]
    assert any(status != nqm.REACHED for status, _ in edge)
    assert found["robust_point"] != found["point"]
    # Every point with a robust T has its whole neighbourhood in the result, all converged, T ≤ it;
    # every converged point with a failed neighbour in the result has none.
    key = {(lr, m): t for lr, m, t in zip(robust.lr.values, robust.momentum.values, robust.median_steps.values)}
    checked = 0
    for lr, m, r in zip(robust.lr.values, robust.momentum.values, robust.robust_steps.values):
        ts = [key.get((p["lr"], p["momentum"])) for p in nudges({"lr": lr, "momentum": m}, 0.1)]
        if np.isfinite(r):
            assert None not in ts and max(ts) == r
            checked += 1
        elif any(t is not None and np.isinf(t) for t in ts):
            assert np.isinf(r) or np.isnan(r)
    assert checked > 1 and robust.robust_steps.min() == found["robust_t_star"]


def test_seed_summary_equals_per_seed_sweeps():
    ds = best("sgdm", lr=(0.05, 1.5), momentum=(0.0, 0.9), delay=1, noise=0.05, seeds=3, seed=4, max_cells=330,
              **SMALL)
    found = answer(ds)
    per_seed = [sweep_at(found["point"], delay=1, noise=0.05, seed=s, **SMALL) for s in (4, 5, 6)]
    ts = np.array([steps if status == nqm.REACHED else np.inf for status, steps in per_seed], float)
    assert np.isfinite(ts).sum() >= 2 and len(set(ts)) > 1  # the seeds differ
    assert found["seeds"]["median"] == found["t_star"] == np.median(ts)
    assert found["seeds"]["min"] == ts.min()
    assert found["seeds"]["max"] == (ts.max() if np.isfinite(ts.max()) else None)
    assert list(ds.seed.values) == [4, 5, 6] and ds.steps.dims == ("seed", "point")


def test_answers_are_settled_in_every_seed():
    # Adam's noisy answers here held one unsettled seed while a point's T was the plain median (b2 =
    # 0.99 keeps its settling runs 3,200 steps long, not 32,000; under the plain median this fails too)
    regime = dict(b2=0.99, delay=0, noise=0.3, **SMALL)
    ds = best("adam", lr=(0.001, 0.5), seeds=5, seed=0, max_cells=400, robust=0.05, **regime)
    a = ds.attrs
    for prefix in ("best", "robust"):
        cells = [sweep_at({"lr": a[f"{prefix}_lr"]}, "adam", seed=s, **regime) for s in range(5)]
        assert [status for status, _ in cells] == [nqm.REACHED] * 5, prefix
        if prefix == "best":
            assert a["seeds_max"] == max(steps for _, steps in cells)


def test_expected_gives_a_point_whose_t_is_the_exact_expected_sweep():
    exact = dict(delay=1, noise=0.01, problem=nqm.zhang(30), max_steps=2000)
    for method, momentum in (("sgdm", (0.0, 0.95)), ("sgd", 0.0)):
        ds = best(method, lr=(0.05, 2.0), momentum=momentum, expected=True, max_cells=250, **exact)
        found = answer(ds)
        cell = expected.sweep(method, lr=[found["point"]["lr"]], momentum=[found["point"]["momentum"]], **exact)
        assert (cell.status.values.item(), cell.steps.values.item()) == (nqm.REACHED, found["t_star"])
        assert ds.attrs["noise_mode"] == "exact expected loss" and ds.attrs["method"] == method


def test_expected_searches_under_iid_delays():
    exact = dict(delay="uniform:0:2", noise=0.01, problem=nqm.zhang(10), max_steps=1000)
    ds = best("sgdm", lr=(0.05, 2.0), momentum=(0.0, 0.9), expected=True, max_cells=100, **exact)
    found = answer(ds)
    cell = expected.sweep("sgdm", lr=[found["point"]["lr"]], momentum=[found["point"]["momentum"]], **exact)
    assert (cell.status.values.item(), cell.steps.values.item()) == (nqm.REACHED, found["t_star"])
    assert ds.attrs["delay"] == "uniform:0:2"


@pytest.mark.parametrize("method, name, box", [("ab", "rho", (0.1, 1.0)), ("dc-asgd", "lambda_dc", (0.01, 1.0))])
def test_searches_a_method_hyperparameter(method, name, box):
    ds = best(method, lr=(0.05, 2.0), momentum=0.5, **{name: box}, delay=2, max_cells=300, **SMALL)
    found = answer(ds)
    assert set(found["point"]) == {"lr", "momentum", name} and found["point"]["momentum"] == 0.5
    assert np.all(ds.momentum.values == 0.5)  # a fixed parameter stays fixed
    assert np.unique(ds[name].values).size > 5 and box[0] <= found["point"][name] <= box[1]
    assert sweep_at(found["point"], method, delay=2, **SMALL) == (nqm.REACHED, found["t_star"])


def test_a_method_hyperparameter_left_out_is_the_sweeps_default():
    ds = best("ab", lr=(0.05, 2.0), momentum=(0.0, 0.9), delay=2, max_cells=200, **SMALL)
    assert np.all(ds.rho.values == 0.5) and answer(ds)["point"]["rho"] == 0.5


def test_save_load_round_trip(robust, tmp_path):
    path = tmp_path / "best.nc"
    nqm.save(robust, path)
    loaded = nqm.load(path)
    xr.testing.assert_identical(loaded, robust)
    assert answer(loaded) == answer(robust)


def test_answer_is_plain_json_with_the_keys_asked_for(searched, robust):
    assert list(answer(searched)) == ["t_star", "point", "cells"]
    assert list(answer(robust)) == ["t_star", "point", "robust_t_star", "robust_point", "cells"]
    for ds in (searched, robust):
        text = json.dumps(answer(ds), allow_nan=False)
        assert json.loads(text) == answer(ds)
    regime = searched.attrs
    assert regime["method"] == "sgdm" and regime["delay"] == "4" and regime["dim"] == 60
    assert regime["box"] == "lr=0.01:4, momentum=0:0.99" and regime["tol"] == 0.01 and regime["robust"] == "none"
    assert regime["cells"] == answer(searched)["cells"] and regime["max_steps"] == 3000


def test_finds_a_thin_converging_band_the_coarse_grid_misses():
    run = dict(RUN, max_steps=260)  # only a thin band next to the edge converges within 260 steps
    ds = best("sgdm", lr=(0.01, 2.0), momentum=(0.0, 0.99), delay=4, max_cells=600, **run)
    assert not (ds.status.values[:, ds.round_number.values == 0] == nqm.REACHED).any()
    found = answer(ds)
    assert sweep_at(found["point"], delay=4, **run) == (nqm.REACHED, found["t_star"])


def test_nothing_converging_is_an_answer_without_a_point():
    ds = best("sgdm", lr=(50.0, 100.0), momentum=(0.0, 0.5), max_cells=100, **SMALL)
    # every point is unstable, which SGDM's exact test knows before running: none is run
    assert answer(ds) == {"t_star": None, "point": None, "cells": 0} and ds.point.size == 64
    assert (ds.status.values == SKIPPED).all() and "-2: not run" in ds.status.attrs["meaning"]
    run = best("sgdm", lr=(50.0, 100.0), momentum=(0.0, 0.5), max_cells=100, **{**SMALL, "first_passage": True})
    assert answer(run) == {"t_star": None, "point": None, "cells": 64}  # (the first passage has no such test)


def test_nothing_converging_over_seeds_is_said_in_words():
    ds = best("sgdm", lr=(50.0, 100.0), momentum=(0.0, 0.5), seeds=2, max_cells=200, **SMALL)
    assert describe(ds).splitlines()[1:] == ["no point of the box reached the target", "over 2 seeds: no seed converged"]


def test_compiles_once_for_rounds_of_every_size():
    kw = dict(lr=(0.05, 3.0), momentum=(0.0, 0.95), delay=3, **SMALL)
    best("sgdm", **kw, max_cells=100)
    before = loop.advance._cache_size()
    ds = best("sgdm", **kw, robust=0.05, max_cells=1000)
    sizes = np.unique(np.bincount(ds.round_number.values))
    # Batches of 16 cells on CPU (whole blocks per device): one shape, whatever the round sizes.
    assert sizes.size >= 5 and sizes.min() >= 16 and loop.advance._cache_size() - before == 0


BAD = [
    (dict(lr=(1.0, 0.5)), "empty"),
    (dict(lr=(0.5, 0.5)), "empty"),
    (dict(lr=(0.0, 1.0)), "lr"),
    (dict(momentum=(0.5, 1.0)), "momentum"),
    (dict(momentum=(0.0, 0.5, 0.9)), "pair"),
    (dict(robust=0.0), "robust"),
    (dict(robust=1.0), "robust"),
    (dict(robust=True), "robust"),
    (dict(tol=0.0), "tol"),
    (dict(tol=float("nan")), "tol"),
    (dict(max_cells=10), "max_cells"),
    (dict(seeds=0), "seeds"),
    (dict(seed=[0, 1]), "seed"),
    (dict(noise=[0.0, 0.1]), "noise"),
    (dict(method="no-such-method"), "unknown method"),
    (dict(rho=(0.1, 1.0)), "rho"),
    (dict(method="ab", rho=(0.0, 1.0)), "log scale"),
    (dict(lr=0.1, momentum=0.5), "nothing to search"),
    (dict(method="ab", expected=True), "linear method"),
    (dict(delay="workers:4", expected=True), "worker pool"),
    (dict(seeds=2, expected=True), "seeds"),
    (dict(expected=True, x64=True), "expected"),
    (dict(method="sgd", expected=True), "momentum"),
    (dict(delay=-1), "delay"),
    (dict(max_steps=0), "max_steps"),
    (dict(coarse=1), "coarse"),
    (dict(max_cells=setup.COARSE[2] ** 2 - 1), f"too small for the coarse grid ({setup.COARSE[2]}^2 points"),
    (dict(width=0), "width"),
    (dict(problem="zhang"), "problem must be an nqm Problem"),
    (dict(noise=None), "noise"),
    # every value the search may evaluate is checked first: a box end's nudge beyond what float32 holds
    (dict(momentum=(0.0, 0.99999994), robust=0.6), "does not hold"),
    (dict(robust=1e-300), "too small"),  # nudges that round to their point
    (dict(robust=1e-9), "too small"),
]


@pytest.mark.parametrize("kwargs, words", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_one_line_before_any_work(kwargs, words, monkeypatch):
    def refuse(*args, **kw):
        raise AssertionError("evaluated before the input was checked")

    monkeypatch.setattr(sweeps, "evaluate_job", refuse)  # where a search runs its rounds
    monkeypatch.setattr(expected, "evaluate", refuse)
    given = {"lr": (0.05, 1.0), "momentum": (0.0, 0.9), "max_cells": 500, **SMALL, **kwargs}
    with pytest.raises(NqmError) as info:
        best(given.pop("method", "sgdm"), **given)
    assert "\n" not in str(info.value) and words in str(info.value)


def test_decay_rates_are_searched_like_momentum_on_log_one_minus_x():
    """Adam's b1 spans (0, 0.999) as momentum does: on log(1 − b1), its nudges on 1 − b1. A box from
    0 is accepted (a log scale on b1 itself would refuse it) and every point lies inside it."""
    from nqm.search.refine import Axis

    for name in ("b1", "b2", "decay"):
        axis, momentum = Axis(name, 0.0, 0.999), Axis("momentum", 0.0, 0.999)
        assert [axis.at(q, 8) for q in range(9)] == [momentum.at(q, 8) for q in range(9)]
        assert axis.nudged(0.99, 0.1) == momentum.nudged(0.99, 0.1)
    ds = best("adam", lr=(1e-3, 0.5), b1=(0.0, 0.999), delay=4, problem=nqm.zhang(10), max_steps=500, max_cells=40,
              coarse=4, progress=False)
    b1 = ds.b1.values
    assert b1.min() == 0.0 and b1.max() == 0.999 and ((b1 >= 0) & (b1 <= 0.999)).all()
    assert np.isclose(np.sort(np.unique(b1))[1], 1 - 0.001 ** (1 / 3))  # the coarse grid's second b1


def test_ranked_by_steps_to_stay_a_settled_run_without_one_does_not_count(monkeypatch):
    """A settled run whose loss keeps coming back has no steps_stay (NaN): ranked by "stay" it is
    transient, never ranked at its first passage. Here the runs of the fastest half of the learning
    rates are made such runs; the answer comes from the rest, at its own steps_stay."""
    real = sweeps.evaluate
    rounds = sweeps.evaluate_job  # where a search runs each round's points

    def bursting(task, process, test, values, seeds, stay=False):
        ds = rounds(task, process, test, values, seeds, stay)
        fast = np.asarray(values["lr"]) > 0.3
        return ds.assign(steps_stay=ds.steps_stay.where(~fast)) if stay else ds

    monkeypatch.setattr(sweeps, "evaluate_job", bursting)
    box = dict(lr=(0.05, 1.0), momentum=0.5, delay=1, problem=nqm.zhang(10), max_steps=3000, max_cells=40,
               progress=False)
    found = best("sgdm", objective="stay", **box)
    fast = found.lr.values > 0.3
    settled_plain = real("sgdm", lr=found.lr.values, momentum=0.5, delay=1, problem=nqm.zhang(10), max_steps=3000,
                         progress=False).status.values[0] == nqm.REACHED
    assert (fast & settled_plain).any()
    assert (found.status.values[0][fast & settled_plain] == 2).all()  # transient, not ranked at T
    assert found.attrs["best_lr"] <= 0.3
