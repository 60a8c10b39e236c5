"""scripts/fig_choices_batch.py: Zhang et al.'s choices (momentum, preconditioning, iterate averaging,
a step decay) against batch size under delay. The committed claims are those its committed data
file gives, and each curve is the best of what was found (its smoke size runs in test_notebooks)."""

import importlib.util
import json
import pathlib

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
