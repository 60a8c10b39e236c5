"""Every bad input is one line `nqm: error: …`, exit status 2, no traceback, before any work, and
leaves existing outputs byte-identical: a table of CLI and Python-API cases."""

import math
import warnings

import numpy as np
import pytest
import xarray as xr

import nqm
from nqm import delays, diagnostics, expected, summary, sweeps
from nqm.thresholds import derived, polynomials
from nqm.search.simulated import simulated_threshold
from nqm.cli import main
from nqm.search.scaling import critical_batch_size
from nqm.errors import NqmError
from nqm.optimizers import make

TINY = ["--dim", "8", "--max-steps", "50", "--no-progress"]


def _unless_given(base, extra):
    """The options of ``base`` (each with its values) that ``extra`` does not give: an option is
    given once (twice is itself an error, with cases of its own below)."""
    kept, given = [], False
    for token in base:
        if token.startswith("--"):
            given = token in extra
        if not given:
            kept.append(token)
    return kept


def _sweep(*extra, lr=("0.1",), momentum=("0.5",)):
    return ["sweep", "--lr", *lr, "--momentum", *momentum, *_unless_given(TINY, extra), *extra]


SWEEP_CASES = (
    [_sweep(lr=(v,)) for v in ("-1", "0", "nan", "inf", "x", "geom:0:1:5", "geom:1:2:0", "lin:0:1:x",
                                "lin:0.01:1:100000000", "geom:1:nan:3", "lin:1:2", "cube:1:2:3", "1e999")]
    + [_sweep(lr=("0.1", "0.1"))]
    + [_sweep(momentum=(v,)) for v in ("1", "-0.1", "1.5", "nan", "inf", "x", "lin:0:1:3")]
    + [_sweep("--noise", v) for v in ("-1", "nan", "inf", "x")]
    + [_sweep("--seed", v) for v in ("-1", "1.5", "nan", "4294967296", "x")]
    + [_sweep("--delay", v) for v in ("-1", "1.5", "1e30", "nan", "x", "2000000")]
    + [_sweep("--delay-dist", v) for v in ("uniform:3:1", "gaussian:0", "pmf:", "pmf:-1,2", "workers:0",
                                             "workers:4:slow=2:3", "workers:4:slow=0.5:0", "poisson:3", "uniform:1")]
    + [_sweep("--delay-dist", "uniform:1:4", "uniform:1:4")]
    + [_sweep("--method", "ab", "--rho", v) for v in ("-1", "nan", "x")]
    + [_sweep("--rho", "0.5"), _sweep("--lambda-dc", "0.1"), _sweep("--method", "no-such-method"), _sweep("--method", "")]
    + [_sweep("--method", "ab", "--group", v) for v in ("rows", "blocks:x", "blocks:0", "blocks:1000")]
    + [_sweep("--group", "element"), _sweep("--micro-steps", "2"), _sweep("--method", "ormo", "--dampening")]
    + [_sweep("--method", "ab", "--micro-steps", v) for v in ("0", "-1", "x", "1.5")]
    + [_sweep("--method", "ab", "--mode", "sideways"), _sweep("--method", "ab", "--ab-mode", "up")]
    + [_sweep("--method", "ab", "--alpha-min", v) for v in ("nan", "x", "inf")]
    + [_sweep("--method", "ab", "--alpha-min", "2", "--alpha-max", "1")]
    + [_sweep("--method", "ab", "--eps", v) for v in ("0", "-1", "nan")]
    + [_sweep("--target", v) for v in ("0", "-1", "nan", "x", "inf")]
    + [_sweep("--max-steps", v) for v in ("0", "-5", "10000000000", "x", "1.5")]
    + [_sweep("--chunk-steps", v) for v in ("0", "x", "-1")]
    + [_sweep("--devices", v) for v in ("0", "99", "x")]
    + [_sweep("--memory-budget", v) for v in ("0", "-1", "nan")]
    + [_sweep("--dim", v) for v in ("0", "-1", "x", "1.5", "100000000")]
    + [_sweep("--spectrum", "flat"), _sweep("--lo", "0.1"), _sweep("--hi", "2"),
       _sweep("--spectrum", "loguniform", "--lo", "0"), _sweep("--spectrum", "loguniform", "--lo", "2", "--hi", "1"),
       _sweep("--eigenvalues", "1", "0.5"), _sweep("--eigenvalues", "-1"), _sweep("--eigenvalues", "nan")]
    + [_sweep("--rotate", v) for v in ("-1", "x")]
    + [_sweep("--threshold"), _sweep("--colour", "red"), ["sweep", "--momentum", "0.5"], ["sweep", "--lr", "0.1"]]
)


def _trace(*extra):
    return ["trace", *_unless_given(["--lr", "0.1", "--momentum", "0.5", "--dim", "8", "--steps", "20"], extra), *extra]


TRACE_CASES = (
    [_trace("--steps", v) for v in ("0", "-1", "x")]
    + [_trace("--stride", v) for v in ("0", "500", "x")]
    + [_trace("--lr", v) for v in ("-1", "nan")]
    + [_trace("--lr", "0.1", "0.2"), _trace("--momentum", "1"), _trace("--delay", "1.5"), _trace("--delay", "poisson:1"),
       _trace("--group", "element"), _trace("--rho", "0.5"), _trace("--target", "0"), _trace("--noise", "-1"),
       _trace("--seed", "-2"), _trace("--method", "nope"), _trace("--dim", "0"), _trace("--rotate", "-1")]
)

THRESHOLD_CASES = [
    ["threshold", "--method", "no-such-method"], ["threshold", "--momentum", "1"], ["threshold", "--delay", "-1"],
    ["threshold", "--delay-dist", "uniform:3:1"], ["threshold", "--delay", "1", "--delay-dist", "workers:4"],
    ["threshold", "--method", "sgd", "--momentum", "0.5"], ["threshold", "--momentum", "nan"],
    ["threshold", "--delay", "x"], ["threshold", "--delay-dist", "poisson:2"],
]
BENCH_CASES = [["bench", "--cells", "0"], ["bench", "--steps", "0"], ["bench", "--dim", "0"], ["bench", "--cells", "x"],
               ["bench", "--steps", "-3"]]

_EXPECTED = ["expected", "--lr", "0.1", "--momentum", "0.5", "--dim", "8"]
# An option given twice is refused (argparse alone would keep the last silently); OUT, FIG, CSV
# and TNC stand for the pre-existing files of the `outputs` fixture.
TWICE_CASES = [
    _sweep("--lr", "0.2"), _sweep("--momentum", "0.5"), _sweep("--target", "0.01", "--target", "0.02"),
    _sweep("--max-steps", "50", "--max-steps", "60"), _sweep("--x64", "--x64"), _sweep("--method", "ab", "--method", "ab"),
    _sweep("--method", "ab", "--mode", "both", "--ab-mode", "vel-only"), _sweep("--method", "ab", "--rho", "0.5", "--rho", "0.7"),
    _sweep("--delay-dist", "uniform:1:4", "--delay-dist", "gaussian:2"), _sweep("--dim", "8", "--dim", "9"),
    _sweep("--plot", "FIG", "--plot", "FIG"), _sweep("--out", "OUT", "--out", "OUT"), _sweep("--memory-budget", "1", "--memory-budget", "2"),
    _trace("--noise", "0", "--noise", "0.1"), _trace("--steps", "20", "--steps", "30"), _trace("--target", "0.01", "--target", "0.02"),
    _trace("--plot", "FIG", "--plot", "FIG"), _trace("--delay", "1", "--delay", "2"),
    [*_EXPECTED, "--bins", "4", "--bins", "8", "--out", "OUT"], [*_EXPECTED, "--lr", "0.2", "--out", "OUT"],
    [*_EXPECTED, "--max-steps", "50", "--max-steps", "60", "--out", "OUT"], [*_EXPECTED, "--out", "OUT", "--out", "OUT"],
    ["plot", "OUT", "--out", "FIG", "--out", "FIG"], ["plot", "OUT", "--out", "FIG", "--threshold", "--threshold"],
    ["summary", "OUT", "--csv", "CSV", "--csv", "CSV"], ["summary", "OUT", "--spread", "--spread"],
    ["threshold", "--momentum", "0.5", "--momentum", "0.9"], ["threshold", "--method", "sgd", "--method", "sgdm"],
    ["threshold", "--dampening", "--dampening"], ["bench", "--cells", "4", "--cells", "8"], ["bench", "--quick", "--quick"],
]
# Two outputs, or an output and an input, that are one file (see test_cli for ./x and symlinks).
SAME_FILE_CASES = [
    _sweep("--out", "FIG", "--plot", "FIG"), _sweep("--out", "OUT", "--plot", "OUT"), _trace("--out", "FIG", "--plot", "FIG"),
    [*_EXPECTED, "--out", "FIG", "--plot", "FIG"], ["plot", "FIG", "--out", "FIG"], ["plot", "OUT", "--out", "OUT"],
    ["summary", "CSV", "--csv", "CSV"], ["summary", "OUT", "--csv", "OUT"],
]


@pytest.fixture
def outputs(tmp_path):
    """Pre-existing outputs that a failed command must leave byte-identical."""
    files = {name: tmp_path / name for name in ("out.nc", "fig.png", "table.csv", "t.nc")}
    for i, path in enumerate(files.values()):
        path.write_bytes(f"previous content {i}".encode())
    return files


def _run(argv, files, capsys) -> str:
    before = {p: p.read_bytes() for p in files.values()}
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, (argv, err)
    assert len(err) == 1 and err[0].startswith("nqm: error: "), err
    assert "Traceback" not in err[0]
    assert {p: p.read_bytes() for p in files.values()} == before
    return err[0]


_FILES = {"OUT": "out.nc", "FIG": "fig.png", "CSV": "table.csv", "TNC": "t.nc"}


def _with_outputs(argv, files):
    argv = [str(files[_FILES[a]]) if a in _FILES else a for a in argv]
    if argv[0] in ("sweep", "trace") and "--out" not in argv:
        argv += ["--out", str(files["out.nc" if argv[0] == "sweep" else "t.nc"])]
    if argv[0] == "threshold":
        argv += ["--out", str(files["t.nc"])]
    return argv


@pytest.mark.parametrize("argv", SWEEP_CASES + TRACE_CASES + THRESHOLD_CASES + BENCH_CASES, ids=" ".join)
def test_cli_bad_input(argv, outputs, capsys):
    _run(_with_outputs(argv, outputs), outputs, capsys)


@pytest.mark.parametrize("argv", TWICE_CASES, ids=" ".join)
def test_cli_option_given_twice(argv, outputs, capsys):
    assert "given more than once" in _run(_with_outputs(argv, outputs), outputs, capsys)


@pytest.mark.parametrize("argv", SAME_FILE_CASES, ids=" ".join)
def test_cli_same_file_twice(argv, outputs, capsys):
    err = _run(_with_outputs(argv, outputs), outputs, capsys)
    assert "name the same file" in err or "would overwrite" in err


def test_cli_bad_paths(outputs, tmp_path, capsys):
    garbage = tmp_path / "garbage.nc"
    garbage.write_bytes(b"not a netCDF file")
    foreign = tmp_path / "foreign.nc"
    xr.Dataset({"x": ("a", [1, 2])}).to_netcdf(foreign, engine="h5netcdf")
    no_attrs = tmp_path / "no_attrs.nc"
    dims = ("momentum", "lr")
    xr.Dataset({"steps": (dims, [[1, 2]]), "status": (dims, [[1, 1]])},
               coords={"momentum": [0.5], "lr": [0.1, 0.2]}).to_netcdf(no_attrs, engine="h5netcdf")
    fig = str(outputs["fig.png"])
    cases = [
        _sweep("--out", str(tmp_path)), _sweep("--out", str(tmp_path / "missing" / "x.nc")),
        _sweep("--out", "/proc/x.nc"), _sweep("--out", str(outputs["out.nc"]), "--plot", str(tmp_path / "fig.xyz")),
        _sweep("--out", str(outputs["out.nc"]), "--plot", str(tmp_path / "missing" / "f.png")),
        _trace("--out", str(tmp_path)), _trace("--out", str(outputs["t.nc"]), "--plot", str(tmp_path / "f.xyz")),
        ["plot", str(tmp_path / "nothing.nc"), "--out", fig], ["plot", str(garbage), "--out", fig],
        ["plot", str(foreign), "--out", fig], ["plot", str(no_attrs), "--out", fig, "--threshold"],
        ["plot", str(no_attrs), "--out", str(tmp_path / "f.xyz")],
        ["summary", str(tmp_path / "nothing.nc")], ["summary", str(garbage)], ["summary", str(foreign)],
        ["summary", str(no_attrs), "--csv", str(tmp_path / "missing" / "t.csv")],
        ["threshold", "--out", str(tmp_path)], ["nosuchcommand"], [],
    ]
    for argv in cases:
        _run(argv, outputs, capsys)
    assert len(cases) + len(SWEEP_CASES + TRACE_CASES + THRESHOLD_CASES + BENCH_CASES) >= 150
    assert len(TWICE_CASES + SAME_FILE_CASES) >= 35


# ------------------------------------------------------------------------------- Python API

SWEEP_API = (
    [dict(lr=v) for v in (-1, 0, math.nan, math.inf, [], [0.1, 0.1], "x", [[0.1]], None)]
    + [dict(momentum=v) for v in (1.0, -0.1, math.nan, 2)]
    + [dict(delay=v) for v in (-1, 1.5, 1e30, "poisson:1", "uniform:3:1", ["uniform:1:2", "uniform:1:2"], [])]
    + [dict(noise=v) for v in (-0.1, math.nan, math.inf)]
    + [dict(seed=v) for v in (-1, 1.5, 2**32)]
    + [dict(method="no-such-method"), dict(method="ab", rho=-0.5), dict(method="ab", rho=math.nan), dict(rho=0.5),
       dict(lambda_dc=0.1), dict(method="ab", group="rows"), dict(method="ab", group="blocks:x"),
       dict(method="ab", group="blocks:100"), dict(method="ab", mode="sideways"), dict(method="ab", micro_steps=0),
       dict(method="ab", alpha_min=math.nan), dict(method="ab", alpha_min=2, alpha_max=1), dict(method="ab", eps=0),
       dict(group="element"), dict(method="ormo", dampening=True), dict(colour="red")]
    + [dict(max_steps=v) for v in (0, 10**10, math.nan, 1.5)]
    + [dict(target=v) for v in (-1.0, 0, math.nan)]
    + [dict(chunk_steps=0), dict(devices=0), dict(devices=99), dict(memory_budget=-1), dict(memory_budget=1.0),
       dict(diverge_factor=0.5)]
)


@pytest.mark.parametrize("kwargs", SWEEP_API, ids=repr)
def test_api_sweep_bad_input(kwargs, tmp_path):
    kw = dict(method="sgdm", lr=0.1, momentum=0.5, problem=nqm.zhang(16), max_steps=50, progress=False)
    kw.update(kwargs)
    with pytest.raises(NqmError) as info:
        nqm.sweep(kw.pop("method"), **kw)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("settings, words", [
    (dict(max_steps=10.5), "max_steps must be an integer"), (dict(chunk_steps=0), "chunk_steps"),
    (dict(batch_cells=1.5), "batch_cells"), (dict(devices=0), "devices"), (dict(target=math.nan), "target"),
    (dict(target="0.1"), "target must be a number"), (dict(memory_budget=0), "memory_budget"),
    (dict(diverge_factor=1.0), "diverge_factor must be a number > 1"), (dict(x64="yes"), "x64 must be True or False"),
    (dict(work_limit=0.5), "work_limit must be a number between 1"),
    (dict(skip_decided=True, first_passage=True), "drop one of the two"),
])
def test_run_settings_are_checked_one_by_one(settings, words):
    """nqm.config.checked_config, which every entry point's run settings pass: each bad one is one
    line naming it; good ones come back as plain numbers (a numpy integer as an int, a count as a float)."""
    from nqm import config

    with pytest.raises(NqmError) as info:
        config.checked_config(**settings)
    assert words in str(info.value) and "\n" not in str(info.value)
    good = config.checked_config(max_steps=np.int64(10), target=1, diverge_factor=10, work_limit=2)
    assert good == config.RunConfig(max_steps=10, target=1.0, diverge_factor=10.0, work_limit=2.0)
    assert (type(good.max_steps), type(good.target), type(good.work_limit)) == (int, float, float)


OTHER_API = [
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=-1, momentum=0.5),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=0.1, momentum=2),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=0.1, momentum=0.5, delay=1.5),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=0.1, momentum=0.5, steps=0),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=0.1, momentum=0.5, stride=0),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=0.1, momentum=0.5, record=("nope",)),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=[0.1, 0.2], momentum=0.5),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=0.1, momentum=0.5, rho=0.5),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=0.1, momentum=0.5, target=-1),
    lambda: diagnostics.trajectory("sgdm", problem=nqm.zhang(8), lr=0.1, momentum=0.5, max_steps=10),
    lambda: delays.process("-1"), lambda: delays.process("workers:0"), lambda: delays.process("pmf:0,0"),
    lambda: delays.process(None), lambda: delays.constant(-2), lambda: delays.workers(3, 2.0, 1.0),
    lambda: make("no-such-method"), lambda: make("sgdm", group="element"), lambda: make("ab", micro_steps=-1),
    lambda: make("ab", group=np.array([-1, 0])),
    lambda: polynomials.threshold("adam"), lambda: polynomials.threshold("sgdm", delay=-1),
    lambda: polynomials.threshold("sgdm", momentum=1.0), lambda: polynomials.threshold("sgd", momentum=0.5),
    lambda: polynomials.threshold("sgdm", delay=1, pmf=[0.5, 0.5]), lambda: delays.uniform_pmf(3, 1),
    lambda: delays.gaussian_pmf(0),
    lambda: nqm.load("/nonexistent/x.nc"), lambda: nqm.zhang(0), lambda: nqm.loguniform(4, lo=0),
    lambda: nqm.loguniform(4, lo=2, hi=1),
    lambda: summary.summarize(xr.Dataset({"x": ("a", [1])})),
    lambda: summary.spread(xr.Dataset({"t_star": ("a", [1.0]), "converged": ("a", [1])})),
    lambda: nqm.best("sgdm", lr=(0.1, 1.0), momentum=0.5, expected="yes", problem=nqm.zhang(8)),
    lambda: nqm.t_star({}), lambda: nqm.plot_heatmaps({}),
    lambda: critical_batch_size([1, 2, 4], [10, 5]), lambda: critical_batch_size([0, 2], [10, 5]),
]


@pytest.mark.parametrize("index", range(len(OTHER_API)))
def test_api_other_bad_input(index):
    with pytest.raises(NqmError) as info:
        OTHER_API[index]()
    assert "\n" not in str(info.value)


def test_api_save_to_a_bad_path_changes_nothing(tmp_path):
    ds = xr.Dataset({"steps": ("a", [1])})
    for path in (tmp_path, tmp_path / "missing" / "x.nc", "/proc/x.nc"):
        with pytest.raises(NqmError):
            nqm.save(ds, path)
    assert len(SWEEP_API) + len(OTHER_API) >= 80


# The newest entry points: the search, the simulated and derived thresholds, the exact mode.
ENTRY_POINT_API = [
    (lambda: nqm.best(lr=(0.1, 1.0), momentum=0.0, problem="zhang"), "problem must be an nqm Problem"),
    (lambda: nqm.best(lr=(0.1, 1.0), momentum=0.0, noise=None), "noise"),
    (lambda: simulated_threshold("sgdm", momentum=0.5, tol="x"), "tol must be a number"),
    (lambda: simulated_threshold("sgdm", momentum=0.5, tol=None), "tol must be a number"),
    (lambda: simulated_threshold("sgdm", momentum=0.5, noise=None), "noise"),
    (lambda: simulated_threshold("sgdm", momentum=0.5, seed=[0, 1]), "seed is the first seed"),
    (lambda: simulated_threshold("sgdm", momentum=0.5, target=1e-3), "takes no target"),
    (lambda: simulated_threshold("sgdm", momentum=0.5, max_steps=100), "takes no max_steps"),
    (lambda: expected.sweep(lr=0.1, momentum=0.5, noise=None, problem=nqm.zhang(8)), "noise"),
    (lambda: expected.sweep(lr=0.1, momentum=0.5, dampening="yes", problem=nqm.zhang(8)), "dampening must be True"),
    (lambda: nqm.sweep(lr=0.1, momentum=0.5, dampening="yes", problem=nqm.zhang(8)), "dampening must be True"),
    (lambda: expected.sweep(lr=0.1 + 1j, momentum=0.5, problem=nqm.zhang(8)), "lr must be numbers"),
    (lambda: expected.steady_state_loss(nqm.zhang(8), "sgdm", 0, "0.1", 0.5, 0.1), "lr must be numbers"),
    (lambda: expected.evaluate(lr="0.1", momentum=0.5, problem=nqm.zhang(8)), "lr must be numbers"),
    (lambda: sweeps.evaluate(lr="0.1", momentum=0.5, problem=nqm.zhang(8)), "lr must be numbers"),
    (lambda: derived.transitions("sgdm", lr=0.1, momentum=0.5, lam="1"), "lam must be one curvature"),
]


@pytest.mark.parametrize("index", range(len(ENTRY_POINT_API)))
def test_api_entry_points_bad_input_is_one_nqm_error_line(index):
    call, words = ENTRY_POINT_API[index]
    with pytest.raises(NqmError) as info:
        call()
    assert "\n" not in str(info.value) and words in str(info.value), str(info.value)


def test_the_exact_mode_says_infinity_where_it_diverges_and_no_library_warning_leaks():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow RuntimeWarning fails the test
        for delay in (0, "uniform:0:3"):
            curve = expected.expected_loss(nqm.zhang(8), lr=5.0, momentum=0.5, steps=2000, delay=delay)
            assert not np.isnan(curve).any() and curve[-1] == np.inf
            expected.sweep(lr=[1e150, 1e300], momentum=0.0, noise=[0.0, 1e100], delay=delay, problem=nqm.zhang(8),
                           max_steps=100)
