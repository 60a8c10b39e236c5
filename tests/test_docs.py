"""The documentation site builds offline with warnings as errors (the command the README gives),
and its API reference names every public object; the build fails on a warning (shown on a page
planted with a broken reference). The build took 12 s alone and 18 s in the suite beside the planted
one (AMD EPYC, 2 cores, 2026-11-25)."""

import importlib
import html
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zlib

import pytest

from test_docstrings import MODULES, public_objects

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")


def build(source: pathlib.Path, out: pathlib.Path, builder: str = "html") -> subprocess.CompletedProcess:
    """``python -m sphinx -W --keep-going -b BUILDER SOURCE OUT``, importing this checkout's nqm."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder, str(source),
                           str(out)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def documented(inventory: pathlib.Path) -> set[str]:
    """The Python objects a Sphinx inventory (``objects.inv``, version 2) names."""
    with inventory.open("rb") as f:
        assert f.readline().startswith(b"# Sphinx inventory version 2")
        for _ in range(3):
            f.readline()
        lines = zlib.decompress(f.read()).decode().splitlines()
    return {line.split(" ", 1)[0] for line in lines if line.split(" ")[1].startswith("py:")}


def public_names() -> set[str]:
    """Every name the reference must hold: ``nqm.__all__``, and each listed module with its public
    functions and classes and every name of its ``__all__``."""
    import nqm

    names = {f"nqm.{name}" for name in nqm.__all__}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names.add(module_name)
        names |= {f"{module_name}.{name}" for name, _ in public_objects(module_name)}
        names |= {f"{module_name}.{name}" for name in getattr(module, "__all__", ())}
    return names


def missing_names(out: pathlib.Path) -> list[str]:
    """The public names the built API reference does not name."""
    return sorted(public_names() - documented(out / "objects.inv"))


def missing_options(out: pathlib.Path) -> list[str]:
    """The commands and options of ``nqm`` the built CLI reference does not show."""
    from nqm.cli import COMMANDS, full_parser

    page = (out / "cli.html").read_text()
    commands = next(a for a in full_parser()._actions if a.dest == "command").choices
    assert list(commands) == [m.NAME for m in COMMANDS]
    return [f"nqm {name} {option}" for name, sub in commands.items() for action in sub._actions
            for option in action.option_strings if option not in page]


def missing_titles(out: pathlib.Path) -> list[str]:
    """The guides whose built page does not hold their own title (a page shadowed by one Sphinx
    makes, as its search page would shadow a guide named search)."""
    missing = []
    for guide in sorted((ROOT / "docs").glob("*.md")):
        text = guide.read_text()
        source = ROOT / "CHANGELOG.md" if "{include} ../CHANGELOG.md" in text else guide  # the changelog page
        title = next(line[2:].strip() for line in source.read_text().splitlines() if line.startswith("# "))
        page = out / f"{guide.stem}.html"
        if not page.is_file() or html.escape(title, quote=False) not in page.read_text():
            missing.append(f"{guide.name}: {title}")
    return missing


def synopsis_gaps(out: pathlib.Path) -> list[str]:
    """The registered methods the CLI page's synopsis of nqm sweep does not offer."""
    from nqm.optimizers import methods

    synopsis = (ROOT / "docs" / "generated" / "cli_synopsis.txt").read_text()
    sweep = synopsis.split("\nnqm ")[0]
    page = html.unescape((out / "cli.html").read_text())
    shown = all(line.strip() in page for line in sweep.splitlines())
    return [m for m in methods() if m not in sweep] + ([] if shown else ["the synopsis is not on the page"])


def missing_claims(out: pathlib.Path) -> list[str]:
    """The figures without a gallery page, and the claims their page does not show."""
    missing = []
    for png in sorted((ROOT / "figures").glob("*.png")):
        page = out / "gallery" / f"{png.stem}.html"
        if not page.is_file() or f"{png.stem}.png" not in page.read_text():
            missing.append(png.stem)
            continue
        claims = png.with_name(f"{png.stem}.claims.json")
        keys = json.loads(claims.read_text())["claims"] if claims.is_file() else {}
        missing += [f"{png.stem}/{key}" for key in keys if f'<span class="pre">{key}</span>' not in page.read_text()]
    return missing


def test_the_site_builds_with_warnings_as_errors_and_holds_every_public_name(tmp_path):
    # One test (not one per check): under pytest-xdist, two builds of docs/ at once would both write
    # its generated pages.
    result = build(ROOT / "docs", tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    for page in ("index", "getting-started", "cli", "api", "gallery/index", "notebooks/01_heatmaps", "changelog"):
        assert (tmp_path / f"{page}.html").is_file(), page
    assert not missing_names(tmp_path), f"not in the API reference: {missing_names(tmp_path)}"
    assert not missing_options(tmp_path), f"not in the CLI reference: {missing_options(tmp_path)}"
    assert not missing_claims(tmp_path), f"not in the gallery: {missing_claims(tmp_path)}"
    assert not missing_titles(tmp_path), f"guides not on their page: {missing_titles(tmp_path)}"
    assert not synopsis_gaps(tmp_path), f"not in the CLI synopsis: {synopsis_gaps(tmp_path)}"


def test_a_warning_fails_the_build(tmp_path):
    for name in ("README.md", "CHANGELOG.md", "figures", "scripts", "notebooks"):  # what the pages read
        (tmp_path / name).symlink_to(ROOT / name)
    source = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", source, ignore=shutil.ignore_patterns("_build", "generated", "gallery", "notebooks"))
    (source / "getting-started.md").write_text((source / "getting-started.md").read_text()
                                               + "\n[a page that is not there](no-such-page.md)\n")
    result = build(source, tmp_path / "out", builder="dummy")  # reads and resolves every page, writes none
    assert result.returncode != 0 and "no-such-page" in result.stdout + result.stderr


def test_a_name_missing_from_the_reference_is_reported(tmp_path):
    entries = b"nqm py:module 0 generated/nqm.html#module-nqm -\nnqm.save py:function 1 generated/nqm.html#$ -\n"
    (tmp_path / "objects.inv").write_bytes(b"# Sphinx inventory version 2\n# Project: nqm\n# Version: 0\n"
                                           b"# The remainder of this file is compressed using zlib.\n"
                                           + zlib.compress(entries))
    missing = missing_names(tmp_path)
    assert "nqm.sweep" in missing and "nqm.sweeps.sweep" in missing
    assert "nqm" not in missing and "nqm.save" not in missing


def test_the_gallery_says_which_definition_of_converged_a_figures_runs_used(tmp_path):
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        generated = importlib.import_module("generated")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    import nqm
    import xarray as xr

    ds = nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=[0.0], problem=nqm.zhang(10), max_steps=300, progress=False)
    settled, literal, old = tmp_path / "s.nc", tmp_path / "l.nc", tmp_path / "o.nc"
    nqm.save(ds, settled)
    nqm.save(ds.assign_attrs(first_passage=1), literal)
    nqm.save(ds.drop_attrs(), old)
    assert generated.definition(settled).startswith("**settled**")
    assert "asked for" in generated.definition(literal)
    assert "predate" in generated.definition(old)
    nqm.save(xr.Dataset({"threshold": ("delay", [1.0, 0.5])}), tmp_path / "t.nc")
    assert generated.definition(tmp_path / "t.nc") is None  # no runs, no definition
    searches = tmp_path / "f.json"
    searches.write_text(json.dumps({"searches": {"a": {"regime": {"first_passage": 0}}}}))
    assert generated.definition(searches).startswith("**settled**")


def test_the_your_own_method_page_runs_as_written(tmp_path):
    """docs/your-method.md's code, run as a script: it registers its method, sweeps, derives a
    threshold, searches and sweeps the expected loss exactly, and prints each answer."""
    page = (ROOT / "docs" / "your-method.md").read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", page, flags=re.S))
    script = tmp_path / "qhm.py"
    script.write_text(code)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=path, NQM_CPU_DEVICES="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["T* of qhm", "qhm's threshold at m = 0.9, D = 4", "fastest qhm",
                                                      "expected T* of qhm at noise 0.05"]
    assert "nan" not in result.stdout


def test_the_your_own_model_page_runs_as_written(tmp_path):
    """docs/your-model.md's code, run as a script: it measures a least-squares model's NQM and
    trains the model under delay; the model's largest stable lr of the grid lies within one grid
    step below the NQM's derived boundary (the model is a quadratic: the boundary is the same)."""
    page = (ROOT / "docs" / "your-model.md").read_text()
    script = tmp_path / "model.py"
    script.write_text("\n".join(re.findall(r"```python\n(.*?)```", page, flags=re.S)))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=path, NQM_CPU_DEVICES="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    edge, stable = (float(x) for x in re.findall(r"lr (\d\.\d+)", result.stdout.splitlines()[-1]))
    assert stable <= edge < stable * 100 ** (1 / 11), result.stdout
