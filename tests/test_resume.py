"""Interrupted sweeps resume mid-cell, bit-identical to an uninterrupted run."""

import os
import pathlib
import signal
import subprocess
import sys
import time
from unittest import mock

import numpy as np
import pytest

import nqm
from nqm import engine

ROOT = pathlib.Path(__file__).resolve().parents[1]
GRID = dict(lr=list(np.geomspace(0.002, 0.05, 6)), momentum=[0.0, 0.9], delay=[0, 3], noise=0.01, seed=1,
            problem=nqm.zhang(3000), target=1e-3, max_steps=40_000, chunk_steps=500, progress=False)
SCRIPT = f"""
import sys, numpy as np, nqm
sys.path.insert(0, {str(ROOT / "tests")!r})
from test_resume import GRID
nqm.sweep("sgdm", checkpoint=sys.argv[1], checkpoint_every=0.5, **GRID)
"""


@pytest.fixture(scope="module")
def uninterrupted():
    return nqm.sweep("sgdm", **GRID)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_a_sweep_killed_mid_cell_resumes_where_it_stopped(sig, uninterrupted, tmp_path):
    checkpoint = tmp_path / "run.partial"
    running = pathlib.Path(str(checkpoint) + ".cells.npz")
    env = dict(os.environ, NQM_CPU_DEVICES="2")
    child = subprocess.Popen([sys.executable, "-c", SCRIPT, str(checkpoint)], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not running.exists() or np.load(running)["0_t"] < 2000:
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.poll() is not None else "timeout"
        time.sleep(0.2)
    child.send_signal(sig)
    child.wait(timeout=120)
    assert child.returncode != 0
    saved_t = int(np.load(running)["0_t"])
    starts = []
    advance = engine.loop.advance

    def spy(spec, cells, inputs, model, noise, schedule, row, t0, *rest):
        starts.append(int(t0))
        return advance(spec, cells, inputs, model, noise, schedule, row, t0, *rest)

    with mock.patch.object(engine.loop, "advance", spy):
        resumed = nqm.sweep("sgdm", checkpoint=checkpoint, **GRID)
    assert starts[0] == saved_t > 0  # the first part went on from where it was, not from step 0
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(resumed[name].values, uninterrupted[name].values)
