"""Delay processes: their schedules, and the engine under them."""

import dataclasses

import numpy as np
import pytest

import nqm

from nqm import delays, engine
from nqm.delays import constant_delays, iid_delays, registry, worker_pools
from nqm.errors import NqmError
from nqm.optimizers import make
from nqm.problem import zhang
from nqm.delays import History
from nqm.pmfs import gaussian_pmf, uniform_pmf

import reference
from nqm import diagnostics

PROBLEM = zhang(64)
CONFIG = engine.RunConfig(target=1e-3, max_steps=600, chunk_steps=64, progress=False)
PROCESSES = ["3", "uniform:1:4", "gaussian:3", "pmf:0.5,0,0.5", "workers:4", "workers:4:slow=0.25:5"]


@dataclasses.dataclass(frozen=True)
class Alternating:
    """A toy process registered from this file: delays alternate A, B, A, … (round-robin workers).
    Adding a process is this class and its registration: the contract tests below and a sweep pick
    it up."""

    a: int
    b: int

    @property
    def label(self):
        return f"alternating:{self.a}:{self.b}"

    @property
    def mean(self):
        return (self.a + self.b) / 2

    @property
    def workers(self):
        return max(self.a, self.b) + 1

    def pmf(self):
        return None  # not independent from step to step

    def schedule(self, seed, steps):
        t = np.arange(steps)
        delay = np.where(t % 2 == 0, self.a, self.b).astype(np.int32)
        return delay, ((t - delay) % self.workers).astype(np.int32)

    def history(self, delays):
        return History(self.workers)


@delays.register("alternating", syntax="alternating:A:B", help="delays A, B, A, B, …", example="alternating:1:3")
def _alternating(rest):
    a, b = rest.split(":")
    return Alternating(int(a), int(b))


FAMILIES = {family.name: family for family in delays.families()}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_contract_of_every_registered_family(name):
    family = FAMILIES[name]
    process = delays.process(family.example)
    assert delays.process(process.label) == process  # the label is a spec of the same process
    assert family.syntax in delays.syntax()
    delay, worker = process.schedule(4, 3000)
    assert delay.dtype == worker.dtype == np.int32 and delay.shape == worker.shape == (3000,)
    for a, b in zip(process.schedule(4, 700), (delay, worker)):
        np.testing.assert_array_equal(a, b[:700])  # a longer budget extends the same schedule
    assert delay.min() >= 0 and worker.min() >= 0 and worker.max() < process.workers
    history = process.history(delay)
    if history.by_worker:  # each worker's snapshot is the weights of iteration t − τ_t
        fetched = np.zeros(process.workers, int)
        for t, (tau, k) in enumerate(zip(delay, worker)):
            assert fetched[k] == t - tau
            fetched[k] = t + 1
    else:
        assert delay.max() < history.slots  # no delay reaches past the ring
    pmf = process.pmf()
    if pmf is not None:
        assert pmf.min() >= 0 and abs(pmf.sum() - 1) < 1e-12 and abs(np.arange(pmf.size) @ pmf - process.mean) < 1e-12
        freq = np.bincount(delay, minlength=pmf.size) / delay.size
        assert np.all(np.abs(freq - pmf) <= 5 * np.sqrt(pmf * (1 - pmf) / delay.size) + 1e-12)


@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("method", ["dana", "staleness"])
def test_every_registered_family_runs_as_its_schedule_says(name, method):
    """The engine under any registered process equals a plain numpy loop over its schedule (DANA:
    per-worker velocities and look-ahead weights; staleness-aware SGDM: the delay itself)."""
    spec, problem = FAMILIES[name].example, zhang(6)
    process = delays.process(spec)
    ds = diagnostics.trajectory(method, problem=problem, lr=0.05, momentum=0.5, delay=spec, seed=2, steps=300,
                                record=("loss",), x64=True)
    expected = reference.run_scheduled(method, problem.eigenvalues, 0.05, 0.5, process.schedule(2, 300),
                                       workers=process.workers)
    np.testing.assert_allclose(ds.loss.values, expected, rtol=1e-10)


def test_a_registered_family_gets_a_sweep():
    ds = nqm.sweep("shifted", lr=[0.05, 0.2], momentum=[0.0, 0.5], delay=[2, "alternating:1:3"], problem=zhang(8),
                   max_steps=400, progress=False)
    assert list(ds.delay.values) == ["2", "alternating:1:3"] and ds.mean_delay.values.tolist() == [2.0, 2.0]
    assert (ds.status.sel(delay="alternating:1:3") != engine.RUNNING).all()
    np.testing.assert_array_equal(ds.steps.sel(delay=2).values, nqm.sweep(
        "shifted", lr=[0.05, 0.2], momentum=[0.0, 0.5], delay=2, problem=zhang(8), max_steps=400,
        progress=False).steps.sel(delay=2).values)


@pytest.mark.parametrize("spec", PROCESSES)
def test_a_schedule_depends_on_the_seed_alone_and_a_longer_budget_extends_it(spec):
    process = delays.process(spec)
    short, long = process.schedule(7, 500), process.schedule(7, 3000)
    for a, b in zip(short, long):
        np.testing.assert_array_equal(a, b[:500])
    delay, worker = long
    assert delay.min() >= 0 and 0 <= worker.min() and worker.max() < process.workers


@pytest.mark.parametrize("spec, pmf", [("uniform:2:6", uniform_pmf(2, 6)), ("gaussian:4", gaussian_pmf(4)),
                                       ("pmf:1,0,3", np.array([0.25, 0, 0.75]))])
def test_iid_delays_follow_their_pmf(spec, pmf):
    process = delays.process(spec)
    delay, _ = process.schedule(0, 40_000)
    freq = np.bincount(delay, minlength=pmf.size) / delay.size
    assert np.all(np.abs(freq - pmf) <= 4 * np.sqrt(pmf * (1 - pmf) / delay.size) + 1e-12)
    # the spec is the iid process of that pmf (nqm.delays.iid_delays), drawn the same way
    assert isinstance(process, iid_delays.Iid) and process.mean == pytest.approx(np.arange(pmf.size) @ pmf)
    same = iid_delays.iid(pmf, label=spec)
    np.testing.assert_allclose(same.pmf(), pmf, rtol=1e-12)
    np.testing.assert_array_equal(same.schedule(0, 40_000)[0], delay)


def test_identical_exponential_workers_have_mean_delay_k_minus_1():
    k = 6
    delay, worker = delays.process(f"workers:{k}").schedule(1, 60_000)
    steady = delay[1000:]
    # Each step, the K − 1 other workers are in flight: E[τ] = K − 1 (delays are correlated, so
    # the tolerance is a few percent rather than a standard error).
    assert abs(steady.mean() - (k - 1)) < 0.05 * (k - 1)
    assert np.bincount(worker, minlength=k).min() > 0.9 * delay.size / k  # all workers equally busy


def test_slow_workers_deliver_less_often_and_staler():
    process = delays.process("workers:8:slow=0.25:4")
    assert process == worker_pools.workers(8, slow_fraction=0.25, slowdown=4)  # (nqm.delays.worker_pools)
    np.testing.assert_array_equal(process.mean_times(), [4, 4, 1, 1, 1, 1, 1, 1])  # the slow ones first
    delay, worker = process.schedule(2, 40_000)
    slow = worker < 2  # the slow ones come first
    assert slow.mean() < 0.5 * 2 / 8
    assert delay[slow].mean() > 2 * delay[~slow].mean()


def test_constant_process_is_round_robin():
    process = delays.process(3)
    assert process == delays.process("constant:3") == constant_delays.constant(3)  # (nqm.delays.constant_delays)
    delay, worker = process.schedule(0, 9)
    np.testing.assert_array_equal(delay, 3)
    np.testing.assert_array_equal(worker, (np.arange(9) - 3) % 4)
    np.testing.assert_array_equal(process.pmf(), [0, 0, 0, 1])
    assert process.history(delay) == History(4)  # w_{t−3} and w_{t+1} share a slot: no copy of the current weights


@pytest.mark.parametrize("method", ["sgdm", "shifted", "ab"])
def test_a_pmf_concentrated_on_one_delay_is_that_constant_delay_bit_for_bit(method):
    hyper = {"lr": np.geomspace(0.2, 1.5, 6), "momentum": np.full(6, 0.6), "rho": np.full(6, 0.5)}
    sigma = np.full(6, 0.05)
    runs = [
        engine.simulate(PROBLEM, engine.Cells(make(method, delay=spec), hyper, sigma, delay=spec, seed=3), CONFIG)
        for spec in (2, "pmf:0,0,1", "uniform:2:2")
    ]
    for other in runs[1:]:
        for a, b in zip(runs[0][:3], other[:3]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("spec", ["uniform:1:4", "workers:3:slow=0.34:3"])
def test_results_do_not_depend_on_chunks_devices_or_grid(spec):
    hyper = {"lr": np.geomspace(0.1, 1.2, 8), "momentum": np.full(8, 0.5)}
    sigma = np.full(8, 0.02)
    optimizer = make("shifted", delay=spec)
    run = lambda idx, **cfg: engine.simulate(
        PROBLEM, engine.Cells(optimizer, {k: v[idx] for k, v in hyper.items()}, sigma[idx], delay=spec, seed=5),
        dataclasses.replace(CONFIG, **cfg))
    every = np.arange(8)
    base = run(every)
    np.testing.assert_array_equal(run(every, chunk_steps=17).steps, base.steps)
    np.testing.assert_array_equal(run(every, devices=1).loss, base.loss)
    np.testing.assert_array_equal(run(every[::-1]).loss[::-1], base.loss)
    np.testing.assert_array_equal(run(every[2:5]).loss, base.loss[2:5])


def test_an_optimizer_made_for_another_worker_count_is_an_error():
    with pytest.raises(NqmError, match="made for 3 workers"):
        engine.simulate(PROBLEM,
                        engine.Cells(make("shifted", delay=2), {"lr": [0.1], "momentum": [0.5]}, [0.0], delay="workers:5"),
                        CONFIG)


def test_a_spec_not_of_its_familys_form_names_the_form_it_registered():
    """The registry (nqm.delays.registry) holds every family once, in registration order, with the
    syntax its help and errors show; a spec its parser cannot read is refused in those words."""
    names = [family.name for family in registry.families()]
    assert names[:4] == ["constant", "uniform", "gaussian", "pmf"] and len(set(names)) == len(names)
    assert registry.syntax() == "D, " + ", ".join(family.syntax for family in registry.families()) == delays.syntax()
    for spec, family in (("constant:x", "constant"), ("gaussian:1.5", "gaussian"), ("workers:4:fast", "workers")):
        with pytest.raises(NqmError) as error:
            delays.process(spec)
        assert str(error.value) == str(registry.bad(family, spec.partition(":")[2]))
        assert str(error.value).endswith(f"is not of the form {FAMILIES[family].syntax}")


@pytest.mark.parametrize("spec", ["-1", "uniform:3:1", "gaussian:0", "pmf:", "pmf:-1,2", "workers:0",
                                  "workers:4:slow=2:3", "workers:4:slow=0.5:0", "poisson:3", "1.5", "constant:x"])
def test_bad_specs_are_one_line_errors(spec):
    with pytest.raises(NqmError) as error:
        delays.process(spec)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("b", [2, 4, 8])
def test_sgd_with_uniform_delays_converges_below_and_diverges_above_the_threshold(b):
    """Giladi et al.'s threshold is of the mean dynamics; single noiseless trajectories on one
    eigenvalue respect it 10 % away from it, whatever the seed."""
    from nqm import sweep
    from nqm.thresholds import polynomials
    from nqm.problem import explicit

    x_star = float(polynomials.threshold("sgd", pmf=uniform_pmf(1, b)))
    ds = sweep("sgdm", lr=[0.9 * x_star, 1.1 * x_star], momentum=0.0, delay=f"uniform:1:{b}", seed=list(range(6)),
               problem=explicit([1.0]), target=1e-8, max_steps=20_000, progress=False)
    status = ds.status.squeeze().transpose("seed", "lr").values
    np.testing.assert_array_equal(status[:, 0], 1)
    np.testing.assert_array_equal(status[:, 1], -1)
