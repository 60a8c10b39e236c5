"""Thresholds and the exact mode where they used to break: extreme pmf weights, ARPACK's failures,
an almost-sure scan at tiny x and states that collapse to 0, delays whose matrices do not fit in
memory, and simulated thresholds whose budget no gradient outlives."""

import numpy as np
import pytest

import nqm
from nqm import delays, expected
from nqm.cli import main
from nqm.errors import NqmError
from nqm.thresholds import derived, polynomials


def _table(capsys, argv) -> list[str]:
    """Run ``nqm threshold …``: exit 0, nothing on stderr; the printed table's lines."""
    code = main(["threshold", *argv])
    out, err = capsys.readouterr()
    assert code == 0 and err.strip() == "", err
    return out.strip().splitlines()


def _refused(capsys, argv, files=()) -> str:
    """Run ``argv``: exit 2, one error line, no traceback, ``files`` byte-identical."""
    before = {p: p.read_bytes() for p in files}
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("nqm: error: ") and "Traceback" not in err[0], err
    assert {p: p.read_bytes() for p in files} == before
    return err[0]


# ----------------------------------------------------------------------------- pmf weights (finding 5)


@pytest.mark.parametrize("weights", ["1e308,0,1e308", "1e-320,0,1e-320", "1.7e308,0,1.7e308"])
def test_pmf_weights_whose_sum_overflows_or_underflows_are_normalised(weights):
    process = delays.process(f"pmf:{weights}")
    np.testing.assert_array_equal(process.pmf(), [0.5, 0.0, 0.5])
    lags, _ = process.schedule(0, 1000)
    assert set(np.unique(lags)) == {0, 2}  # not every step at delay 0
    assert derived.threshold("sgd", delay=f"pmf:{weights}") == derived.threshold("sgd", delay="pmf:1,0,1")
    same = [expected.steady_state_loss(nqm.explicit([1.0, 0.1]), "sgdm", spec, 0.3, 0.5, 0.1)
            for spec in (f"pmf:{weights}", "pmf:1,0,1")]
    assert same[0] == same[1]


def test_ordinary_pmf_weights_keep_their_bits():
    p = np.array([0.2, 0.0, 0.5, 0.3, 0.0])
    np.testing.assert_array_equal(delays.validate_pmf(p), p[:4] / p.sum())


def test_a_weight_that_underflows_when_normalised_is_dropped():
    np.testing.assert_array_equal(delays.pmf("pmf:1e308,0,1e-300"), [1.0])


def test_threshold_and_expected_take_huge_pmf_weights(capsys, tmp_path):
    lines = _table(capsys, ["--method", "sgd", "--delay-dist", "pmf:1e308,0,1e308", "pmf:1,0,1"])
    assert lines[-2].split()[-1] == lines[-1].split()[-1] == "2"
    out = tmp_path / "e.nc"
    code = main(["expected", "--method", "sgd", "--lr", "0.1", "--momentum", "0", "--dim", "20",
                 "--delay-dist", "pmf:1e308,0,1e308", "--max-steps", "200", "--out", str(out)])
    assert code == 0 and "Traceback" not in capsys.readouterr().err
