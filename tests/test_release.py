"""A release a stranger can install: ``python -m build`` makes an sdist and a wheel that install into a
clean virtual environment (at the pinned versions of constraints.txt), run ``nqm sweep`` and pass the
docstrings' examples (``tests/doctests.py``, run from outside the checkout so that the installed
package is the one imported).
Slow (it builds, creates a venv and installs JAX from the package index): ``pytest -m slow``."""

import os
import pathlib
import subprocess
import sys
import venv

import pytest

import nqm

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_installs_into_a_clean_environment_and_runs_a_sweep(tmp_path):
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True, timeout=600)
    wheel, = dist.glob(f"nqm-{nqm.__version__}-*.whl")
    sdist, = dist.glob(f"nqm-{nqm.__version__}.tar.gz")
    assert sdist.stat().st_size > 10_000
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    # A clean environment: no PYTHONPATH, which would show pip and Python a checkout's nqm instead.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel), "-c", str(ROOT / "constraints.txt")],
                   check=True, capture_output=True, timeout=1200, env=clean)
    out = tmp_path / "r.nc"
    run = subprocess.run([str(env_dir / "bin" / "nqm"), "sweep", "--lr", "0.1", "0.3", "--momentum", "0", "0.5",
                          "--dim", "20", "--max-steps", "500", "--out", str(out), "--no-progress"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path, env=clean)
    assert run.returncode == 0, run.stderr[-2000:]
    assert out.exists() and "settled below the target" in run.stdout
    version = subprocess.run([str(python), "-c", "import nqm; print(nqm.__version__)"], capture_output=True, text=True,
                             cwd=tmp_path, env=clean)
    assert version.stdout.strip() == nqm.__version__
    examples = subprocess.run([str(python), str(ROOT / "tests" / "doctests.py")], capture_output=True, text=True,
                              timeout=600, cwd=tmp_path, env=clean)
    assert examples.returncode == 0, (examples.stdout + examples.stderr)[-3000:]
    assert f"from {env_dir}" in examples.stdout and " 0 failed" in examples.stdout, examples.stdout
