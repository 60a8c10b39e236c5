"""scripts/fig_choices_batch.py: Zhang et al.'s choices (momentum, preconditioning, iterate averaging,
a step decay) against batch size under delay. Its smoke size runs as a command, and the committed
claims are those its committed data file gives."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from nqm.io import json_plain
from nqm.plots.script import existing_data, read_data

ROOT = pathlib.Path(__file__).resolve().parents[1]
NAME = "fig_choices_batch"
COMMITTED = ROOT / "figures" / f"{NAME}.png"


def _script():
    spec = importlib.util.spec_from_file_location(NAME, ROOT / "scripts" / f"{NAME}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_size_runs_as_a_command(tmp_path):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # this checkout's nqm
    env = dict(os.environ, MPLBACKEND="Agg", NQM_CPU_DEVICES="2", PYTHONPATH=path)
    out = tmp_path / f"{NAME}.png"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / f"{NAME}.py"), "--smoke", "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert out.stat().st_size > 5_000 and out.with_suffix(".nc").is_file()
    record = json.loads((tmp_path / f"{NAME}.claims.json").read_text())
    assert record["figure"] == NAME and record["data"] == f"{NAME}.nc"
    data = read_data(out.with_suffix(".nc"))
    assert data.attrs["size"] == "smoke" and set(data.method.values) == set(_script().CHOICES)
    best_of_what_was_found(data, _script().NESTED)


def best_of_what_was_found(data, nested):
    """Each curve is no worse than its own search, than the choices it contains, and than its value
    at a smaller batch size (less noise never needs more steps)."""
    steps = data.steps.fillna(np.inf)
    assert (steps <= data.steps_searched.fillna(np.inf)).all()
    for name, parts in nested.items():
        for part in parts:
            assert (steps.sel({"method": name}) <= steps.sel({"method": part})).all(), (name, part)
    assert (steps.diff("batch_size") <= 0).all()
    assert (data.steps_stay.fillna(np.inf) >= steps).all()  # a loss stays below the target from T at the earliest


@pytest.mark.skipif(not COMMITTED.is_file(), reason="no committed figure")
def test_the_committed_claims_are_those_of_the_committed_data():
    script = _script()
    data = read_data(existing_data(COMMITTED))
    record = json.loads(COMMITTED.with_name(f"{NAME}.claims.json").read_text())
    assert data.attrs["size"] == "full" and record["data"] == existing_data(COMMITTED).name
    claims = record["claims"]
    assert json_plain(script.claims(data)) == claims
    best_of_what_was_found(data, script.NESTED)
    for d in data.delay.values:  # the ratios are those of the steps they quote
        assert claims[f"ema_gain_b1_d{d}"] == pytest.approx(
            claims[f"sgd_steps_b1_d{d}"] / claims[f"sgd_ema_steps_b1_d{d}"])
        top = int(data.batch_size[-1])
        assert claims[f"momentum_gain_b{top}_d{d}"] == pytest.approx(
            claims[f"sgd_steps_b{top}_d{d}"] / claims[f"sgdm_steps_b{top}_d{d}"])
