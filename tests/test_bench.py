"""The benchmark runs and reports what it promises (its numbers are read by people, not asserted)."""

import json

from nqm.cli import main


def test_bench_prints_a_json_summary_last(capsys):
    assert main(["bench", "--quick"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(last)
    for key in ("probe_elem_steps_per_s", "numpy_elem_steps_per_s", "sgdm_elem_steps_per_s", "ab_elem_steps_per_s",
                "sgdm_vs_probe", "ab_vs_probe", "sgdm_vs_numpy", "early_exit_efficiency", "devices", "backend"):
        assert key in result
    assert result["devices"] == 2 and result["backend"] == "cpu"
    assert 0 < result["early_exit_efficiency"] and all(result[k] > 0 for k in result if k.endswith("_per_s"))
