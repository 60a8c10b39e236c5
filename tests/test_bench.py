"""The benchmark runs and reports what it promises (its numbers are read by people, not asserted)."""

import json
import os
import pathlib
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import nqm
from nqm import bench
from nqm.cli import main
from nqm.optimizers import methods


def test_bench_prints_a_json_summary_last(capsys):
    assert main(["bench", "--quick", "--check"]) == 0  # no verdict, so no miss either
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    result = json.loads(last)
    for key in ("probe_elem_steps_per_s", "numpy_elem_steps_per_s", "sgdm_elem_steps_per_s", "ab_elem_steps_per_s",
                "adam_elem_steps_per_s", "sgdm_vs_probe", "ab_vs_probe", "adam_vs_sgdm", "sgdm_vs_numpy",
                "early_exit_efficiency", "devices", "backend"):
        assert key in result
    assert result["devices"] == 2 and result["backend"] == "cpu"
    assert 0 < result["early_exit_efficiency"] <= 1 and all(result[k] > 0 for k in result if k.endswith("_per_s"))
    for name in ("iid", "workers", "slow_workers"):
        assert result[f"{name}_vs_constant"] > 0
    # targets hold at the default size only: a quick run gives ratios without verdicts
    assert result["verdicts"] is False and result["targets_missed"] == []
    assert "no verdicts" in out


def test_the_command_passes_its_options_and_exits_1_on_a_missed_target_only_with_check(monkeypatch):
    """``nqm bench`` (nqm.cli.bench): its options default to nqm.bench.main's own, are handed to it,
    and ``--check`` turns a missed target into exit status 1 (a CI gate); without it, 0."""
    import inspect

    from nqm.cli import bench as bench_command

    defaults = {k: p.default for k, p in inspect.signature(bench.main).parameters.items()}
    calls = []

    def benchmark(missed):  # nqm.bench.main as the parser reads it (its defaults), which misses `missed`
        def run(cells=defaults["cells"], dim=defaults["dim"], steps=defaults["steps"], quick=False):
            calls.append(dict(cells=cells, dim=dim, steps=steps, quick=quick))
            return {"targets_missed": missed}
        return run

    monkeypatch.setattr(bench, "main", benchmark(["ab_vs_probe"]))
    assert main([bench_command.NAME, "--check"]) == 1
    assert main([bench_command.NAME]) == 0
    assert main([bench_command.NAME, "--cells", "8", "--dim", "5", "--steps", "3", "--quick", "--check"]) == 1
    assert calls == [defaults, defaults, dict(cells=8, dim=5, steps=3, quick=True)]
    monkeypatch.setattr(bench, "main", benchmark([]))
    assert main([bench_command.NAME, "--check"]) == 0


def test_check_names_each_missed_target():
    met = {name: floor for name, floor in bench.TARGETS.items()}
    assert bench.missed_targets(met) == []
    short = dict(met, ab_vs_probe=0.2, early_exit_efficiency=float("nan"))
    assert bench.missed_targets(short) == ["ab_vs_probe", "early_exit_efficiency"]


@pytest.mark.parametrize("method", methods())
def test_the_engine_rate_runs_every_registered_method(method):
    """Every method's hyperparameters are filled in (the benchmark's lr and momentum, defaults for the rest)."""
    rate = bench.engine_rate(nqm.zhang(8), method, cells=2, steps=4, chunk=2)
    assert np.isfinite(rate) and rate > 0


@pytest.mark.parametrize("method, delay", [("sgdm", 3), ("ab", 3), ("ab", 0)])
def test_the_peer_benchmark_counts_the_same_steps_as_nqm(method, delay):
    """scripts/bench_peer.py times nqm against a plain JAX/optax implementation; its comparison
    means something only if both run the same dynamics: in float64, the same T in every cell."""
    import runpy

    peer = runpy.run_path(str(pathlib.Path(__file__).resolve().parents[1] / "scripts" / "bench_peer.py"))
    row = peer["case"](32, method, delay, 0.0, side=3, steps=1500, x64=True, repeat=1)
    assert row["cells"] == 9 and row["t_reached"] >= 5 and row["t_equal"] == 9 and row["t_max_difference"] == 0, row


@pytest.mark.parametrize("tiled", [False, True], ids=["full-grid", "tiled"])
@pytest.mark.parametrize("work", bench.PROBES)
def test_each_probe_does_the_work_it_is_measured_for(work, tiled):
    """The probes are what their ratios say — the heavy-ball update, each cell's crossing of the
    target (a per-step loss), the gradient at the weights D steps old plus the step's noise, AB's
    braking — against a numpy loop in float64, in either layout."""
    lam = np.asarray(nqm.zhang(50).eigenvalues)
    cells, steps = 16, 2000
    fn, args = bench.probe(jnp.asarray(lam, jnp.float32), cells=cells, steps=steps, tiled=tiled, work=work)
    w, v, crossed = (np.asarray(x) for x in fn(*args))
    lr, momentum, noise = (np.asarray(a, np.float64) for a in args[2:])
    rw, rv, rcrossed = np.ones((cells, lam.size)), np.zeros((cells, lam.size)), np.zeros((cells, 1), bool)
    ring = [rw] * (bench.DELAY + 1)  # ring[-1] is w_t, ring[0] w_{t−D}
    for t in range(steps):
        g = lam * ring[0] + noise[t] if work in ("sgdm", "ab") else lam * rw
        if work == "ab":
            dot = lambda a, b: (a * b).sum(-1, keepdims=True)
            g = g * (1 - 0.5 * dot(g, rv) / np.sqrt(dot(g, g) * dot(rv, rv) + 1e-12))
        rv = momentum * rv + g
        rw = rw - lr * rv
        ring = ring[1:] + [rw]
        rcrossed |= 0.5 * (lam * rw * rw).sum(-1, keepdims=True) < 0.01
    np.testing.assert_allclose(w, rw, rtol=2e-4, atol=1e-5)
    assert np.array_equal(crossed, rcrossed & (work != "update")) and (work == "update" or rcrossed.any())


def test_the_gpu_check_script_runs_its_panels_at_smoke_size(tmp_path):
    """scripts/gpu_check.sh (what made figures/gpu_h200/) at its smoke size, on the CPU."""
    root = pathlib.Path(__file__).resolve().parents[1]
    done = subprocess.run(["bash", str(root / "scripts" / "gpu_check.sh"), str(tmp_path), "300", "smoke"],
                          env={**os.environ, "PYTHON": sys.executable}, cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "log.txt").read_text()
    assert "panel first_passage: exit 0" in log and "panel settled: exit 0" in log
    first, settled = (nqm.load(tmp_path / f"panel_{mode}.nc") for mode in ("first_passage", "settled"))
    assert (first.attrs["first_passage"], settled.attrs["first_passage"]) == (1, 0)
    assert first.sizes["lr"] == first.sizes["momentum"] == 3 and first.attrs["dim"] == 50
    assert not (first.status == 2).any()  # a first passage is never "transient"
    row = json.loads(log.strip().splitlines()[-1])  # scripts/bench_blocks.py's: the same cells in any blocks
    assert row["cells"] == 16 and row["same_status"] == row["same_t"] == 16


def test_the_compile_profile_counts_the_programs_a_test_run_compiles(tmp_path):
    """scripts/compile_profile.py (docs/performance.md's profile of the suite) as its user runs it: a
    pytest plugin on one test of the engine, then its report, which names the method of the engine
    programs that test compiled (sgdm, and no other)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root / "scripts"), "NQM_COMPILE_PROFILE": str(tmp_path)}
    test = "tests/engine/test_engine.py::test_to_horizon_steps_the_reached_cells_on_and_keeps_their_first_passage"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "compile_profile", "-p",
                          "no:cacheprovider", test], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (kept,) = tmp_path.glob("*.json")
    profile = json.loads(kept.read_text())
    assert profile["counts"]["compile"] >= len(profile["programs"]) >= 1
    assert {p[0] for p in profile["programs"]} == {"sgdm"}
    report = subprocess.run([sys.executable, str(root / "scripts" / "compile_profile.py"), str(tmp_path)],
                            capture_output=True, text=True, check=True).stdout
    assert f"The engine's chunk: {len(profile['programs'])} programs traced" in report
    assert "method                  1  \"sgdm\"" in report
    # ... and where the compile seconds went: the chunk among the functions, that test among the tests
    assert "jit(advance)" in profile["functions"] and list(profile["tests"]) == [test]
    by_function = report.split("compile seconds by function")[1]
    assert "jit(advance)" in by_function and test in report.split("compile seconds by test")[1]
