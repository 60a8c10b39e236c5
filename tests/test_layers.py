"""The package's structure as a contract: the layers of ``pyproject.toml``'s import-linter section
(docs/architecture.md explains them) hold, no module imports itself back through others, and a
wrong import is caught — so the next change that breaks the layering fails the suite."""

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import grimp
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Prints the import cycles of the package nqm found on sys.path, one per line.
CYCLES = """
import grimp

graph = grimp.build_graph("nqm")
index, low, stack, on, found = {}, {}, [], set(), []

def visit(module):  # Tarjan's strongly connected components
    index[module] = low[module] = len(index)
    stack.append(module)
    on.add(module)
    for other in graph.find_modules_directly_imported_by(module):
        if other not in index:
            visit(other)
            low[module] = min(low[module], low[other])
        elif other in on:
            low[module] = min(low[module], index[other])
    if low[module] == index[module]:
        component = []
        while not component or component[-1] != module:
            component.append(stack.pop())
            on.discard(component[-1])
        if len(component) > 1:
            found.append(sorted(component))

for module in sorted(graph.modules):
    if module not in index:
        visit(module)
for component in found:
    print(" ".join(component))
"""


def _run(args, where):
    env = dict(os.environ, PYTHONPATH=str(where))  # the package in `where`, whatever is installed
    return subprocess.run([sys.executable, *args], cwd=where, env=env, capture_output=True, text=True, timeout=120)


def _lint(where):
    return _run(["-c", "import sys; from importlinter.cli import lint_imports_command as lint; "
                 "sys.argv = ['lint-imports', '--no-cache', 'pyproject.toml']; lint()"], where)


def _copy_with(tmp_path, module: str, line: str) -> pathlib.Path:
    """This checkout's package and contracts in ``tmp_path``, with ``line`` appended to ``module``."""
    shutil.copytree(ROOT / "nqm", tmp_path / "nqm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + "\n" + line + "\n")
    return tmp_path


def test_the_layers_hold():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_the_analysis_starts_without_the_engine():
    """The exact mode and the derived thresholds run without loading the Monte Carlo engine (its
    runs are behind the JAX boundary of ``Job.run`` and ``jobs.job``'s check)."""
    code = "import sys, nqm.expected, nqm.thresholds.derived; print('nqm.engine' in sys.modules)"
    result = _run(["-c", code], ROOT)
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stdout + result.stderr[-2000:]


def test_no_module_imports_itself_back():
    result = _run(["-c", CYCLES], ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == ""


def test_an_engine_module_that_imports_the_command_line_fails_the_contract(tmp_path):
    where = _copy_with(tmp_path, "nqm.engine.step", "from nqm import cli  # noqa: E402,F401  (the mistake)")
    result = _lint(where)
    assert result.returncode == 1 and "BROKEN" in result.stdout
    assert "nqm.engine.step -> nqm.cli" in result.stdout
    cycles = _run(["-c", CYCLES], where)
    assert "nqm.cli" in cycles.stdout and "nqm.engine.step" in cycles.stdout  # and it closes a circle


def test_the_polynomials_may_not_reach_jax_nor_the_exact_mode_a_job(tmp_path):
    where = _copy_with(tmp_path, "nqm.thresholds.polynomials", "import jax  # noqa: E402,F401  (the mistake)")
    api = where / "nqm" / "expected" / "api.py"
    api.write_text(api.read_text() + "\nfrom nqm import jobs  # noqa: E402,F401  (the other mistake)\n")
    result = _lint(where)
    assert result.returncode == 1 and "nqm.thresholds.polynomials is not allowed to import jax" in result.stdout
    assert "nqm.expected is not allowed to import nqm.jobs" in result.stdout


def _layers():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]


def test_the_contract_names_every_module_in_at_most_twelve_layers():
    """Every module of nqm sits in a layer (or is a package), so a new module cannot slip past the
    contract unplaced; and the layers stay few enough to read."""
    layers = _layers()
    assert len(layers) <= 12, f"{len(layers)} layers: join neighbours that are one concern"
    names = [name.strip() for layer in layers for name in re.split(r"[|:]", layer)]
    graph = grimp.build_graph("nqm")
    placed = lambda m: any(m == name or m.startswith(name + ".") for name in names)
    packages = {"nqm", "nqm.__main__", "nqm.thresholds", "nqm.transfer"}
    assert sorted(m for m in graph.modules if not placed(m) and m not in packages) == []


def test_the_aliases_of_0_2_are_gone():
    """0.3.0 dropped the names 0.2.0 kept for one version (CHANGELOG): an old import fails loudly."""
    import importlib

    import nqm.sweeps

    for old in ("nqm.stability", "nqm.linear", "nqm.boundary", "nqm.plots.searches"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
    for name in ("t_star", "cell_uids", "load", "save"):
        assert not hasattr(nqm.sweeps, name)


def test_the_architecture_guide_names_every_module():
    """docs/architecture.md's map of the layers names every module: a top-level one by its dotted
    name, one inside a package by its file's name, so a reader finds every file there."""
    guide = (ROOT / "docs" / "architecture.md").read_text()
    unnamed = []
    for path in sorted((ROOT / "nqm").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] in ("__init__", "__main__"):
            continue
        named = ".".join(parts) in guide if len(parts) == 2 else re.search(rf"\b{parts[-1]}\b", guide)
        if not named:
            unnamed.append(".".join(parts))
    assert unnamed == []


def test_modules_and_functions_stay_readable():
    """Every module of nqm is at most 450 lines and every function's code (its docstring aside) at
    most 60: a file reads in one sitting, a function in one screen."""
    import ast

    long = []
    for path in sorted((ROOT / "nqm").rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 450:
            long.append(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body[1:] if ast.get_docstring(node) is not None else node.body
                if body and body[-1].end_lineno - body[0].lineno + 1 > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert long == []


def _modules() -> set[str]:
    """The dotted name of every module of nqm: one per file, a package's ``__init__.py`` by the
    package's name."""
    names = set()
    for path in (ROOT / "nqm").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _imported_by_path(tree, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``tree`` imports by their dotted path: ``import nqm.a.b``,
    ``from nqm.a.b import x``, ``from nqm.a import b`` (b a submodule: both ``nqm.a`` and ``nqm.a.b``
    are named). A package counts as imported by the path of any module in it (``nqm.a`` by ``import
    nqm.a.b``: its ``__init__.py`` runs first, and its name is the path's prefix). ``nqm.__main__``
    counts where the code runs ``python -m nqm`` (a list or tuple with ``"-m", "nqm"`` in a row)."""
    paths = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            paths.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            paths.add(node.module)
            paths.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, (ast.List, ast.Tuple)):
            words = [item.value if isinstance(item, ast.Constant) else None for item in node.elts]
            if any(words[i:i + 2] == ["-m", "nqm"] for i in range(len(words) - 1)):
                paths.add("nqm.__main__")
    found = {".".join(path.split(".")[:end]) for path in paths for end in range(1, path.count(".") + 2)}
    return found & modules


def _test_files(tests: pathlib.Path) -> dict[str, ast.Module]:
    return {str(path): ast.parse(path.read_text(), str(path)) for path in sorted(tests.rglob("*.py"))}


def _untested(files: dict[str, ast.Module]) -> list[str]:
    """The modules of nqm that none of the parsed test ``files`` imports by path."""
    modules = _modules()
    found = set().union(*(_imported_by_path(tree, modules) for tree in files.values()))
    return sorted(modules - found)


def test_every_module_is_imported_by_path_in_a_test():
    """Every module of nqm is imported by its dotted path in some file under tests/ (``import
    nqm.search.refine``, ``from nqm.search.refine import Axis`` or ``from nqm.search import
    refine``), so that searching the tests for a module's name finds the test that exercises it; a
    package by its own name or by any of its modules' (whose paths start with its name). ``nqm.__main__``
    is the one module a test does not import: importing it runs the command line, so a test that
    runs ``python -m nqm`` in a subprocess covers it, and counts."""
    untested = _untested(_test_files(ROOT / "tests"))
    assert untested == [], (f"{len(untested)} modules no test imports by path: {', '.join(untested)}. "
                            "Import each (by its dotted path) in the test that exercises it, or write one")


class _WithoutRefine(ast.NodeTransformer):
    """A test file as if no import in it named ``nqm.search.refine``."""

    def visit_Import(self, node):
        return None if any(alias.name == "nqm.search.refine" for alias in node.names) else node

    def visit_ImportFrom(self, node):
        names = {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
        return None if "nqm.search.refine" in names else node


def test_a_module_no_test_imports_fails_the_check():
    """The check above fails, naming the module, when a module's imports by path leave the tests:
    here ``nqm.search.refine``'s, removed from the parsed tests."""
    files = _test_files(ROOT / "tests")
    assert "nqm.search.refine" not in _untested(files)
    without = {path: _WithoutRefine().visit(tree) for path, tree in files.items()}
    assert "nqm.search.refine" in _untested(without)
