"""A command's result is a netCDF file and never lands on another kind of file: --out must name a
.nc file (a figure's name gets a hint towards --plot), an existing file that nqm did not write is
not overwritten without --force, and a result nqm wrote is (a rerun replaces its own result)."""

import pytest

from nqm.cli import full_parser, main
from nqm.cli.parser import ResultFile

SMALL = ["--dim", "5"]
ARGV = {  # every command that writes a result, at a tiny size
    "sweep": ["--lr", "0.1", "--momentum", "0.5", "--max-steps", "20", *SMALL],
    "best": ["--lr", "0.05:1", "--momentum", "0.5", "--max-steps", "200", "--max-cells", "16", *SMALL],
    "scaling": ["--lr", "0.05:1", "--momentum", "0.5", "--batch-size", "1", "4", "--noise", "0.05", "--max-steps", "200",
                "--max-cells", "16", *SMALL],
    "trace": ["--lr", "0.1", "--momentum", "0.5", "--steps", "20", *SMALL],
    "expected": ["--lr", "0.1", "--momentum", "0.5", "--max-steps", "20", *SMALL],
    "threshold": ["--momentum", "0.5", "--delay", "1"],
    "transfer": ["--problem", "quadratic", "--lr", "0.1", "--momentum", "0.5", "--delay", "0", "--steps", "20"],
}


def test_every_command_that_writes_a_result_is_covered():
    commands = next(a for a in full_parser()._actions if a.dest == "command").choices
    writing = {name for name, sub in commands.items() if any(a.type is ResultFile for a in sub._actions)}
    assert writing == set(ARGV)


@pytest.mark.parametrize("command", sorted(ARGV))
def test_out_is_a_netcdf_file(command, tmp_path, capsys):
    for name, hint in (("figure.png", "--plot"), ("table.json", "name it *.nc")):
        assert main([command, *ARGV[command], "--out", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "a result is a netCDF file" in err[0] and hint in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", sorted(ARGV))
def test_a_file_nqm_did_not_write_is_kept_unless_forced(command, tmp_path, capsys):
    notes = tmp_path / "notes.nc"
    notes.write_text("my notes")
    assert main([command, *ARGV[command], "--out", str(notes)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a result of nqm" in err[0] and "--force" in err[0]
    assert notes.read_text() == "my notes"
    assert main([command, *ARGV[command], "--out", str(notes), "--force"]) == 0
    assert notes.read_bytes()[:4] == b"\x89HDF"
    assert main([command, *ARGV[command], "--out", str(notes), "--restart"] if command in ("sweep", "best")
                else [command, *ARGV[command], "--out", str(notes)]) == 0  # its own result: replaced freely


@pytest.mark.parametrize("argv", [
    ["sweep", "--lr", "0.1", "--momentum", "0.5", "--out", "OUT", "--plot", " "],
    ["sweep", "--lr", "0.1", "--momentum", "0.5", "--out", ""],
    ["threshold", "--momentum", "0.5", "--out", " "],
    ["summary", ""],
    ["plot", "", "--out", "OUT"],
    ["sweep", "--lr", "0.1", "--momentum", "0.5", "--out", "FOLDER/"],
])
def test_a_blank_path_is_refused_before_any_work(argv, tmp_path, capsys):
    argv = [a.replace("OUT", str(tmp_path / "r.nc")).replace("FOLDER", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and any(words in err[0] for words in ("is empty", "names a folder", "is a directory"))
    assert list(tmp_path.iterdir()) == []
