"""Progress wherever the user is: a sweep run in a real Jupyter kernel shows its bar in the cell's
output (a widget, or text where ipywidgets is missing); a run whose stderr is a log prints a line a
while, none when it ends sooner; a quiet run shows none."""

import os
import pathlib

import pytest

import nqm
from nqm import progress

ROOT = pathlib.Path(__file__).resolve().parents[1]
SWEEP = ("import nqm\n"
         "ds = nqm.sweep('sgdm', lr=[0.1, 0.5], momentum=[0.0, 0.5], max_steps=300, problem=nqm.zhang(20){quiet})\n"
         "print('status', ds.status.values.ravel().tolist())")


def _bars(outputs) -> list:
    """The progress bars among a cell's outputs: tqdm's widget, or its text on stderr."""
    widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    text = [o for o in outputs if o.get("name") == "stderr" and "cell" in o.get("text", "") and "%|" in o["text"]]
    return widgets + text


def _execute(source: str, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # this checkout's nqm
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("NQM_CPU_DEVICES", "1")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return notebook.cells[0].outputs


def test_a_sweep_in_a_kernel_shows_its_bar_and_a_quiet_one_none(tmp_path, monkeypatch):
    outputs = _execute(SWEEP.format(quiet="") + "\n" + SWEEP.format(quiet=", progress=False"), tmp_path, monkeypatch)
    printed = [o["text"] for o in outputs if o.get("name") == "stdout"]
    assert "status" in "".join(printed)  # the cell ran
    assert len(_bars(outputs)) >= 1, outputs
    # the quiet sweep printed after the first: no bar between its status line and the end
    assert not _bars(outputs[[i for i, o in enumerate(outputs) if o.get("name") == "stdout"][0] + 1:])


def test_in_a_log_a_bar_prints_a_line_a_while_and_nothing_when_short_or_quiet(capsys, monkeypatch):
    import time

    assert not progress.in_kernel()  # and stderr is captured: a log, not a terminal
    with progress.bar(total=3, desc="cells") as short:
        short.update(3)
    with progress.bar(False, total=3) as quiet:
        quiet.update(3)
    assert quiet.disable and capsys.readouterr().err == ""  # the short bar ended before its first line
    monkeypatch.setattr(progress, "LOG_EVERY", 0.2)
    with progress.bar(total=8, desc="steps", leave=False) as long:
        for _ in range(8):
            time.sleep(0.1)
            long.update(1)
    lines = capsys.readouterr().err.splitlines(keepends=True)
    assert 1 <= len(lines) <= 8, lines  # the first after 0.2 s of at least 0.8, then at most one an update
    assert all(line.startswith("steps: ") and line.endswith("\n") and "\r" not in line for line in lines)
    counts = [int(line.split("|")[2].split("/")[0]) for line in lines]  # "steps:  25%|##  | 2/8 [...]"
    assert counts == sorted(set(counts))


def test_a_sweeps_bar_says_when_settling_runs_go_past_the_budget_and_how_far_they_may():
    from nqm.engine.observers import Progress

    class Bar:
        def update(self, n):
            pass

        def set_postfix_str(self, text, refresh=True):
            self.text = text

    shared = Bar()
    observer = Progress("D=0 seed=0", bar=shared, label="settling", limit=8_000_000)
    observer.total = 500_000
    observer.progress(400_000, 0, 9, 0)
    assert shared.text == "D=0 seed=0: step 400,000/500,000, 9 running"
    observer.progress(600_000, 0, 3, 3)
    assert shared.text == ("D=0 seed=0: step 600,000, past the 500,000-step budget (at most 8,000,000), 3 running "
                           "(3 settling)")


def test_a_sweeps_bar_states_its_work_limit(capsys, monkeypatch):
    """A sweep whose cells settle says in its bar how far past the budget they may go: work_limit × budget."""
    monkeypatch.setattr(progress, "LOG_EVERY", 0.0)  # a log's line at every update
    nqm.sweep("ab", lr=[0.3], momentum=[0.5], rho=0.5, problem=nqm.zhang(20), max_steps=200, chunk_steps=50,
              work_limit=9, progress=True)
    assert "at most 9,000" in capsys.readouterr().err
