"""Every ```python block of the README and of the getting-started guide runs as written (in order,
one namespace per page, in a scratch directory), so the front pages cannot rot; the README stays a
front page (under 200 lines: what nqm is, the two commands, a tour, results in brief, the
documentation)."""

import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]


def python_blocks(page: pathlib.Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_page_has_python_blocks(page):
    assert python_blocks(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_of_the_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("figures", exist_ok=True)
    namespace = {"__name__": "readme"}
    for number, block in enumerate(python_blocks(page), 1):
        exec(compile(block, f"{page.name} python block {number}", "exec"), namespace)


def test_the_readme_is_a_front_page_whose_commands_are_the_guides():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    commands = re.findall(r"```bash\n(.*?)\n```", readme, re.S)[:2]
    guide = (ROOT / "docs" / "getting-started.md").read_text()
    assert len(commands) == 2 and all(command in guide for command in commands)
    assert "](docs/results.md)" in readme and "](your-method.md)" in guide and "](your-model.md)" in guide
