"""Notebooks and figure scripts run at their smoke size, so they cannot rot."""

import os
import pathlib
import subprocess
import sys

import jupytext
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
SCRIPTS = sorted((ROOT / "scripts").glob("fig*.py"))


def _run(args, tmp_path):
    env = dict(os.environ, NQM_SMOKE="1", MPLBACKEND="Agg", NQM_CPU_DEVICES="2")
    result = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_at_smoke_size(notebook, tmp_path):
    _run([str(notebook)], tmp_path)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_paired_ipynb_is_in_sync(notebook):
    paired = notebook.with_suffix(".ipynb")
    assert paired.exists(), f"run: jupytext --to ipynb {notebook.relative_to(ROOT)}"
    sources = lambda nb: [cell.source for cell in nb.cells]
    assert sources(jupytext.read(paired)) == sources(jupytext.read(notebook))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_figure_script_runs_at_smoke_size(script, tmp_path):
    out = tmp_path / f"{script.stem}.png"
    _run([str(script), "--smoke", "--out", str(out)], tmp_path)
    assert out.stat().st_size > 5_000
