"""The command line: the documented interface works, and bad input is one line with exit status 2."""

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
                 "--micro-steps", "2", "--ab-mode", "vel-only", "--seed", "3", *SMALL,
                 "--out", str(out), "--plot", str(fig), "--threshold"])
    assert code == 0
    ds = nqm.load(out)
    assert ds.sizes == {"delay": 2, "noise": 2, "rho": 1, "seed": 1, "momentum": 2, "lr": 5}
    assert (ds.attrs["group"], ds.attrs["micro_steps"], ds.attrs["ab_mode"]) == ("blocks:4", 2, "vel-only")
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
    assert main(["sweep", "--lr", "0.5", "--momentum", "0.5", "--spectrum", "loguniform", "--dim", "16",
                 "--lo", "1e-3", "--max-steps", "100", "--no-progress", "--out", str(out)]) == 0
    assert nqm.load(out).attrs["spectrum"] == "loguniform(N=16, lo=0.001, hi=1)"


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


def test_python_dash_m_reports_errors_without_traceback(tmp_path):
    run = subprocess.run([sys.executable, "-m", "nqm", "sweep", "--lr", "-1", "--momentum", "0.5",
                          "--out", str(tmp_path / "r.nc")], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip() == "nqm: error: lr=-1 is invalid: each value must be a learning rate > 0"
