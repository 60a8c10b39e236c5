"""Digests of a fixed set of sweeps and traces: the bit-identity anchor of refactors.

The digests in ``tests/data/digests.json`` were recorded before the engine was split by
responsibility (and before worker pools kept their fetched snapshots instead of a weight ring);
``tests/test_digests.py`` checks that every case still gives exactly those bits. Record again only
when an issue changes results on purpose:

    python tests/digests.py --record
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys

import numpy as np

import nqm
from nqm import diagnostics

PATH = pathlib.Path(__file__).with_name("data") / "digests.json"
SMALL = dict(problem=None, target=0.02, max_steps=2500, progress=False)
LR, MOMENTUM = np.geomspace(0.05, 1.5, 5), [0.0, 0.6, 0.9]
PROCESSES = [3, "uniform:0:6", "workers:4:slow=0.25:4"]

# name -> (method, sweep keyword arguments beyond SMALL)
SWEEPS = {
    "sgdm": ("sgdm", dict(delay=[0, 3], noise=[0.0, 0.05], seed=[0, 1])),
    "sgdm-dampened-x64": ("sgdm", dict(delay=[2, "pmf:0.5,0,0.5"], noise=0.02, dampening=True, x64=True)),
    "ab": ("ab", dict(delay=PROCESSES, noise=[0.0, 0.02], rho=[0.5, 1.0])),
    "ab-element-micro": ("ab", dict(delay=2, noise=0.01, rho=0.7, group="element", micro_steps=2)),
    "ab-blocks-clamped-independent": ("ab", dict(delay=1, noise=0.03, rho=1.5, group="blocks:3", alpha_max=1.0,
                                                 independent_noise=True, seed=[0, 5])),
    "ab-vel-only-rotated": ("ab", dict(delay=2, noise=0.01, rho=0.5, mode="vel-only", rotate=3)),
    **{m: (m, dict(delay=PROCESSES, noise=0.01)) for m in
       ("shifted", "nesterov", "staleness", "restart", "dana", "ormo", "ormo-da")},
    "dc-asgd": ("dc-asgd", dict(delay=PROCESSES, noise=0.01, lambda_dc=[0.1, 1.0])),
    "workers-long": ("sgdm", dict(delay=["workers:6:slow=0.3:5", "gaussian:3"], noise=0.01, max_steps=12_000,
                                  target=1e-4)),
}

TRACES = {
    "ab-workers": dict(method="ab", lr=0.3, momentum=0.7, rho=0.8, delay="workers:3:slow=0.34:3", noise=0.02,
                       steps=600, stride=3, target=0.05),
    "shifted-constant": dict(method="shifted", lr=0.2, momentum=0.5, delay=2, noise=0.01, steps=400, stride=1,
                             target=0.05),
}
TRACED = ("loss", "component_loss", "energy", "alpha", "velocity_norm", "gradient_norm", "gradient_velocity_ratio",
          "gradient_velocity_cosine", "group_cosine", "update_alignment", "delay", "energy_ratio")


def problem(rotate=None):
    return nqm.zhang(40).with_rotation(rotate)


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:32]


def run_sweep(name):
    method, kwargs = SWEEPS[name]
    kwargs = {**SMALL, **kwargs}
    kwargs["problem"] = problem(kwargs.pop("rotate", None))
    ds = nqm.sweep(method, lr=LR, momentum=MOMENTUM, **kwargs)
    return {"steps": digest(ds.steps.values), "status": digest(ds.status.values), "loss": digest(ds.loss.values)}


def run_trace(name):
    kwargs = dict(TRACES[name])
    method = kwargs.pop("method")
    ds = diagnostics.trajectory(method, problem=problem(), record=TRACED, summaries=True, **kwargs)
    out = {n: digest(ds[n].values) for n in TRACED}
    out["relative_energy_decay"] = digest(ds.relative_energy_decay.values)
    out["alpha_histogram"] = digest(ds.alpha_histogram.values)
    out["steps_to_target"] = int(ds.steps_to_target)
    return out


def compute() -> dict:
    return {"sweeps": {n: run_sweep(n) for n in SWEEPS}, "traces": {n: run_trace(n) for n in TRACES}}


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/digests.py --record")
    PATH.parent.mkdir(exist_ok=True)
    PATH.write_text(json.dumps(compute(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PATH}")
