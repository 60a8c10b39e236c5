"""A mistyped method, option or command gets the name it was probably meant to be, at the API and
the command line, in the one-line error; a name close to nothing gets no guess."""

import pytest

import nqm
import nqm.expected
from nqm.cli import main

GRID = dict(lr=[0.1], momentum=[0.5], max_steps=10, progress=False, problem=nqm.zhang(5))


@pytest.mark.parametrize("call, meant", [
    (lambda: nqm.sweep("sgdm", **{**GRID, "momentun": [0.5]}), "'momentum'"),
    (lambda: nqm.sweep("sgmd", **GRID), "'sgdm'"),
    (lambda: nqm.sweep("ab", **GRID, rhoo=[0.5]), "'rho'"),
    (lambda: nqm.trajectory("ab", lr=0.1, momentum=0.5, rh=0.5, steps=5), "'rho'"),
    (lambda: nqm.best("adam", lr=(0.001, 0.1), b11=(0.0, 0.9), max_cells=10), "'b1'"),
    (lambda: nqm.expected.sweep("shifed", lr=[0.1], momentum=[0.5]), "'shifted'"),
])
def test_the_api_guesses(call, meant):
    with pytest.raises(nqm.NqmError, match="did you mean") as error:
        call()
    assert meant in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("argv, meant", [
    (["sweep", "--lr", "0.1", "--momentun", "0.5", "--out", "x.nc"], "'--momentum'"),
    (["sweep", "--method", "ab", "--lr", "0.1", "--momentum", "0.5", "--rhoo=0.5", "--out", "x.nc"], "'--rho'"),
    (["sweep", "--method", "sgmd", "--lr", "0.1", "--momentum", "0.5", "--out", "x.nc"], "'sgdm'"),
    (["threshold", "--method", "nesterv", "--out", "x.nc"], "'nesterov'"),
    (["swep"], "'sweep'"),
])
def test_the_command_line_guesses(argv, meant, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean" in err[0] and meant in err[0]
    assert not (tmp_path / "x.nc").exists()


def test_a_name_close_to_nothing_gets_no_guess(capsys):
    with pytest.raises(nqm.NqmError) as error:
        nqm.sweep("sgdm", **GRID, zzzzzz=[1])
    assert "did you mean" not in str(error.value)
    assert main(["sweep", "--lr", "0.1", "--momentum", "0.5", "--qqqqqq", "1", "--out", "x.nc"]) == 2
    assert "did you mean" not in capsys.readouterr().err
