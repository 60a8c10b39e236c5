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
from nqm.status import SKIPPED
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
    deadline = time.monotonic() + 600  # a hang, not a slow machine
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


# ------------------------------------------------------------------ a checkpoint resumes only the same sweep, intact

SMALL = dict(lr=[0.05, 0.1, 0.2], momentum=[0.0, 0.9], target=1e-3, max_steps=20_000, progress=False)
LAM = list(np.geomspace(1.0, 0.01, 10))
STORED = dict(SMALL, lr=list(np.geomspace(0.002, 0.2, 6)), chunk_steps=100, problem=nqm.zhang(64))  # many stores


def test_a_changed_ninth_eigenvalue_is_another_sweep(tmp_path):
    """The spectrum's label shows eight eigenvalues: the check compares all of them, by digest."""
    from nqm.checkpoint import StaleCheckpoint

    path = tmp_path / "c.partial"
    old = nqm.sweep("sgdm", problem=nqm.explicit(LAM), checkpoint=path, **SMALL)
    changed = list(LAM)
    changed[8] *= 0.7
    assert nqm.explicit(changed).spectrum == nqm.explicit(LAM).spectrum
    with pytest.raises(StaleCheckpoint, match="eigenvalues") as info:
        nqm.sweep("sgdm", problem=nqm.explicit(changed), checkpoint=path, **SMALL)
    assert "\n" not in str(info.value) and "delete" in str(info.value)
    direct = nqm.sweep("sgdm", problem=nqm.explicit(changed), **SMALL)
    assert (direct.steps.values != old.steps.values).any()  # resuming would have returned wrong numbers
    restarted = nqm.sweep("sgdm", problem=nqm.explicit(changed), checkpoint=path, restart=True, **SMALL)
    np.testing.assert_array_equal(restarted.steps.values, direct.steps.values)


def test_flipped_bits_in_a_checkpoints_steps_are_refused(tmp_path):
    import h5py

    from nqm.checkpoint import StaleCheckpoint

    path = tmp_path / "c.partial"
    nqm.sweep("sgdm", problem=nqm.zhang(8), checkpoint=path, **SMALL)
    with h5py.File(path, "r+") as f:  # one bit of one cell's T, as a bad disk would
        steps = f["steps"][...]
        steps.flat[3] ^= 1 << 2
        f["steps"][...] = steps
    with pytest.raises(nqm.NqmError, match="damaged"):
        nqm.load(path)
    with pytest.raises(StaleCheckpoint, match="damaged"):
        nqm.sweep("sgdm", problem=nqm.zhang(8), checkpoint=path, **SMALL)


def test_damaged_running_cells_are_refused(tmp_path, interrupt_at_store):
    from nqm import checkpoint as checkpoints

    path = tmp_path / "c.partial"
    interrupt_at_store(2)
    with pytest.raises(KeyboardInterrupt):
        nqm.sweep("sgdm", checkpoint=path, checkpoint_every=0.0, **STORED)
    interrupt_at_store.disarm()
    running = pathlib.Path(str(path) + ".cells.npz")
    with np.load(running) as f:
        arrays = {name: f[name] for name in f.files}
    leaf = next(name for name in arrays if name.startswith("0_") and name[2:].isdigit())
    arrays[leaf] = arrays[leaf].copy()
    arrays[leaf].flat[0] += 1  # one weight changed, the saved checksum kept
    np.savez(running, **arrays)
    with pytest.raises(checkpoints.StaleCheckpoint, match="running cells .* damaged"):
        nqm.sweep("sgdm", checkpoint=path, **STORED)
    running.write_bytes(running.read_bytes()[:100])  # truncated
    with pytest.raises(checkpoints.StaleCheckpoint, match="cannot read the checkpoint's running cells"):
        nqm.sweep("sgdm", checkpoint=path, **STORED)


def test_a_checkpoint_rewrites_the_result_only_when_cells_finished_since(tmp_path, monkeypatch):
    """Every checkpoint writes the running cells' state; the result (a netCDF, the costly file) only
    when some cells finished since it was last written, so frequent checkpoints of long-running
    cells cost little."""
    from nqm import checkpoint as checkpoints

    calls = {"save": 0, "store": 0, "running": 0}

    def counted(name, function):
        def call(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return call

    for name, owner, attribute in (("save", checkpoints, "save"), ("store", checkpoints.Checkpointer, "store"),
                                   ("running", checkpoints, "_save_running")):
        monkeypatch.setattr(owner, attribute, counted(name, getattr(owner, attribute)))
    nqm.sweep("sgdm", checkpoint=tmp_path / "c.partial", checkpoint_every=0.0, **STORED)
    assert calls["running"] > calls["store"] + 1 >= calls["save"] >= 1


def test_a_resumed_sweep_cuts_its_chunks_where_the_run_it_continues_did(tmp_path, interrupt_at_store):
    """Chunk boundaries depend on the step alone: a sweep resumed at a chunk's end, inside the first
    (short) chunks or past them, cuts the rest where a sweep never stopped does, so the cells that
    finish together there (a floor probe's, found again by its cells) finish together here."""
    kw = dict(STORED, chunk_steps=160)

    def starts(**extra):
        seen, advance = [], engine.loop.advance

        def spy(spec, cells, inputs, model, noise, schedule, row, t0, *rest):
            seen.append(int(t0))
            return advance(spec, cells, inputs, model, noise, schedule, row, t0, *rest)

        with mock.patch.object(engine.loop, "advance", spy):
            nqm.sweep("sgdm", **kw, **extra)
        return list(dict.fromkeys(seen))  # a chunk's start once, however many batches it advanced

    whole = starts()
    assert whole[:6] == [0, 10, 30, 70, 150, 310]  # 1/16, 1/8, 1/4, 1/2 of a chunk, then whole ones
    from nqm.engine import run as host

    cuts = [0]
    while cuts[-1] < whole[-1]:
        cuts.append(cuts[-1] + host.steps_to_chunk_end(cuts[-1], 160))  # the step alone sets each chunk's end
    assert cuts == whole
    for stores in (1, 9):  # resumed at step 30 (inside the short chunks) and far past them
        path = tmp_path / f"{stores}.partial"
        interrupt_at_store(stores)
        with pytest.raises(KeyboardInterrupt):
            nqm.sweep("sgdm", checkpoint=path, checkpoint_every=0.0, **kw)
        interrupt_at_store.disarm()
        resumed = starts(checkpoint=path)
        assert resumed[0] > 0 and resumed == [t for t in whole if t >= resumed[0]]


# ------------------------------------------------------------------ a search resumes by round

SEARCH = dict(lr=(0.05, 3.0), momentum=(0.0, 0.95), delay=3, robust=0.05, max_cells=300, problem=nqm.zhang(20),
              max_steps=1000, progress=False)
SEARCH_CLI = ["best", "--lr", "0.05:3", "--momentum", "0:0.95", "--delay", "3", "--robust", "0.05", "--max-cells", "300",
              "--dim", "20", "--max-steps", "1000", "--no-progress"]


def _interrupted_after(rounds: int):
    """``nqm.sweeps.evaluate_job`` (where a search runs a round's points) interrupted (Ctrl-C) at its
    call ``rounds + 1``; and its calls."""
    from nqm import sweeps

    real, calls = sweeps.evaluate_job, []

    def evaluate(task, process, test, values, seeds, stay=False):
        calls.append(values["lr"].size)
        if len(calls) > rounds:
            raise KeyboardInterrupt
        return real(task, process, test, values, seeds, stay)
    return evaluate, calls


def test_an_interrupted_search_resumes_its_rounds_and_gives_the_uninterrupted_answer(tmp_path, monkeypatch):
    from nqm import sweeps

    uninterrupted = nqm.best("sgdm", **SEARCH)
    checkpoint = tmp_path / "search.partial"
    evaluate, _ = _interrupted_after(3)
    with monkeypatch.context() as patch:
        patch.setattr(sweeps, "evaluate_job", evaluate)
        with pytest.raises(KeyboardInterrupt):
            nqm.best("sgdm", checkpoint=checkpoint, **SEARCH)
    kept = nqm.load(checkpoint)
    assert sorted(set(kept.round_number.values)) == [0, 1, 2] and not (tmp_path / "search.partial.lock").exists()
    evaluate, calls = _interrupted_after(10**6)
    monkeypatch.setattr(sweeps, "evaluate_job", evaluate)
    resumed = nqm.best("sgdm", checkpoint=checkpoint, **SEARCH)
    assert resumed.identical(uninterrupted)
    run = uninterrupted.status.values[0] != SKIPPED  # (a point known not to settle is not run)
    assert sum(calls) == int(((uninterrupted.round_number.values > 2) & run).sum())  # only the rounds not kept
    with pytest.raises(nqm.NqmError, match="different search: setting max_steps differs"):
        nqm.best("sgdm", checkpoint=checkpoint, **{**SEARCH, "max_steps": 999})


def test_ctrl_c_on_best_says_it_keeps_its_checkpoint_and_the_same_command_resumes(tmp_path, monkeypatch, capsys):
    from argparse import Namespace

    from nqm import sweeps
    from nqm.cli import best as best_command
    from nqm.cli import main

    out = tmp_path / "best.nc"
    assert best_command.interrupted(Namespace(out=str(out))) == ("no round had finished, nothing was kept: the search "
                                                                 "starts over when run again")
    evaluate, _ = _interrupted_after(2)
    with monkeypatch.context() as patch:
        patch.setattr(sweeps, "evaluate_job", evaluate)
        assert main([*SEARCH_CLI, "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"nqm: interrupted; the checkpoint {out}.partial holds every round evaluated so far: run the same "
                   "command again to resume"]
    assert err == [f"nqm: interrupted; {best_command.interrupted(Namespace(out=str(out)))}"]  # what the command says
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.nc.partial"]
    assert main([*("999" if a == "1000" else a for a in SEARCH_CLI), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different search" in err[0] and "--restart" in err[0], err
    assert main([*SEARCH_CLI, "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.nc"]
    saved, direct = nqm.load(out), nqm.best("sgdm", **SEARCH)
    for name in ("steps", "status", "loss", "lr", "momentum", "round_number", "robust_steps"):
        np.testing.assert_array_equal(saved[name].values, direct[name].values)


def test_ctrl_c_on_sweep_says_it_keeps_its_checkpoint_and_the_same_command_resumes(tmp_path, capsys, monkeypatch,
                                                                                   interrupt_at_store):
    """``nqm sweep`` interrupted once its checkpoint holds something says so (nqm.cli.sweep's
    ``interrupted``), keeps only the checkpoint, and the same command resumes it to the result of a
    sweep never stopped. (Its checkpoint written at every store here, as a long sweep's is every 30 s.)"""
    from argparse import Namespace

    from nqm.cli import main
    from nqm.cli import sweep as sweep_command

    sweep = nqm.sweep
    monkeypatch.setattr(nqm, "sweep", lambda *args, **kwargs: sweep(*args, **kwargs, checkpoint_every=0.0))
    out = tmp_path / "r.nc"
    argv = [sweep_command.NAME, "--lr", "0.002", "0.01", "0.05", "--momentum", "0", "0.9", "--dim", "64", "--target",
            "1e-3", "--max-steps", "20000", "--chunk-steps", "100", "--no-progress", "--out", str(out)]
    assert sweep_command.interrupted(Namespace(out=str(out))) is None  # nothing kept yet: nothing to say
    interrupt_at_store(1)
    assert main(argv) == 130
    interrupt_at_store.disarm()
    err = capsys.readouterr().err.strip().splitlines()
    said = sweep_command.interrupted(Namespace(out=str(out)))
    assert said == (f"the checkpoint {out}.partial holds the finished and running cells: run the same command again "
                    "to resume")
    assert err == [f"nqm: interrupted; {said}"] and not out.exists()
    assert main(argv) == 0 and not pathlib.Path(f"{out}.partial").exists()
    whole = sweep("sgdm", lr=[0.002, 0.01, 0.05], momentum=[0.0, 0.9], problem=nqm.zhang(64), target=1e-3,
                  max_steps=20_000, progress=False)
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(nqm.load(out)[name].values, whole[name].values)


# ------------------------------------------------------------------ a floor probe inside a sweep resumes too

# Three AB cells below their floor (see test_settled.py's ESCAPES) that finish in one chunk: one probe of three
PROBED = dict(lr=list(np.geomspace(0.025, 0.06, 8)[[1, 4, 7]]), momentum=0.98, rho=2.0, delay=4,
              problem=nqm.zhang(100), max_steps=20_000, chunk_steps=20_000, progress=False)


def test_a_sweep_stopped_inside_a_floor_probe_resumes_the_probe(tmp_path, monkeypatch):
    """AB's floor probe (a float64 run that may take hours at N = 10⁴) runs inside a sweep's part:
    stopped there once some of its cells have finished, the checkpoint keeps their results and the
    others' state, and the same call goes on with the probe from its saved step: the result of a
    sweep never stopped."""
    from nqm import checkpoint as checkpoints

    whole = nqm.sweep("ab", **PROBED)
    between = checkpoints.Checkpointer.between_chunks

    def stop_once_a_probed_cell_finished(self, key, todo, snapshot):
        self.stop = self.stop or ("|probe|" in key and f"{key}|finished" in self.running)
        return between(self, key, todo, snapshot)

    path = tmp_path / "c.partial"
    with monkeypatch.context() as patch:
        patch.setattr(checkpoints.Checkpointer, "between_chunks", stop_once_a_probed_cell_finished)
        with pytest.raises(KeyboardInterrupt):
            nqm.sweep("ab", checkpoint=path, **PROBED)
    with np.load(f"{path}.cells.npz") as f:
        saved = {str(key): (int(f[f"{i}_t"]), f[f"{i}_where"].size) for i, key in enumerate(f["keys"])}
    (probe,) = [key for key in saved if key.endswith("|finished")]
    assert saved[probe][1] > 0 and saved[probe.removesuffix("|finished")][1] > 0  # finished ones, running ones
    starts, advance = [], engine.loop.advance

    def spy(spec, cells, inputs, model, noise, schedule, row, t0, *rest):
        if cells.loss.dtype == np.float64:  # the probe's chunks
            starts.append(int(t0))
        return advance(spec, cells, inputs, model, noise, schedule, row, t0, *rest)

    with mock.patch.object(engine.loop, "advance", spy):
        resumed = nqm.sweep("ab", checkpoint=path, **PROBED)
    assert starts[0] == saved[probe.removesuffix("|finished")][0] > 0
    for name in ("steps", "status", "loss"):
        np.testing.assert_array_equal(resumed[name].values, whole[name].values)


def test_a_floor_probe_shows_its_step_in_the_sweeps_bar_without_counting_its_cells(monkeypatch):
    from nqm.engine.observers import Progress

    shown, progress = [], Progress.progress

    def spy(self, t, finished, running, settling):
        shown.append((self.description, self.count, t, finished))
        return progress(self, t, finished, running, settling)

    monkeypatch.setattr(Progress, "progress", spy)
    nqm.sweep("ab", **PROBED)
    probe = [row for row in shown if row[0].endswith("floor probe")]
    assert probe and not any(count for _, count, _, _ in probe)
    assert sum(finished for _, count, _, finished in shown if count) == len(PROBED["lr"])  # the sweep's cells only
