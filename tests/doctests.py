"""Runs every doctest of the nqm that ``import nqm`` finds (the docstrings' ``Examples:``), and checks
that each main entry point has one. ``tests/test_doctests.py`` runs it on this checkout;
``tests/test_release.py`` runs it as a script against the installed wheel:

    python tests/doctests.py    # exit status 1 if an example fails or an entry point has none

Plain Python (doctest and nqm only), so that it runs where the tests' packages are not installed."""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil
import sys
import time

os.environ.setdefault("MPLBACKEND", "Agg")

import nqm  # noqa: E402

# The command's entry module (importing it runs the command) and the deprecated aliases of renamed
# modules (importing them warns).
SKIP = {"nqm.__main__"}
# Each must have an example.
ENTRY_POINTS = [
    "nqm.sweeps.sweep", "nqm.search.api.best", "nqm.diagnostics.trajectory", "nqm.expected.api.sweep",
    "nqm.thresholds.derived.threshold", "nqm.search.simulated.simulated_threshold",
    "nqm.thresholds.polynomials.threshold", "nqm.delays.process", "nqm.delays.constant", "nqm.delays.iid",
    "nqm.delays.workers", "nqm.io.save", "nqm.io.load", "nqm.summary.summarize", "nqm.summary.spread",
    "nqm.summary.robustness", "nqm.status.t_star", "nqm.search.scaling.scaling",
]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def modules() -> list:
    """Every module of the package, imported (but :data:`SKIP`)."""
    names = sorted(m.name for m in pkgutil.walk_packages(nqm.__path__, "nqm.") if m.name not in SKIP)
    return [nqm] + [importlib.import_module(name) for name in names]


def resolve(dotted: str):
    """The object a dotted name (``module.attribute``) names."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def without_examples() -> list[str]:
    """The entry points whose docstring holds no example."""
    finder = doctest.DocTestFinder(recurse=False)
    return [name for name in ENTRY_POINTS if not any(t.examples for t in finder.find(resolve(name), name))]


def run(verbose: bool = False) -> tuple[int, int, list[tuple[float, str]]]:
    """Run every doctest of every module.

    Args:
        verbose: print each example as it runs.

    Returns:
        ``(failed, attempted, times)``: examples failed and run, and ``(seconds, name)`` per docstring.
    """
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=FLAGS, verbose=verbose)
    times, seen = [], set()
    for module in modules():
        for test in finder.find(module):
            if not test.examples or test.name in seen:
                continue
            seen.add(test.name)
            start = time.perf_counter()
            runner.run(test)
            times.append((time.perf_counter() - start, test.name))
    result = runner.summarize(verbose=False)
    return result.failed, result.attempted, sorted(times, reverse=True)


def main() -> int:
    start = time.perf_counter()
    missing = without_examples()
    failed, attempted, times = run()
    print(f"nqm {nqm.__version__} from {os.path.dirname(nqm.__file__)}: {attempted} examples in "
          f"{len(times)} docstrings, {failed} failed, {time.perf_counter() - start:.1f} s; slowest: "
          + ", ".join(f"{name} {seconds:.1f} s" for seconds, name in times[:3]))
    if missing:
        print("entry points without an example: " + ", ".join(missing))
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
