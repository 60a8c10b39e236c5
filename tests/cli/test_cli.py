"""The command line: the documented interface works, and bad input is one line with exit status 2."""

import os
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import nqm
from nqm.cli import main, values

SMALL = ["--dim", "200", "--max-steps", "1500", "--no-progress"]


def test_value_lists():
    assert values("0.5") == [0.5]
    np.testing.assert_allclose(values("geom:0.01:1:3"), [0.01, 0.1, 1.0])
    np.testing.assert_allclose(values("lin:0:0.9:4"), [0.0, 0.3, 0.6, 0.9])
    for bad in ("abc", "geom:1:2", "geom:0:1:3", "log:1:2:3", "lin:0:1:x"):
        with pytest.raises(nqm.NqmError):
            values(bad)


def test_sweep_writes_result_and_heatmap(tmp_path, capsys):
    out, fig = tmp_path / "r.nc", tmp_path / "h.png"
    code = main(["sweep", "--method", "ab", "--lr", "geom:0.05:2:4", "0.7", "--momentum", "0", "0.9",
                 "--delay", "0", "2", "--noise", "0", "0.01", "--rho", "0.5", "--group", "blocks:4",
                 "--micro-steps", "2", "--mode", "vel-only", "--seed", "3", *SMALL,
                 "--out", str(out), "--plot", str(fig), "--threshold"])
    assert code == 0
    ds = nqm.load(out)
    assert ds.sizes == {"delay": 2, "noise": 2, "rho": 1, "seed": 1, "momentum": 2, "lr": 5}
    assert (ds.attrs["group"], ds.attrs["micro_steps"], ds.attrs["mode"]) == ("blocks:4", 2, "vel-only")
    assert list(ds.seed.values) == [3] and ds.attrs["dim"] == 200
    assert fig.stat().st_size > 10_000
    assert not (tmp_path / "r.nc.partial").exists()
    assert "reached the target" in capsys.readouterr().out
    # plot again from the file
    assert main(["plot", str(out), "--out", str(tmp_path / "again.png")]) == 0


def test_problem_options(tmp_path):
    out = tmp_path / "r.nc"
    assert main(["sweep", "--lr", "0.5", "--momentum", "0.5", "--eigenvalues", "1", "0.1", "0.01",
                 "--rotate", "4", "--x64", "--dampening", *SMALL[2:], "--out", str(out)]) == 0
    ds = nqm.load(out)
    assert ds.attrs["dim"] == 3 and ds.attrs["rotation_seed"] == 4 and ds.attrs["dtype"] == "float64"
    assert ds.attrs["convention"].startswith("dampened")
    other = tmp_path / "loguniform.nc"  # another sweep: not written over the first
    assert main(["sweep", "--lr", "0.5", "--momentum", "0.5", "--spectrum", "loguniform", "--dim", "16",
                 "--lo", "1e-3", "--max-steps", "100", "--no-progress", "--out", str(other)]) == 0
    assert nqm.load(other).attrs["spectrum"] == "loguniform(N=16, lo=0.001, hi=1)"


@pytest.mark.parametrize("args,message", [
    (["--lr", "0", "--momentum", "0.5"], "lr=0 is invalid"),
    (["--lr", "nan", "--momentum", "0.5"], "lr=nan is invalid"),
    (["--lr", "0.1", "--momentum", "1"], "momentum=1 is invalid"),
    (["--lr", "0.1", "--momentum", "0.5", "--delay", "-2"], "delay=-2 is invalid"),
    (["--method", "ab", "--lr", "0.1", "--momentum", "0.5", "--rho", "-1"], "rho=-1 is invalid"),
    (["--method", "nope", "--lr", "0.1", "--momentum", "0.5"], "invalid choice"),
    (["--method", "ab", "--group", "rows", "--lr", "0.1", "--momentum", "0.5"], "unknown group"),
    (["--lr", "geom:1:0:3", "--momentum", "0.5"], "geometric range"),
    (["--lr", "--momentum", "0.5"], "expected at least one argument"),
    (["--lr", "0.1", "--momentum", "0.5", "--dim", "0"], "--dim must be an integer between 1 and"),
])
def test_bad_sweep_input(tmp_path, capsys, args, message):
    out = tmp_path / "r.nc"
    assert main(["sweep", *args, *SMALL[2:], "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nqm: error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_unwritable_output_fails_before_any_work(tmp_path, capsys):
    assert main(["sweep", "--lr", "0.1", "--momentum", "0.5", "--out", str(tmp_path / "no" / "r.nc")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["sweep", "--lr", "0.1", "--momentum", "0.5", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_unreadable_result(tmp_path, capsys):
    bad = tmp_path / "bad.nc"
    bad.write_bytes(b"\x89HDF garbage")
    assert main(["plot", str(bad), "--out", str(tmp_path / "x.png")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_plot_says_what_is_wrong_with_its_input_before_its_figure(tmp_path, capsys):
    """``nqm plot`` (nqm.cli.plot) reads its result first: with both a bad result and a figure it
    cannot write, the one line names the result; a good result then meets the figure's check."""
    from nqm.cli import plot as plot_command

    bad, result = tmp_path / "bad.nc", tmp_path / "r.nc"
    bad.write_bytes(b"\x89HDF garbage")
    nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=0.5, problem=nqm.zhang(8), max_steps=100, progress=False),
             result)
    for given, said in ((bad, "cannot read"), (result, "unknown format 'xyz'")):
        assert main([plot_command.NAME, str(given), "--out", str(tmp_path / "f.xyz")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
    assert main([plot_command.NAME, str(result), "--out", str(tmp_path / "f.png")]) == 0
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_threshold_table(tmp_path, capsys):
    out = tmp_path / "t.nc"
    assert main(["threshold", "--method", "sgdm", "--delay", "0", "1", "4", "--momentum", "0", "0.5",
                 "--out", str(out)]) == 0
    ds = xr.load_dataset(out, engine="h5netcdf")
    np.testing.assert_allclose(ds.threshold.sel(delay=0).values, [2.0, 3.0])  # 2(1 + m)
    assert "undampened" in ds.attrs["convention"]
    assert main(["threshold", "--momentum", "0.5", "--delay-dist", "uniform:4:2"]) == 2
    assert main(["threshold", "--momentum", "0.5", "--delay-dist", "poisson:3"]) == 2
    assert main(["threshold", "--momentum", "1.5", "--delay", "1"]) == 2
    assert main(["threshold", "--momentum", "0.5", "--delay", "-1"]) == 2


def test_threshold_answers_for_every_method(capsys):
    """Derived from the update for the linear methods (refused, pointing at --simulate, for the
    others), simulated by bisection for any method."""
    from nqm.optimizers import make, methods

    from nqm.cli import threshold as threshold_command

    out = ""
    for method in methods():
        momentum = ["--momentum", "0.5"] if "momentum" in make(method).hyper._fields else []  # none for adam
        assert threshold_command.has_momentum(method) == bool(momentum)  # --momentum defaults to 0 where it has one
        derived = main(["threshold", "--method", method, "--delay", "2", *momentum])
        printed = capsys.readouterr()
        assert derived == (0 if make(method).linear else 2)
        assert make(method).linear or "--simulate" in printed.err
        assert main(["threshold", "--method", method, "--delay", "2", *momentum, "--simulate",
                     "--steps", "1500", "--tol", "0.05"]) == 0
        out += printed.out + capsys.readouterr().out
    assert out.count("simulated thresholds") == len(methods()) and out.count("mean thresholds") == sum(make(m).linear for m in methods())
    assert main(["threshold", "--delay-dist", "workers:3", "--momentum", "0.5"]) == 2  # a pool has no pmf
    assert main(["threshold", "--steps", "10"]) == 2  # a simulation option without --simulate
    assert main(["threshold", "--simulate", "--criterion", "mean-square"]) == 2


def test_the_overlay_is_the_methods_own_threshold_or_a_given_table(tmp_path):
    """--threshold draws the result's own derived threshold; for a method that is not linear it
    draws none (never another method's) unless a table is given, e.g. a simulated one."""
    import matplotlib

    matplotlib.use("Agg")
    from nqm.plots.heatmap import plot_heatmaps

    kw = dict(lr=np.geomspace(0.05, 1.5, 5), momentum=[0.0, 0.5, 0.8], delay=2, problem=nqm.zhang(8), max_steps=300,
              progress=False)
    red = lambda fig: [line for ax in fig.axes for line in ax.get_lines() if line.get_color() == "red"]
    sgdm = nqm.sweep("sgdm", **kw)
    line = red(plot_heatmaps(sgdm, threshold=True))[0]
    from nqm.thresholds import derived

    np.testing.assert_allclose(line.get_xdata()[[0, -1]], derived.threshold("sgdm", delay=2, momentum=[0.0, 0.8]), rtol=1e-9)
    ab = nqm.sweep("ab", rho=0.5, **kw)
    fig = plot_heatmaps(ab, threshold=True)
    assert not red(fig) and "no derived threshold" in fig._suptitle.get_text()
    table = tmp_path / "ab.nc"
    assert main(["threshold", "--method", "ab", "--rho", "0.5", "--delay", "2", "--momentum", "0", "0.5", "0.8",
                 "--simulate", "--steps", "1000", "--tol", "0.05", "--out", str(table)]) == 0
    result = tmp_path / "ab_result.nc"
    nqm.save(ab, result)
    assert main(["plot", str(result), "--out", str(tmp_path / "ab.png"), "--threshold", str(table)]) == 0
    assert red(plot_heatmaps(ab, threshold=nqm.io.load_dataset(table)))


@pytest.mark.parametrize("command", ["sweep", "expected", "plot"])
def test_a_threshold_table_is_drawn_and_labelled_as_given(command, tmp_path, monkeypatch):
    """--threshold TABLE draws the table (here half the derived threshold, labelled by its own
    criterion), never the derived line in its place."""
    from nqm.cli import output
    from nqm.io import load_dataset

    derived_table = tmp_path / "derived.nc"
    assert main(["threshold", "--method", "sgdm", "--delay", "2", "--momentum", "0", "0.5", "0.8",
                 "--out", str(derived_table)]) == 0
    table = load_dataset(derived_table)
    table["threshold"] = table.threshold / 2
    table.attrs["criterion"] = "simulated"
    nqm.save(table, tmp_path / "table.nc")
    figures = []
    monkeypatch.setattr(output, "save_figure", lambda fig, path: figures.append(fig))
    grid = ["--lr", "geom:0.05:1.5:5", "--momentum", "0", "0.5", "0.8", "--delay", "2", "--dim", "8", "--max-steps",
            "300"]
    threshold = ["--threshold", str(tmp_path / "table.nc")]
    if command == "plot":
        nqm.save(nqm.sweep("sgdm", lr=np.geomspace(0.05, 1.5, 5), momentum=[0.0, 0.5, 0.8], delay=2,
                           problem=nqm.zhang(8), max_steps=300, progress=False), tmp_path / "r.nc")
        argv = ["plot", str(tmp_path / "r.nc"), "--out", str(tmp_path / "f.png"), *threshold]
    else:
        argv = [command, *grid, "--out", str(tmp_path / "r.nc"), "--plot", str(tmp_path / "f.png"), *threshold]
    assert main(argv) == 0
    lines = [line for ax in figures[0].axes for line in ax.get_lines() if line.get_color() == "red"]
    assert len(lines) == 1 and lines[0].get_label() == "stability η*(m) (simulated)"
    np.testing.assert_allclose(lines[0].get_xdata()[[0, -1]], table.threshold.values[0, [0, -1]], rtol=1e-12)


def test_python_dash_m_reports_errors_without_traceback(tmp_path):
    run = subprocess.run([sys.executable, "-m", "nqm", "sweep", "--lr", "-1", "--momentum", "0.5",
                          "--out", str(tmp_path / "r.nc")], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == "nqm: error: lr=-1 is invalid: each value must be a learning rate > 0"


def test_the_command_keeps_its_compiled_programs_where_it_is_told(tmp_path):
    from nqm.cli import use_compilation_cache

    home = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    env = dict(home)
    assert use_compilation_cache(env) == str(tmp_path / "xdg" / "nqm" / "jax") == env["JAX_COMPILATION_CACHE_DIR"]
    assert (tmp_path / "xdg" / "nqm" / "jax").is_dir()
    env = {**home, "NQM_COMPILATION_CACHE": str(tmp_path / "mine")}
    assert use_compilation_cache(env) == str(tmp_path / "mine") == env["JAX_COMPILATION_CACHE_DIR"]
    env = {**home, "NQM_COMPILATION_CACHE": "off"}
    assert use_compilation_cache(env) is None and "JAX_COMPILATION_CACHE_DIR" not in env
    env = {**home, "JAX_COMPILATION_CACHE_DIR": "theirs", "NQM_COMPILATION_CACHE": str(tmp_path / "other")}
    assert use_compilation_cache(env) == "theirs" and not (tmp_path / "other").exists()  # the user's own wins
    (tmp_path / "a-file").write_text("")
    env = {**home, "NQM_COMPILATION_CACHE": str(tmp_path / "a-file" / "jax")}  # cannot be made: compile as without
    assert use_compilation_cache(env) is None and "JAX_COMPILATION_CACHE_DIR" not in env


def test_the_command_leaves_with_its_status_its_output_and_its_exit_handlers():
    """``command`` skips the interpreter's teardown, and nothing else: the status, every line of
    output (block-buffered in a pipe) and what is registered to run at exit."""
    script = ("import atexit, sys\natexit.register(lambda: print('exit handler ran'))\nfrom nqm.cli import command\n"
              "sys.argv = ['nqm', *sys.argv[1:]]\ncommand()\nprint('not reached')")
    ok = subprocess.run([sys.executable, "-c", script, "threshold", "--method", "sgdm", "--delay", "0", "1", "2",
                         "--momentum", "0.5"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert lines[-1] == "exit handler ran" and "not reached" not in ok.stdout and len(lines) >= 4, ok.stdout
    bad = subprocess.run([sys.executable, "-c", script, "threshold", "--method", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("nqm: error:") and bad.stdout == "exit handler ran\n"


def test_a_second_run_loads_the_first_runs_programs_and_gives_the_same_bits(tmp_path):
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["NQM_COMPILATION_CACHE"] = str(cache)
    grid = ["--lr", "geom:0.05:2:3", "--momentum", "0", "0.9", "--delay", "2", "--noise", "0.05", "--dim", "600",
            "--max-steps", "3000"]  # more than the numpy path's components: compiled kernels
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}.nc"
        done = subprocess.run([sys.executable, "-m", "nqm", "expected", *grid, "--out", str(out)],
                              capture_output=True, text=True, env=env)
        assert done.returncode == 0 and "Warning" not in done.stderr, done.stderr
        runs.append(nqm.load(out).load())
        if i == 0:
            kept = sorted(p.name for p in cache.iterdir())
            assert any(name.startswith("jit__fit") for name in kept), kept
    assert sorted(p.name for p in cache.iterdir()) == kept  # the second run compiled nothing new
    for name in ("steps", "status", "loss", "steady_state_loss"):
        np.testing.assert_array_equal(runs[0][name].values, runs[1][name].values)


def test_a_cache_entry_cut_short_shows_no_library_warning_and_changes_no_result(tmp_path):
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["NQM_COMPILATION_CACHE"] = str(cache)
    argv = ["sweep", "--lr", "0.1", "0.3", "--momentum", "0", "0.5", "--dim", "8", "--max-steps", "200",
            "--no-progress"]
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}.nc"
        done = subprocess.run([sys.executable, "-m", "nqm", *argv, "--out", str(out)], capture_output=True, text=True,
                              env=env)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        runs.append(nqm.load(out))
        for entry in cache.iterdir():  # every entry cut short, as a file-size limit or a full disk leaves it
            if entry.is_file():
                entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(runs[0][name].values, runs[1][name].values)


@pytest.mark.parametrize("extra, message", [
    (["--expected", "--seeds", "2"], "--expected has no seeds (the expectation is exact): drop --seeds"),
    (["--expected", "--x64"], "drop --x64"),
    (["--expected", "--independent-noise"], "drop --independent-noise"),
    (["--expected", "--method", "ab", "--rho", "0.5"], "not --method ab; drop --expected"),
    (["--expected", "--delay-dist", "workers:4"], "worker pool workers:4 (no delay pmf); drop --expected"),
    (["--max-cells", "10"], "--max-cells 10 is too small for the first grid (64 cells"),
    (["--seed", "4294967295", "--seeds", "2"], "seed=4294967296 is invalid"),
    (["--robust", "1e-300", "--x64"], "the nudge δ = 1e-300 is too small"),
])
def test_best_refuses_in_the_commands_words(extra, message, tmp_path, monkeypatch, capsys):
    from nqm import expected, sweeps

    def refuse(*args, **kw):
        raise AssertionError("evaluated before the input was checked")

    monkeypatch.setattr(sweeps, "evaluate_job", refuse)  # where a search runs its rounds
    monkeypatch.setattr(expected, "evaluate", refuse)
    argv = ["best", "--lr", "0.05:1", "--momentum", "0:0.9", "--dim", "8", "--max-steps", "50", "--no-progress",
            *extra, "--out", str(tmp_path / "b.nc")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    for api_words in ("seeds=1", "expected=True", "coarse", "e+09"):
        assert api_words not in err[0]
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ one parser, shared groups

import argparse
import dataclasses
import re

from nqm import engine
from nqm.cli import COMMANDS, build_parser, groups
from nqm.cli.parser import Parser


def _parser(name) -> argparse.ArgumentParser:
    """The full parser of one command, as ``nqm NAME`` builds it."""
    module = next(m for m in COMMANDS if m.NAME == name)
    return module.add_parser(Parser(prog="nqm").add_subparsers(parser_class=Parser))


def _options(name) -> set[str]:
    return {flag for action in _parser(name)._actions for flag in action.option_strings}


def _help_entries(name) -> dict[str, str]:
    """Each option's entry of ``nqm NAME --help``, its wrapped lines joined."""
    entries, current = {}, None
    for line in _parser(name).format_help().splitlines():
        if re.match(r"  -", line):
            current = line.split()[0].rstrip(",")
            entries[current] = line
        elif current and line.startswith("   "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return {k: " ".join(v.split()) for k, v in entries.items()}


@pytest.mark.parametrize("name", [m.NAME for m in COMMANDS])
def test_every_help_shows_each_default_once(name, monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")  # narrow: defaults wrap across lines
    entries = _help_entries(name)
    assert len(entries) >= 3
    for option, entry in entries.items():
        assert entry.count("default") <= 1, entry
        assert not re.search(r"default:? None\b", entry), entry
    for action in _parser(name)._actions:
        if action.option_strings and action.default is not None and not isinstance(action.default, bool) \
                and action.default is not argparse.SUPPRESS:
            shown = " ".join(map(str, action.default)) if isinstance(action.default, list) else str(action.default)
            assert f"(default: {shown})" in entries[action.option_strings[0]], entries[action.option_strings[0]]


@pytest.mark.parametrize("name, required", [
    ("sweep", ["--lr", "1", "--momentum", "0", "--out", "x.nc"]),
    ("trace", ["--lr", "1", "--momentum", "0", "--steps", "5", "--out", "x.nc"]),
    ("expected", ["--lr", "1", "--momentum", "0", "--out", "x.nc"]),
])
def test_run_settings_default_to_run_config(name, required, monkeypatch):
    args = build_parser(name).parse_args([name, *required])
    settings = groups.settings(args)
    assert "target" in settings and engine.RunConfig(**settings) == engine.RunConfig()
    assert args.target == engine.RunConfig().target

    @dataclasses.dataclass(frozen=True)
    class Changed(engine.RunConfig):
        target: float = 0.125
        max_steps: int = 777

    monkeypatch.setattr(engine, "RunConfig", Changed)  # the CLI follows: no default of its own
    args = build_parser(name).parse_args([name, *required])
    assert args.target == 0.125 and getattr(args, "max_steps", 777) == 777


def test_commands_share_the_grid_problem_and_method_groups():
    from nqm import expected
    from nqm.optimizers import methods
    from nqm.optimizers.base import options
    from nqm.grids import all_hyper_dims

    grid = {"--lr", "--momentum", "--delay", "--noise"}
    problem = {"--spectrum", "--dim", "--lo", "--hi", "--eigenvalues", "--rotate"}
    registry = {"--method", *("--" + n.replace("_", "-") for m in methods() for n in options(m)),
                *("--" + n.replace("_", "-") for n in all_hyper_dims())}
    sweep, trace, expected_ = _options("sweep"), _options("trace"), _options("expected")
    for options_ in (sweep, trace, expected_):
        assert grid | problem | {"--target", "--out"} <= options_
    assert registry | {"--seed", "--ab-mode"} <= sweep & trace  # --ab-mode: --mode's earlier spelling
    # the exact mode takes only the linear methods' options, and precond's power (one value)
    assert "--delay-dist" in sweep and not (registry - {"--method", "--dampening", "--power"}) & expected_
    args = build_parser("expected").parse_args(["expected", "--lr", "1", "--momentum", "0", "--out", "x.nc", "--bins"])
    assert args.bins == expected.DEFAULT_BINS and args.method == groups.default_of(expected.sweep, "method")
    assert next(a for a in _parser("expected")._actions if a.dest == "method").choices == expected.methods()
    assert next(a for a in _parser("threshold")._actions if a.dest == "method").choices == methods()


def test_commands_that_need_no_simulation_do_not_import_jax(tmp_path):
    result = tmp_path / "r.nc"
    nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.3], momentum=[0, 0.5], problem=nqm.zhang(8), max_steps=200, progress=False),
             result)
    script = ("import sys\nfrom nqm.cli import main\ntry:\n    code = main(sys.argv[1:])\nexcept SystemExit as e:\n"
              "    code = e.code\nassert 'jax' not in sys.modules, 'imported jax'\nsys.exit(code)")
    for argv in (["summary", str(result)], ["--help"], ["plot", str(result), "--out", str(tmp_path / "f.png")],
                 ["summary", "--help"], ["summary", str(result), "--spread", "2"]):
        run = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True)
        assert run.returncode == (2 if "2" in argv else 0) and "imported jax" not in run.stderr, (argv, run.stderr)


def test_two_names_of_one_file_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    result = tmp_path / "r.nc"
    nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.3], momentum=[0, 0.5], problem=nqm.zhang(8), max_steps=200, progress=False),
             result)
    before = result.read_bytes()
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.png").symlink_to(result)
    (tmp_path / "dangling.png").symlink_to(tmp_path / "new.png")  # a link to a file not written yet
    os.link(result, tmp_path / "hard.nc")
    cell = ["--lr", "0.1", "--momentum", "0", "--dim", "8"]
    cases = {
        ("plot", "r.nc", "--out", "./r.nc"): "--out would overwrite the input result",
        ("plot", str(result), "--out", "link.png"): "--out would overwrite the input result",
        ("summary", "r.nc", "--csv", "hard.nc"): "--csv would overwrite the input result",
        ("summary", "r.nc", "--csv", "sub/../r.nc"): "--csv would overwrite the input result",
        ("sweep", *cell, "--out", "new.png", "--plot", "dangling.png"): "--out and --plot name the same file",
        ("sweep", *cell, "--out", "r.png", "--plot", "r.png"): "--out and --plot name the same file",
        ("trace", *cell, "--steps", "5", "--out", "t.png", "--plot", "./t.png"): "--out and --plot name the same file",
        ("expected", *cell, "--out", "x", "--plot", "x"): "--out and --plot name the same file",
    }
    for argv, message in cases.items():
        assert main(list(argv)) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("nqm: error: ") and message in err[0], (argv, err)
    assert result.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.png", "hard.nc", "link.png", "r.nc", "sub"]


def test_best_prints_its_answer_last_and_sweep_gives_it_again(tmp_path, capsys):
    import json

    out = tmp_path / "best.nc"
    common = ["--delay", "2", "--dim", "30", "--max-steps", "3000", "--no-progress"]
    assert main(["best", "--method", "ab", "--lr", "0.02:1.5", "--momentum", "0:0.9", "--rho", "0.5", "--seeds", "2",
                 "--noise", "0.01", "--robust", "0.05", "--max-cells", "600", *common, "--json", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    found = json.loads(printed[-1])
    assert set(found) == {"t_star", "point", "robust_t_star", "robust_point", "seeds", "robust_seeds", "cells"}
    assert found["cells"] <= 600 and found["point"]["rho"] == 0.5 and any("T*_best" in line for line in printed)
    # The robust T with seeds is one statistic: per seed, the largest steps over the point's own
    # neighbourhood (lr and 1 − m nudged by ±δ); its median ranks, its min and max are its spread.
    ds, robust = nqm.load(out), found["robust_point"]
    from nqm.search import Axis

    lrs, momenta = ((v,) + Axis(n, 0.0, 1.0).nudged(v, 0.05) for n, v in (("lr", robust["lr"]), ("momentum", robust["momentum"])))
    rows = [i for i in range(ds.sizes["point"]) if any(np.isclose(ds.lr.values[i], a, rtol=1e-12) for a in lrs)
            and any(np.isclose(ds.momentum.values[i], b, rtol=1e-12, atol=1e-15) for b in momenta)]
    assert len(rows) == 9
    per_seed = np.where(ds.status.values[:, rows] == 1, ds.steps.values[:, rows], np.inf).max(axis=1)
    assert found["robust_seeds"] == {"median": float(np.median(per_seed)), "min": float(per_seed.min()),
                                     "max": float(per_seed.max())}
    assert found["robust_t_star"] == found["robust_seeds"]["median"]
    point = found["point"]
    again = nqm.sweep("ab", lr=point["lr"], momentum=point["momentum"], rho=0.5, delay=2, noise=0.01, seed=[0, 1],
                      problem=nqm.zhang(30), max_steps=3000, progress=False)
    assert np.median(again.steps.values) == found["seeds"]["median"] == found["t_star"]
    assert main(["best", "--lr", "1:2:3", "--momentum", "0.5", "--out", str(tmp_path / "x.nc")]) == 2
    assert main(["best", "--lr", "0.1", "--momentum", "0.5", "--delay", "1", "--delay-dist", "uniform:0:2",
                 "--out", str(tmp_path / "x.nc")]) == 2
    assert main(["best", "--method", "ab", "--lr", "0.1:1", "--momentum", "0.5", "--expected",
                 "--out", str(tmp_path / "x.nc")]) == 2


def test_a_threshold_the_method_has_not_is_a_note_of_one_line(tmp_path, capsys):
    """--threshold on AB (not linear: no derived threshold) draws none and says so in one line, with
    what to do instead; the figure is written."""
    out, png = tmp_path / "r.nc", tmp_path / "r.png"
    assert main(["sweep", "--method", "ab", "--lr", "0.1", "0.3", "--momentum", "0", "0.5", "--dim", "10",
                 "--max-steps", "300", "--out", str(out), "--plot", str(png), "--threshold", "--no-progress"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nqm: note:")]
    assert len(notes) == 1 and "no threshold drawn: ab" in notes[0] and "--simulate" in notes[0] and png.exists()
    import warnings

    import nqm
    from nqm.errors import NqmWarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nqm.plot_heatmaps(nqm.load(out), threshold=True)
    # (JAX warns of os.fork() when a library starts a subprocess in this multithreaded process: not ours)
    ours = [w for w in caught if "os.fork()" not in str(w.message)]
    assert [w.category for w in ours] == [NqmWarning] and "no threshold drawn: ab" in str(ours[0].message), \
        [(w.category.__name__, str(w.message), w.filename, w.lineno) for w in ours]
