"""The engine against independent numpy loops, closed forms and its own invariances."""

import dataclasses
import functools

import numpy as np
import pytest

import nqm
from nqm.delays import History
import reference
from nqm import diagnostics, engine
from nqm.optimizers import make

# A small ill-conditioned problem: fast, and with both converging and diverging cells per grid.
PROBLEM = nqm.loguniform(12, 1e-2, 1.0)
QUIET = engine.RunConfig(max_steps=4000, target=1e-3, progress=False)
X64 = dataclasses.replace(QUIET, x64=True)
LR = np.array([0.03, 0.1, 0.3, 0.6, 1.2, 2.5])

VARIANTS = [
    ("sgdm", {}, {}),
    ("sgdm", {"dampening": True}, {}),
    ("shifted", {}, {}),
    ("ab", {}, {"rho": 0.5}),
    ("ab", {"group": "element"}, {"rho": 0.5}),
    ("ab", {"group": "blocks:3"}, {"rho": 0.5}),
    ("ab", {"group": np.arange(12) % 2}, {"rho": 0.5}),
    ("ab", {"micro_steps": 3}, {"rho": 0.7}),
    ("ab", {"mode": "vel-only"}, {"rho": 0.5}),
    ("ab", {"mode": "weight-only"}, {"rho": 0.5}),
    ("ab", {"alpha_max": 1.0}, {"rho": 0.9}),
    ("ab", {"alpha_min": 0.0}, {"rho": 1.2}),
]


def _labels(group):
    if group is None or isinstance(group, np.ndarray):
        return group
    if group == "element":
        return np.arange(PROBLEM.dim)
    count = int(group.split(":")[1])
    return np.arange(PROBLEM.dim) * count // PROBLEM.dim


def run(method, options, extra, delay, lr=LR, momentum=0.8, sigma=0.0, config=QUIET, problem=PROBLEM, record=None,
        seed=0):
    cells = len(lr)
    hyper = {"lr": lr, "momentum": np.broadcast_to(momentum, cells), **{k: np.full(cells, v) for k, v in extra.items()}}
    batch = engine.Cells(make(method, delay=delay, **options), hyper, np.broadcast_to(sigma, cells), delay=delay,
                         seed=seed)
    return engine.simulate(problem, batch, config, [engine.Trace(record)] if record else [])


# Delays 1 and 8 compile every variant twice more: under `pytest -m slow`.
@pytest.mark.parametrize("delay", [0, 4, pytest.param(1, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
@pytest.mark.parametrize("method,options,extra", VARIANTS, ids=lambda x: str(x) if not isinstance(x, np.ndarray) else "partition")
def test_noiseless_steps_match_numpy_reference(method, options, extra, delay):
    """T and status equal a plain float64 numpy loop of the README's update rules (±1 step, float32 and float64).

    AB is non-linear: next to its stability edge a cell's divergence step can hinge on the last
    bits (element-wise α = 1 ∓ ρ flips with the sign of g_i v_i). Such cells are found by running
    the reference again with lr·(1 + 1e-6); where the two reference answers differ by more than a
    step, T is not well defined and only the status is compared.
    """
    opts = dict(options)
    labels = _labels(opts.pop("group", None))

    def reference_steps(scale):
        return np.array([
            reference.run(PROBLEM.eigenvalues, lr * scale, 0.8, delay, method=method, labels=labels,
                          micro_steps=opts.get("micro_steps", 1), mode=opts.get("mode", "both"),
                          alpha_min=opts.get("alpha_min"), alpha_max=opts.get("alpha_max"),
                          dampening=opts.get("dampening", False), target=1e-3, max_steps=4000, **extra)
            for lr in LR
        ])

    expected, nudged = reference_steps(1.0), reference_steps(1.0 + 1e-6)
    defined = (np.abs(expected[:, 0] - nudged[:, 0]) <= 1) & (expected[:, 1] == nudged[:, 1])
    statuses = set(expected[defined, 1])
    assert defined.sum() >= 4 and (1 in statuses or len(statuses) >= 2)  # the comparison is not vacuous
    for config in (X64, QUIET):
        out = run(method, options, extra, delay, config=config)
        np.testing.assert_array_equal(out.status[defined], expected[defined, 1])
        assert np.all(np.abs(out.steps - expected[:, 0])[defined] <= 1), (config.x64, out.steps, expected[:, 0])


def test_sgd_per_component_is_geometric():
    """σ = 0, m = 0, D = 0: every eigencomponent follows (1 − ηλ)^t exactly."""
    config = dataclasses.replace(X64, max_steps=300, target=-1.0, diverge_factor=np.inf, chunk_steps=64)
    lr = np.array([0.5, 1.0, 1.9])
    out = run("sgdm", {}, {}, 0, lr=lr, momentum=0.0, config=config, record={"w": lambda view: view.w_next})
    t = np.arange(1, 301)[None, :, None]
    np.testing.assert_allclose(out.trace["w"], (1 - lr[:, None, None] * PROBLEM.eigenvalues) ** t, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("delay", [0, 3])
def test_ab_with_rho_zero_is_sgdm_bit_for_bit(delay):
    cells = 8
    lr, m = np.geomspace(0.05, 2, cells), np.linspace(0, 0.95, cells)
    sgdm = run("sgdm", {}, {}, delay, lr=lr, momentum=m, sigma=0.01)
    ab = run("ab", {}, {"rho": 0.0}, delay, lr=lr, momentum=m, sigma=0.01)
    for field in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(ab, field), getattr(sgdm, field))


def test_one_micro_step_is_plain_ab_bit_for_bit():
    """S = 1 is the same update as AB: compare the explicit option with the default, under noise and delay."""
    lr, m = np.geomspace(0.05, 2, 8), np.linspace(0, 0.95, 8)
    plain = run("ab", {}, {"rho": 0.6}, 2, lr=lr, momentum=m, sigma=0.01)
    micro = run("ab", {"micro_steps": 1}, {"rho": 0.6}, 2, lr=lr, momentum=m, sigma=0.01)
    for field in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(micro, field), getattr(plain, field))


def test_shifted_momentum_without_delay_is_sgdm():
    lr, m = np.geomspace(0.05, 2, 8), np.linspace(0, 0.95, 8)
    sgdm = run("sgdm", {}, {}, 0, lr=lr, momentum=m, sigma=0.01)
    shifted = run("shifted", {}, {}, 0, lr=lr, momentum=m, sigma=0.01)
    np.testing.assert_array_equal(shifted.steps, sgdm.steps)
    np.testing.assert_array_equal(shifted.status, sgdm.status)
    np.testing.assert_allclose(shifted.loss, sgdm.loss, rtol=1e-5)


@pytest.mark.parametrize("method,extra", [("sgdm", {}), ("ab", {"rho": 0.5})])
def test_vmapped_grid_equals_cell_by_cell(method, extra):
    lr, m = np.geomspace(0.05, 2, 6), np.linspace(0, 0.9, 6)
    grid = run(method, {}, extra, 2, lr=lr, momentum=m, sigma=0.01)
    for i in range(len(lr)):
        one = run(method, {}, extra, 2, lr=lr[i:i + 1], momentum=m[i:i + 1], sigma=0.01)
        assert (one.steps[0], one.status[0], one.loss[0]) == (grid.steps[i], grid.status[i], grid.loss[i])


@functools.lru_cache
def _layout_run(independent_noise: bool, layout: tuple = ()):
    lr, m = np.geomspace(0.02, 3, 24), np.tile([0.0, 0.5, 0.9], 8)
    base = dataclasses.replace(QUIET, target=0.05, independent_noise=independent_noise)
    return run("ab", {}, {"rho": 0.5}, 3, lr=lr, momentum=m, sigma=0.02, problem=nqm.zhang(2000),
               config=dataclasses.replace(base, **dict(layout)))


@pytest.mark.parametrize("layout", [
    {"chunk_steps": 37}, {"chunk_steps": 5000}, {"compaction": False}, {"devices": 1}, {"block_cells": 4},
    {"batch_cells": 4}, {"devices": 1, "block_cells": 8, "chunk_steps": 128},
    {"batch_cells": 16, "memory_budget": 2 * 2**20},  # two groups, one after the other
])
@pytest.mark.parametrize("independent_noise", [False, True])
def test_results_do_not_depend_on_layout(layout, independent_noise):
    """Chunk size, compaction, device count, block and batch size and memory groups change nothing."""
    expected = _layout_run(independent_noise)  # the default layout's run, shared by every layout
    other = _layout_run(independent_noise, tuple(layout.items()))
    assert len(set(expected.status)) == 3  # reached, diverged and out of budget all present
    for field in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(other, field), getattr(expected, field))


def test_cell_result_does_not_depend_on_its_grid():
    lr, m = np.geomspace(0.02, 3, 24), np.tile([0.0, 0.5, 0.9], 8)
    full = run("sgdm", {}, {}, 4, lr=lr, momentum=m, sigma=0.02)
    pick = [3, 11, 17]
    part = run("sgdm", {}, {}, 4, lr=lr[pick], momentum=m[pick], sigma=0.02)
    for field in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(part, field), getattr(full, field)[pick])


@pytest.mark.parametrize("method,extra,config", [
    ("sgdm", {}, QUIET), ("ab", {"rho": 0.5}, QUIET), ("ab", {"rho": 1.5}, X64), ("adam", {}, QUIET),
    ("lion", {}, QUIET), ("shifted", {}, dataclasses.replace(QUIET, chunk_steps=50)),
], ids=["sgdm", "ab", "ab-x64", "adam", "lion", "shifted-short-chunks"])
def test_noiseless_cells_alone_draw_no_noise_and_give_the_same_bits(method, extra, config, monkeypatch):
    """A run whose cells are all noiseless draws no noise (σ·ξ is 0 whatever ξ): each cell has the
    steps, status and loss it has beside a noisy cell, where the step's noise is drawn and scaled by 0
    (over several chunks, all reading the same zeros)."""
    lr, m = np.geomspace(0.02, 3, 12), np.tile([0.0, 0.5, 0.9], 4)
    optimizer = make(method, delay=3)
    given = {"lr": lr, "momentum": m, **{k: np.full(12, v) for k, v in extra.items()}}
    hyper = {k: given.get(k, np.full(12, optimizer.hyper._field_defaults.get(k, 0.0))) for k in optimizer.hyper._fields}
    cells = lambda sigma, pick: engine.Cells(optimizer, {k: v[pick] for k, v in hyper.items()}, sigma, delay=3)
    draws = []
    monkeypatch.setattr(engine.loop, "common_noise", lambda *a, draw=engine.loop.common_noise: draws.append(1) or draw(*a))
    quiet = engine.simulate(PROBLEM, cells(np.zeros(12), slice(None)), config)
    assert not draws
    beside = engine.simulate(PROBLEM, cells(np.r_[np.zeros(12), 0.05], np.r_[np.arange(12), 0]), config)
    assert draws
    assert len(set(quiet.steps)) >= 8  # cells that stop at many different steps
    for field in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(quiet, field), getattr(beside, field)[:12])


def test_same_seed_same_numbers_and_other_seed_differs():
    lr, m = np.geomspace(0.05, 1, 6), np.full(6, 0.5)
    a, b = (run("ab", {}, {"rho": 0.5}, 1, lr=lr, momentum=m, sigma=0.05, seed=7) for _ in range(2))
    c = run("ab", {}, {"rho": 0.5}, 1, lr=lr, momentum=m, sigma=0.05, seed=8)
    np.testing.assert_array_equal(a.loss, b.loss)
    # Compared where both are finite (a diverged cell's loss may be NaN, and NaN != NaN).
    both = np.isfinite(a.loss) & np.isfinite(c.loss)
    assert both.sum() >= 3 and (a.loss[both] != c.loss[both]).all()


def test_compiles_once_per_shape():
    """New hyperparameter values reuse the compiled chunk (and the noise generator)."""
    lr = np.geomspace(0.05, 1, 6)
    run("ab", {}, {"rho": 0.5}, 2, lr=lr, momentum=0.5, sigma=0.01)
    sizes = engine.loop.advance._cache_size(), engine.loop.common_noise._cache_size()
    run("ab", {}, {"rho": 0.9}, 2, lr=lr * 1.1, momentum=0.3, sigma=0.02, seed=3)
    assert (engine.loop.advance._cache_size(), engine.loop.common_noise._cache_size()) == sizes


def test_float64_agrees_with_float32():
    lr, m = np.array([0.05, 0.1, 0.2, 0.4, 8.0, 20.0]), np.full(6, 0.5)
    for method, extra in (("sgdm", {}), ("ab", {"rho": 0.5})):
        f32 = run(method, {}, extra, 2, lr=lr, momentum=m, sigma=0.0)
        f64 = run(method, {}, extra, 2, lr=lr, momentum=m, sigma=0.0, config=X64)
        np.testing.assert_array_equal(f32.status, f64.status)
        assert set(f32.status) == {1, -1}
        assert np.all(np.abs(f32.steps - f64.steps) <= 1)
        np.testing.assert_allclose(f32.loss[f32.status == 1], f64.loss[f64.status == 1], rtol=1e-3)


def test_noise_has_the_hessian_covariance():
    """ξ ~ N(0, H): with w = 0 held fixed (lr tiny, D large is irrelevant), g = σξ per component has variance σ²λ."""
    problem = nqm.loguniform(4, 0.01, 1.0)
    config = dataclasses.replace(X64, max_steps=4000, target=-1.0, diverge_factor=np.inf, chunk_steps=500)
    out = run("sgdm", {}, {}, 0, lr=np.array([1e-12]), momentum=0.0, sigma=0.3, config=config, problem=problem,
              record={"noise": lambda view: view.g - view.model.hvp(view.w)})
    variance = out.trace["noise"][0].var(axis=0)
    np.testing.assert_allclose(variance, 0.09 * problem.eigenvalues, rtol=0.1)


def test_rotation_leaves_rotation_invariant_methods_unchanged():
    problem = nqm.loguniform(8, 0.05, 1.0)
    lr = np.array([0.1, 0.5, 1.5])
    for method, extra in (("sgdm", {}), ("ab", {"rho": 0.5})):
        plain = run(method, {}, extra, 2, lr=lr, momentum=0.6, config=X64, problem=problem)
        turned = run(method, {}, extra, 2, lr=lr, momentum=0.6, config=X64, problem=problem.with_rotation(3))
        np.testing.assert_array_equal(turned.status, plain.status)
        assert np.all(np.abs(turned.steps - plain.steps) <= 1)
    # element-wise AB is not rotation-invariant: the rotated run takes another path
    plain = run("ab", {"group": "element"}, {"rho": 0.5}, 2, lr=lr, momentum=0.6, config=X64, problem=problem)
    turned = run("ab", {"group": "element"}, {"rho": 0.5}, 2, lr=lr, momentum=0.6, config=X64,
                 problem=problem.with_rotation(3))
    assert not np.array_equal(plain.loss, turned.loss)


def test_memory_budget_splits_the_grid_into_groups():
    problem = nqm.zhang(2000)
    config = dataclasses.replace(QUIET, batch_cells=16, memory_budget=2 * 2**20)
    layout = engine.layout.choose(problem, make("ab", delay=3), History(4), 24, config, np.float32)
    assert layout.group_cells == 16 < 24  # so the layout test above really ran two groups
    with pytest.raises(nqm.NqmError, match="memory_budget"):
        engine.layout.choose(problem, make("ab", delay=3), History(4), 24, dataclasses.replace(config, memory_budget=2**20),
                             np.float32)


class _Stop(Exception):
    pass


@pytest.mark.parametrize("method, spec", [("ab", 3), ("shifted", "workers:3")])
def test_a_run_resumed_from_a_snapshot_mid_cell_is_bit_identical(method, spec):
    problem = nqm.zhang(40)
    hyper = {"lr": np.geomspace(0.02, 0.5, 10), "momentum": np.full(10, 0.8), "rho": np.full(10, 0.5)}
    sigma = np.full(10, 0.02)
    config = engine.RunConfig(target=1e-4, max_steps=3000, chunk_steps=128, progress=False)
    optimizer = make(method, delay=spec)
    hyper = {k: hyper[k] for k in optimizer.hyper._fields}
    run = lambda **kw: engine.simulate(problem, engine.Cells(optimizer, hyper, sigma, delay=spec, seed=2), config,
                                       [engine.Trace({"decay": engine.GeometricMean(diagnostics.energy_ratio)}),
                                        engine.Checkpoint(**kw)])
    whole = run()
    saved = []

    def stop_at_600(snapshot):
        if len(saved) == 0 and snapshot().t >= 300:
            saved.append(snapshot())
            raise _Stop

    with pytest.raises(_Stop):
        run(between_chunks=stop_at_600)
    snap = saved[0]
    assert snap.t >= 300 and snap.index.size > 0
    resumed = run(resume=snap)
    for a, b in zip(whole[:5], resumed[:5]):  # all but the work, which the interruption changes
        if isinstance(a, dict):
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
        else:
            np.testing.assert_array_equal(a, b)


def test_the_work_counted_is_what_the_blocks_computed():
    """``Outcome.work`` counts every cell-step a block computes: exactly cells × budget when no cell
    stops early, and never less than the useful Σ T when cells stop at different steps."""
    problem = nqm.zhang(16)
    hyper = {"lr": np.geomspace(0.01, 0.02, 8), "momentum": np.full(8, 0.5)}
    config = dataclasses.replace(QUIET, target=-1.0, max_steps=300, chunk_steps=64, batch_cells=8, block_cells=2)
    out = engine.simulate(problem, engine.Cells(make("sgdm"), hyper, np.zeros(8)), config)
    assert out.work[0] == 8 * 300 and (out.steps == 300).all()
    hyper = {"lr": np.geomspace(0.05, 3.0, 8), "momentum": np.full(8, 0.5)}
    out = engine.simulate(problem, engine.Cells(make("sgdm"), hyper, np.zeros(8)),
                          dataclasses.replace(config, target=0.05))
    assert len(set(out.steps)) > 2 and out.steps.sum() <= out.work[0] <= 8 * out.steps.max()


@pytest.mark.parametrize("spec", ["workers:4", "uniform:0:40"])
def test_a_cell_does_not_depend_on_the_budget_under_random_delays(spec):
    """A longer budget draws deeper delays; neither the history kept nor the cache blocks may depend on
    them (XLA rounds a 2-cell block's loss differently from a 4- or 8-cell one at this N), so the cells
    that finish within the short budget are bit for bit the same in the long one."""
    problem = nqm.zhang(2000)
    hyper = {"lr": np.geomspace(0.01, 0.4, 8), "momentum": np.full(8, 0.5), "rho": np.full(8, 0.5)}
    run = lambda budget: engine.simulate(problem,
                                         engine.Cells(make("ab", delay=spec), hyper, np.full(8, 0.01), delay=spec),
                                         dataclasses.replace(QUIET, target=2.0, max_steps=budget))
    short, long = run(200), run(20_000)
    done = short.status != engine.BUDGET
    assert done.sum() >= 3
    for field in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(short, field)[done], getattr(long, field)[done])


def test_the_observers_watch_without_changing_a_cell():
    """A run with a checkpoint and a progress bar gives the same cells as a bare one; the checkpoint
    is handed every cell exactly once and a snapshot between chunks, the bare run hands nothing on."""
    problem = nqm.zhang(24)
    hyper = {"lr": np.geomspace(0.05, 3.0, 12), "momentum": np.full(12, 0.7), "rho": np.full(12, 0.5)}
    cells = engine.Cells(make("ab", delay=2), hyper, np.full(12, 0.01), delay=2, seed=1)
    config = dataclasses.replace(QUIET, target=1e-3, max_steps=1500, chunk_steps=64, batch_cells=4)
    bare = engine.simulate(problem, cells, config)
    handed, snapshots = [], []
    observers = [engine.Checkpoint(on_finished=lambda ids, part: handed.extend(np.asarray(ids).tolist()),
                                   between_chunks=lambda snapshot: snapshots.append(snapshot().t)),
                 engine.Progress(enabled=False)]
    watched = engine.simulate(problem, cells, config, observers)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(watched, name), getattr(bare, name))
    assert sorted(handed) == list(range(12))
    assert snapshots and snapshots == sorted(snapshots)
    assert set(bare.status.tolist()) >= {-1, 1}  # cells that finish both ways were handed on


@pytest.mark.parametrize("method,extra", [("sgdm", {}), ("ab", {"rho": np.full(8, 0.5)})])
def test_a_small_problem_runs_in_longer_chunks_with_the_same_numbers(method, extra):
    """Left unset, a chunk is 1,000 steps, doubled up to 16× while it advances fewer than
    CHUNK_ELEMENTS elements (cells per batch × N × steps); a sweep's numbers are those of 1,000-step
    chunks."""
    chunk_length = engine.layout.chunk_length
    assert chunk_length(64 * 10**4) == 1000 and chunk_length(8192) == 4000 and chunk_length(8 * 20) == 16_000
    problem, config = nqm.zhang(20), dataclasses.replace(QUIET, target=1e-3, max_steps=30_000)
    assert engine.layout.choose(problem, make(method), History(1), 8, config, np.float32).spec.chunk_steps == 16_000
    cells = engine.Cells(make(method), {"lr": np.geomspace(0.05, 1.5, 8), "momentum": np.full(8, 0.9), **extra},
                         np.full(8, 0.05), seed=3)
    longer, fixed = (engine.simulate(problem, cells, dataclasses.replace(config, chunk_steps=chunk))
                     for chunk in (None, engine.layout.CHUNK_STEPS))
    assert len(set(fixed.status)) > 1
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(longer, name), getattr(fixed, name))


def test_a_chunk_of_common_noise_is_held_to_the_memory_budget():
    """The common noise of a chunk is drawn at once (chunk × N values): a large problem gets shorter
    chunks: the same numbers, in bounded memory (a problem whose batch does not fit is refused before)."""
    problem = nqm.zhang(4000)
    cells = engine.Cells(make("sgdm"), {"lr": np.geomspace(0.05, 1.0, 4), "momentum": np.full(4, 0.5)},
                         np.full(4, 0.05), seed=3)
    small = dataclasses.replace(QUIET, target=1e-3, max_steps=400, memory_budget=2 * 2**20)  # 2 MiB
    layout = engine.layout.choose(problem, make("sgdm"), History(1), 4, small, np.float32)
    assert layout.spec.chunk_steps == 2**20 // (2 * 4000 * 4) < engine.layout.CHUNK_STEPS
    capped = engine.simulate(problem, cells, small)
    chosen = engine.simulate(problem, cells, dataclasses.replace(small, memory_budget=None,
                                                                 chunk_steps=layout.spec.chunk_steps))
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(getattr(capped, name), getattr(chosen, name))


def test_blocks_fit_the_cache_on_cpu_and_about_a_million_elements_on_an_accelerator():
    """CPU blocks depend on N alone (2 cells at N = 10⁴, 8 at N ≤ 4,096), never on the grid; an
    accelerator's hold at least 2²⁰ elements (128 cells at N = 10⁴: finished cells are repacked away)
    unless the grid or the memory holds fewer."""
    from nqm.engine.layout import block_size

    assert [block_size("cpu", n, 1000, 10**6) for n in (10_000, 4096, 100)] == [2, 8, 8]
    assert block_size("cpu", 10_000, 1, 10**6) == 2
    assert [block_size("gpu", n, 10**5, 10**6) for n in (10_000, 1000, 2**20, 2**22)] == [128, 2048, 1, 1]
    assert block_size("gpu", 10_000, 40, 10**6) == 40 and block_size("gpu", 10_000, 1024, 16) == 16


def test_to_horizon_steps_the_reached_cells_on_and_keeps_their_first_passage():
    """The stop rules of nqm.engine.stop: the first passage ends a cell (the default); ToHorizon(H)
    keeps every cell that reached the target stepping to H — its trace then covers every step to H,
    the same losses the first-passage run had to T — with its first passage and status kept; a cell
    that diverges ends as it does without it."""
    from nqm.engine import record, stop

    assert stop.FirstPassage().horizon(300) == 300 and not stop.FirstPassage().continues
    assert stop.ToHorizon(500).horizon(300) == 500 and stop.ToHorizon(500).horizon(800) == 800
    lr = np.array([0.3, 0.6, 1.2, 4.0])  # three reach the target, the last diverges
    cells = engine.Cells(make("sgdm"), {"lr": lr, "momentum": np.full(4, 0.5)}, np.zeros(4))
    config = dataclasses.replace(X64, max_steps=400)
    first = engine.simulate(PROBLEM, cells, config, [engine.Trace({"loss": record.loss})])
    assert (first.status[:3] == engine.REACHED).all() and first.status[3] == engine.DIVERGED
    horizon = int(first.steps[:3].max()) + 40
    stepped = engine.simulate(PROBLEM, cells, config, [engine.Trace({"loss": record.loss})],
                              stop=stop.ToHorizon(horizon))
    np.testing.assert_array_equal(stepped.steps, first.steps)
    np.testing.assert_array_equal(stepped.status, first.status)
    for i in range(3):
        t = int(first.steps[i])
        assert np.isfinite(stepped.trace["loss"][i, :horizon]).all()
        np.testing.assert_array_equal(stepped.trace["loss"][i, :t], first.trace["loss"][i, :t])
        assert (stepped.trace["loss"][i, t:horizon] < stepped.trace["loss"][i, 0]).all()


@pytest.mark.parametrize("group", ["global", "element", "blocks:3", np.array([0, 1, 1, 0, 2, 2])])
def test_the_braking_factor_is_one_minus_rho_times_each_groups_cosine(group):
    """nqm.optimizers.braking: α = 1 − ρ cos(g, u) with the cosine of each group (the whole vector,
    each coordinate, K contiguous blocks, or labelled groups), against numpy; clamps bound α."""
    import jax.numpy as jnp

    from nqm.optimizers import braking

    rng = np.random.default_rng(0)
    g, u = rng.standard_normal(6), rng.standard_normal(6)
    labels = {"global": np.zeros(6, int), "element": np.arange(6), "blocks:3": np.arange(6) * 3 // 6}
    labels = labels[group] if isinstance(group, str) else group
    cosine = np.empty(6)
    for k in np.unique(labels):
        at = labels == k
        cosine[at] = g[at] @ u[at] / (np.linalg.norm(g[at]) * np.linalg.norm(u[at]))
    _, of = braking.grouping(group)
    alpha, cos = braking.factor(jnp.asarray(g), jnp.asarray(u), 0.7, of, braking.EPS)
    np.testing.assert_allclose(np.asarray(cos), cosine, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(alpha), 1 - 0.7 * cosine, rtol=1e-6)
    clamped, _ = braking.factor(jnp.asarray(g), jnp.asarray(u), 0.7, of, braking.EPS, alpha_min=0.9, alpha_max=1.1)
    np.testing.assert_allclose(np.asarray(clamped), np.clip(1 - 0.7 * cosine, 0.9, 1.1), rtol=1e-6)
    zero, _ = braking.factor(jnp.zeros(6), jnp.asarray(u), 0.7, of, braking.EPS)  # no gradient: cos 0, not 0/0
    np.testing.assert_array_equal(np.asarray(zero), 1.0)
