"""Notebooks and figure scripts run at their smoke size, so they cannot rot; a figure script writes
its data beside the PNG and redraws the same figure from that data alone."""

import json
import os
import pathlib
import re
import runpy
import subprocess
import sys

import jupytext
import pytest
import xarray as xr

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.py"))
SCRIPTS = sorted((ROOT / "scripts").glob("fig*.py"))

# Runs a script with --redraw, then fails unless it exited cleanly without ever importing JAX (so
# nothing was simulated: the engine cannot run without it).
REDRAW = """
import runpy, sys
script, out = sys.argv[1:]
sys.argv = [script, "--redraw", "--out", out]
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
assert "jax" not in sys.modules, "--redraw imported JAX"
"""


def _run(args, tmp_path):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # this checkout's nqm
    env = dict(os.environ, NQM_SMOKE="1", MPLBACKEND="Agg", NQM_CPU_DEVICES="2", PYTHONPATH=path)
    result = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _run_here(args, tmp_path, monkeypatch):
    """Run a script in this process (JAX imported once, compiled programs shared with the other
    tests), as ``python SCRIPT ARGS`` would from ``tmp_path``, at the smoke size."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NQM_SMOKE", "1")
    monkeypatch.setattr(sys, "argv", [str(a) for a in args])
    monkeypatch.syspath_prepend(str(ROOT))
    try:
        runpy.run_path(str(args[0]), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None), f"{args[0]} exited with {exc.code}"
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_at_smoke_size(notebook, tmp_path, monkeypatch):
    _run_here([notebook], tmp_path, monkeypatch)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_paired_ipynb_is_in_sync(notebook):
    paired = notebook.with_suffix(".ipynb")
    assert paired.exists(), f"run: jupytext --to ipynb {notebook.relative_to(ROOT)}"
    sources = lambda nb: [cell.source for cell in nb.cells]
    assert sources(jupytext.read(paired)) == sources(jupytext.read(notebook))


def _regime(data_path):
    if data_path.suffix == ".nc":
        with xr.open_dataset(data_path, engine="h5netcdf") as ds:
            return dict(ds.attrs)
    return json.loads(data_path.read_text())["regime"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_figure_script_runs_at_smoke_size_and_redraws_from_its_data(script, tmp_path, monkeypatch):
    out = tmp_path / f"{script.stem}.png"
    _run_here([script, "--smoke", "--out", out], tmp_path, monkeypatch)
    assert out.stat().st_size > 5_000
    data = [out.with_suffix(s) for s in (".nc", ".json") if out.with_suffix(s).exists()]
    assert len(data) == 1, "one data file beside the PNG"
    regime = _regime(data[0])
    assert regime["figure"] == script.stem and regime["size"] == "smoke" and regime["wall_seconds"] >= 0
    claims_path = tmp_path / f"{script.stem}.claims.json"
    claims = json.loads(claims_path.read_text())
    assert claims["figure"] == script.stem and claims["data"] == data[0].name
    assert not list(tmp_path.glob("*.partial*")), "the checkpoint and the files beside it are removed"

    monkeypatch.undo()  # the redraw runs in a fresh process, where importing JAX would show
    drawn = out.read_bytes()
    out.unlink()
    claims_path.unlink()
    _run(["-c", REDRAW, str(script), str(out)], tmp_path)
    assert out.read_bytes() == drawn  # the figure is always drawn from the data as written
    assert json.loads(claims_path.read_text()) == claims


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_prose_types_no_result(notebook):
    """A notebook's results are printed by its cells, never typed into its prose, where a rerun
    would leave them stale: every number of two or more digits in a markdown cell is one of the
    notebook's own settings (it appears in a code cell) or names a figure."""
    cells = jupytext.read(notebook).cells
    code = "\n".join(c.source for c in cells if c.cell_type == "code")
    for cell in (c for c in cells if c.cell_type == "markdown"):
        text = re.sub(r"`[^`]*`|\b(?:Fig\.|Figures?)\s+\d+", "", cell.source)  # commands; figure names
        for number in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", text):
            number = number.rstrip(",")
            assert len(number.replace(",", "").replace(".", "")) < 2 or number in code, (number, cell.source[:200])
