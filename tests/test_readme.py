"""Every ```python block of the README runs as written (in order, one namespace, in a scratch
directory), so the documentation cannot rot."""

import os
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_the_readme_has_python_blocks():
    assert python_blocks()


def test_every_python_block_of_the_readme_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("figures", exist_ok=True)
    namespace = {"__name__": "readme"}
    for number, block in enumerate(python_blocks(), 1):
        exec(compile(block, f"README.md python block {number}", "exec"), namespace)
