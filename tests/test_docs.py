"""The documentation site builds offline with warnings as errors (the command the README gives),
and its API reference names every public object; the build fails on a warning (shown on a page
planted with a broken reference)."""

import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import time
import zlib

import pytest

from test_docstrings import MODULES, public_objects

ROOT = pathlib.Path(__file__).resolve().parents[1]
pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")


def build(source: pathlib.Path, out: pathlib.Path) -> subprocess.CompletedProcess:
    """``python -m sphinx -W --keep-going -b html SOURCE OUT``, importing this checkout's nqm."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(source),
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


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    start = time.perf_counter()
    result = build(ROOT / "docs", out)
    seconds = time.perf_counter() - start
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    return out, seconds


def test_the_site_builds_with_warnings_as_errors_within_a_minute(site):
    out, seconds = site
    for page in ("index", "getting-started", "cli", "api", "gallery/index", "notebooks/01_heatmaps", "changelog"):
        assert (out / f"{page}.html").is_file(), page
    assert seconds < 60, f"the documentation took {seconds:.0f} s to build"


def test_every_public_name_is_in_the_api_reference(site):
    out, _ = site
    missing = sorted(public_names() - documented(out / "objects.inv"))
    assert not missing, f"not in the API reference: {missing}"


def test_the_cli_reference_has_every_command_and_option(site):
    from nqm.cli import COMMANDS, full_parser

    out, _ = site
    page = (out / "cli.html").read_text()
    parser = full_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    assert [m.NAME for m in COMMANDS] == list(subparsers)
    for name, sub in subparsers.items():
        for action in sub._actions:
            for option in action.option_strings:
                assert option in page, f"nqm {name} {option} is not in the CLI reference"


def test_every_figure_has_a_gallery_page_with_its_claims(site):
    import json

    out, _ = site
    for png in sorted((ROOT / "figures").glob("*.png")):
        page = (out / "gallery" / f"{png.stem}.html").read_text()
        assert f"{png.stem}.png" in page
        claims = png.with_name(f"{png.stem}.claims.json")
        if claims.is_file():
            for key in json.loads(claims.read_text())["claims"]:
                assert f"<code class=\"docutils literal notranslate\"><span class=\"pre\">{key}</span></code>" in page, key


def test_a_warning_fails_the_build(tmp_path):
    for name in ("README.md", "CHANGELOG.md", "figures", "scripts", "notebooks"):  # what the pages read
        (tmp_path / name).symlink_to(ROOT / name)
    source = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", source, ignore=shutil.ignore_patterns("_build", "generated", "gallery", "notebooks"))
    (source / "getting-started.md").write_text((source / "getting-started.md").read_text()
                                               + "\n[a page that is not there](no-such-page.md)\n")
    result = build(source, tmp_path / "html")
    assert result.returncode != 0 and "no-such-page" in result.stdout + result.stderr
