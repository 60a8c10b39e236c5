"""Every case of tests/digests.py against its record: bit for bit where this platform fingerprint has
digests (ids ``exact-…``), within the documented tolerances of the reference arrays elsewhere
(ids ``tolerance-…``)."""

import json
import os
import platform
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import digests

# Decided once, from this process's fingerprint, so the test ids say which comparison runs.
PATH = digests.comparison_path()
SWEEP_NAMES, TRACE_NAMES = sorted(digests.SWEEPS), sorted(digests.TRACES)


@pytest.mark.parametrize("name", SWEEP_NAMES, ids=[f"{PATH}-{n}" for n in SWEEP_NAMES])
def test_sweep_matches_record(name):
    assert digests.comparison_path() == PATH
    assert digests.check("sweeps", name, PATH) == []


@pytest.mark.parametrize("name", TRACE_NAMES, ids=[f"{PATH}-{n}" for n in TRACE_NAMES])
def test_trace_matches_record(name):
    assert digests.comparison_path() == PATH
    assert digests.check("traces", name, PATH) == []


def test_a_fake_fingerprint_takes_the_tolerance_path_and_passes(monkeypatch):
    # The path any unrecorded CPU takes, run here: it must pass against the reference.
    monkeypatch.setenv(digests.OVERRIDE, "fake")
    fp = digests.fingerprint()
    assert fp["override"] == "fake" and "override=fake" in digests.fingerprint_key(fp)
    assert digests.fingerprint_key(fp) not in digests.recorded()["fingerprints"]
    assert digests.comparison_path() == "tolerance"
    problems = {f"{kind}/{name}": digests.check(kind, name) for kind, name in digests.cases()}
    assert problems == {case: [] for case in problems}


def test_the_fingerprint_names_versions_cpu_devices_and_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2 --xla_cpu_max_isa=AVX "
                                    "--xla_cpu_enable_fast_math=true")
    fp = digests.fingerprint()
    assert (fp["jax"], fp["numpy"], fp["machine"]) == (jax.__version__, np.__version__, platform.machine())
    assert fp["cpu_devices"] == len(jax.devices("cpu"))
    assert (fp["xla_cpu_max_isa"], fp["xla_flags"]) == ("AVX", "--xla_cpu_enable_fast_math=true")
    assert "xla_cpu_max_isa=AVX" in digests.fingerprint_key(fp)
    if os.path.exists("/proc/cpuinfo") and platform.machine() in ("x86_64", "AMD64"):
        assert fp["cpu_isa"] in ("avx512f", "avx2", "avx", "sse4_2") and fp["cpu_vendor"]
    monkeypatch.delenv("XLA_FLAGS")
    assert digests.fingerprint()["xla_cpu_max_isa"] == ""


def test_an_entry_is_claimed_only_by_its_exact_platform():
    _, meta = digests.reference()
    fp = dict(meta["platform"])
    assert digests.comparison_path(fp) == "exact"
    for field, other in (("cpu_model", None), ("cpu_isa", "avx2"), ("cpu_devices", 1), ("xla_cpu_max_isa", "AVX")):
        assert digests.comparison_path({**fp, field: other}) == "tolerance", field


def test_the_reference_holds_the_bits_recorded_for_its_fingerprint():
    # The arrays and the digests of the reference machine describe the same results.
    _, meta = digests.reference()
    entry = digests.recorded()["fingerprints"][meta["fingerprint"]]
    assert entry["platform"] == meta["platform"]
    for kind, name in digests.cases():
        assert digests.check_exact(kind, name, digests.reference_result(kind, name), entry) == [], name


def test_the_intel_record_differs_from_the_reference_in_two_arrays_and_in_plain_ab():
    # Same versions, another CPU: two arrays moved (see the docstring of digests.py); and plain AB
    # (S = 1, both: the sweep "ab", the trace "ab-workers"), whose velocity sum the reference rounds
    # in the order braked optax SGD does (the Intel record predates it).
    (key, entry), = [(k, e) for k, e in digests.recorded()["fingerprints"].items()
                     if e["platform"]["cpu_vendor"] == "GenuineIntel" and e["platform"]["jax"] == "0.10.2"]
    assert entry["platform"]["cpu_model"] is None and key == digests.fingerprint_key(entry["platform"])
    moved = sorted(problem.split(":")[0] for kind, name in digests.cases()
                   for problem in digests.check_exact(kind, name, digests.reference_result(kind, name), entry))
    plain_ab = [m for m in moved if m.startswith(("sweeps/ab/", "traces/ab-workers/"))]
    assert sorted(set(moved) - set(plain_ab)) == ["sweeps/ab-vel-only-rotated/loss"] and len(plain_ab) >= 3


def test_the_records_are_small_and_keyed_by_their_platforms():
    assert digests.REFERENCE.stat().st_size < 400_000
    arrays, meta = digests.reference()
    assert all(a.dtype in (np.float64, np.int64) for a in arrays.values())
    assert {k.rsplit("/", 1)[0] for k in arrays} == {f"{kind}/{name}" for kind, name in digests.cases()}
    for key, entry in digests.recorded()["fingerprints"].items():
        assert key == digests.fingerprint_key(entry["platform"])


def changed(kind, name, array, index, f) -> list:
    """The tolerance path's problems when one element of a case's reference is changed by f."""
    ref = digests.reference_result(kind, name)
    arrays = {n: a.copy() for n, a in ref.arrays.items()}
    arrays[array][index] = f(arrays[array][index])
    return digests.check_tolerance(kind, name, digests.Result(arrays, ref.dims), ref)


def test_the_tolerance_path_catches_what_rounding_cannot_explain():
    ref = digests.reference_result("sweeps", "sgdm")
    assert digests.check_tolerance("sweeps", "sgdm", ref, ref) == []
    reached = tuple(np.argwhere(ref.arrays["status"] == 1)[0])
    rtol = digests.LOSS_RTOL["sgdm"]
    assert changed("sweeps", "sgdm", "loss", reached, lambda x: x * (1 + rtol / 2)) == []
    assert changed("sweeps", "sgdm", "loss", reached, lambda x: x * (1 + 2 * rtol))
    assert changed("sweeps", "sgdm", "steps", reached, lambda x: x + 1)
    assert changed("sweeps", "sgdm", "status", reached, lambda x: 0)
    # A cell declared chaotic may move freely; the same change elsewhere in the case may not.
    ab = digests.reference_result("sweeps", "ab")
    chaotic = digests.chaotic_mask("ab", ab.dims, ab.arrays["steps"].shape)
    assert changed("sweeps", "ab", "steps", tuple(np.argwhere(chaotic)[0]), lambda x: x + 100) == []
    assert changed("sweeps", "ab", "steps", tuple(np.argwhere(~chaotic)[0]), lambda x: x + 1)
    trace = ("traces", "ab-workers")
    assert changed(*trace, "energy", (5, 0), lambda x: x * (1 + digests.TRACE_RTOL / 2)) == []
    assert changed(*trace, "energy", (5, 0), lambda x: x * (1 + 3 * digests.TRACE_RTOL))
    assert changed(*trace, "delay", 7, lambda x: x + 1)
    assert changed(*trace, "steps_to_target", (), lambda x: x + 1)
    fullest = int(np.argmax(digests.reference_result(*trace).arrays["alpha_histogram"]))
    assert changed(*trace, "alpha_histogram", fullest, lambda x: x - 2)


def test_the_exact_path_catches_one_ulp():
    _, meta = digests.reference()
    entry = digests.recorded()["fingerprints"][meta["fingerprint"]]
    ref = digests.reference_result("sweeps", "workers-long")
    loss = ref.arrays["loss"].copy()
    loss.flat[0] = np.nextafter(loss.flat[0], np.inf)
    moved = digests.check_exact("sweeps", "workers-long", digests.Result({**ref.arrays, "loss": loss}, ref.dims), entry)
    assert [p.split(":")[0] for p in moved] == ["sweeps/workers-long/loss"]
    # ... which the tolerance path accepts.
    assert digests.check_tolerance("sweeps", "workers-long", digests.Result({**ref.arrays, "loss": loss}, ref.dims),
                                   ref) == []


def test_the_chaotic_cells_are_real_cells_of_their_cases():
    for name, selections in digests.CHAOTIC.items():
        ref = digests.reference_result("sweeps", name)
        for selection, why in selections:
            assert why and digests.select(selection, ref.dims, ref.arrays["steps"].shape).any(), (name, selection)
    with pytest.raises(KeyError):
        digests.select({"rho": 0}, ("delay", "lr"), (2, 5))


def test_under_another_xla_instruction_set_the_tolerance_path_passes():
    # SSE4_2 has no FMA: every array of every case changes bits, so this is the tolerance path at
    # its hardest. The shared compilation cache (tests/conftest.py) must not hand back programs
    # compiled for the native ISA: the results must differ from the reference's bits.
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_cpu_max_isa=")]
    env = {**os.environ, "XLA_FLAGS": " ".join(flags + ["--xla_cpu_max_isa=SSE4_2"])}
    env.pop(digests.OVERRIDE, None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(digests.PATH.parents[1] / "digests.py"), "--check"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report = json.loads(done.stdout)
    cases = report["cases"]
    print(f"{report['fingerprint']}: path {report['path']} in {time.perf_counter() - start:.0f} s; "
          f"{sum(bool(c['arrays_differing_in_bits']) for c in cases.values())} of {len(cases)} cases differ in bits, "
          f"{sum(len(c.get('cells_moved', [])) for c in cases.values())} cells moved")
    assert report["platform"]["xla_cpu_max_isa"] == "SSE4_2" and report["path"] == "tolerance"
    assert {case: c["problems"] for case, c in cases.items()} == {case: [] for case in cases}
    assert report["passed"] and done.returncode == 0
    assert sum(bool(c["arrays_differing_in_bits"]) for c in cases.values()) >= len(cases) - 2
    assert all(c.get("cells_moved_outside_chaotic", []) == [] for c in cases.values())
