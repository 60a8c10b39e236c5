"""Failed writes change nothing, one writer per output, and the CLI says what it is."""

import os
import pathlib
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from nqm.cli import main

# Under a file-size limit JAX could not write its compilation cache either (a warning on stderr).
NO_CACHE = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}

ROOT = pathlib.Path(__file__).resolve().parents[1]
SWEEP = ["sweep", "--lr", "geom:0.001:0.01:8", "--momentum", "0", "0.5", "--dim", "2000", "--max-steps", "20000",
         "--target", "1e-6", "--no-progress"]


def test_a_write_beyond_the_file_size_limit_is_one_line_and_keeps_the_previous_file(tmp_path, earlier_result):
    out = tmp_path / "out.nc"
    out.write_bytes(earlier_result)
    os.chmod(out, 0o640)
    script = (
        "import resource, sys, numpy as np, xarray as xr\n"
        "from nqm.cli import main\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))\n"
        f"sys.exit(main(['sweep', '--lr', 'geom:0.01:1:40', '--momentum', 'lin:0:0.9:10', '--dim', '8',"
        f" '--max-steps', '20', '--no-progress', '--force', '--out', {str(out)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=NO_CACHE)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nqm: error: cannot write") and "Traceback" not in done.stderr
    assert out.read_bytes() == earlier_result and (os.stat(out).st_mode & 0o777) == 0o640


def test_an_overwritten_result_keeps_its_file_mode(tmp_path, earlier_result):
    out = tmp_path / "out.nc"
    out.write_bytes(earlier_result)
    os.chmod(out, 0o600)
    assert main(["sweep", "--lr", "0.1", "--momentum", "0", "--dim", "8", "--max-steps", "20", "--no-progress",
                 "--force", "--out", str(out)]) == 0  # another sweep's result: replaced as asked
    assert (os.stat(out).st_mode & 0o777) == 0o600 and out.stat().st_size > 100


@pytest.mark.parametrize("through", ["the same name", "a symlink"])
def test_a_second_sweep_to_the_same_output_is_refused_at_once(through, tmp_path, capsys):
    out = tmp_path / "out.nc"
    second = out
    if through == "a symlink":  # a lock by resolved path: the symlink names the same file
        second = tmp_path / "elsewhere" / "link.nc"
        second.parent.mkdir()
        second.symlink_to(out)
    first = subprocess.Popen([sys.executable, "-m", "nqm", *SWEEP, "--out", str(out)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600  # a hang, not a slow machine
        while not pathlib.Path(str(out) + ".lock").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read() if first.poll() else "timeout"
            time.sleep(0.1)
        assert main([*SWEEP, "--out", str(second)]) == 2
        assert first.poll() is None  # refused while the first still runs: it did not wait for it
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


def test_one_progress_bar_counts_every_cell_of_the_sweep(progress_bars):
    import nqm

    bars = progress_bars
    nqm.sweep("sgdm", lr=[0.05, 0.1, 0.2], momentum=[0.0, 0.5], delay=[0, 2], seed=[0, 1], problem=nqm.zhang(8),
              max_steps=300)
    assert len(bars) == 1 and bars[0].total == 24 and bars[0].n == 24 and bars[0].unit == "cell"


def test_when_neither_result_nor_checkpoint_can_be_written_the_cells_are_rescued(tmp_path, monkeypatch, capsys, earlier_result):
    """A disk that is full where the result goes: the sweep still finishes, says where its cells
    are, and the previous result is untouched."""
    import nqm
    import nqm.io

    out = tmp_path / "out.nc"
    out.write_bytes(earlier_result)
    real = nqm.io.atomic_write

    def full_disk(path, mode="wb"):
        if str(path).startswith(str(tmp_path)):
            raise nqm.NqmError(f"cannot write {path}: No space left on device")
        return real(path, mode)

    monkeypatch.setattr(nqm.io, "atomic_write", full_disk)
    argv = ["sweep", "--lr", "0.1", "0.3", "--momentum", "0", "0.5", "--dim", "8", "--max-steps", "200",
            "--no-progress", "--force", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every computed cell is saved in" in err[0]
    rescued = err[0].split("saved in ")[1].split(":")[0]
    direct = nqm.sweep("sgdm", lr=[0.1, 0.3], momentum=[0, 0.5], problem=nqm.zhang(8), max_steps=200, progress=False)
    assert (nqm.load(rescued).steps.values == direct.steps.values).all()
    assert out.read_bytes() == earlier_result
    os.remove(rescued)


# ------------------------------------------------------------------ every write atomic, cells kept, locks by file

def _result(path):
    import nqm

    nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.3], momentum=[0, 0.5], problem=nqm.zhang(8), max_steps=50, progress=False),
             path)


def test_a_full_disk_while_writing_a_figure_or_a_table_leaves_the_previous_file(tmp_path, monkeypatch, capsys):
    """The write goes to /dev/full (ENOSPC at the first flush): one line, the old file unchanged,
    no temporary file left."""
    import tempfile

    result, fig, csv = tmp_path / "r.nc", tmp_path / "fig.png", tmp_path / "t.csv"
    _result(result)
    fig.write_bytes(b"an older figure")
    csv.write_bytes(b"an older table")
    real = tempfile.mkstemp

    def full_disk(*args, **kwargs):
        fd, path = real(*args, **kwargs)
        os.close(fd)
        return os.open("/dev/full", os.O_WRONLY), path

    monkeypatch.setattr(tempfile, "mkstemp", full_disk)
    for argv in (["plot", str(result), "--out", str(fig), "--force"], ["summary", str(result), "--csv", str(csv)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "cannot write" in err[0] and "No space left" in err[0], err
    assert fig.read_bytes() == b"an older figure" and csv.read_bytes() == b"an older table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "r.nc", "t.csv"]


def test_a_file_size_limit_while_writing_a_figure_leaves_the_previous_figure(tmp_path):
    result, fig = tmp_path / "r.nc", tmp_path / "fig.png"
    _result(result)
    fig.write_bytes(b"an older figure")
    script = (
        "import resource, sys\n"
        "from nqm.cli import main\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4_000, 4_000))\n"
        f"sys.exit(main(['plot', {str(result)!r}, '--out', {str(fig)!r}, '--force']))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=NO_CACHE)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "cannot write" in lines[0], done.stderr
    assert fig.read_bytes() == b"an older figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "r.nc"]


def _read_only(directory, monkeypatch):
    """Make ``directory`` read-only. Root writes through file permissions, so there the writes nqm
    makes into it (temporary files, renames, removals, access checks) fail as the OS would fail them."""
    import tempfile

    if os.geteuid() != 0:
        os.chmod(directory, 0o555)
        return
    inside = lambda path: os.path.dirname(os.path.abspath(os.fspath(path))) == str(directory)

    def denied(real, path_of=lambda *a, **k: a[0]):
        def call(*args, **kwargs):
            if inside(path_of(*args, **kwargs)):
                raise PermissionError(13, "Permission denied")
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(tempfile, "mkstemp", denied(tempfile.mkstemp, lambda *a, **k: os.path.join(k.get("dir", ""), "x")))
    monkeypatch.setattr(os, "remove", denied(os.remove))
    monkeypatch.setattr(os, "replace", denied(os.replace, lambda src, dst: dst))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if mode & os.W_OK and (
        str(path) == str(directory) or inside(path)) else real_access(path, mode))


def test_a_directory_made_read_only_mid_run_ends_with_one_line_and_the_cells_rescued(tmp_path, monkeypatch, capsys):
    import nqm
    from nqm import checkpoint

    out_dir = tmp_path / "results"
    out_dir.mkdir()
    out = out_dir / "out.nc"
    store = checkpoint.Checkpointer.store

    def store_then_read_only(self, *args):
        store(self, *args)
        if not getattr(store_then_read_only, "done", False):
            store_then_read_only.done = True
            _read_only(out_dir, monkeypatch)

    monkeypatch.setattr(checkpoint.Checkpointer, "store", store_then_read_only)
    grid = dict(lr=[0.05, 0.2, 0.6], momentum=[0.0, 0.9])
    argv = ["sweep", "--lr", *map(str, grid["lr"]), "--momentum", *map(str, grid["momentum"]), "--dim", "8",
            "--max-steps", "3000", "--target", "1e-4", "--chunk-steps", "100", "--no-progress", "--out", str(out)]
    try:
        assert main(argv) == 2
    finally:
        monkeypatch.undo()
        os.chmod(out_dir, 0o755)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0] and "permission denied" in err[0].lower(), err
    assert "every computed cell is saved in" in err[0]
    rescued = err[0].split("saved in ")[1].split(":")[0]
    assert not rescued.startswith(str(out_dir))  # not beside the output, nor its checkpoint: read-only
    direct = nqm.sweep("sgdm", **grid, problem=nqm.zhang(8), max_steps=3000, target=1e-4, progress=False)
    kept = nqm.load(rescued)
    os.remove(rescued)
    for name in ("steps", "status"):
        assert (kept[name].values == direct[name].values).all()


@pytest.mark.parametrize("unwritable, where", [
    (("out.nc",), "out.rescued.nc"),  # beside the output
    (("out.nc", "out.rescued.nc"), "checkpoint"),  # the checkpoint, which the same command then writes out
    (("out.nc", "out.rescued.nc", "out.nc.partial"), "nqm-rescued-"),  # the temporary directory
    (("",), "nothing could be saved"),  # anywhere at all
])
def test_the_computed_cells_are_kept_beside_the_output_then_in_the_checkpoint_then_in_the_temporary_directory(
        unwritable, where, tmp_path, monkeypatch, capsys):
    import nqm
    from nqm import engine, io

    out = tmp_path / "out.nc"
    real = io.write_bytes

    def failing(path, data):
        name = os.path.basename(os.fspath(path)) if str(path).startswith(str(tmp_path)) else ""
        if name in unwritable or unwritable == ("",):
            raise nqm.NqmError(f"cannot write {path}: No space left on device")
        return real(path, data)

    monkeypatch.setattr(io, "write_bytes", failing)
    argv = ["sweep", "--lr", "0.1", "0.3", "--momentum", "0", "0.5", "--dim", "8", "--max-steps", "200", "--no-progress",
            "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and where in err[0], err
    assert not out.exists()
    direct = nqm.sweep("sgdm", lr=[0.1, 0.3], momentum=[0, 0.5], problem=nqm.zhang(8), max_steps=200, progress=False)
    if where == "nothing could be saved":
        return
    if where == "checkpoint":  # run again: written without computing anything
        monkeypatch.setattr(io, "write_bytes", real)
        monkeypatch.setattr(engine, "simulate", lambda *a, **k: pytest.fail("recomputed a rescued cell"))
        assert main(argv) == 0
        rescued = str(out)
    else:
        rescued = err[0].split("saved in ")[1].split(":")[0]
    assert (nqm.load(rescued).steps.values == direct.steps.values).all()
    if rescued != str(out):
        os.remove(rescued)


def test_under_a_file_size_limit_the_cells_are_rescued_or_it_says_nothing_could_be_saved(tmp_path):
    """A result larger than the limit (64 kB) is kept compressed (46 kB) beside the output; under a
    limit too small for anything, one line says that nothing could be saved."""
    import json

    import nqm
    from nqm.status import RUNNING

    script = (
        "import contextlib, io, json, resource, sys\n"
        "from nqm.cli import main\n"
        "runs = []\n"
        f"for limit, lr, out in ((55_000, 'lin:0.01:1:60', {str(tmp_path / 'big.nc')!r}), "
        f"(2_000, '0.1', {str(tmp_path / 'small.nc')!r})):\n"
        "    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        code = main(['sweep', '--lr', lr, '--momentum', 'lin:0:0.9:60', '--dim', '8', '--max-steps', '20',"
        " '--no-progress', '--out', out])\n"
        "    runs.append((code, err.getvalue().strip().splitlines()))\n"
        "print(json.dumps(runs))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=NO_CACHE)
    (big, big_err), (small, small_err) = json.loads(done.stdout.strip().splitlines()[-1])
    assert big == small == 2 and len(big_err) == len(small_err) == 1, (big_err, small_err, done.stderr)
    assert f"saved in {tmp_path / 'big.rescued.nc'}" in big_err[0], big_err
    assert "nothing could be saved" in small_err[0] and "Traceback" not in done.stderr, small_err
    kept = nqm.load(tmp_path / "big.rescued.nc")
    assert kept.status.size == 60 * 60 and (kept.status.values != RUNNING).all()


def test_an_interrupted_trace_says_so_in_one_line_and_mentions_no_checkpoint(tmp_path):
    import signal

    out = tmp_path / "t.nc"
    # Ctrl-C as in a terminal: a test runner started in the background (or pytest-xdist's workers)
    # ignores SIGINT, and a child would inherit that
    child = subprocess.Popen([sys.executable, "-m", "nqm", "trace", "--lr", "0.01", "--momentum", "0.5", "--dim", "1000",
                              "--steps", "20000000", "--stride", "1000", "--out", str(out)],
                             stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(12)  # imported, compiled, running
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 130 and err.strip() == "nqm: interrupted", (child.returncode, err)
    assert list(tmp_path.iterdir()) == []  # no output, no lock left


# ------------------------------------------------------------------ special files, a search's write, SIGTERM

@pytest.mark.parametrize("argv", [
    ["threshold", "--method", "sgd", "--delay", "0", "1"],
    ["sweep", "--lr", "0.1", "--momentum", "0", "--dim", "8", "--max-steps", "20", "--no-progress"],
    ["best", "--lr", "0.1:1", "--momentum", "0", "--dim", "8", "--max-steps", "20", "--no-progress"],
], ids=lambda argv: argv[0])
def test_a_fifo_given_as_the_output_is_refused_and_left_a_fifo(argv, tmp_path, capsys):
    fifo = tmp_path / "fifo.nc"
    os.mkfifo(fifo)
    assert main([*argv, "--out", str(fifo)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a regular file" in err[0], err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and list(tmp_path.iterdir()) == [fifo]


def test_saving_to_a_device_or_a_fifo_is_refused(tmp_path):
    import nqm

    fifo = tmp_path / "fifo.nc"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/null"):
        with pytest.raises(nqm.NqmError, match="not a regular file"):
            nqm.save(nqm.sweep("sgdm", lr=0.1, momentum=0, problem=nqm.zhang(8), max_steps=5, progress=False), path)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_search_whose_write_fails_prints_its_answer_and_keeps_every_point(tmp_path, monkeypatch, capsys, earlier_result):
    import nqm
    import nqm.io
    from nqm.search import answer

    out = tmp_path / "best.nc"
    out.write_bytes(earlier_result)
    real = nqm.io.atomic_write

    def full_disk(path, mode="wb"):  # the output's disk is full; the rest can be written
        if os.fspath(path) == str(out):
            raise nqm.NqmError(f"cannot write {path}: No space left on device")
        return real(path, mode)

    monkeypatch.setattr(nqm.io, "atomic_write", full_disk)
    argv = ["best", "--lr", "0.05:3", "--momentum", "0:0.9", "--delay", "2", "--dim", "20", "--max-steps", "1000",
            "--max-cells", "200", "--no-progress", "--json", "--force", "--out", str(out)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "every evaluated point is saved in" in err[0], err
    direct = nqm.best("sgdm", lr=(0.05, 3.0), momentum=(0.0, 0.9), delay=2, problem=nqm.zhang(20), max_steps=1000,
                      max_cells=200, progress=False)
    found = answer(direct)
    assert any(f"T*_best = {found['t_star']:,} steps" in line for line in captured.out.splitlines())
    rescued = nqm.load(err[0].split("saved in ")[1].split(":")[0])
    for name in ("steps", "status", "loss", "lr", "momentum"):
        np.testing.assert_array_equal(rescued[name].values, direct[name].values)
    assert out.read_bytes() == earlier_result


def test_sigterm_ends_a_command_as_ctrl_c_does_in_one_line_and_removes_its_lock(tmp_path):
    out = tmp_path / "t.nc"
    child = subprocess.Popen([sys.executable, "-m", "nqm", "trace", "--lr", "0.01", "--momentum", "0.5", "--dim", "1000",
                              "--steps", "20000000", "--stride", "1000", "--out", str(out)],
                             stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600  # a hang, not a slow machine
        while not pathlib.Path(str(out) + ".lock").exists():
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(12)  # imported, compiled, running
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=300)
    finally:
        child.kill()
    assert child.returncode == 130 and err.strip() == "nqm: interrupted", (child.returncode, err)
    assert list(tmp_path.iterdir()) == []  # no output, no lock left
