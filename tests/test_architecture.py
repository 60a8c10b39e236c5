"""docs/architecture.md's statements about the code, each checked where the guide makes it (the
layers themselves: tests/test_layers.py)."""

import ast
import importlib
import pathlib
import re

import pytest

import nqm
from nqm import conventions
from nqm.optimizers import base

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = " ".join((ROOT / "docs" / "architecture.md").read_text().split())  # its prose, one space between words


def _trees():
    return {path.relative_to(ROOT): ast.parse(path.read_text(), str(path)) for path in sorted((ROOT / "nqm").rglob("*.py"))}


def _local_imports(tree):
    """Every import inside a function of ``tree`` (once, however deeply it is nested)."""
    found = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found[node.lineno] = node
    return found.values()


def test_a_function_local_import_says_why():
    """"Imports are at the top of a module": a command of nqm.cli imports what it runs when it runs;
    anywhere else a function-local import has a comment on its line or the line above."""
    assert "Imports are at the top of a module" in GUIDE
    silent = []
    for path, tree in _trees().items():
        if path.parts[:2] == ("nqm", "cli"):
            continue
        lines = (ROOT / path).read_text().splitlines()
        for node in _local_imports(tree):
            line, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
            if "#" not in line and not above.startswith("#"):
                silent.append(f"{path}:{node.lineno}: {line.strip()}")
    assert silent == [], "function-local imports without a comment saying why (or move them to the top):\n" + \
        "\n".join(silent)


def test_only_the_summaries_are_called_summary():
    """The glossary: "summary" names a result's per-panel table (nqm.summary, the nqm summary command)
    and a trace's running statistic (nqm.engine's Summary kinds, trajectory's summaries=); nothing else."""
    assert "Nothing else is called so" in GUIDE
    allowed = {("nqm/summary.py", "summarize"), ("nqm/engine/record.py", "Summary"), ("nqm/diagnostics.py", "_summaries")}
    named = {(str(path), node.name) for path, tree in _trees().items() for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and "summar" in node.name.lower()}
    assert named <= allowed, f"called summary beside the glossary's: {sorted(named - allowed)}"
    modules = {str(path) for path in _trees() if "summar" in path.stem}
    assert modules == {"nqm/summary.py", "nqm/cli/summary.py"}


def test_no_module_is_imported_under_another_name():
    """"No module is imported under another name": an ``as`` in nqm renames a function or a class,
    never a module (``from nqm import jobs as j`` would hide where a name comes from)."""
    trees = _trees()
    modules = {".".join(path.with_suffix("").parts).removesuffix(".__init__") for path in trees}
    renamed = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                renamed += [f"{path}: import {a.name} as {a.asname}" for a in node.names
                             if a.asname and a.name.startswith("nqm")]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nqm"):
                renamed += [f"{path}: from {node.module} import {a.name} as {a.asname}" for a in node.names
                            if a.asname and f"{node.module}.{a.name}" in modules]
    assert renamed == []


def test_sgd_is_registered_beside_sgdm_and_read_as_sgdm_at_momentum_0():
    """The glossary: sgd is registered in sgdm.py, and the analyses read it as sgdm at momentum 0
    through nqm.conventions.family, which refuses it any other momentum."""
    assert "resolved in one place (`nqm.conventions.family`)" in GUIDE
    assert "sgd" in nqm.optimizers.methods()
    assert base.registered("sgd").factory.__module__ == "nqm.optimizers.sgdm"
    assert conventions.family("sgd") == "sgdm" == conventions.family("sgdm")
    assert conventions.family("sgd", momenta=[0.0, 0.0]) == "sgdm"
    with pytest.raises(nqm.NqmError, match="sgd has no momentum"):
        conventions.family("sgd", momenta=[0.0, 0.9])


def test_no_function_is_above_radons_c():
    """The hardest functions stay plain: radon's cyclomatic complexity ranks none of nqm's below C
    (a rank of D or worse is more than 20 decisions in one function)."""
    complexity = pytest.importorskip("radon.complexity")
    worse = [f"{path}:{block.lineno} {block.name} ({block.complexity})"
             for path in sorted((ROOT / "nqm").rglob("*.py"))
             for block in complexity.cc_visit((path).read_text())
             if complexity.cc_rank(block.complexity) not in "ABC"]
    assert worse == [], "split these into small steps: " + ", ".join(worse)


def test_the_registry_holds_one_record_per_method():
    """The glossary: a method is registered once, as one record (its factory, title, reductions,
    near-zero form, braking, domains and options) that every lookup reads and unregister removes whole."""
    assert "one record per method" in GUIDE

    @base.register("architecture-probe", title="Probe", domains={"rho": nqm.validate.UNIT})
    def probe(*, dampening: bool = False) -> base.Optimizer:
        """A probe.

        Args:
          dampening: weight the gradient by 1 − m.
        """
        return base.make("sgdm", dampening=dampening)

    try:
        record = base.registered("architecture-probe")
        assert isinstance(record, base.Registered) and record.factory is probe
        assert (base.title("architecture-probe"), base.reductions("architecture-probe")) == ("Probe", ())
        assert list(base.options("architecture-probe")) == ["dampening"]
        assert base.documentation("architecture-probe") == {"dampening": "weight the gradient by 1 − m."}
    finally:
        base.unregister("architecture-probe")
    assert "architecture-probe" not in nqm.optimizers.methods()
    with pytest.raises(nqm.NqmError, match="unknown method 'architecture-probe'"):
        base.title("architecture-probe")


def test_a_search_checks_its_job_and_chooses_its_settled_test_once(monkeypatch):
    """"a search … checks its job and chooses its settled test once": nqm.best over several rounds
    builds no job and chooses no test per round."""
    from nqm import jobs, sweeps
    from nqm.search import setup

    assert "checks its job and chooses its settled test once" in GUIDE
    counted = {"job": 0, "choose": 0, "rounds": 0}

    def counting(name, real):
        def call(*args, **kwargs):
            counted[name] += 1
            return real(*args, **kwargs)
        return call

    for module in (jobs, sweeps):
        monkeypatch.setattr(module, "job", counting("job", jobs.job))
    for module in (setup, sweeps):
        monkeypatch.setattr(module, "choose", counting("choose", setup.choose))
    monkeypatch.setattr(sweeps, "evaluate_job", counting("rounds", sweeps.evaluate_job))
    nqm.best("ab", lr=(0.05, 1.0), momentum=(0.0, 0.9), delay=2, problem=nqm.zhang(10), max_steps=400, max_cells=120,
             progress=False)
    assert counted["rounds"] >= 3 and counted["choose"] == 1 and counted["job"] <= 1


def test_the_exact_modes_share_one_loop_and_the_transfer_says_its_own_rule():
    """"Three loops step dynamics": the second-moment maps of nqm.expected (second_moment and
    augmented) step through moments_loop alone, and transfer.train's results state its fixed-window rule."""
    train = importlib.import_module("nqm.transfer.train")  # the module: nqm.transfer.train names its function

    assert "Three loops step dynamics, and they stay three" in GUIDE
    for module in ("second_moment", "augmented"):
        tree = ast.parse((ROOT / "nqm" / "expected" / f"{module}.py").read_text())
        loops = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "while_loop"]
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "attr", getattr(n.func, "id", None)) == "moments_loop"]
        assert (len(loops), len(calls) > 0) == ((1, True) if module == "second_moment" else (0, True)), module
    assert "first half of the budget" in train.STATUS_MEANING


def test_the_tests_mirror_the_package():
    """"tests/ … mirroring the package": each folder of tests/ is named after a package of nqm, and
    each test file in it imports that package, or a module of it, by its dotted path."""
    assert "mirroring the package" in GUIDE
    packages = {path.parent.name for path in (ROOT / "nqm").glob("*/__init__.py")}
    folders = [p for p in (ROOT / "tests").iterdir() if p.is_dir() and p.name not in ("data", "__pycache__")]
    assert folders and {p.name for p in folders} <= packages
    strays = []
    for folder in folders:
        for path in sorted(folder.glob("test_*.py")):
            imported = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    imported |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module:
                    imported |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            if not any(name == f"nqm.{folder.name}" or name.startswith(f"nqm.{folder.name}.") for name in imported):
                strays.append(str(path.relative_to(ROOT)))
    assert strays == [], f"test files in a package's folder that never import the package: {strays}"


def test_every_test_file_the_docs_name_exists():
    """The guides name test files as where a claim is checked: each of them exists."""
    named = set()
    for page in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md", *(ROOT / "nqm").rglob("*.py")]:
        named |= set(re.findall(r"\btests/[\w/]+\.py\b", page.read_text()))
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert named and missing == [], f"named but not there: {missing}"


def test_every_status_and_threshold_variable_is_laid_out_by_the_result_schema():
    """"One schema for every result": outside nqm/results.py no module lays out a ``status`` or a
    ``threshold`` variable by hand (a dict key ``"status"``/``"threshold"`` whose value is a
    ``(dims, values)`` tuple or a Variable), and the builders the guide names call the schema's
    functions."""
    assert "One schema for every result" in GUIDE
    by_hand = []
    for path, tree in _trees().items():
        if path == pathlib.Path("nqm/results.py"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and key.value in ("status", "threshold") and (
                            isinstance(value, ast.Tuple) or (isinstance(value, ast.Call) and "Variable" in ast.unparse(value.func))):
                        by_hand.append(f"{path}:{node.lineno}")
    assert by_hand == []
    calls = {str(path): ast.unparse(tree) for path, tree in _trees().items()}
    for module, function in (("nqm/sweeps.py", "results.outcomes"), ("nqm/search/api.py", "results.outcomes"),
                             ("nqm/transfer/train.py", "results.outcomes"),
                             ("nqm/expected/api.py", "outcomes("), ("nqm/thresholds/derived.py", "results.threshold_table"),
                             ("nqm/thresholds/polynomials.py", "results.threshold_table"),
                             ("nqm/search/simulated.py", "results.threshold_table")):
        assert function in calls[module], module
