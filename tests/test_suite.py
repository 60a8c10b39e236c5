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
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assert) and _timed(node):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_test_asserts_a_duration(tmp_path):
    assert timed_assertions(ROOT / "tests") == []
    # the scan finds the two planted in a data file (kept out of the suite's own source)
    (tmp_path / "test_x.py").write_text((ROOT / "tests" / "data" / "timed_assertions.txt").read_text())
    assert timed_assertions(tmp_path) == ["test_x.py:3", "test_x.py:5"]
