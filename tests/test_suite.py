"""Rules for the suite itself: it must pass on any CPU and on a loaded machine, so no test asserts
how long something took (a speed claim belongs in a benchmark script that prints ratios)."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLOCKS = {"perf_counter", "monotonic", "time", "process_time", "perf_counter_ns", "monotonic_ns", "time_ns"}
DURATIONS = {"seconds", "elapsed", "duration", "took", "wall"}


def _timed(node: ast.Assert) -> bool:
    """An assertion on a duration: a clock read minus another, or a name that holds one."""
    for sub in ast.walk(node.test):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub):
            reads = [c for c in ast.walk(sub) if isinstance(c, ast.Call) and getattr(c.func, "attr", None) in CLOCKS]
            if reads:
                return True
        if isinstance(sub, ast.Compare) and any(isinstance(x, ast.Name) and x.id in DURATIONS
                                                for x in [sub.left, *sub.comparators]):
            return True
    return False


def timed_assertions(root: pathlib.Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assert) and _timed(node):
                found.append(f"{path.name}:{node.lineno}")
    return found


def _planted() -> str:
    """A file with the two kinds of timed assertion on lines 3 and 5, built as syntax trees so that no
    timed assertion is written anywhere in the repository."""
    clock = ast.Call(ast.Attribute(ast.Name("time"), "perf_counter"), [], [])
    below = lambda left, limit: ast.Assert(ast.Compare(left, [ast.Lt()], [ast.Constant(limit)]))
    body = [ast.Import([ast.alias("time")]), ast.Assign([ast.Name("start")], clock, lineno=2),
            below(ast.BinOp(clock, ast.Sub(), ast.Name("start")), 5),
            ast.Assign([ast.Name(sorted(DURATIONS)[0])], ast.Constant(3), lineno=4),
            below(ast.Name(sorted(DURATIONS)[0]), 60)]
    return "\n".join(ast.unparse(ast.fix_missing_locations(ast.Module([node], []))) for node in body) + "\n"


def test_no_test_asserts_a_duration(tmp_path):
    assert timed_assertions(ROOT / "tests") == []
    # the scan finds the two planted in a generated file
    (tmp_path / "test_x.py").write_text(_planted())
    assert timed_assertions(tmp_path) == ["test_x.py:3", "test_x.py:5"]
