import os
import pathlib
import sys

import pytest

import nqm

# Two CPU devices even on a one-core machine, so the multi-device path is always exercised.
os.environ.setdefault("NQM_CPU_DEVICES", "2")
nqm.use_every_core()
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


def pytest_configure(config):
    """Compiled programs shared by the subprocesses a test starts (scripts, notebooks, the command
    line, several hosts): a program is compiled once per worker, not once per subprocess. One
    directory per pytest-xdist worker (its id is known here, not when this file is imported). The
    test process itself keeps its programs in memory only, so that what a test runs never depends on
    entries other processes wrote (a worker compiles each program once anyway)."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker is None and getattr(config.option, "numprocesses", None):
        return  # xdist's controller runs no test; its workers inherit its environment, so it sets none
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(pathlib.Path(__file__).resolve().parents[1]
                                                           / ".pytest_cache" / f"jax-compilation-{worker or 'main'}"))
    import jax

    jax.config.update("jax_enable_compilation_cache", False)


@pytest.fixture
def progress_bars(monkeypatch):
    """Every tqdm bar made while the test runs, shown even without a terminal (so its counts move)."""
    import tqdm

    bars = []

    class Recording(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = False
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(tqdm, "tqdm", Recording)
    return bars


@pytest.fixture
def interrupt_at_store(monkeypatch):
    """``interrupt_at_store(n)``: the n-th checkpoint store of a run is written, then the run is
    interrupted as by Ctrl-C; ``interrupt_at_store.disarm()`` puts the plain store back."""
    from nqm import checkpoint

    original = checkpoint.Checkpointer.store

    def arm(n: int):
        calls = []

        def store_then_die(self, *args):
            original(self, *args)
            calls.append(1)
            if len(calls) == n:
                raise KeyboardInterrupt

        monkeypatch.setattr(checkpoint.Checkpointer, "store", store_then_die)

    arm.disarm = lambda: monkeypatch.setattr(checkpoint.Checkpointer, "store", original)
    return arm


@pytest.fixture(scope="session")
def earlier_result() -> bytes:
    """The bytes of a small result nqm wrote: what an --out file holds before a command replaces it
    (a command replaces its own results, never another kind of file without --force)."""
    import nqm.io

    return nqm.io.to_bytes(nqm.sweep("sgdm", lr=0.1, momentum=0.5, problem=nqm.zhang(3), max_steps=5, progress=False))


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's figures are closed after it: a worker runs hundreds of tests, and figures left open
    pile up (matplotlib warns past 20, which a test that records warnings then sees)."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


_tests_run = 0


@pytest.fixture(autouse=True)
def _bounded_compiled_programs():
    """Every 10th test, JAX's compiled programs are dropped once the process maps more than 30,000
    memory regions. Each compiled XLA program keeps regions mapped; a worker that ran a thousand
    tests passed Linux's default limit of 65,530 and the next compile crashed in XLA (a segfault,
    'worker crashed' in CI). Reading /proc/self/maps at that size takes ~25 ms, so not every test."""
    global _tests_run
    yield
    _tests_run += 1
    if _tests_run % 10 or not os.path.exists("/proc/self/maps"):
        return
    with open("/proc/self/maps", "rb") as maps:
        regions = maps.read().count(b"\n")
    if regions > 30_000 and "jax" in sys.modules:
        import gc

        sys.modules["jax"].clear_caches()
        gc.collect()
