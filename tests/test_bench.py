"""The benchmark runs and reports what it promises (its numbers are read by people, not asserted)."""

import json

from nqm import bench
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
    assert result["targets_missed"] == bench.missed_targets(result)


def test_check_names_each_missed_target():
    met = {name: floor for name, floor in bench.TARGETS.items()}
    assert bench.missed_targets(met) == []
    short = dict(met, ab_vs_probe=0.2, early_exit_efficiency=float("nan"))
    assert bench.missed_targets(short) == ["ab_vs_probe", "early_exit_efficiency"]
