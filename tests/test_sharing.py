"""Work shared by processes (nqm.sharing): the last to leave clears what they shared, an
interrupted one leaves it to resume from, and a figure's checkpoint goes with the files beside it."""

import json
import subprocess
import sys

import pytest

from nqm import sharing
from nqm.plots.script import remove_checkpoint


@pytest.fixture
def other():
    """Another live process on this host."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


def test_without_a_shared_file_every_key_comes_in_order():
    assert list(sharing.each(["b", "a", "c"], None)) == ["b", "a", "c"]


def test_keys_another_process_holds_come_last_once_it_lets_them_go(tmp_path, other):
    path = str(tmp_path / "work.json")
    (tmp_path / "work.json.claims").write_text(json.dumps({"a": other}))
    lines = []

    def log(line):  # the other process finishes "a" once this one waits for it
        lines.append(line)
        sharing._claim(path, "a", release=True)

    assert list(sharing.each(["a", "b"], path, wait=0.01, log=log)) == ["b", "a"]
    assert lines == ["waiting for 1 piece(s) of work that another process does"]
    assert not (tmp_path / "work.json.claims").exists()


def test_a_dead_process_claim_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = str(tmp_path / "work.json")
    (tmp_path / "work.json.claims").write_text(json.dumps({"a": dead.pid}))
    assert list(sharing.each(["a", "b"], path, log=pytest.fail)) == ["a", "b"]


def test_only_the_last_member_to_leave_clears_and_an_interrupted_one_never_does(tmp_path, other):
    path, cleared = str(tmp_path / "work.json"), []
    (tmp_path / "work.json.members").write_text(json.dumps([other]))
    with sharing.member(path, clear=lambda: cleared.append("with another")):
        pass
    assert cleared == [] and json.loads((tmp_path / "work.json.members").read_text()) == [other]
    (tmp_path / "work.json.members").unlink()
    with pytest.raises(KeyboardInterrupt), sharing.member(path, clear=lambda: cleared.append("interrupted")):
        raise KeyboardInterrupt
    assert cleared == []
    with sharing.member(path, clear=lambda: cleared.append("last")):
        assert json.loads((tmp_path / "work.json.members").read_text()) != []
    assert cleared == ["last"] and not (tmp_path / "work.json.members").exists()


def test_a_figure_checkpoint_goes_with_the_files_its_pieces_keep_and_nothing_else(tmp_path):
    names = ["fig.nc.partial", "fig.nc.partial.sgdm", "fig.nc.partial.sgdm.cells.npz", "fig.nc.partial.seconds",
             "fig.nc.partial.claims", "fig.nc.partialx", "fig.nc", "other.nc.partial"]
    for name in names:
        (tmp_path / name).write_text("x")
    remove_checkpoint(str(tmp_path / "fig.nc.partial"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.nc", "fig.nc.partialx", "other.nc.partial"]


def test_finished_pieces_are_kept_whole_and_read_back_bit_for_bit(tmp_path):
    import numpy as np
    import xarray as xr

    from nqm.errors import NqmError
    path = str(tmp_path / "curves.partial")
    curve = xr.Dataset({"steps": ("b", np.array([410.0, np.nan, 97.5]))}, attrs={"critical_batch_size": 12.5})
    assert sharing.kept(path, "ab.d4") is None
    sharing.keep(path, "sgdm.d4", curve * 2)
    assert sharing.keep(path, "ab.d4", curve) is curve
    for key, want in (("ab.d4", curve), ("sgdm.d4", curve * 2)):
        back = sharing.kept(path, key)
        assert back.steps.values.tobytes() == want.steps.values.tobytes() and back.attrs == want.attrs
    assert sharing.kept(path, "ab.d16") is None
    (tmp_path / "curves.partial").write_bytes(b"not a zip")
    with pytest.raises(NqmError, match="delete it to start over"):
        sharing.kept(path, "ab.d4")


TOY = '''
import sys, time
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import xarray as xr
from nqm import sharing
from nqm.plots.script import FigureScript

def compute(smoke, checkpoint=None):
    done = {}
    for key in sharing.each(["a", "b", "c", "d"], checkpoint, wait=0.05):
        found = sharing.kept(checkpoint, key)
        if found is None:  # a piece takes a while, so that both processes have some
            time.sleep(0.5)
            with open(sys.argv[-1], "a") as log:
                log.write(key + "\\n")
            found = sharing.keep(checkpoint, key, xr.Dataset({"x": ("i", [float(ord(key))])}))
        done[key] = float(found.x.values[0])
    return {"values": done}

main = FigureScript("toy", compute, lambda data: plt.figure(), checkpoint=True).main
raise SystemExit(main(sys.argv[1:-1]))
'''


def test_a_figure_started_twice_does_each_piece_once_and_both_write_it_whole(tmp_path):
    """Two processes of one figure script: every piece is done by exactly one of them, each
    writes the whole figure, and the checkpoint goes only when the last one is done (a process
    that cleared it early would make the other redo a piece)."""
    script, log, png = tmp_path / "toy.py", tmp_path / "done.log", tmp_path / "toy.png"
    script.write_text(TOY)
    runs = [subprocess.Popen([sys.executable, str(script), "--out", str(png), str(log)]) for _ in range(2)]
    assert [run.wait(timeout=300) for run in runs] == [0, 0]
    assert sorted(log.read_text().split()) == ["a", "b", "c", "d"]
    assert json.loads((tmp_path / "toy.json").read_text())["values"] == {k: float(ord(k)) for k in "abcd"}
    assert not list(tmp_path.glob("*.partial*"))
