"""Failed writes change nothing, one writer per output, and the CLI says what it is."""

import os
import pathlib
import subprocess
import sys
import time

import pytest

from nqm.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
SWEEP = ["sweep", "--lr", "geom:0.001:0.01:8", "--momentum", "0", "0.5", "--dim", "2000", "--max-steps", "20000",
         "--target", "1e-6", "--no-progress"]


def test_a_write_beyond_the_file_size_limit_is_one_line_and_keeps_the_previous_file(tmp_path):
    out = tmp_path / "out.nc"
    out.write_bytes(b"previous result")
    os.chmod(out, 0o640)
    script = (
        "import resource, sys, numpy as np, xarray as xr\n"
        "from nqm.cli import main\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))\n"
        f"sys.exit(main(['sweep', '--lr', 'geom:0.01:1:40', '--momentum', 'lin:0:0.9:10', '--dim', '8',"
        f" '--max-steps', '20', '--no-progress', '--out', {str(out)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nqm: error: cannot write") and "Traceback" not in done.stderr
    assert out.read_bytes() == b"previous result" and (os.stat(out).st_mode & 0o777) == 0o640


def test_an_overwritten_result_keeps_its_file_mode(tmp_path):
    out = tmp_path / "out.nc"
    out.write_bytes(b"x")
    os.chmod(out, 0o600)
    assert main(["sweep", "--lr", "0.1", "--momentum", "0", "--dim", "8", "--max-steps", "20", "--no-progress",
                 "--out", str(out)]) == 0
    assert (os.stat(out).st_mode & 0o777) == 0o600 and out.stat().st_size > 100


def test_a_second_sweep_to_the_same_output_is_refused_at_once(tmp_path, capsys):
    out = tmp_path / "out.nc"
    first = subprocess.Popen([sys.executable, "-m", "nqm", *SWEEP, "--out", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not pathlib.Path(str(out) + ".lock").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() else "timeout"
            time.sleep(0.1)
        start = time.monotonic()
        assert main([*SWEEP, "--out", str(out)]) == 2
        assert time.monotonic() - start < 10
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another nqm run is writing" in err[0]
    finally:
        first.kill()
        first.wait()


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    import nqm

    assert capsys.readouterr().out.strip() == f"nqm {nqm.__version__}"


def test_one_progress_bar_counts_every_cell_of_the_sweep(monkeypatch):
    import tqdm

    import nqm

    bars = []

    class Recording(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = False
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(tqdm, "tqdm", Recording)
    nqm.sweep("sgdm", lr=[0.05, 0.1, 0.2], momentum=[0.0, 0.5], delay=[0, 2], seed=[0, 1], problem=nqm.zhang(8),
              max_steps=300)
    assert len(bars) == 1 and bars[0].total == 24 and bars[0].n == 24 and bars[0].unit == "cell"


def test_when_neither_result_nor_checkpoint_can_be_written_the_cells_are_rescued(tmp_path, monkeypatch, capsys):
    """A disk that is full where the result goes: the sweep still finishes, says where its cells
    are, and the previous result is untouched."""
    import nqm
    import nqm.io

    out = tmp_path / "out.nc"
    out.write_bytes(b"previous result")
    real = nqm.io.atomic_write

    def full_disk(path, mode="wb"):
        if str(path).startswith(str(tmp_path)):
            raise nqm.NqmError(f"cannot write {path}: No space left on device")
        return real(path, mode)

    monkeypatch.setattr(nqm.io, "atomic_write", full_disk)
    argv = ["sweep", "--lr", "0.1", "0.3", "--momentum", "0", "0.5", "--dim", "8", "--max-steps", "200",
            "--no-progress", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every computed cell is saved in" in err[0]
    rescued = err[0].split("saved in ")[1].split(":")[0]
    direct = nqm.sweep("sgdm", lr=[0.1, 0.3], momentum=[0, 0.5], problem=nqm.zhang(8), max_steps=200, progress=False)
    assert (nqm.load(rescued).steps.values == direct.steps.values).all()
    assert out.read_bytes() == b"previous result"
    os.remove(rescued)
