"""Every number the README and the docs quote from a figure is the figure's data: each carries a marker
``<!--claim:FIGURE/KEY-->`` right after it, and must equal ``claims[KEY]`` of
``figures/FIGURE.claims.json`` as rounded in the README (commas removed, to the decimals shown).
The stored claims must also be what the figure script's ``claims(data)`` gives for its data file."""

import importlib.util
import json
import math
import pathlib
import re

import pytest

from nqm.io import json_plain
from nqm.plots.script import existing_data, read_data

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The README and the documentation pages, read as one text (the architecture guide only shows the
# marker's syntax, as an example).
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "architecture.md")]
README = "\n".join(path.read_text() for path in PAGES)
MARKER = re.compile(r"<!--claim:([^/\s]+)/(\S+?)-->")
# A number (digits with optional thousands commas and decimals), then at most one space, then a marker.
QUOTED = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?) ?<!--claim:([^/\s]+)/(\S+?)-->")
MARKED = sorted({figure for figure, _ in MARKER.findall(README)})


def matches(written: str, claim: float) -> bool:
    """``written`` is ``claim`` rounded to the decimals written (a tie may round either way)."""
    decimals = len(written.split(".")[1]) if "." in written else 0
    value = float(written.replace(",", ""))
    return abs(claim - value) <= 0.5 * 10.0 ** -decimals * (1 + 1e-9)


def _claims(figure):
    path = ROOT / "figures" / f"{figure}.claims.json"
    assert path.is_file(), f"{path.name} missing: run python scripts/{figure}.py (or --redraw)"
    return json.loads(path.read_text())["claims"]


def test_the_rounding_rule():
    assert matches("5,556", 5556.0) and matches("751", 750.63) and matches("0.99", 0.9876)
    assert matches("1.7", 1.749) and not matches("1.7", 1.76) and not matches("5,556", 5557.0)
    assert matches("10,528", 10527.63) and not matches("19", 19.6)


def test_every_marker_follows_a_number():
    assert len(QUOTED.findall(README)) == len(MARKER.findall(README)) > 0


@pytest.mark.parametrize("number, figure, key", QUOTED.findall(README), ids=lambda x: x)
def test_a_quoted_number_is_its_figures_claim(number, figure, key):
    claims = _claims(figure)
    assert key in claims, f"figures/{figure}.claims.json has no {key!r}"
    value = claims[key]
    assert value is not None and math.isfinite(value), f"{figure}/{key} is not a number: {value}"
    assert matches(number, value), f"README says {number}, {figure}/{key} is {value}"


@pytest.mark.parametrize("figure", MARKED)
def test_stored_claims_are_those_of_the_data_file(figure):
    path = ROOT / "scripts" / f"{figure}.py"
    spec = importlib.util.spec_from_file_location(figure, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = read_data(existing_data(ROOT / "figures" / f"{figure}.png"))
    assert json_plain(module.claims(data)) == _claims(figure)


SEARCHED = sorted(p for p in (ROOT / "figures").glob("*.json") if not p.name.endswith(".claims.json"))


@pytest.mark.parametrize("path", SEARCHED, ids=lambda p: p.stem)
def test_every_committed_answer_over_seeds_settles_in_every_seed(path):
    """With seeds, an answer of nqm.best is a point that settles in every seed: each committed search
    over seeds has a finite spread at its answer (a seed that did not settle would be null)."""
    for key, found in json.loads(path.read_text()).get("searches", {}).items():
        if found["regime"]["seeds"] > 1 and found["t_star"] is not None:
            assert found["seeds"]["max"] is not None, f"{path.stem}/{key}: an answer with an unsettled seed"


def test_every_committed_batch_size_answer_settles_in_every_seed():
    import numpy as np
    import xarray as xr

    with xr.open_dataset(ROOT / "figures" / "fig_batch_delay_mc.nc") as ds:
        found = np.isfinite(ds.steps.values)
        assert found.any() and np.isfinite(ds.steps_max.values[found]).all()
        assert ((ds.answered.values == 1) == found).all()  # a search without an answer has no value


def test_no_quoted_number_comes_from_a_search_that_missed():
    """A number the README or a guide quotes from a figure of searches is that of a search that
    answered (nqm.search.answered: stopped on its tolerance, off its box's edges), never of one
    that missed — a miss is no value."""
    from nqm.search.answers import answered

    quoted = [(figure, key) for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
              for figure, key in MARKER.findall(path.read_text())]
    for figure, key in quoted:
        data = ROOT / "figures" / f"{figure}.json"
        searches = json.loads(data.read_text()).get("searches", {}) if data.is_file() else {}
        owner = max((name for name in searches if key.startswith(name + "_")), key=len, default=None)
        if owner is not None and not key.endswith(("_answered", "_cells")):
            assert answered(searches[owner]), f"{figure}/{key} quotes the search {owner}, which missed"


# The figures whose statuses or answers come from the settled test (not the exact mode's alone, not
# a real model's own rule), and the release whose settled test the committed data should be from.
SETTLED_FIGURES = ("fig1_heatmaps", "fig1_paper", "fig_ab13_microsteps", "fig_ab14_elementwise", "fig_adam_braking",
                   "fig_adam_stability", "fig_batch_delay_mc", "fig_choices_batch", "fig_methods_vs_delay",
                   "fig_noise_question", "fig_rho_landscape")
SETTLED_TEST_OF = "0.4.0"
OLDER = re.compile(r"<!--older-settled-test-->(.*?)<!--/older-settled-test-->", re.S)


def _computed_by(figure: str) -> str:
    data = read_data(existing_data(ROOT / "figures" / f"{figure}.png"))
    return data.attrs["nqm_version"] if hasattr(data, "attrs") else data["regime"]["nqm_version"]


def test_a_figure_from_an_older_settled_test_is_said_to_be():
    """The results page lists, between its markers, every figure whose data an older settled test
    judged, with the release that did (``fig_x`` (0.3.0)), and no other."""
    said = OLDER.findall((ROOT / "docs" / "results.md").read_text())
    assert len(said) == 1, "docs/results.md: one <!--older-settled-test--> … <!--/older-settled-test--> list"
    listed = dict(re.findall(r"`(fig\w+)` \((\d+\.\d+\.\d+)\)", said[0]))
    older = {figure: version for figure in SETTLED_FIGURES if (version := _computed_by(figure)) != SETTLED_TEST_OF}
    assert listed == older
