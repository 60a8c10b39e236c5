"""Delay processes: their schedules, and the engine under them."""

import dataclasses

import numpy as np
import pytest

from nqm import delays, engine
from nqm.errors import NqmError
from nqm.optimizers import make
from nqm.problem import zhang
from nqm.stability import gaussian_pmf, uniform_pmf

PROBLEM = zhang(64)
CONFIG = engine.RunConfig(target=1e-3, max_steps=600, chunk_steps=64, progress=False)
PROCESSES = ["3", "uniform:1:4", "gaussian:3", "pmf:0.5,0,0.5", "workers:4", "workers:4:slow=0.25:5"]


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
    delay, _ = delays.process(spec).schedule(0, 40_000)
    freq = np.bincount(delay, minlength=pmf.size) / delay.size
    assert np.all(np.abs(freq - pmf) <= 4 * np.sqrt(pmf * (1 - pmf) / delay.size) + 1e-12)


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
    delay, worker = process.schedule(2, 40_000)
    slow = worker < 2  # the slow ones come first
    assert slow.mean() < 0.5 * 2 / 8
    assert delay[slow].mean() > 2 * delay[~slow].mean()


def test_constant_process_is_round_robin():
    delay, worker = delays.process(3).schedule(0, 9)
    np.testing.assert_array_equal(delay, 3)
    np.testing.assert_array_equal(worker, (np.arange(9) - 3) % 4)


@pytest.mark.parametrize("method", ["sgdm", "shifted", "ab"])
def test_a_pmf_concentrated_on_one_delay_is_that_constant_delay_bit_for_bit(method):
    hyper = {"lr": np.geomspace(0.2, 1.5, 6), "momentum": np.full(6, 0.6), "rho": np.full(6, 0.5)}
    sigma = np.full(6, 0.05)
    runs = [
        engine.simulate(PROBLEM, make(method, delay=spec), hyper, sigma, delay=spec, seed=3, config=CONFIG)
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
        PROBLEM, optimizer, {k: v[idx] for k, v in hyper.items()}, sigma[idx], delay=spec, seed=5,
        config=dataclasses.replace(CONFIG, **cfg))
    every = np.arange(8)
    base = run(every)
    np.testing.assert_array_equal(run(every, chunk_steps=17).steps, base.steps)
    np.testing.assert_array_equal(run(every, devices=1).loss, base.loss)
    np.testing.assert_array_equal(run(every[::-1]).loss[::-1], base.loss)
    np.testing.assert_array_equal(run(every[2:5]).loss, base.loss[2:5])


def test_an_optimizer_made_for_another_worker_count_is_an_error():
    with pytest.raises(NqmError, match="made for 3 workers"):
        engine.simulate(PROBLEM, make("shifted", delay=2), {"lr": [0.1], "momentum": [0.5]}, [0.0],
                        delay="workers:5", config=CONFIG)


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
    from nqm import stability, sweep
    from nqm.problem import explicit

    x_star = float(stability.threshold("sgd", pmf=uniform_pmf(1, b)))
    ds = sweep("sgdm", lr=[0.9 * x_star, 1.1 * x_star], momentum=0.0, delay=f"uniform:1:{b}", seed=list(range(6)),
               problem=explicit([1.0]), target=1e-8, max_steps=20_000, progress=False)
    status = ds.status.squeeze().transpose("seed", "lr").values
    np.testing.assert_array_equal(status[:, 0], 1)
    np.testing.assert_array_equal(status[:, 1], -1)
