"""Searches that converge, or say that they did not (``nqm.search.answered``): a search that stopped
at its cell limit or whose answer sits on its box's edge is run again with more cells and a wider
box; a curve over batch sizes is consistent or has gaps; what still misses is never a value."""

import numpy as np
import pytest

import nqm
from nqm.cli import build_parser, main
from nqm.io import load_dataset
from nqm.search import answer, best
from nqm.search import scaling as scaling_module
from nqm.search.answered import answered_best, misses
from nqm.search.scaling import scaling

SMALL = dict(problem=nqm.zhang(20), max_steps=2000, progress=False)


def test_a_search_stopped_at_its_cell_limit_is_rerun_with_twice_the_cells():
    short = best("sgdm", lr=(0.01, 8.0), momentum=(0.0, 0.9), max_cells=70, **SMALL)
    assert short.attrs["stopped"] == "max_cells" and misses(short) == ["stopped at the cell limit"]
    ds = answered_best("sgdm", lr=(0.01, 8.0), momentum=(0.0, 0.9), max_cells=70, **SMALL)
    assert ds.attrs["answered"] == 1 and ds.attrs["miss"] == "" and ds.attrs["attempts"] == 2
    assert ds.attrs["max_cells"] == 140 and answer(ds)["t_star"] <= answer(short)["t_star"]
    # answered: it stopped on its tolerance, or twice the cells moved its answer by at most 2 × tol
    assert ds.attrs["stopped"] != "max_cells" or abs(1 - ds.attrs["best_steps"] / ds.attrs["half_steps"]) <= 0.02
    assert ds.attrs["cells_total"] == answer(ds)["cells"]  # the rerun ran only the cells past the first's limit


def test_a_rerun_of_the_same_box_runs_only_its_new_cells_and_answers_as_a_fresh_search(monkeypatch):
    """The rerun takes the first search's points instead of running them again (the rounds are the
    same until its limit), so it runs only the cells past that limit — and its result, every point
    and every answer, is the one a fresh search with twice the cells gives."""
    box = dict(lr=(0.01, 8.0), momentum=(0.0, 0.9), **SMALL)
    fresh = best("sgdm", max_cells=140, **box)
    ran = []
    run = nqm.jobs.Job.run
    monkeypatch.setattr(nqm.jobs.Job, "run", lambda self, process, values, *a, **k: ran.append(np.size(values["lr"]))
                        or run(self, process, values, *a, **k))
    ds = answered_best("sgdm", max_cells=70, **box)
    assert ds.attrs["attempts"] == 2 and sum(ran) == ds.attrs["cells_total"] == fresh.attrs["cells"]
    for name in ("steps", "status", "loss", "median_steps", "robust_steps", "lr", "momentum", "round_number"):
        if name in fresh.variables:
            np.testing.assert_array_equal(ds[name].values, fresh[name].values)
    assert {k: v for k, v in ds.attrs.items() if k in fresh.attrs} == fresh.attrs
    with pytest.raises(nqm.NqmError, match="same search"):
        best("sgdm", max_cells=140, reuse=best("sgdm", max_cells=70, **dict(box, max_steps=1000)), **box)


def test_an_answer_on_the_box_edge_is_searched_again_in_a_wider_box():
    narrow = best("sgdm", lr=(0.05, 0.5), momentum=0.5, **SMALL)
    assert misses(narrow) == ["lr on the box's upper edge"]
    ds = answered_best("sgdm", lr=(0.05, 0.5), momentum=0.5, attempts=3, **SMALL)  # 0.5, then 2, then 8 (4× a time)
    assert ds.attrs["answered"] == 1 and ds.attrs["box"] == "lr=0.05:8, momentum=0.5" and 2 < ds.attrs["best_lr"] < 8
    assert answer(ds)["t_star"] < answer(narrow)["t_star"]
    at_zero = best("sgdm", lr=(0.01, 2.0), momentum=(0.0, 0.9), delay=2, max_cells=400, **SMALL)
    assert at_zero.attrs["best_momentum"] < 0.01 or not misses(at_zero)  # m = 0 ends the domain: not a miss


def test_what_still_misses_is_said_and_not_drawn():
    ds = answered_best("sgdm", lr=(50.0, 100.0), momentum=(0.0, 0.5), max_cells=100, **SMALL)
    assert ds.attrs["answered"] == 0 and ds.attrs["miss"] == "no point settled"
    from nqm.search.answers import value
    assert np.isnan(value({"t_star": 12, "answered": False}, "t_star")) and value({"t_star": 12, "answered": True},
                                                                                  "t_star") == 12


def test_best_steps_that_rise_with_the_batch_size_are_no_answer_and_no_critical_batch_size(monkeypatch):
    """Less noise cannot need more steps: a batch size whose best steps exceed a smaller one's is
    searched again and, where it still does, has no answer (a gap), and the curve no critical batch size."""
    real = scaling_module.answered_best
    curve = dict(batch_size=[1, 16, 256, 4096], noise=1.0, lr=(1e-3, 2.0), momentum=0, problem=nqm.zhang(20),
                 max_steps=20_000, progress=False)

    def missing_at_256(method, **search):  # the search at B = 256 "misses": it reports 20 × its steps
        ds = real(method, **search)
        return ds.assign_attrs(best_steps=20 * ds.attrs["best_steps"]) if search["batch_size"] == 256 else ds

    monkeypatch.setattr(scaling_module, "answered_best", missing_at_256)
    ds = scaling("sgd", **curve)
    assert ds.answered.values.tolist() == [1, 1, 0, 1] and "exceed a smaller batch size's" in str(ds.miss.values[2])
    assert np.isnan(ds.steps.values[2]) and np.isfinite(ds.steps.values[[0, 1, 3]]).all()
    assert np.isnan(ds.attrs["critical_batch_size"])
    monkeypatch.setattr(scaling_module, "answered_best", real)
    whole = scaling("sgd", **curve)
    assert whole.answered.values.all() and whole.attrs["critical_batch_size"] == pytest.approx(331.1, abs=0.1)
    assert (np.diff(whole.steps.values) <= 0).all()


# ------------------------------------------------------------------ one method vocabulary

def _method_choices(command: str) -> set:
    parser = build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return set(next(a for a in sub._actions if a.dest == "method").choices)


@pytest.mark.parametrize("command", ["sweep", "trace", "best", "scaling", "threshold"])
def test_every_command_with_a_method_takes_every_registered_name(command):
    assert _method_choices(command) == set(nqm.optimizers.methods()) and "sgd" in nqm.optimizers.methods()


def test_the_exact_mode_takes_every_linear_name():
    linear = {m for m in nqm.optimizers.methods() if nqm.optimizers.make(m).linear} | {"precond"}
    assert _method_choices("expected") == linear and "sgd" in linear


def test_nqm_scaling_runs_sgd(tmp_path, capsys):
    out = tmp_path / "sgd.nc"
    assert main(["scaling", "--method", "sgd", "--lr", "0.01:2", "--batch-size", "1", "16", "--noise", "1",
                 "--dim", "20", "--max-steps", "5000", "--out", str(out)]) == 0
    assert load_dataset(out).attrs["method"] == "sgd" and "critical batch size" in capsys.readouterr().out


def test_sgd_is_sgdm_at_momentum_zero_everywhere():
    kw = dict(lr=[0.1, 0.9], delay=2, problem=nqm.zhang(20), max_steps=500, progress=False)
    a, b = nqm.sweep("sgd", **kw), nqm.sweep("sgdm", momentum=0, **kw)
    np.testing.assert_array_equal(a.steps.values, b.steps.values)
    np.testing.assert_array_equal(a.loss.values, b.loss.values)
    with pytest.raises(nqm.NqmError, match="sgd has no momentum"):
        nqm.sweep("sgd", momentum=0.5, **kw)


# ------------------------------------------------------------------ the search's cost

def test_sgdm_under_delay_is_found_in_no_more_cells_than_a_tenth_of_a_64_grid():
    """The case of the search's cost: the best point of a 64 × 64 grid is T = 441; the search finds as
    good or better in at most 410 cells run (points known not to settle are not run)."""
    ds = best("sgdm", lr=(0.01, 1.5), momentum=(0.0, 0.95), delay=2, noise=0.0, problem=nqm.zhang(200),
              max_steps=20_000, progress=False)
    found = answer(ds)
    assert found["cells"] <= 410 and found["t_star"] <= 441


def _jobs():
    small = dict(method="sgdm", lr=(0.05, 2.0), momentum=0.5, problem=nqm.zhang(10), max_steps=500, max_cells=40)
    return {"a": dict(small, delay=0), "b": dict(small, delay=1)}


def test_searches_another_live_process_claimed_are_left_to_it_and_read_when_it_finishes(tmp_path):
    """Several processes may share a figure's checkpoint: a search another live process has claimed
    is not run here; its outcome is read from the checkpoint once that process writes it."""
    import json
    import os
    import subprocess
    import sys

    from nqm import sharing
    from nqm.search import answers
    checkpoint = str(tmp_path / "searches.json")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "searches.json.claims").write_text(json.dumps({"b": other.pid}))
        theirs = {"t_star": 12345, "cells": 1}  # what the other process found (never computed here)

        def finish():  # the other process writes its outcome and lets its claim go
            with sharing.locked(checkpoint):
                done = json.loads(open(checkpoint).read()) if os.path.exists(checkpoint) else {}
                done["b"] = {"asked": answers._describe(_jobs()["b"]), "outcome": theirs}
                open(checkpoint, "w").write(json.dumps(done))
            sharing._claim(checkpoint, "b", release=True)

        lines = []

        def log(line):  # once this process waits for "b", the other one finishes it
            lines.append(line)
            if line.startswith("waiting"):
                finish()

        found = answers.run(_jobs(), checkpoint=checkpoint, log=log, wait=0.05)
    finally:
        other.kill()
    assert found["b"] == theirs and found["a"]["t_star"] is not None
    assert any(line.startswith("a:") for line in lines) and not any(line.startswith("b:") for line in lines)
    assert any("waiting for 1 piece" in line for line in lines)
    assert not (tmp_path / "searches.json.claims").exists()  # every claim let go


def test_a_claim_whose_process_died_is_taken_over(tmp_path):
    import json
    import subprocess
    import sys

    from nqm.search import answers
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    checkpoint = tmp_path / "searches.json"
    (tmp_path / "searches.json.claims").write_text(json.dumps({"a": dead.pid, "b": dead.pid}))
    lines = []
    found = answers.run(_jobs(), checkpoint=str(checkpoint), log=lines.append, wait=0.05)
    assert sorted(line.split(":")[0] for line in lines) == ["a", "b"] and set(json.loads(checkpoint.read_text())) == {"a", "b"}
    fresh = answers.run(_jobs(), log=lambda line: None)  # no checkpoint, no claims: the same outcomes
    assert [{k: v for k, v in found[key].items() if k != "wall_seconds"} for key in "ab"] == \
        [{k: v for k, v in fresh[key].items() if k != "wall_seconds"} for key in "ab"]
