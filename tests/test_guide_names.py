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

# Resolve names in a fresh interpreter: what it imports of nqm is only what each page's checks ask
# for. The packages nqm stands on are imported once; each page is then checked in a child forked
# from that interpreter, which holds no module of nqm until its checks import one.
PROBE = r"""
import importlib, json, os, sys
import jax, matplotlib, numpy, scipy, xarray  # noqa: F401  (not nqm: what every page's imports load)
assert not any(name == "nqm" or name.startswith("nqm.") for name in sys.modules)
pages = json.loads(sys.argv[1])


def check(checks):
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
    return failed


found = {}
for page, checks in pages.items():
    read, write = os.pipe()
    if os.fork() == 0:  # the child: this page's checks alone
        os.close(read)
        os.write(write, json.dumps(check(checks)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        found[page] = json.loads(pipe.read())
    os.wait()
print(json.dumps(found))
"""


def _probe(pages: dict) -> dict:
    """``{page: [[name, error], …]}``: the names of each page's checks that do not resolve."""
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(pages)], capture_output=True, text=True, check=True,
                         timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


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
    found = _probe({page.name: _checks(page) for page in PAGES})
    assert len(found) == len(PAGES) and {page: bad for page, bad in found.items() if bad} == {}


def test_the_check_sees_a_name_that_is_not_there(tmp_path):
    """A misspelt name fails; a submodule used after only ``import nqm`` resolves (nqm loads its
    submodules on first use: the case the guides had, `nqm.summary.summarize`)."""
    page = tmp_path / "page.md"
    page.write_text("```python\nimport nqm\nnqm.summary.summarise(ds)\nnqm.summary.summarize(ds)\n```\n"
                    "In prose, `nqm.sumary` and `nqm.settling.choose`.\n")
    assert _probe({"page.md": _checks(page)}) == {"page.md": [["nqm.sumary", "AttributeError"],
                                                             ["nqm.summary.summarise", "AttributeError"]]}
