"""Readers that cannot hang: a small result with one bit flipped, at each of many places, gives a
clean answer or one error line — from nqm.load, nqm summary and nqm plot — and one cut short at
each of many places (its seal cut, or part of its body) is named damaged, never read; each run is
guarded against a hang by a subprocess deadline (a hang fails the test; its length is not tested)."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Flips one bit at each of FLIPS places (spread over the file, its header first), and runs each
# reader on the damaged copy: it must return or raise NqmError; prints the counts.
FUZZ = """
import contextlib, io, sys
import numpy as np
import nqm
from nqm.cli import main

source, work, flips = sys.argv[1], sys.argv[2], int(sys.argv[3])
nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=[0.0, 0.5], problem=nqm.zhang(50), max_steps=500,
                   progress=False), source)
data = open(source, "rb").read()
rng = np.random.default_rng(0)
places = np.unique(np.concatenate([np.arange(0, min(len(data), 2048), 7), rng.integers(0, len(data), flips)]))
read = refused = 0
for i, place in enumerate(places):
    damaged = bytearray(data)
    damaged[place] ^= 1 << int(rng.integers(8))
    open(work, "wb").write(bytes(damaged))
    try:
        nqm.load(work)
        read += 1
    except nqm.NqmError as error:
        assert "\\n" not in str(error), str(error)
        refused += 1
    commands = [["summary", work]] + ([["plot", work, "--out", work + ".png"]] if i % 25 == 0 else [])
    for argv in commands:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        assert code in (0, 2) and len(err.getvalue().strip().splitlines()) <= 1, (argv, err.getvalue())
print(len(places), read, refused)
"""


def test_a_flipped_bit_is_a_clean_answer_or_one_line(tmp_path):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, MPLBACKEND="Agg", NQM_CPU_DEVICES="1")
    result = subprocess.run([sys.executable, "-c", FUZZ, str(tmp_path / "r.nc"), str(tmp_path / "bad.nc"), "200"],
                            capture_output=True, text=True, timeout=900, env=env)  # a hang, not a slow machine
    assert result.returncode == 0, result.stderr[-3000:]
    places, read, refused = map(int, result.stdout.split())
    assert places > 400 and refused > 0.9 * places  # nearly every flip is caught by the seal


# Cuts the file at each of many sizes: through its seal byte by byte, just before and after it, and
# at random places of its body; every reader must call each cut copy damaged; prints the counts.
CUT = """
import contextlib, io, sys
import numpy as np
import nqm
from nqm.cli import main
from nqm.files import SEAL_SIZE

source, work = sys.argv[1], sys.argv[2]
nqm.save(nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=[0.0, 0.5], problem=nqm.zhang(50), max_steps=500,
                   progress=False), source)
data = open(source, "rb").read()
rng = np.random.default_rng(0)
seal = np.arange(len(data) - SEAL_SIZE - 8, len(data))  # every cut through the seal, and the body's last bytes
sizes = np.unique(np.concatenate([seal, rng.integers(1, len(data), 150), np.arange(1, 80, 3)]))
damaged = 0
for i, size in enumerate(sizes):
    open(work, "wb").write(data[:size])
    try:
        nqm.load(work)
    except nqm.NqmError as error:
        assert "\\n" not in str(error) and "is damaged" in str(error), (int(size), str(error))
        damaged += 1
    if i % 10 == 0:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["summary", work])
        assert code == 2 and len(err.getvalue().strip().splitlines()) == 1 and "is damaged" in err.getvalue()
print(len(sizes), damaged)
"""


def test_a_result_cut_short_anywhere_is_damaged_never_read(tmp_path):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, MPLBACKEND="Agg", NQM_CPU_DEVICES="1")
    result = subprocess.run([sys.executable, "-c", CUT, str(tmp_path / "r.nc"), str(tmp_path / "cut.nc")],
                            capture_output=True, text=True, timeout=900, env=env)  # a hang, not a slow machine
    assert result.returncode == 0, result.stderr[-3000:]
    sizes, damaged = map(int, result.stdout.split())
    assert sizes > 200 and damaged == sizes  # each cut copy is refused as damage, the whole seal cut off included
