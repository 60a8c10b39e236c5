"""Every result bit-identical to the digests recorded before the engine was split (tests/digests.py)."""

import json

import pytest

import digests

RECORDED = json.loads(digests.PATH.read_text())


@pytest.mark.parametrize("name", sorted(digests.SWEEPS))
def test_sweep_bits_are_unchanged(name):
    assert digests.run_sweep(name) == RECORDED["sweeps"][name]


@pytest.mark.parametrize("name", sorted(digests.TRACES))
def test_trace_bits_are_unchanged(name):
    assert digests.run_trace(name) == RECORDED["traces"][name]
