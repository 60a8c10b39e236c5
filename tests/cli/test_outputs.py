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


def _refused(argv, folder, capsys) -> str:
    """Run ``argv``: exit 2, one error line, and every file of ``folder`` as it was (nothing written)."""
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    capsys.readouterr()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nqm: error: "), err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    return err[0]


SWEEP = ["sweep", "--lr", "0.1", "0.2", "0.3", "--momentum", "0", "0.5", "--max-steps", "20", *SMALL, "--no-progress"]


@pytest.mark.parametrize("argv, words", [
    (["sweep", "--lr", "0.1", "--momentum", "0", "--max-steps", "20", *SMALL, "--no-progress"], "its grid differs"),
    (SWEEP + ["--target", "0.02"], "setting target differs"),
    (SWEEP + ["--method", "nesterov"], "setting method differs"),
], ids=["one cell", "another target", "another method"])
def test_a_result_is_replaced_only_by_a_rerun_of_the_same_sweep(argv, words, tmp_path, capsys, monkeypatch):
    import nqm.sweeps

    out = tmp_path / "results.nc"
    assert main(SWEEP + ["--out", str(out)]) == 0
    real = nqm.sweeps._run
    monkeypatch.setattr(nqm.sweeps, "_run", lambda *a: pytest.fail("a cell was computed"))  # refused before any work
    err = _refused(argv + ["--out", str(out)], tmp_path, capsys)
    assert "holds another sweep" in err and words in err and "--force" in err, err
    monkeypatch.setattr(nqm.sweeps, "_run", real)
    assert main(SWEEP + ["--out", str(out)]) == 0  # the same sweep again: replaced
    assert main(argv + ["--out", str(out), "--force"]) == 0
    assert nqm.load(out).attrs["method"] == ("nesterov" if "nesterov" in argv else "sgdm")


def test_a_search_is_replaced_only_by_the_same_search(tmp_path, capsys):
    out = tmp_path / "best.nc"
    assert main(["best", *ARGV["best"], "--out", str(out)]) == 0
    err = _refused(["best", *ARGV["best"], "--target", "0.02", "--out", str(out)], tmp_path, capsys)
    assert "holds another search's points" in err and "setting target differs" in err, err
    assert main(["best", *ARGV["best"], "--out", str(out)]) == 0


def _trace(out):
    return ["trace", *ARGV["trace"], "--out", str(out)]


def _sweep(out):
    return ["sweep", *ARGV["sweep"], "--out", str(out)]


@pytest.mark.parametrize("first, then, held", [
    (_trace, _sweep, "a trace (nqm trace), not a sweep"),
    (_sweep, _trace, "a sweep (nqm sweep, nqm expected), not a trace"),
    (_sweep, lambda out: ["threshold", *ARGV["threshold"], "--out", str(out)], "a sweep (nqm sweep, nqm expected), not a "
                                                                                "threshold table"),
    (_trace, lambda out: ["expected", *ARGV["expected"], "--out", str(out)], "a trace (nqm trace), not a sweep"),
], ids=["sweep over a trace", "trace over a sweep", "threshold over a sweep", "expected over a trace"])
def test_a_result_of_another_kind_is_never_replaced_without_force(first, then, held, tmp_path, capsys):
    out = tmp_path / "r.nc"
    assert main(first(out)) == 0
    err = _refused(then(out), tmp_path, capsys)  # nothing written: no rescued copy either
    assert f"holds {held}" in err and "--force" in err, err
    assert main(then(out) + ["--force"]) == 0


KINDS = {"sweep": "sweep", "expected": "sweep", "best": "search", "scaling": "scaling", "trace": "trace",
         "threshold": "threshold", "transfer": "transfer"}


@pytest.mark.parametrize("command", sorted(ARGV))
def test_every_kind_of_result_is_read_by_nqm_load_and_named_by_nqm_summary(command, tmp_path, capsys):
    import nqm
    from nqm.results import kind

    out = tmp_path / "r.nc"
    assert main([command, *ARGV[command], "--out", str(out)]) == 0
    assert kind(nqm.load(out)) == KINDS[command]
    capsys.readouterr()
    code = main(["summary", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    if KINDS[command] == "sweep":
        assert code == 0 and err == []
    else:
        assert code == 2 and len(err) == 1 and "not a sweep" in err[0] and f"nqm {command}" in err[0], err


def _result(folder):
    import nqm

    path = folder / "result.nc"
    nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=0.5, problem=nqm.zhang(5), max_steps=20, progress=False), path)
    return path


FIGURES = {  # every command that draws, with its figure's option
    "sweep": lambda folder, fig: ["sweep", *ARGV["sweep"], "--no-progress", "--out", str(folder / "r.nc"), "--plot", fig],
    "trace": lambda folder, fig: ["trace", *ARGV["trace"], "--out", str(folder / "r.nc"), "--plot", fig],
    "expected": lambda folder, fig: ["expected", *ARGV["expected"], "--out", str(folder / "r.nc"), "--plot", fig],
    "scaling": lambda folder, fig: ["scaling", *ARGV["scaling"], "--out", str(folder / "r.nc"), "--plot", fig],
    "plot": lambda folder, fig: ["plot", str(_result(folder)), "--out", fig],
}


@pytest.mark.parametrize("command", FIGURES)
@pytest.mark.parametrize("name", ["notes.png", "notes.pdf", "notes.svg"])
def test_an_image_nqm_did_not_draw_is_kept_unless_forced(command, name, tmp_path, capsys):
    notes = tmp_path / name
    argv = FIGURES[command](tmp_path, str(notes))  # (nqm plot's input is written here)
    notes.write_bytes(b"my own figure")
    err = _refused(argv, tmp_path, capsys)  # before any work: no result written either
    assert "is not a figure nqm drew" in err and "--force" in err, err
    assert main(argv + ["--force"]) == 0 and notes.read_bytes() != b"my own figure"
    assert main(argv + (["--restart"] if command == "sweep" else [])) == 0  # a figure nqm drew: replaced freely
