"""nqm.search.refine: the refinement as immutable state advanced in small pure steps, its tracks
by name, on nqm.search.lattice and nqm.search.book; and nqm.best's arguments as one setup.Request
(run on a made-up T, no engine)."""

import dataclasses
import inspect

import numpy as np
import pytest

import nqm
from nqm.search import setup
from nqm.search.book import Book
from nqm.search.lattice import UNIT, Lattice
from nqm.search.refine import Axis, Lane, Refinement, Track
from nqm.status import DIVERGED, REACHED

BOX = setup.Box(("lr", "momentum"), {}, (Axis("lr", 0.01, 4.0), Axis("momentum", 0.0, 0.99)), 5, 3000, {})


def settings(delta=0.1, width=1):
    return setup.Settings("first", np.arange(2), delta, 0.01, width, 3, 0.0, False)


def evaluated(points):
    """A made-up T: ``40 / (lr (1 + m))`` steps below the edge ``lr < 1.5 (1 − m)``, diverged past it;
    the second seed one step slower."""
    x = np.array(points, np.float64)
    lr, m = x[:, 0], x[:, 1]
    settled = lr < 1.5 * (1 - m)
    steps = np.stack([np.ceil(40 / (lr * (1 + m))) + s for s in (0, 1)]).astype(np.int64)
    status = np.where(settled, REACHED, DIVERGED).astype(np.int8)[None].repeat(2, 0)
    return steps, status, np.where(settled, 0.0, np.inf)[None].repeat(2, 0)


def searched(refine):
    while refine.asked:
        refine = refine.stored(*evaluated(refine.asked)).next_round()
    return refine


def test_each_step_gives_a_new_state_and_leaves_the_last_as_it_was():
    start = Refinement.start(settings(), BOX)
    assert len(start.asked) == 25 and not any(start.nudges) and start.book.rows == ()  # the coarse grid
    stored = start.stored(*evaluated(start.asked))
    after = stored.next_round()
    assert start.book.rows == () and len(start.asked) == 25  # untouched
    assert stored.asked == () and stored.rounds == 0 and len(stored.book.rows) == 25
    assert after.rounds == 1 and after.asked and after.book is stored.book
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.rounds = 2
    # a state holds no hidden mutable part: searching on from it twice gives one answer
    assert searched(after).answer() == searched(after).answer()
    assert after.rounds == 1 and after.book is stored.book


def test_the_tracks_are_named():
    refine = searched(Refinement.start(settings(width=2), BOX))
    assert [lane.name for lane in refine.lanes] == ["plain", "robust"]
    assert isinstance(refine.plain, Lane) and refine.robust.robust and not refine.plain.robust
    assert all(isinstance(t, Track) for t in refine.plain.tracks + refine.robust.tracks + refine.edge)
    assert refine.stopped in ("tol", "refined", "max_cells") and np.isfinite(refine.answer()["robust_best_steps"])
    plain = searched(Refinement.start(settings(delta=None), BOX))
    assert plain.robust is None and [lane.name for lane in plain.lanes] == ["plain"]
    assert "robust_best_steps" not in plain.answer()


def test_the_lattice_holds_the_box_ends_exactly_and_nudges_every_searched_axis():
    lattice = Lattice.of(BOX, 0.1)
    grid = lattice.coarse_grid()
    assert len(grid) == 25 and lattice.size == 4 * UNIT and lattice.edge_axis == 0  # lr
    assert lattice.values(grid[0]) == (0.01, 0.0) and lattice.values(grid[-1]) == (4.0, 0.99)
    assert lattice.holds((0, lattice.size)) and not lattice.holds((-1, 0))
    around = lattice.neighbourhood((1.0, 0.5))
    assert around[0] == (1.0, 0.5) and len(around) == 9 and (0.9, 1 - 0.5 * 1.1) in around


def test_a_book_grows_into_a_new_book():
    empty = Book()
    steps, status, loss = evaluated([(1.0, 0.0), (3.0, 0.0)])  # settled, diverged
    book = empty.added([(1.0, 0.0), (3.0, 0.0)], [False, True], 0, steps, status, loss)
    assert empty.rows == () and empty.index == {} and empty.cells == 0
    assert book.index == {(1.0, 0.0): 0, (3.0, 0.0): 1} and book.nudge == (False, True) and book.cells == 4
    assert book.t == (40.5, float("inf")) and book.t_of((3.0, 0.0)) == float("inf") and book.t_of((2.0, 0.0)) is None
    assert book.rest == (0.0, float("inf")) and list(book.per_seed(0)) == [40.0, 41.0]


def test_a_search_is_asked_with_one_request_of_nqm_bests_arguments():
    """nqm.best's keywords (its checkpoint, restart and reuse aside) are setup.Request's fields."""
    given = [p for p in inspect.signature(nqm.best).parameters if p not in ("checkpoint", "restart", "reuse")]
    assert [f.name for f in dataclasses.fields(setup.Request)] == given
