"""The environment results were made in: constraints.txt pins every package nqm and its tests
install, at versions pyproject.toml admits, and every result records the machine it ran on."""

import pathlib
import re

import numpy as np
import pytest
from packaging.requirements import Requirement

import nqm
from nqm import machine, results

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _pins() -> dict:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return dict(line.lower().split("==") for line in lines if re.match(r"^[A-Za-z0-9]", line))


def _requirements() -> list[Requirement]:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]


def test_constraints_pin_every_requirement_at_an_admitted_version():
    pins = _pins()
    for requirement in _requirements():
        name = requirement.name.lower()
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} vs {requirement}"


def test_every_result_records_its_platform_outside_its_identity():
    ds = nqm.sweep("sgdm", lr=0.1, momentum=0.5, problem=nqm.zhang(5), max_steps=50, progress=False)
    described = machine.describe()
    assert ds.attrs["platform"] == machine.platform_line()
    assert f"jax {described['jax']}" in ds.attrs["platform"] and f"numpy {np.__version__}" in ds.attrs["platform"]
    other = ds.copy()
    other.attrs["platform"] = "elsewhere"
    assert results.difference(ds, other) is None  # a checkpoint resumes on another machine


def test_a_result_made_on_an_accelerator_names_it_and_a_cpu_result_is_unchanged():
    from types import SimpleNamespace

    gpu = [SimpleNamespace(platform="gpu", device_kind="NVIDIA H200")] * 2
    cpus = [SimpleNamespace(platform="cpu", device_kind="cpu")] * 2
    assert machine.platform_line(gpu) == machine.platform_line() + "; gpu: 2 x NVIDIA H200"
    assert machine.platform_line(cpus) == machine.platform_line()
    assert machine.accelerators(gpu + [SimpleNamespace(platform="tpu", device_kind="TPU v5")]) == [
        "gpu: 2 x NVIDIA H200", "tpu: 1 x TPU v5"]


DEVICES = """
import os, sys
import nqm.devices
asked = nqm.devices.use_every_core(3)
print(asked, os.environ.get("JAX_NUM_CPU_DEVICES"), "jax" in sys.modules)
import jax
print(jax.device_count("cpu"), nqm.devices.use_every_core(5))
"""


@pytest.mark.parametrize("chosen", [{}, {"JAX_NUM_CPU_DEVICES": "2"},
                                    {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}])
def test_use_every_core_sets_the_device_count_once_and_never_over_the_users_choice(chosen):
    """nqm.devices.use_every_core before JAX: only the environment is set (JAX is not imported for
    it), and JAX starts with that many CPU devices; once JAX runs, the count stays. A count the user
    chose (JAX_NUM_CPU_DEVICES, or XLA_FLAGS's device count) is left alone: 0, nothing changed."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS", "NQM_CPU_DEVICES")}
    done = subprocess.run([sys.executable, "-c", DEVICES], env={**env, "JAX_PLATFORMS": "cpu", **chosen},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = (line.split() for line in done.stdout.splitlines())
    if chosen:
        assert first == ["0", chosen.get("JAX_NUM_CPU_DEVICES", "None"), "False"] and second == ["2", "0"]
    else:
        assert first == ["3", "3", "False"] and second == ["3", "0"]
    import jax

    from nqm import devices

    assert devices.use_every_core(7) == 0 and jax.device_count("cpu") == 2  # this process: chosen, and running
