"""Pages generated from the repository's files when the site is built, so that they cannot drift
from them (they are not committed: ``docs/.gitignore``).

* ``gallery/``: one page per committed figure ``figures/NAME.png``: the image, what its script
  ``scripts/NAME.py`` draws (the script's docstring), the commands that make it, its question,
  regime and answer (the section of the documentation marked ``<!-- figure:NAME -->`` …
  ``<!-- /figure -->``, included, not copied), its claims (``figures/NAME.claims.json``) and its
  data file, and which definition of *converged* its runs used (read from the data file).
  ``quickstart.png`` is the README's main job.
* ``notebooks/``: the notebooks of ``notebooks/``, shown with their committed outputs.
"""

from __future__ import annotations

import ast
import json
import math
import pathlib
import re
import shutil

import h5py

DOCS = pathlib.Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
MARKER = re.compile(r"<!-- figure:(\w+) -->")


def _write(path: pathlib.Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (an unchanged page is not rebuilt)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _escape(text: str) -> str:
    """Markdown's special characters escaped outside code spans (inside one a backslash would show)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else re.sub(r"([*_\\<>\[\]])", r"\\\1", part) for part in parts)


def synopsis(target: pathlib.Path) -> None:
    """Every command's usage line, as the parser that runs it prints it: the synopsis of the CLI page."""
    from nqm.cli import full_parser

    commands = next(a for a in full_parser()._actions if a.dest == "command").choices
    lines = [sub.format_usage().removeprefix("usage: ").rstrip() for sub in commands.values()]
    _write(target, "\n".join(lines) + "\nnqm --version\n")


def _number(value) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return f"`{json.dumps(value)}`"


def _readme_lines() -> tuple[dict, str]:
    """docs/results.md's one-line description of each figure, and the README's main job's command."""
    readme = (ROOT / "README.md").read_text()
    table = (DOCS / "results.md").read_text()
    rows = dict(re.findall(r"^\| `figures/(\w+)\.png` \| `scripts/\w+\.py` \| (.*) \|$", table, flags=re.M))
    job = re.search(r"^```bash\n(pip install -e \. && nqm sweep .*)\n```", readme, flags=re.M).group(1)
    return rows, job


def _sections() -> dict:
    """Figure name → the page (relative to docs/) holding its marked section."""
    found = {}
    for page in sorted(DOCS.glob("*.md")):
        for name in MARKER.findall(page.read_text()):
            if name in found:
                raise ValueError(f"figure {name} is marked in both {found[name]} and {page.name}")
            found[name] = page.name
    return found


DEFINITIONS = {
    0: "**settled** — a run converged when it reached the target and stays below it; T is its first passage",
    1: "**first passage** — asked for (`first_passage=True`): a run that touched the target counted",
    None: "**first passage** — the data predate the settled definition: a run that touched the target "
          "counted, whether or not it stayed",
}


def definition(data: pathlib.Path) -> str | None:
    """Which definition of converged a figure's runs used, from its data file (``None``: it has no
    runs with a status, e.g. thresholds or traces)."""
    if data.suffix == ".json":
        searches = json.loads(data.read_text()).get("searches") or {}
        flags = {s.get("regime", {}).get("first_passage") for s in searches.values()}
    else:
        with h5py.File(data, "r") as f:
            if "status" not in f:
                return None
            flags = {int(f.attrs["first_passage"][()].item()) if "first_passage" in f.attrs else None}
    if not flags:
        return None
    return "; ".join(DEFINITIONS[flag] for flag in sorted(flags, key=str)) + "."


def figure_page(name: str, described: dict, sections: dict, job: str) -> str:
    """The Markdown of one figure's page."""
    script = ROOT / "scripts" / f"{name}.py"
    claims_path = ROOT / "figures" / f"{name}.claims.json"
    title = described.get(name, "the README's main job" if name == "quickstart" else name)
    out = [f"# {name}", "", f"*{title}*", "", f"![{name}](../../figures/{name}.png)", ""]
    if script.is_file():
        doc = ast.get_docstring(ast.parse(script.read_text())) or ""
        out += ["## What it shows", "", _escape(doc), "",
                "## How it is made", "",
                f"`scripts/{name}.py` computes the data, writes it beside the PNG and draws the figure "
                "from it:", "",
                "```bash",
                f"python scripts/{name}.py            # the committed figure, at its full size",
                f"python scripts/{name}.py --smoke    # a toy size, in seconds (what the tests run)",
                f"python scripts/{name}.py --redraw   # redraw from the committed data, without JAX",
                "```", ""]
    else:
        out += ["## How it is made", "", "The README's main job:", "", "```bash", job, "```", ""]
    if name in sections:
        out += ["## Question, regime and answer", "",
                f"From [{sections[name].removesuffix('.md')}](../{sections[name]}):", "",
                f"```{{include}} ../{sections[name]}",
                f":start-after: <!-- figure:{name} -->",
                ":end-before: <!-- /figure -->",
                "```", ""]
    if claims_path.is_file():
        record = json.loads(claims_path.read_text())
        out += ["## Claims", "",
                f"`figures/{name}.claims.json`, computed from the data file by the script's `claims(data)`; "
                "every number the documentation quotes from this figure is one of them "
                "(`tests/test_readme_numbers.py`).", "",
                "| claim | value |", "| --- | --- |"]
        out += [f"| `{key}` | {_number(value)} |" for key, value in record["claims"].items()]
        out += ["", "## Data", "", f"{{download}}`figures/{record['data']} <../../figures/{record['data']}>`", ""]
        converged = definition(ROOT / "figures" / record["data"])
        if converged:
            out += [f"Converged means, in these runs: {converged}", ""]
    return "\n".join(out)


def gallery(target: pathlib.Path) -> list[str]:
    """Write the gallery's pages into ``target``; returns the figure names."""
    described, job = _readme_lines()
    sections = _sections()
    names = sorted(p.stem for p in (ROOT / "figures").glob("*.png"))
    for name in names:
        data = [p for p in (ROOT / "figures").glob(f"{name}.*") if p.suffix in (".nc", ".json")
                and not p.name.endswith(".claims.json")]
        if name != "quickstart" and not ((ROOT / "scripts" / f"{name}.py").is_file() and data):
            raise ValueError(f"figures/{name}.png has no script scripts/{name}.py or no data file")
        _write(target / f"{name}.md", figure_page(name, described, sections, job))
    index = ["# Gallery", "",
             "One page per committed figure of `figures/`, generated from the figure, its script, its "
             "claims and its data file when the site is built.", "",
             "| figure | what it shows |", "| --- | --- |"]
    described.setdefault("quickstart", "the README's main job")
    index += [f"| [{name}]({name}.md) | {described[name]} |" for name in names]
    index += ["", "```{toctree}", ":hidden:", "", *names, "```", ""]
    _write(target / "index.md", "\n".join(index))
    for stale in target.glob("*.md"):
        if stale.stem not in names and stale.stem != "index":
            stale.unlink()
    return names


def notebooks(target: pathlib.Path) -> None:
    """Copy the committed notebooks (with their outputs) into ``target``, with an index."""
    names = []
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        target.mkdir(parents=True, exist_ok=True)
        copy = target / notebook.name
        if not copy.exists() or copy.read_bytes() != notebook.read_bytes():
            shutil.copyfile(notebook, copy)
        names.append(notebook.stem)
    _write(target / "index.md", "\n".join([
        "# Notebooks", "",
        "The notebooks of `notebooks/`, with the outputs they were committed with (not re-run here). "
        "Each is paired with a jupytext `py:percent` file; `NQM_SMOKE=1` runs them at a tiny size.", "",
        "```{toctree}", ":maxdepth: 1", "", *names, "```", ""]))


def generate(app) -> None:
    synopsis(DOCS / "generated" / "cli_synopsis.txt")
    gallery(DOCS / "gallery")
    notebooks(DOCS / "notebooks")


def setup(app):
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
