"""The delay remedies against independent numpy loops, their reductions, and a contract every
registered method keeps (so a new family is covered without touching this file)."""

import dataclasses

import numpy as np
import pytest

import nqm
import reference
from nqm import delays, diagnostics, engine
from nqm.optimizers import make, methods
from nqm.optimizers.ab import adaptive_braking
from nqm.optimizers.dana import dana
from nqm.optimizers.dc_asgd import dc_asgd
from nqm.optimizers.nesterov import nesterov
from nqm.optimizers.ormo import ormo, ormo_da
from nqm.optimizers.precond import precond
from nqm.optimizers.restart import restart
from nqm.optimizers.sgdm import sgd, sgdm
from nqm.optimizers.shifted import shifted
from nqm.optimizers.staleness import staleness
from nqm.optimizers.base import StepContext, options, reductions

LAM = np.array([1.0, 0.5, 0.2, 0.05])
PROBLEM = nqm.explicit(LAM)
STEPS = 120
CONFIG = engine.RunConfig(target=-1.0, diverge_factor=np.inf, max_steps=STEPS, chunk_steps=50, x64=True, progress=False)


def losses(method, spec, lr, momentum, problem=PROBLEM, config=CONFIG, seed=3, **hyper):
    optimizer = make(method, delay=spec, problem=problem)  # precond reads the spectrum
    defaults = optimizer.hyper._field_defaults  # the hyperparameters not given take the sweep's defaults
    values = {"lr": [lr], "momentum": [momentum], **{k: [v] for k, v in {**defaults, **hyper}.items()}}
    out = engine.simulate(problem, engine.Cells(optimizer, values, [0.0], delay=spec, seed=seed), config,
                          [engine.Trace({"loss": diagnostics.loss})])
    return out.trace["loss"][0]


@pytest.mark.parametrize("spec", [3, "uniform:0:5", "workers:4:slow=0.25:3"])
@pytest.mark.parametrize("method", reference.SCHEDULED)
def test_each_method_follows_its_numpy_loop(method, spec):
    process = delays.process(spec)
    hyper = {"lambda_dc": 0.3} if method == "dc-asgd" else {}
    got = losses(method, spec, 0.15, 0.7, **hyper)
    want = reference.run_scheduled(method, LAM, 0.15, 0.7, process.schedule(3, STEPS), workers=process.workers, **hyper)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("spec", [3, "workers:4"])
def test_ormo_with_beta_zero_is_delayed_sgd(spec):
    for method in ("ormo", "ormo-da" if spec == 3 else "ormo"):
        np.testing.assert_allclose(losses(method, spec, 0.3, 0.0), losses("sgdm", spec, 0.3, 0.0), rtol=1e-12)


def test_ormo_with_one_worker_is_sgdm():
    np.testing.assert_allclose(losses("ormo", 0, 0.3, 0.8), losses("sgdm", 0, 0.3, 0.8), rtol=1e-12)


@pytest.mark.parametrize("d", [0, 1, 4])
def test_staleness_at_constant_delay_is_sgdm_at_a_smaller_learning_rate(d):
    np.testing.assert_allclose(losses("staleness", d, 0.4, 0.6), losses("sgdm", d, 0.4 / max(1, d), 0.6), rtol=1e-12)


def test_restart_never_leaves_the_velocity_against_the_gradient():
    alignment = lambda view: view.g @ view.state_next.velocity
    optimizer = make("restart", delay=3)
    out = engine.simulate(nqm.zhang(30),
                          engine.Cells(optimizer, {"lr": [0.3, 0.6], "momentum": [0.9, 0.95]}, [0.05, 0.05], delay=3),
                          CONFIG, [engine.Trace({"gv": alignment})])
    assert (out.trace["gv"] >= 0).all()
    plain = engine.simulate(nqm.zhang(30),
                            engine.Cells(make("sgdm"), {"lr": [0.3, 0.6], "momentum": [0.9, 0.95]}, [0.05, 0.05], delay=3),
                            CONFIG, [engine.Trace({"gv": lambda view: view.g @ view.velocity})])
    assert (plain.trace["gv"] < 0).any()  # without restart the velocity does oppose the gradient


# Each built-in method and the factory of its own module (nqm/optimizers/<module>.py), the file that
# writes the update the tests above hold against numpy; the optax ones are test_optax.py's.
FACTORIES = {"ab": adaptive_braking, "dana": dana, "dc-asgd": dc_asgd, "nesterov": nesterov, "ormo": ormo,
             "ormo-da": ormo_da, "precond": precond, "restart": restart, "sgd": sgd, "sgdm": sgdm, "shifted": shifted,
             "staleness": staleness}


@pytest.mark.parametrize("method", sorted(FACTORIES))
def test_each_built_in_method_is_the_factory_of_its_module(method):
    """``make(method)`` is its module's factory (with the workers and the problem it declares), named:
    the same options, hyperparameters and settings, and one step of each gives the same bits."""
    import inspect

    import jax.numpy as jnp

    factory = FACTORIES[method]
    declared = inspect.signature(factory).parameters
    own = factory(**{k: v for k, v in (("workers", 4), ("problem", PROBLEM)) if k in declared})
    made = make(method, delay=3, problem=PROBLEM)  # a constant delay 3: four round-robin workers
    assert made.name == method
    assert options(method) == {k: p for k, p in declared.items() if k not in ("workers", "problem")}
    assert (made.hyper._fields, made.hyper._field_defaults, made.config, made.linear) == \
        (own.hyper._fields, own.hyper._field_defaults, own.config, own.linear)
    hyper = made.hyper(**{f: 0.3 if f == "lr" else 0.5 for f in made.hyper._fields})
    w, g = jnp.asarray([1.0, -0.5, 0.25, 2.0]), jnp.asarray([0.3, 0.1, -0.2, 0.4])
    context = StepContext(jnp.int32(5), jnp.int32(3), jnp.int32(1), w * 0.9)
    steps = []
    for optimizer in (made, own):
        state, weights = optimizer.init(w), w
        for t in range(3):
            weights, state, _ = optimizer.step(hyper, state, weights, g * (t + 1), context._replace(t=jnp.int32(5 + t)))
        steps.append(np.asarray(weights))
    np.testing.assert_array_equal(steps[0], steps[1])
    assert not np.array_equal(steps[0], np.asarray(w))  # it stepped


# ------------------------------------------------------------------ the contract of every method

def test_every_registered_method_states_what_it_reduces_to():
    """Each family says, where it registers, what it equals at some setting (AB at ρ = 0 is SGDM)."""
    assert all(reductions(m) for m in methods())


@pytest.mark.parametrize("method", methods())
def test_reductions(method):
    for hyper, other, other_hyper, d in reductions(method):
        base = {"lr": 0.2, "momentum": 0.6}
        a = losses(method, d, **{**base, **hyper})
        b = losses(other, d, **{**base, **other_hyper})
        np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=f"{method}{hyper} vs {other}{other_hyper} at D={d}")


@pytest.mark.parametrize("method", methods())
def test_contract_jit_vmap_dtypes_processes_and_compile_once(method):
    problem = nqm.zhang(24)
    for spec in (2, "uniform:0:3", "workers:3:slow=0.34:2"):
        optimizer = make(method, delay=spec, problem=problem)
        cells = 6
        hyper = {f: np.geomspace(0.05, 0.3, cells) if f == "lr" else np.full(cells, 0.5 if f == "momentum" else 0.2)
                 for f in optimizer.hyper._fields}
        run = lambda x64, h=hyper: engine.simulate(problem,
                                                   engine.Cells(optimizer, h, np.zeros(cells), delay=spec, seed=1),
                                                   dataclasses.replace(CONFIG, x64=x64, max_steps=60),
                                                   [engine.Trace({"loss": diagnostics.loss})])
        f64, f32 = run(True).trace["loss"], run(False).trace["loss"]
        assert np.isfinite(f64).all()
        np.testing.assert_allclose(f32, f64, rtol=2e-3)
        # one cell alone equals the same cell in the vmapped batch
        single = engine.simulate(problem,
                                 engine.Cells(optimizer, {k: v[2:3] for k, v in hyper.items()}, [0.0], delay=spec, seed=1),
                                 dataclasses.replace(CONFIG, max_steps=60), [engine.Trace({"loss": diagnostics.loss})])
        np.testing.assert_array_equal(single.trace["loss"][0], run(True).trace["loss"][2])
        before = engine.loop.advance._cache_size()
        run(True, {k: v * 0.9 for k, v in hyper.items()})
        assert engine.loop.advance._cache_size() == before, "new hyperparameter values recompiled"
