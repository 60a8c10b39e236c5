"""Every hyperparameter of every registered method has a declared domain, and one validation reads
it: a value at or beyond an open end, beyond a closed one, NaN or ±∞ is one line naming the
parameter and its domain, at the API and the command line; the ends inside are accepted. A search
box is held to the same domains."""

import numpy as np
import pytest

import nqm
from nqm import jobs
from nqm.cli import main
from nqm.optimizers import base, from_optax, methods
from nqm.validate import Domain

CASES = [(m, f) for m in methods() for f in base.domains(m)]


def _outside(domain: Domain) -> list:
    values = [np.nan, np.inf, -np.inf]
    values.append(domain.low if not domain.closed_low else domain.low - max(1.0, abs(domain.low)))
    if np.isfinite(domain.high):
        values.append(domain.high if not domain.closed_high else domain.high + 1.0)
    return values


def _inside(domain: Domain) -> list:
    low = domain.low if domain.closed_low else domain.low + 1e-3
    high = domain.high if domain.closed_high else domain.high - 1e-3
    return [low, high] if np.isfinite(high) else [low, low + 10.0]


def _cell(method, **hyper):
    momentum = 0.5 if "momentum" in base.hyperparameters(method)._fields else None
    return jobs.cell(method, lr=0.1, momentum=momentum, problem=nqm.zhang(5), **hyper)


@pytest.mark.parametrize("method, name", CASES, ids=[f"{m}-{f}" for m, f in CASES])
def test_every_hyperparameter_is_held_to_its_domain(method, name):
    domain = base.domains(method)[name]
    for value in _outside(domain):
        with pytest.raises(nqm.NqmError) as error:
            _cell(method, **{name: value})
        message = str(error.value)
        assert name in message and domain.text in message and "\n" not in message, message
    for value in _inside(domain):
        _cell(method, **{name: value})


@pytest.mark.parametrize("method", sorted({m for m, _ in CASES}))
def test_the_command_line_refuses_an_edge_in_one_line(method, capsys, tmp_path):
    name, domain = next(iter(base.domains(method).items()))
    value = _outside(domain)[3]
    argv = ["sweep", "--method", method, "--lr", "0.1", f"--{name.replace('_', '-')}={value!r}", "--dim", "5",
            "--out", str(tmp_path / "r.nc")]
    if "momentum" in base.hyperparameters(method)._fields:
        argv += ["--momentum", "0.5"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0] and domain.text in err[0]
    assert not (tmp_path / "r.nc").exists()


def test_a_search_box_may_not_touch_an_open_end():
    with pytest.raises(nqm.NqmError, match=r"b1=1 is invalid: each value must be a decay rate in \[0, 1\)"):
        nqm.best("adam", lr=(0.001, 0.1), b1=(0.5, 1.0), problem=nqm.zhang(5), max_cells=10)
    with pytest.raises(nqm.NqmError, match=r"eps=0 is invalid: each value must be an epsilon > 0"):
        nqm.best("adam", lr=(0.001, 0.1), eps=0.0, problem=nqm.zhang(5), max_cells=10)


def test_an_optax_factory_declares_what_the_bridge_does_not_know():
    import optax

    def scaled_sgd(learning_rate, gain=2.0):  # a hyperparameter no optax factory of nqm's knows
        return optax.sgd(learning_rate * gain)

    with pytest.raises(nqm.NqmError, match="gain have no domain nqm knows: give from_optax"):
        from_optax("scaled-sgd", scaled_sgd)
    assert "scaled-sgd" not in methods()
    try:
        from_optax("scaled-sgd", scaled_sgd, domains={"gain": Domain("a gain in [1, 4]", 1.0, 4.0)})
        with pytest.raises(nqm.NqmError, match=r"gain=5 is invalid: each value must be a gain in \[1, 4\]"):
            _cell("scaled-sgd", gain=5.0)
        _cell("scaled-sgd", gain=4.0)
    finally:
        base.unregister("scaled-sgd")


@pytest.mark.parametrize("given", [{"noise": 2**53 + 1}, {"lr": [0.1, 2**60 + 1]}, {"target": 2**55 + 1}])
def test_an_integer_a_float_cannot_hold_is_refused(given):
    kw = {"lr": 0.1, "momentum": 0.5, "max_steps": 5, "progress": False, "problem": nqm.zhang(3), **given}
    with pytest.raises(nqm.NqmError, match=r"beyond what a float holds exactly \(2\^53\)"):
        nqm.sweep("sgdm", **kw)


def test_the_command_line_refuses_it_too_and_prints_a_huge_value_short(capsys, tmp_path):
    out = str(tmp_path / "r.nc")
    assert main(["sweep", "--lr", "0.1", "--momentum", "0.5", "--noise", "9007199254740993", "--out", out]) == 2
    assert main(["sweep", "--lr", "0.1", "--momentum", "0.5", "--batch-size", "1e300", "--out", out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "beyond what a float holds exactly" in err[0]
    assert "batch_size=1e+300 is invalid" in err[1] and len(err[1]) < 200


def test_an_eigenvalue_the_precision_cannot_hold_is_refused():
    problem = nqm.explicit([1.0, 1e-40])  # a float32 subnormal: precond's λ^(-1) would be ∞
    grid = dict(lr=0.1, momentum=0.5, power=1.0, problem=problem, max_steps=10, progress=False)
    with pytest.raises(nqm.NqmError, match=r"eigenvalue 1e-40 is below the smallest normal float32.*--x64"):
        nqm.sweep("precond", **grid)
    assert int(nqm.sweep("precond", **grid, x64=True).status.values.ravel()[0]) == 1  # float64 holds it: it settles
