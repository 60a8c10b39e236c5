"""Every `nqm.…` a guide or the README names resolves as the page uses it: in prose, a module path
that imports and the attributes below it; in a page's Python, the name after only the imports the
page itself makes (``import nqm`` does not import every submodule)."""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
NAME = re.compile(r"\bnqm(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
IMPORT = re.compile(r"^\s*(?:import\s+(nqm(?:\.\w+)*)|from\s+(nqm(?:\.\w+)*)\s+import\s+([\w, ]+))", re.M)

# Resolve names in a fresh interpreter: what it imports is only what each check asks for.
PROBE = r"""
import importlib, json, sys
checks = json.loads(sys.argv[1])
failed = []
for imports, name, lenient in checks:
    try:
        for module in imports:
            importlib.import_module(module)
        parts = name.split(".")
        start = 1
        if lenient:  # prose: the longest prefix that is a module, imported
            for i in range(len(parts), 0, -1):
                try:
                    importlib.import_module(".".join(parts[:i]))
                    start = i
                    break
                except ImportError:
                    continue
        obj = sys.modules["nqm"] if start == 1 else sys.modules[".".join(parts[:start])]
        for part in parts[start:]:
            obj = getattr(obj, part)
    except Exception as exc:
        failed.append([name, type(exc).__name__])
print(json.dumps(failed))
"""


def _checks(page: pathlib.Path) -> list:
    text = page.read_text()
    blocks = list(BLOCK.finditer(text))
    prose = BLOCK.sub("", text)
    checks = [[["nqm"], name, True] for name in sorted(set(NAME.findall(prose))) if name != "nqm.plugins"]
    imported = ["nqm"]
    for block in blocks:
        code = block.group(1)
        for plain, source, names in IMPORT.findall(code):
            imported.append(plain or source)
        used = set(NAME.findall(re.sub(r"^\s*(import|from)\s.*$", "", code, flags=re.M)))
        checks += [[list(dict.fromkeys(imported)), name, False] for name in sorted(used)]
    return checks


def test_every_nqm_name_of_the_guides_resolves_as_the_page_uses_it():
    failed = {}
    for page in PAGES:
        checks = _checks(page)
        if not checks:
            continue
        out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(checks)], capture_output=True, text=True,
                             check=True, timeout=300)
        bad = json.loads(out.stdout.strip().splitlines()[-1])
        if bad:
            failed[page.name] = bad
    assert failed == {}


def test_the_check_sees_a_name_that_is_not_there(tmp_path):
    """A misspelt name fails; a submodule used after only ``import nqm`` resolves (nqm loads its
    submodules on first use: the case the guides had, `nqm.summary.summarize`)."""
    page = tmp_path / "page.md"
    page.write_text("```python\nimport nqm\nnqm.summary.summarise(ds)\nnqm.summary.summarize(ds)\n```\n"
                    "In prose, `nqm.sumary` and `nqm.settling.choose`.\n")
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(_checks(page))], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [["nqm.sumary", "AttributeError"],
                                                               ["nqm.summary.summarise", "AttributeError"]]
