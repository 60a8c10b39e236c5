"""Where the test suite's time goes to XLA: a pytest plugin that counts each test process's
compilations, and a report over all of them.

Run the tests with the plugin, then the report:

    PYTHONPATH=scripts python -m pytest -p compile_profile tests/engine tests/settling
    python scripts/compile_profile.py            # or: python scripts/compile_profile.py DIR

Each test process (each xdist worker) writes one JSON file into ``$NQM_COMPILE_PROFILE`` (default
``.pytest_cache/compile-profile``, emptied by the first process of a session): its wall time, the
seconds JAX spent tracing, lowering and compiling (its own monitoring events) and, for every
program of the engine's chunk (``nqm.engine.loop.advance``) it traced, what made it that program —
the method, the history depth, the chunk length, N, the precision, the recorders, the stop rule.
The report adds the processes up and says how many of the engine's programs differ and in what.
Subprocesses a test starts (scripts, notebooks, the command line) are not counted.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import sys
import time

DEFAULT = pathlib.Path(__file__).resolve().parents[1] / ".pytest_cache" / "compile-profile"
EVENTS = {"/jax/core/compile/backend_compile_duration": "compile",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/jaxpr_trace_duration": "trace"}
TOP = 25  # the report's lists of where compile time went
# What makes two of the engine's chunk programs different (the fields of the report's table).
FIELDS = ("method", "slots", "by_worker", "chunk_steps", "block_cells", "independent_noise", "devices", "recorders",
          "summaries", "stride", "stop", "averaged", "schedule", "dim", "dtype", "rotated")


def _folder() -> pathlib.Path:
    return pathlib.Path(os.environ.get("NQM_COMPILE_PROFILE", DEFAULT))


class _Recorder:
    def __init__(self):
        self.start = time.perf_counter()
        self.seconds, self.counts, self.programs = collections.Counter(), collections.Counter(), []
        self.functions, self.tests = collections.Counter(), collections.Counter()  # compile seconds by each
        self.test = None

    def event(self, name, duration, fun_name=None, **_):
        if name in EVENTS:
            self.seconds[EVENTS[name]] += duration
            self.counts[EVENTS[name]] += 1
            if EVENTS[name] == "compile":
                self.functions[fun_name or "?"] += duration
                self.tests[self.test or "(outside a test)"] += duration

    def program(self, spec, model):
        self.programs.append([spec.optimizer.name, spec.slots, spec.by_worker, spec.chunk_steps, spec.block_cells,
                              spec.independent_noise, spec.mesh.size, [n for n, _ in spec.record],
                              [n for n, _ in spec.summaries], spec.stride, type(spec.stop).__name__, spec.averaged,
                              spec.schedule is not None, int(model.lam.shape[-1]), str(model.lam.dtype),
                              model.hessian is not None])

    def write(self, name: str) -> None:
        folder = _folder()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps({
            "wall": time.perf_counter() - self.start, "seconds": self.seconds, "counts": self.counts,
            "programs": self.programs, "functions": self.functions, "tests": self.tests}))


_recorder = None


def pytest_configure(config):
    global _recorder
    import jax.monitoring

    from nqm.engine import loop

    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker is None and getattr(config.option, "numprocesses", None):
        return  # xdist's controller runs no test
    if worker in (None, "gw0"):  # the session's first process starts the folder afresh
        for old in _folder().glob("*.json"):
            old.unlink()
    _recorder = _Recorder()
    jax.monitoring.register_event_duration_secs_listener(_recorder.event)
    traced = loop.advance_block  # called once per trace of the chunk program: one call, one program

    def recording(spec, cells, inputs, model, *rest):
        _recorder.program(spec, model)
        return traced(spec, cells, inputs, model, *rest)

    loop.advance_block = recording


def pytest_runtest_logstart(nodeid, location):
    if _recorder is not None:
        _recorder.test = nodeid


def pytest_unconfigure(config):
    if _recorder is not None:
        _recorder.write(getattr(config, "workerinput", {}).get("workerid", "main"))


def report(folder: pathlib.Path) -> str:
    """The processes' files in ``folder`` added up: one paragraph and a table of what varies."""
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    if not runs:
        raise SystemExit(f"no profile in {folder}: run pytest with -p compile_profile first (PYTHONPATH=scripts)")
    seconds, counts = collections.Counter(), collections.Counter()
    for run in runs:
        seconds.update(run["seconds"])
        counts.update(run["counts"])
    wall = sum(run["wall"] for run in runs)
    programs = [tuple(json.dumps(v) for v in p) for run in runs for p in run["programs"]]
    lines = [f"{len(runs)} test process(es), {wall:.0f} process-seconds in all: XLA compiled {counts['compile']:,} "
             f"programs in {seconds['compile']:.0f} s ({seconds['compile'] / wall:.0%}), lowering took "
             f"{seconds['lower']:.0f} s and tracing {seconds['trace']:.0f} s.",
             f"The engine's chunk: {len(programs):,} programs traced, {len(set(programs)):,} different.",
             "", f"{'field':18} {'values':>6}  most traced"]
    for i, field in enumerate(FIELDS):
        values = collections.Counter(p[i] for p in programs)
        common = ", ".join(f"{v} ×{n}" for v, n in values.most_common(4))
        lines.append(f"{field:18} {len(values):6d}  {common}")
    for title, key in (("function", "functions"), ("test", "tests")):  # where the compile seconds went
        spent = collections.Counter()
        for run in runs:
            spent.update(run.get(key, {}))
        lines += ["", f"compile seconds by {title} (the {TOP} most):"]
        lines += [f"{value:8.1f}  {name}" for name, value in spent.most_common(TOP)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else _folder()))
