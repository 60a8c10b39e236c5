"""Bad input, second round: every case is one line `nqm: error: …` (or one NqmError line at the
API), exit status 2, no traceback, refused before any work, and every pre-existing file — outputs,
checkpoints, their lock-free state — byte-identical.

The classes: bounds that must not depend on the spelling of a delay, a size or a budget (5);
values the run's precision cannot hold (7); outputs locked by the file they resolve to, for every
writing command (3, 8); checkpoints of another sweep or damaged (1, 2); API arguments of the wrong
type (6); messages that must not mislead (8).
"""

import math
import os
import pathlib
import subprocess
import sys

import h5py
import numpy as np
import pytest
import xarray as xr

import nqm
from nqm import bench, delays, diagnostics, io, summary
from nqm.thresholds import polynomials
from nqm.cli import main
from nqm.errors import NqmError
from nqm.files import SEAL_SIZE
from nqm.results import index_delays
from nqm.validate import BOUNDS

EIGENVALUES = [1.0, 0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1, 0.05]
BASE = ["sweep", "--lr", "0.1", "0.2", "--momentum", "0.5", "--eigenvalues", *map(str, EIGENVALUES), "--max-steps", "50",
        "--no-progress"]


def _command(name, base, extra):
    """``nqm NAME`` with the options of ``base`` that ``extra`` does not give, then ``extra``."""
    given = {t for t in extra if t.startswith("--")}
    return [name, *[x for k, v in base.items() if k not in given for x in (k, *v)], *extra]


def _sweep(*extra):
    base = {"--lr": ["0.1"], "--momentum": ["0.5"], "--dim": ["8"], "--max-steps": ["50"], "--no-progress": []}
    return _command("sweep", base, extra)


def _trace(*extra):
    return _command("trace", {"--lr": ["0.1"], "--momentum": ["0.5"], "--dim": ["8"], "--steps": ["20"]}, extra)


# ------------------------------------------------------------------ 5: one bounds table, every spelling

BOUND_CASES = [
    _sweep("--delay-dist", "constant:2000000"), _sweep("--delay-dist", "uniform:0:2000000"),
    _sweep("--delay-dist", "gaussian:1000000"), _sweep("--delay-dist", "workers:100000000"),
    _sweep("--delay-dist", "3000000000"), _sweep("--delay-dist", "pmf:" + "0," * 1_000_001 + "1"),
    _sweep("--delay", "3000000000"),
    _trace("--delay", "3000000000"), _trace("--delay", "constant:2000000"), _trace("--delay", "workers:100000000"),
    _trace("--delay", "gaussian:600000"), _trace("--steps", "1000000000"),
    _trace("--dim", "10000000", "--steps", "100000000"), _trace("--dim", "200000", "--steps", "60000000"),
    ["threshold", "--delay", "1e30"], ["threshold", "--delay", "10000000"],
    ["threshold", "--delay-dist", "uniform:0:2000000"], ["threshold", "--delay-dist", "gaussian:1000000"],
    ["threshold", "--simulate", "--delay", "2000000"], ["threshold", "--criterion", "mean-square", "--delay", "2000000"],
    ["threshold", "--delay-dist", "pmf:1,0," + "0," * 1_000_001 + "1"],
    ["bench", "--dim", "100000000"], ["bench", "--steps", "1000000000000"], ["bench", "--cells", "100000", "--dim", "100000"],
    ["bench", "--cells", "1000000000"],
    # options whose cost grows with their value (the work of each step or cell, the cells or seeds of a search)
    _sweep("--method", "ab", "--micro-steps", "1000000", "--dim", "20", "--max-steps", "300"),
    _trace("--method", "ab", "--micro-steps", "1000000"), _sweep("--work-limit", "1e300"),
    ["best", "--lr", "0.05:1", "--momentum", "0.5", "--dim", "8", "--max-cells", "1000000000000", "--out", "OUT"],
    ["best", "--lr", "0.05:1", "--momentum", "0.5", "--dim", "8", "--seeds", "1000000000", "--out", "OUT"],
    ["scaling", "--lr", "0.05:1", "--momentum", "0.5", "--batch-size", "1", "4", "--noise", "0.05", "--dim", "8",
     "--max-cells", "1000000000000", "--out", "OUT"],
    ["threshold", "--simulate", "--seeds", "100000000000"],
    *(["expected", "--lr", "0.1", "0.5", "--momentum", "0", "0.5", "--dim", "50", "--out", "OUT", *extra]
      for extra in (["--delay", "100000"], ["--delay", "1000000", "--method", "shifted"],
                    ["--delay", "5000", "--lr", "1e-4", "2e-4", "3e-4"], ["--delay-dist", "constant:20000"])),
]

# ------------------------------------------------------------------ 7: values the run's precision cannot hold

PRECISION_CASES = [
    _sweep("--lr", "1e-320"), _sweep("--momentum", "0.99999999999"), _sweep("--target", "1e-300"), _sweep("--lr", "1e39"),
    _sweep("--noise", "1e-50"), _sweep("--lr", "0.1", "0.100000001"), _sweep("--method", "ab", "--rho", "1e-50"),
    _sweep("--x64", "--lr", "1e-320"), _trace("--lr", "1e-320"), _trace("--target", "1e-300"),
    _trace("--momentum", "0.999999999999"),
    ["threshold", "--delay", "0", "0"], ["threshold", "--momentum", "0.5", "0.5"],
    ["threshold", "--delay-dist", "uniform:1:4", "uniform:1:4"], ["threshold", "--delay", "3", "--delay-dist", "constant:3"],
]


@pytest.fixture
def files(tmp_path, earlier_result):
    """Pre-existing files that a refused command must leave byte-identical."""
    named = {"OUT": "out.nc", "FIG": "fig.png", "CSV": "table.csv", "TNC": "t.nc"}
    paths = {key: tmp_path / name for key, name in named.items()}
    for i, path in enumerate(paths.values()):
        path.write_bytes(earlier_result if path.suffix == ".nc" else f"previous content {i}".encode())
    return paths


def _refused(argv, files, capsys) -> str:
    """Run ``argv``: exit 2, one error line, no traceback, every file in ``files`` unchanged and no
    new file (a lock, a temporary file) left beside them."""
    folder = next(iter(files.values())).parent
    before = {p: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, (argv[:8], err)
    assert len(err) == 1 and err[0].startswith("nqm: error: ") and "Traceback" not in err[0], err
    assert {p: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    return err[0]


def _with_out(argv, files):
    argv = [str(files[a]) if a in files else a for a in argv]
    if argv[0] in ("sweep", "trace", "threshold") and "--out" not in argv:
        argv += ["--out", str(files["OUT" if argv[0] == "sweep" else "TNC"])]
    return argv


@pytest.mark.parametrize("argv", BOUND_CASES, ids=lambda a: " ".join(a)[:80])
def test_bounds_hold_for_every_spelling(argv, files, capsys):
    err = _refused(_with_out(argv, files), files, capsys)
    assert any(word in err for word in ("between", "more than", "at most")), err


@pytest.mark.parametrize("argv", PRECISION_CASES, ids=" ".join)
def test_values_the_run_cannot_hold_and_repeated_rows_are_refused(argv, files, capsys):
    err = _refused(_with_out(argv, files), files, capsys)
    assert "float32" in err or "float64" in err or "repeated" in err, err


# ------------------------------------------------------------------ 3, 8: every writing command locks what it writes

LOCK_CASES = [
    (_sweep("--out", "OUT"), "OUT"), (_sweep("--out", "LINK"), "OUT"), (_sweep("--out", "OUT", "--plot", "FIG"), "FIG"),
    (_sweep("--out", "LINKDIR/out.nc"), "OUT"), (_trace("--out", "TNC"), "TNC"), (_trace("--out", "TNC", "--plot", "FIG"), "FIG"),
    (["expected", "--lr", "0.1", "--momentum", "0.5", "--dim", "8", "--out", "OUT"], "OUT"),
    (["expected", "--lr", "0.1", "--momentum", "0.5", "--dim", "8", "--out", "TNC", "--plot", "FIG"], "FIG"),
    (["summary", "OUT", "--csv", "CSV"], "CSV"), (["plot", "OUT", "--out", "FIG"], "FIG"),
    (["plot", "OUT", "--out", "LINKFIG"], "FIG"), (["threshold", "--out", "TNC"], "TNC"),
]


@pytest.mark.parametrize("argv, held", LOCK_CASES, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_a_file_being_written_is_refused_under_any_name(argv, held, files, capsys, tmp_path):
    (tmp_path / "LINK").symlink_to(files["OUT"])
    (tmp_path / "LINKFIG").symlink_to(files["FIG"])
    (tmp_path / "LINKDIR").symlink_to(tmp_path)
    files = dict(files, LINK=tmp_path / "LINK", LINKFIG=tmp_path / "LINKFIG")
    argv = [str(tmp_path / a) if a.startswith("LINKDIR/") else a for a in argv]
    with io.lock(files[held]):  # another run writing it
        err = _refused(_with_out(argv, files), files, capsys)
    assert "another nqm run is writing" in err


# ------------------------------------------------------------------ 1, 2: a checkpoint of another sweep, or damaged

@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory):
    """A complete checkpoint of BASE (as `nqm sweep BASE --out OUT` leaves it when interrupted)."""
    path = tmp_path_factory.mktemp("base") / "out.nc.partial"
    nqm.sweep("sgdm", lr=[0.1, 0.2], momentum=[0.5], problem=nqm.explicit(EIGENVALUES), max_steps=50, progress=False,
              checkpoint=path)
    return path.read_bytes()


def _ninth_changed():
    lam = list(EIGENVALUES)
    lam[8] = 0.12
    return ["sweep", "--lr", "0.1", "0.2", "--momentum", "0.5", "--eigenvalues", *map(str, lam), "--max-steps", "50",
            "--no-progress"]


def _flip_steps(path):
    with h5py.File(path, "r+") as f:
        steps = f["steps"][...]
        steps.flat[0] ^= 1 << 4
        f["steps"][...] = steps


def _version(path):
    with h5py.File(path, "r+") as f:
        f.attrs["nqm_version"] = "0.0.9"


STALE_CASES = {
    "9th of 10 eigenvalues": (_ninth_changed(), None),
    "target": (BASE + ["--target", "0.02"], None),
    "max steps": (["sweep", *BASE[1:BASE.index("--max-steps")], "--max-steps", "60", "--no-progress"], None),
    "dampening": (BASE + ["--dampening"], None),
    "x64": (BASE + ["--x64"], None),
    "rotation": (BASE + ["--rotate", "3"], None),
    "lr grid": (["sweep", "--lr", "0.1", "0.3", *BASE[4:]], None),
    "delay": (BASE + ["--delay", "2"], None),
    "noise": (BASE + ["--noise", "0.01"], None),
    "method": (BASE + ["--method", "nesterov"], None),
    "flipped bits in steps": (BASE, _flip_steps),
    "nqm version": (BASE, _version),
    "garbage": (BASE, lambda p: p.write_bytes(b"\x89HDF not really")),
}


@pytest.mark.parametrize("case", STALE_CASES)
def test_a_checkpoint_of_another_sweep_or_damaged_is_refused_naming_restart(case, base_checkpoint, files, capsys):
    argv, damage = STALE_CASES[case]
    partial = files["OUT"].parent / "out.nc.partial"
    partial.write_bytes(base_checkpoint)
    if damage:
        damage(partial)
    err = _refused(argv + ["--out", str(files["OUT"])], files, capsys)
    assert "--restart" in err and ("different sweep" in err or "damaged" in err), err


def test_the_unchanged_sweep_resumes_its_checkpoint(base_checkpoint, files, capsys):
    """The positive control of the table above: the same command resumes (nothing to compute)."""
    (files["OUT"].parent / "out.nc.partial").write_bytes(base_checkpoint)
    files["OUT"].unlink()  # the result the interrupted run had not written yet (another sweep is not replaced)
    assert main(BASE + ["--out", str(files["OUT"])]) == 0
    assert nqm.load(files["OUT"]).status.size == 2


# ------------------------------------------------------------------ 8: messages that must not mislead

def test_messages_say_what_is_wrong(files, tmp_path, capsys):
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:  # an HDF5 file that is no netCDF result (xarray warns on it)
        f["x"] = np.arange(3)
    cases = [
        (["plot", str(plain), "--out", str(files["FIG"])], "not an nqm"),
        (["summary", str(plain)], "not an nqm"),
        (["summary", str(tmp_path)], "is a directory"),
        (_sweep("--dim", "10000", "--memory-budget", "0.0001", "--out", str(tmp_path / "new.nc")), "KiB"),
    ]
    for argv, expected in cases:
        err = _refused(argv, files, capsys)
        assert expected in err and "0.00 GiB" not in err, err
    (tmp_path / "out.nc.partial").mkdir()  # the sweep's checkpoint is a directory: not "damaged"
    err = _refused(_with_out(_sweep(), files), files, capsys)
    assert "is a directory" in err and "damaged" not in err


# ------------------------------------------------------------------ 6: API arguments of the wrong type

def _sweep_api(**kwargs):
    kw = dict(lr=0.1, momentum=0.5, problem=nqm.zhang(8), max_steps=50, progress=False)
    kw.update(kwargs)
    return lambda: nqm.sweep("sgdm", **kw)


def _trajectory(**kwargs):
    kw = dict(lr=0.1, momentum=0.5, problem=nqm.zhang(8), steps=20)
    kw.update(kwargs)
    return lambda: diagnostics.trajectory("sgdm", **kw)


API_CASES = {
    "sweep problem='zhang'": _sweep_api(problem="zhang"), "sweep target='0.01'": _sweep_api(target="0.01"),
    "sweep max_steps='100'": _sweep_api(max_steps="100"), "sweep memory_budget='4e9'": _sweep_api(memory_budget="4e9"),
    "sweep devices=1.0": _sweep_api(devices=1.0), "sweep chunk_steps=True": _sweep_api(chunk_steps=True),
    "sweep x64='yes'": _sweep_api(x64="yes"), "sweep lr='0.1'": _sweep_api(lr="0.1"), "sweep lr=[True]": _sweep_api(lr=[True]),
    "sweep momentum=0.99999999999": _sweep_api(momentum=0.99999999999), "sweep target=1e-300": _sweep_api(target=1e-300),
    "sweep lr=1e-320 x64": _sweep_api(lr=1e-320, x64=True),
    "sweep checkpoint_every='x'": _sweep_api(checkpoint="C", checkpoint_every="x"),
    "sweep checkpoint_every=nan": _sweep_api(checkpoint="C", checkpoint_every=math.nan),
    "sweep checkpoint=dir": _sweep_api(checkpoint="DIR"), "sweep checkpoint=3": _sweep_api(checkpoint=3),
    "sweep restart='yes'": _sweep_api(checkpoint="C", restart="yes"), "sweep method=None": lambda: nqm.sweep(None, lr=0.1, momentum=0),
    "sweep delay=constant:2000000": _sweep_api(delay="constant:2000000"), "sweep delay=3e9": _sweep_api(delay=3_000_000_000),
    "sweep delay=workers:1e8": _sweep_api(delay="workers:100000000"), "sweep delay=True": _sweep_api(delay=True),
    "zhang(nan)": lambda: nqm.zhang(math.nan), "zhang(None)": lambda: nqm.zhang(None), "zhang(1e9)": lambda: nqm.zhang(10**9),
    "zhang(16.0)": lambda: nqm.zhang(16.0), "loguniform(1e8)": lambda: nqm.loguniform(10**8),
    "explicit(['a'])": lambda: nqm.explicit(["a"]), "explicit([[1, 2]])": lambda: nqm.explicit([[1, 2]]),
    "explicit(None)": lambda: nqm.explicit(None), "rotation_seed=-1": lambda: nqm.zhang(8).with_rotation(-1),
    "trajectory steps=inf": _trajectory(steps=math.inf), "trajectory steps=nan": _trajectory(steps=math.nan),
    "trajectory target='x'": _trajectory(target="x"), "trajectory target=1e-300": _trajectory(target=1e-300),
    "trajectory steps=1e9": _trajectory(steps=10**9), "trajectory x64='no'": _trajectory(x64="no"),
    "trajectory lr=1e-320": _trajectory(lr=1e-320), "trajectory stride=2.0": _trajectory(stride=2.0),
    "trajectory trace of 40 GB": _trajectory(steps=10**7, record=("component_loss",), problem=nqm.zhang(1000)),
    "spread without t_star": lambda: summary.spread(xr.Dataset({"converged": ("seed", [1, 2])})),
    "robustness without lr": lambda: summary.robustness(momentum=0.5, problem=nqm.zhang(8), max_steps=20),
    "format_table(Dataset())": lambda: summary.format_table(xr.Dataset()),
    "to_csv(Dataset())": lambda: summary.to_csv(xr.Dataset(), "C"),
    "spectral_radius('abc')": lambda: polynomials.spectral_radius("abc"), "roots([])": lambda: polynomials.roots([]),
    "threshold delay=1e30": lambda: polynomials.threshold("sgdm", delay=1e30, momentum=0.5),
    "threshold_dataset delays=[0, 0]": lambda: polynomials.threshold_dataset("sgdm", delays=[0, 0]),
    "save('notads')": lambda: nqm.save("notads", "C"), "save(None)": lambda: nqm.save(None, "C"),
    "constant(2000000)": lambda: delays.constant(2_000_000), "workers(1e8)": lambda: delays.workers(10**8),
    "uniform_pmf(0, 2000000)": lambda: delays.uniform_pmf(0, 2_000_000), "gaussian_pmf(1e6)": lambda: delays.gaussian_pmf(10**6),
    "iid pmf reaching 2000000": lambda: delays.iid(np.r_[np.zeros(2_000_000), 1.0]),
    "bench dim=1e8": lambda: bench.main(dim=10**8), "bench cells x dim": lambda: bench.main(cells=10**5, dim=10**5),
    "sweep work_limit=1e300": _sweep_api(work_limit=1e300),
    "best max_cells=1e12": lambda: nqm.best(lr=(0.05, 1.0), momentum=0.5, problem=nqm.zhang(8), max_cells=10**12),
    "best seeds=1e9": lambda: nqm.best(lr=(0.05, 1.0), momentum=0.5, problem=nqm.zhang(8), seeds=10**9),
}


@pytest.mark.parametrize("case", API_CASES)
def test_api_bad_arguments_are_one_nqm_error_line(case, tmp_path):
    os.chdir(tmp_path)
    (tmp_path / "DIR").mkdir()
    with pytest.raises(NqmError) as info:
        API_CASES[case]()
    assert "\n" not in str(info.value) and str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["DIR"]  # nothing written


def test_the_table_is_large_enough():
    cli = BOUND_CASES + PRECISION_CASES + LOCK_CASES + list(STALE_CASES)
    assert len(cli) >= 60 and len(API_CASES) >= 50


# ------------------------------------------------------------------ 9: sealed results at their edges

@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    """The bytes of a small result as nqm.save writes it (sealed)."""
    path = tmp_path_factory.mktemp("sealed") / "r.nc"
    nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=[0.0, 0.5], problem=nqm.zhang(8), max_steps=50, progress=False),
             path)
    return path.read_bytes()


CUTS = {  # where a file is cut: its size after the cut, from its size n
    "half its body": lambda n: n // 2, "the last byte of its body": lambda n: n - SEAL_SIZE - 1,
    "its whole seal": lambda n: n - SEAL_SIZE, "half its seal": lambda n: n - SEAL_SIZE // 2,
    "its last byte": lambda n: n - 1, "all but its first bytes": lambda n: 5,
}


@pytest.mark.parametrize("cut", CUTS)
def test_a_cut_result_is_named_damaged_by_every_reader(cut, sealed, tmp_path, capsys):
    """Truncation removes the seal: the file is damage (never an old unsealed file read as it is)."""
    path = tmp_path / "r.nc"
    path.write_bytes(sealed[:CUTS[cut](len(sealed))])
    with pytest.raises(NqmError) as info:
        nqm.load(path)
    assert "\n" not in str(info.value) and "is damaged" in str(info.value), str(info.value)
    assert "cut short" in str(info.value) or "seal" in str(info.value)
    for argv in (["summary", str(path)], ["plot", str(path), "--out", str(tmp_path / "f.png")]):
        assert "is damaged" in _refused(argv, {"R": path}, capsys)


def test_a_file_written_before_seals_is_read_as_it_is(tmp_path, capsys):
    """The control: a file without a seal (nqm 0.2.0's reduced Figure 1, kept as it was written) is no damage."""
    old = pathlib.Path(__file__).resolve().parent / "data" / "fig1_heatmaps_0.2.0.nc"
    assert not old.read_bytes().endswith(b"\n") and nqm.load(old).status.size == 2 * 2 * 2 * 24 * 24
    assert main(["summary", str(old)]) == 0


def _fifo(folder):
    os.mkfifo(folder / "x.nc")
    return folder / "x.nc"


def _loop(folder):
    (folder / "x.nc").symlink_to(folder / "y.nc")
    (folder / "y.nc").symlink_to(folder / "x.nc")
    return folder / "x.nc"


SPECIAL = {  # what is given as a result to read, and what the error line calls it
    "a FIFO": (_fifo, "FIFO"), "a device": (lambda folder: pathlib.Path("/dev/null"), "device"),
    "a symbolic link loop": (_loop, "symbolic link loop"),
    "a directory": (lambda folder: (folder / "x.nc").mkdir() or folder / "x.nc", "directory"),
    "a broken symbolic link": (lambda folder: (folder / "x.nc").symlink_to(folder / "gone.nc") or folder / "x.nc",
                               "broken symbolic link"),
}


@pytest.mark.parametrize("what", SPECIAL)
def test_what_is_not_a_file_is_named_for_what_it_is(what, tmp_path, capsys, earlier_result):
    make, words = SPECIAL[what]
    given = make(tmp_path)
    with pytest.raises(NqmError, match=words):
        nqm.load(given)
    (tmp_path / "r.nc").write_bytes(earlier_result)
    for argv in (["summary", str(given)], ["plot", str(given), "--out", str(tmp_path / "f.png")],
                 ["plot", str(tmp_path / "r.nc"), "--out", str(tmp_path / "f.png"), "--threshold", str(given)]):
        err = _refused(argv, {"R": tmp_path / "r.nc"}, capsys)
        assert words in err and "no such file" not in err, err


def test_a_fifo_never_blocks_the_command_line(tmp_path):
    """A FIFO nobody writes to: a reader that opened it would wait forever (the deadline is a hang's, not a time)."""
    fifo = _fifo(tmp_path)
    done = subprocess.run([sys.executable, "-m", "nqm", "summary", str(fifo)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"nqm: error: cannot read {fifo}: it is a FIFO (a named pipe), not a file; give a result file (netCDF)"]


def test_a_file_larger_than_any_result_is_refused_by_its_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(BOUNDS, "file_bytes", 2**20)
    big = tmp_path / "big.nc"
    with open(big, "wb") as f:
        f.truncate(2**21)  # sparse: no disk used
    with pytest.raises(NqmError, match="more than the 1 MiB of the largest result"):
        nqm.load(big)
    assert "more than" in _refused(["summary", str(big)], {"B": big}, capsys)
    with pytest.raises(NqmError, match="more than the 1 MiB"):  # and nqm.save writes none that large
        nqm.save(xr.Dataset({"x": ("a", np.zeros(2**18))}), tmp_path / "r.nc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.nc"]


def test_a_large_file_that_is_no_result_is_refused_without_reading_it(tmp_path):
    """1 GiB of zeros (sparse): refused from its first bytes, so the reader's memory stays far below its size."""
    big = tmp_path / "big.nc"
    with open(big, "wb") as f:
        f.truncate(2**30)
    script = ("import resource, sys, nqm\n"
              "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"  # KiB on Linux
              "before = peak()\n"
              "try:\n    nqm.load(sys.argv[1])\nexcept nqm.NqmError as error:\n    print(error)\n"
              "print(peak() - before)\n")
    done = subprocess.run([sys.executable, "-c", script, str(big)], capture_output=True, text=True, timeout=600)
    error, grown = done.stdout.strip().splitlines()
    assert "not an nqm netCDF file" in error and int(grown) < 2**18, (error, grown)  # below 256 MiB


def test_a_damaged_unsealed_file_leaves_no_exception_of_the_hdf5_layer(tmp_path):
    """h5netcdf's half-opened file printed "Exception ignored … File.close" after the error line."""
    dims = ("momentum", "lr")
    path = tmp_path / "old.nc"
    xr.Dataset({"steps": (dims, [[1, 2]]), "status": (dims, [[1, 1]])},
               coords={"momentum": [0.5], "lr": [0.1, 0.2]}).to_netcdf(path, engine="h5netcdf")  # no seal
    damaged = bytearray(path.read_bytes())
    damaged[96:200] = bytes(104)
    path.write_bytes(bytes(damaged))
    script = "import gc, sys, nqm\ntry:\n    nqm.load(sys.argv[1])\nexcept nqm.NqmError as error:\n    print(error)\ngc.collect()\n"
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=600)
    assert "not an nqm netCDF file" in done.stdout and done.stderr == "", done.stderr[-2000:]


# ------------------------------------------------------------------ 10: readers read what nqm.save writes

def _cells(**kw):
    return nqm.sweep("sgdm", problem=nqm.zhang(8), max_steps=50, progress=False, **kw)


@pytest.fixture(scope="module")
def grids():
    return {"2x2": _cells(lr=[0.1, 0.5], momentum=[0.0, 0.5], delay=[0, 1]), "1x2": _cells(lr=[0.1, 0.5], momentum=0.5),
            "2x1": _cells(lr=0.1, momentum=[0.0, 0.5])}


VARIANTS = {  # a result as a user may change it before nqm.save
    "as computed": ("2x2", lambda ds: ds),
    "its attributes emptied": ("2x2", lambda ds: ds.drop_attrs()),
    "its lr coordinate dropped": ("2x2", lambda ds: ds.drop_vars("lr")),
    "its momentum coordinate dropped": ("2x2", lambda ds: ds.drop_vars("momentum")),
    "its delay coordinates dropped": ("2x2", lambda ds: ds.drop_vars(["delay", "mean_delay"])),
    "squeezed with drop=True": ("2x2", lambda ds: ds.isel(delay=0).squeeze(drop=True)),
    "squeezed to one momentum with drop=True": ("1x2", lambda ds: ds.squeeze(drop=True)),
    "squeezed to one lr with drop=True": ("2x1", lambda ds: ds.squeeze(drop=True)),
    "squeezed to one momentum": ("1x2", lambda ds: ds.squeeze()),
    "transposed": ("2x2", lambda ds: ds.transpose("lr", ...)),
    "with learning rates as text": ("2x2", lambda ds: ds.assign_coords(lr=["a", "b"])),
    "with no learning rate": ("2x2", lambda ds: ds.isel(lr=slice(0, 0))),
    "with status over fewer dimensions": ("2x2", lambda ds: ds.assign(status=ds.status.isel(delay=0, drop=True))),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_result_nqm_save_writes_is_read_by_every_reader(variant, grids, tmp_path, capsys):
    """nqm.save refuses in one line what its readers could not read; what it writes, nqm.load,
    nqm.summary, nqm summary and nqm plot read."""
    grid, change = VARIANTS[variant]
    ds, path = change(grids[grid]), tmp_path / "r.nc"
    try:
        nqm.save(ds, path)
    except NqmError as error:
        assert "\n" not in str(error) and not path.exists()
        return
    assert nqm.load(path).identical(index_delays(ds))
    summary.summarize(nqm.load(path))
    capsys.readouterr()
    for argv in (["summary", str(path)], ["plot", str(path), "--out", str(tmp_path / "f.png")]):
        assert main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "f.png").stat().st_size > 1000


def test_what_nqm_save_refuses_says_what_is_missing(grids, tmp_path):
    for variant, words in (("its lr coordinate dropped", "lr dimension has no values"),
                           ("squeezed to one momentum with drop=True", "no momentum values"),
                           ("with learning rates as text", "learning rates > 0")):
        grid, change = VARIANTS[variant]
        with pytest.raises(NqmError, match=words):
            nqm.save(change(grids[grid]), tmp_path / "r.nc")
    assert list(tmp_path.iterdir()) == []
