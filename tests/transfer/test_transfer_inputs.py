"""Every option of ``nqm transfer`` and every parameter of ``nqm.transfer``'s entry points (transfer,
measure, train) refuses its bad input in one line — exit 2 at the command line, ``nqm.NqmError`` at
the API — with nothing written: the tables below list the bad values of each, and a test checks
that every option and parameter has its row, so that a new one cannot arrive without its bad input
(the idea of tests/cli/test_option_coverage.py, taken to transfer and to more than NaN)."""

import argparse
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nqm
import nqm.transfer
from nqm.cli import build_parser, main
from nqm.transfer import checked
from nqm.transfer.compare import transfer

# ------------------------------------------------------------------ the command line

MODEL = '''
import jax.numpy as jnp
import numpy as np


def build():
    x = np.random.default_rng(0).standard_normal((40, 6))
    loss = lambda p, b: 0.5 * jnp.mean((b["x"] @ p["w"] - b["y"]) ** 2)
    return loss, {"w": jnp.zeros(6)}, {"x": jnp.asarray(x), "y": jnp.asarray(x @ np.ones(6))}


def fails():
    raise ValueError("no data here")


def wrong():
    return 1, 2
'''

MINIMAL = ["--lr", "0.1", "--momentum", "0.5", "--delay", "0", "--steps", "20", "--out", "r.nc"]
PROBLEM = ["--problem", "quadratic"]

BAD = {  # option → its bad values (a list: several words); each a call of its own
    "--problem": [["nosuch"]],
    "--model": [["nan"], ["nosuch_module_of_nqm:build"], ["model"], ["model:nosuch"], ["model:fails"], ["model:wrong"],
                ["model:build", "--problem", "quadratic"], ["model:build", "--target", "1e6"]],
    "--target": [["nan"], ["inf"], ["-1"], ["0"], ["1e308"], ["1e6"]],
    "--method": [["nosuch"], ["adam"], ["sgdm", "sgdm"]],
    "--rho": [["-1"], ["nan"], ["1e308"]],
    "--delay": [["-1"], ["0", "0"], ["1.5"], ["2000000"]],
    "--lr": [["0"], ["-1"], ["nan"], ["inf"], ["1e-320"], ["1e308"]],
    "--momentum": [["1"], ["-0.1"], ["nan"]],
    "--steps": [["1"], ["-5"], ["nan"]],
    "--batch-size": [["0"], ["64", "8"], ["100000"]],
    "--seed": [["-1"], ["0", "0"], ["nan"], ["4294967296"]],
    "--top": [["0"], ["nan"], ["1000"]],
    "--x64": [["yes"]],
    "--out": [["table.json"]],
    "--force": [["yes"]],
    "--import": [["nosuch_module_of_nqm"]],  # every command's
}


def _options():
    parser = build_parser("transfer")
    sub = next(a for a in parser._actions if a.dest == "command").choices["transfer"]
    for action in sub._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            yield max(action.option_strings, key=len)


def test_every_option_of_nqm_transfer_has_its_bad_values():
    assert sorted(_options()) == sorted(BAD)
    # nqm.cli.transfer's own options: all of them but --import, which the command line gives every command
    from nqm.cli import transfer as transfer_command

    own = transfer_command.add_parser(argparse.ArgumentParser().add_subparsers())
    options = [max(a.option_strings, key=len) for a in own._actions if a.option_strings and a.dest != "help"]
    assert sorted(options) == sorted(set(BAD) - {"--import"})
    defaults = own.parse_args(["--lr", "0.1", "--momentum", "0.5", "--out", "r.nc"])
    assert (defaults.delay, defaults.steps, defaults.seed, defaults.problem) == ([0, 4], 2000, [0], None)


CLI_CASES = [(option, value) for option, values in BAD.items() for value in values]


@pytest.mark.parametrize("option, value", CLI_CASES, ids=[f"{o} {' '.join(v)}" for o, v in CLI_CASES])
def test_every_option_refuses_its_bad_input_in_one_line(option, value, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "model.py").write_text(MODEL)
    argv = ["transfer"] + MINIMAL + ([] if option == "--model" else PROBLEM)
    if option in argv:  # the minimal call's own value, replaced (an option may be given once)
        at = argv.index(option)
        end = at + 1
        while end < len(argv) and not argv[end].startswith("--"):
            end += 1
        argv[at + 1:end] = value
    else:
        argv += [option, *value]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nqm: error: "), err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == before


def test_the_crashes_of_the_audit_are_one_line(tmp_path, monkeypatch, capsys):
    """``--delay 0 0`` wrote its file, then crashed in its report; ``--lr 1e-320`` and ``1e308`` ran
    at lr 0 and ∞ in float32."""
    monkeypatch.chdir(tmp_path)
    call = ["transfer", *PROBLEM, "--momentum", "0.5", "--steps", "20", "--out", "r.nc"]
    for extra, said in ((["--lr", "0.1", "--delay", "0", "0"], "delay has repeated values"),
                        (["--lr", "1e-320"], "is 0 in float32"), (["--lr", "1e308"], "is inf in float32")):
        assert main(call + extra) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and said in err, err
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------ the API

@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _least_squares(dtype=jnp.float64):
    x = np.random.default_rng(0).standard_normal((40, 6))
    loss = lambda p, b: 0.5 * jnp.mean((b["x"] @ p - b["y"]) ** 2)
    return loss, jnp.zeros(6, dtype), {"x": jnp.asarray(x, dtype), "y": jnp.asarray(x @ np.ones(6), dtype)}


TRANSFER = {  # parameter → bad values; the call: the quadratic, 1 method, 1 delay, 1 lr, 20 steps
    "problem": ["nosuch", 3],
    "model": ["nosuch", 5, ("a", "b"), "model_of_nobody:build"],
    "target": [float("nan"), -1.0, float("inf"), "a", True, 1e308, 1e6],
    "methods": ["sgdm", [], ["sgdm", "sgdm"], [3], ["adam"]],
    "delays": [[], [0, 0], [-1], "a", [1.5]],
    "lr": [1e-320, 1e308, [], "0.1", None, -1.0],
    "momentum": [1.0, None, float("nan")],
    "steps": [1, 2.5, "a", 10**9],
    "batch_size": [0, [8, 4], [], "a", 10**6],
    "seed": [-1, "a", [], [1, 1], 2**32],
    "x64": ["yes", 1],
    "top": [0, "a", 1000],
    "rho": [-1.0, 1e308, "a"],
}


def test_every_parameter_of_transfer_has_its_bad_values():
    assert set(inspect.signature(transfer).parameters) == set(TRANSFER)


API_TRANSFER = [(name, value) for name, values in TRANSFER.items() for value in values]


@pytest.mark.parametrize("name, value", API_TRANSFER, ids=[f"{n}={v!r}" for n, v in API_TRANSFER])
def test_transfer_refuses_its_bad_input_in_one_line(name, value):
    call = dict(problem="quadratic", methods=["sgdm"], delays=[0], lr=[0.5], momentum=[0.0], steps=20)
    if name == "model":
        call.pop("problem")
    call[name] = value
    with pytest.raises(nqm.NqmError) as error:
        with jax.enable_x64(False):  # the run's precision: float32, as nqm transfer's default
            transfer(**call)
    assert "\n" not in str(error.value)


def test_transfer_of_no_delay_is_one_line():
    with pytest.raises(nqm.NqmError, match="delay is empty"):
        transfer("quadratic", delays=[], lr=[0.5], momentum=[0.0], steps=20)


MEASURE = {
    "loss": [5, None],
    "params": [jnp.zeros(6, jnp.int32), {}, "a"],
    "data": [{}, np.float64(1.0), {"x": np.ones((3, 6)), "y": np.ones(4)}],
    "top": [0, "a", 7, 1.5],
    "dim": [0, "a", 10**8],
    "probes": [0, "a"],
    "steps": [0, "a"],
    "floor": [-0.1, 1.0, float("nan"), "a"],
    "seed": [-1, "a", 2**32],
    "exact": ["yes", 1],
}


def test_every_parameter_of_measure_has_its_bad_values():
    assert set(inspect.signature(nqm.transfer.measure).parameters) == set(MEASURE)


API_MEASURE = [(name, value) for name, values in MEASURE.items() for value in values]


@pytest.mark.parametrize("name, value", API_MEASURE, ids=[f"{n}={v!r}" for n, v in API_MEASURE])
def test_measure_refuses_its_bad_input_in_one_line(name, value):
    loss, params, data = _least_squares()
    call = dict(loss=loss, params=params, data=data) | {name: value}
    with pytest.raises(nqm.NqmError) as error:
        nqm.transfer.measure(**call)
    assert "\n" not in str(error.value)


TRAIN = {
    "loss": [5],
    "params": [jnp.zeros(6, jnp.int32)],
    "data": [{}],
    "method": ["nosuch", 3, "adam"],  # adam: the momentum given
    "lr": [1e308, 1e-320, -1.0, "a", None],
    "momentum": [1.0, None],
    "delay": [-1, "nosuch:3"],
    "steps": [1, "a", 10**9],
    "target": [float("nan"), float("inf"), -1.0, 0.0, "a", 1e308],
    "batch_size": [0, 41, "a"],
    "stride": [0, "a", 10**6],
    "seed": [-1, "a", 2**32, 1.5],
    "diverge_factor": [float("nan"), 0.0, -1.0, 1.0, "a"],
    "hyper_and_options": [dict(rho=1e308), dict(method="adam", eps=1e308, momentum=None),
                          dict(method="ab", micro_steps=2**53 + 1), dict(method="ab", micro_steps=0),
                          dict(nosuch=1), dict(max_steps=10)],
}


def test_every_parameter_of_train_has_its_bad_values():
    assert set(inspect.signature(nqm.transfer.train).parameters) == set(TRAIN)


API_TRAIN = [(name, value) for name, values in TRAIN.items() for value in values]


@pytest.mark.parametrize("name, value", API_TRAIN, ids=[f"{n}={v!r}" for n, v in API_TRAIN])
def test_train_refuses_its_bad_input_in_one_line(name, value):
    """As nqm sweep refuses them: the grid in the parameters' precision (float32 here: lr = 1e308 or
    1e-320 would run as ∞ or 0), the target and the bound in their domains, a seed, a micro-step
    count a run can hold."""
    with jax.enable_x64(False):
        loss, params, data = _least_squares(jnp.float32)
    call = dict(loss=loss, params=params, data=data, method="sgdm", lr=0.1, momentum=0.5, steps=20, target=0.01)
    if name == "hyper_and_options":
        call |= {"method": "ab"} | value
    else:
        call[name] = value
    with pytest.raises(nqm.NqmError) as error:
        with jax.enable_x64(False):
            nqm.transfer.train(**call)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("data, words", [
    ({"x": np.ones((3, 6)), "y": np.ones(4)}, "share one leading example axis"),
    ({"x": np.float64(1.0)}, "share one leading example axis"),
    ({"x": np.ones((0, 2))}, "at least one example"),
])
def test_a_real_models_data_is_checked_before_any_work(data, words):
    """nqm.transfer.checked: the examples of a model's data are counted along one shared leading
    axis, and anything else is one line; its loss at the start must be a finite scalar."""
    assert checked.examples({"x": np.ones((5, 2)), "y": np.ones(5)}) == 5
    with pytest.raises(nqm.NqmError, match=words):
        checked.examples(data)
    w = jnp.ones(3)
    assert checked.loss_at(lambda v: jnp.sum(v**2), w) == 3.0
    with pytest.raises(nqm.NqmError, match="must return a scalar"):
        checked.loss_at(lambda v: v**2, w)
    with pytest.raises(nqm.NqmError, match="not finite at params"):
        checked.loss_at(lambda v: jnp.sum(v) / 0.0, w)
