import os
import pathlib

import pytest

import nqm

# Two CPU devices even on a one-core machine, so the multi-device path is always exercised.
os.environ.setdefault("NQM_CPU_DEVICES", "2")
nqm.use_every_core()
os.environ.setdefault("MPLBACKEND", "Agg")
# Compiled programs shared by every test and every subprocess a test starts (scripts, notebooks, the
# command line, several hosts): the same program is compiled once per test process, not once per
# test. One directory per pytest-xdist worker: JAX writes an entry in place, without a lock, and a
# worker that reads an entry the other is still writing can crash in XLA's deserialiser.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      str(pathlib.Path(__file__).resolve().parents[1] / ".pytest_cache"
                          / f"jax-compilation-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


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
