"""Every option of every command has its bad input: the parser gives the list, so a new option
cannot arrive without one. A value option given NaN (or, for a path, a name it cannot take) and a
flag given a value are one error line, exit 2, with nothing written — before any work."""

import argparse

import pytest

from nqm.cli import full_parser, main

TINY = ["--dim", "5"]
MINIMAL = {  # a valid call of each command, at a tiny size; OUT and RESULT are filled per test
    "sweep": ["--lr", "0.1", "--momentum", "0.5", "--max-steps", "20", *TINY, "--out", "OUT"],
    "best": ["--lr", "0.05:1", "--momentum", "0.5", "--max-steps", "200", "--max-cells", "16", *TINY, "--out", "OUT"],
    "scaling": ["--lr", "0.05:1", "--momentum", "0.5", "--batch-size", "1", "4", "--noise", "0.05", "--max-steps", "200",
                "--max-cells", "16", *TINY, "--out", "OUT"],
    "trace": ["--lr", "0.1", "--momentum", "0.5", "--steps", "20", *TINY, "--out", "OUT"],
    "expected": ["--lr", "0.1", "--momentum", "0.5", "--max-steps", "20", *TINY, "--out", "OUT"],
    "threshold": ["--momentum", "0.5", "--delay", "1", "--out", "OUT"],
    "plot": ["RESULT", "--out", "FIG"],
    "summary": ["RESULT"],
    "bench": [],
    "transfer": ["--problem", "quadratic", "--lr", "0.1", "--momentum", "0.5", "--delay", "0", "--steps", "20",
                 "--out", "OUT"],
}
PATHS = {"--out": "table.json", "--plot": "figure.xyz", "--threshold": "missing.nc", "--csv": " ", "--checkpoint": " "}
PLOT_OUT = "figure.xyz"  # nqm plot's --out is a figure


def _options():
    commands = next(a for a in full_parser()._actions if a.dest == "command").choices
    for name, sub in commands.items():
        for action in sub._actions:
            if action.option_strings and not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                yield name, max(action.option_strings, key=len), action


CASES = list(_options())


def test_every_command_has_a_minimal_call():
    assert {name for name, _, _ in CASES} <= set(MINIMAL)


@pytest.mark.parametrize("command, option, action", CASES, ids=[f"{c} {o}" for c, o, _ in CASES])
def test_every_option_refuses_its_bad_input(command, option, action, tmp_path, capsys, monkeypatch, earlier_result):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "result.nc").write_bytes(earlier_result)
    argv = [command] + [{"OUT": "r.nc", "RESULT": "result.nc", "FIG": "fig.png"}.get(a, a) for a in MINIMAL[command]]
    if action.nargs == 0:  # a flag: given a value, which it does not take
        argv += [option, "yes"]
    else:
        bad = PLOT_OUT if (command, option) == ("plot", "--out") else PATHS.get(option, "nan")
        if option in argv:  # replace the minimal call's value (an option may be given once)
            at = argv.index(option) + 1
            argv[at] = bad
        else:
            argv += [option, bad]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nqm: error: "), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _api_cases():
    import dataclasses

    from nqm.engine import RunConfig
    from nqm.optimizers import base, methods

    for method in methods():
        for name in base.options(method):
            yield method, name
    for field in dataclasses.fields(RunConfig):
        yield "sgdm", field.name


API_CASES = list(_api_cases())


@pytest.mark.parametrize("method, name", API_CASES, ids=[f"{m}-{n}" for m, n in API_CASES])
def test_every_api_option_refuses_a_value_of_no_kind_it_takes(method, name):
    """Every optimizer option of every method and every run setting, given a value of no kind it
    takes (a string of words), is one NqmError line from nqm.sweep, before any work."""
    import nqm

    momentum = 0.5 if "momentum" in nqm.optimizers.base.hyperparameters(method)._fields else None
    call = {"lr": 0.1, "momentum": momentum, "problem": nqm.zhang(5), "max_steps": 10, "progress": False,
            name: "not a value"}
    with pytest.raises(nqm.NqmError) as error:
        nqm.sweep(method, **call)
    assert "\n" not in str(error.value)
