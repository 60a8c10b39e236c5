"""The refinement behind :func:`nqm.best`: a lattice over the box, a book of the evaluated points,
and pattern-search tracks that propose each round's points (the design is told in :mod:`nqm.search`).

Pure bookkeeping (numpy only), in immutable values: a :class:`Refinement` asks for points, the
caller evaluates them, and ``refine.stored(steps, status, loss).next_round()`` is the next state.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import NamedTuple

import numpy as np

from nqm.conventions import DECAYS
from nqm.search.book import Book
from nqm.search.lattice import UNIT, Lattice, Track


class Axis(NamedTuple):
    """A searched parameter and its box ``[lo, hi]`` (log scale; ``log(1 − x)`` for a decay rate such
    as momentum)."""

    name: str
    lo: float
    hi: float

    def at(self, q: int, size: int) -> float:
        """The value at lattice coordinate ``q`` of ``0 … size`` (the box's ends exactly)."""
        if q in (0, size):
            return self.lo if q == 0 else self.hi
        z = q / size
        if self.name in DECAYS:
            return 1.0 - math.exp(math.log1p(-self.lo) * (1 - z) + math.log1p(-self.hi) * z)
        return math.exp(math.log(self.lo) * (1 - z) + math.log(self.hi) * z)

    def nudged(self, value: float, delta: float) -> tuple[float, float]:
        """The two nudges of ``value``: ``v(1 ± δ)``, or ``1 − (1 − x)(1 ± δ)`` ≥ 0 for a decay rate."""
        if self.name in DECAYS:
            return tuple(max(0.0, 1.0 - (1.0 - value) * (1.0 + s * delta)) for s in (-1, 1))
        return tuple(value * (1.0 + s * delta) for s in (-1, 1))


class Lane(NamedTuple):
    """The free tracks of one objective, ``plain`` T or ``robust`` T: the running ones, every centre
    one has held, and the best value found."""

    name: str
    tracks: tuple = ()
    visited: tuple = ()
    best: float = math.inf

    @property
    def robust(self) -> bool:
        return self.name == "robust"


class Poll(NamedTuple):
    """What polling a track gives: the track with what it tried, the groups of new points it asks
    for, and ``(values, lattice point)`` of every lattice point it reached."""

    track: Track | None
    groups: list
    seen: list


@dataclasses.dataclass(frozen=True)
class Refinement:
    """A search's refinement at one moment, as an immutable value: the points it ``asked`` for (and
    whether each is only a ``nudge``; none once it ``stopped``), its :class:`Book`, its tracks by
    name (the ``plain`` and ``robust`` :class:`Lane`, the ``edge`` tracks along lines) and its counts.

    :meth:`start` asks for the coarse grid; :meth:`stored` keeps the asked points' results;
    :meth:`next_round` asks for the next round's; :meth:`answer` is what was found.
    """

    settings: object  # nqm.search.setup.Settings: delta, seeds, tol, width, patience
    lattice: Lattice
    book: Book = dataclasses.field(default_factory=Book)
    # values -> lattice point, of the coarse grid and every point a track polled: a point asked for is a
    # nudge unless it is one of them
    polled: dict = dataclasses.field(default_factory=dict)
    plain: Lane = Lane("plain")
    robust: Lane | None = None  # with a nudge δ only
    edge: tuple = ()
    split: frozenset = frozenset()  # pairs of neighbouring lines split by a new one
    rounds: int = 0
    stale: int = 0
    stopped: str = ""
    misses: int = 0  # rounds in a row without a robust point
    seeded: bool = False  # whether the last round sought one
    asked: tuple = ()
    nudges: tuple = ()

    @classmethod
    def start(cls, settings, box) -> Refinement:
        """The refinement of a search that asks for its coarse grid."""
        lattice = Lattice.of(box, settings.delta)
        grid = lattice.coarse_grid()
        points = [lattice.values(q) for q in grid]
        robust = None if settings.delta is None else Lane("robust")
        return cls(settings, lattice, polled=_merged({}, zip(points, grid)), robust=robust, asked=tuple(points),
                   nudges=(False,) * len(points))

    @property
    def lanes(self) -> tuple:
        return (self.plain,) if self.robust is None else (self.plain, self.robust)

    # ------------------------------------------------------------------ points and their values

    def robust_t(self, x) -> float | None:
        """The robust T of ``x``: the median over seeds of :meth:`robust_seeds`; ``None`` while some
        neighbours are unknown (∞ as soon as ``x`` failed in a seed or a neighbour in most seeds)."""
        per_seed = self.robust_seeds(x)
        return None if per_seed is None else float(np.median(per_seed))

    def robust_seeds(self, x) -> np.ndarray | None:
        """Each seed's own robust T at ``x``: the largest of its steps over the neighbourhood (∞ where
        a neighbour did not converge in that seed); ``None`` while some neighbours are unknown, or
        ∞ in every seed once ``x`` itself failed in a seed or a known neighbour in most seeds."""
        around = self.lattice.neighbourhood(x)
        rows = [row for y in around if (row := self.book.index.get(y)) is not None]
        centre = self.book.t_of(x)
        if (centre is not None and math.isinf(centre)) or any(math.isinf(self.book.median[row]) for row in rows):
            return np.full(self.settings.seeds.size, np.inf)
        if len(rows) < len(around):
            return None
        return np.max([self.book.per_seed(row) for row in rows], axis=0)

    def score(self, q, robust: bool) -> float:
        """The objective at lattice point ``q`` (T, or robust T); ∞ where unknown."""
        x = self.lattice.values(q)
        value = self.robust_t(x) if robust else self.book.t_of(x)
        return math.inf if value is None else value

    def key(self, q, robust: bool) -> tuple:
        """What tracks minimise: the objective, then (plain tracks, where T is ∞) the final loss,
        which leads from cells out of budget toward a thin band of converging ones."""
        row = None if robust else self.book.index.get(self.lattice.values(q))
        return (self.score(q, robust), math.inf if row is None else self.book.rest[row])

    def _started(self, key: tuple) -> bool:
        """Whether a track may start at a point of this key: it converged, or (while no point has)
        it ran out of budget."""
        return math.isfinite(key[0]) or (math.isinf(self.plain.best) and math.isfinite(key[1]))

    def _search_rows(self) -> list:
        """``(row, lattice coordinates)`` of every evaluated search point (not the nudges)."""
        return [(row, self.polled[x]) for row, x in enumerate(self.book.rows) if not self.book.nudge[row]]

    # ------------------------------------------------------------------ rounds

    def stored(self, steps, status, loss) -> Refinement:
        """This refinement with the asked points' results (each (seeds, points)) in its book."""
        book = self.book.added(self.asked, self.nudges, self.rounds, steps, status, loss)
        return dataclasses.replace(self, book=book, asked=(), nudges=())

    def next_round(self) -> Refinement:
        """The refinement that asks for the next round's new points, or (once it stops) for none."""
        state = self._judged()
        while not state.stopped:
            state, groups, alive = state._moved()._refilled()._planned()
            if not alive:
                return dataclasses.replace(state, stopped="refined")
            points, wanted = state._choose(groups)
            if points:
                return dataclasses.replace(state, rounds=state.rounds + 1, asked=tuple(points),
                                           nudges=tuple(x not in state.polled for x in points))
            if wanted:
                return dataclasses.replace(state, stopped="max_cells")
            # every point the tracks asked for is known already: move or shrink them, and ask again
        return state

    def _judged(self) -> Refinement:
        """The best values updated; stopped on ``tol`` once ``patience`` rounds in a row improved
        none by ``tol``."""
        settings, improved, lanes = self.settings, False, {}
        for lane in self.lanes:
            new = min((self.score(q, lane.robust) for _, q in self._search_rows()), default=math.inf)
            improved |= _improves(new, lane.best, settings.tol)
            lanes[lane.name] = lane._replace(best=new)
        state = dataclasses.replace(self, **lanes)
        robust = state.robust is not None and math.isinf(state.robust.best) and self.seeded
        state = dataclasses.replace(state, misses=self.misses + 1 if robust else 0)
        if self.rounds and not (robust or math.isinf(state.plain.best)):  # (none stale while a first point is sought)
            stale = 0 if improved else self.stale + 1
            state = dataclasses.replace(state, stale=stale, stopped="tol" if stale >= settings.patience else "")
        return state

    def _moved(self) -> Refinement:
        """Every track moved or shrunk (:meth:`Track.moved`), then new edge lines (:meth:`_split_lines`)."""
        lanes = {}
        for lane in self.lanes:
            tracks, moves = self._advanced(lane.tracks, lane.robust)
            lanes[lane.name] = lane._replace(tracks=tracks, visited=lane.visited + moves)
        state = dataclasses.replace(self, edge=self._advanced(self.edge, False)[0], **lanes)
        return state if self.lattice.edge_axis is None else state._split_lines()

    def _advanced(self, tracks, robust: bool) -> tuple[tuple, tuple]:
        """``tracks`` moved or shrunk, less those whose step is gone or that meet another; and the
        centres they moved to."""
        kept, moves = [], []
        for track in tracks:
            moved = track.moved(lambda q: self.key(q, robust))
            if moved.centre != track.centre:
                moves.append(moved.centre)
            if moved.step and all(t.centre != moved.centre for t in kept):
                kept.append(moved)
        return tuple(kept), tuple(moves)

    def _lines(self) -> dict:
        """The best evaluated search point of every line along the edge axis: line → (key, point)."""
        axis, lines = self.lattice.edge_axis, {}
        for row, q in self._search_rows():
            line, key = q[:axis] + q[axis + 1:], (self.book.t[row], self.book.rest[row])
            if line not in lines or key < lines[line][0]:
                lines[line] = (key, q)
        return lines

    def _split_lines(self) -> Refinement:
        """Edge tracks. After the coarse grid, one on every coarse line along the edge axis (lr if
        searched, else momentum), at the line's best point, polling along the line only: they find
        the edge on every line, hence the best stretch of the edge, not only the neighbourhood of
        the best coarse point. Then, each round, ``width`` new lines halfway between two
        neighbouring lines with the best edges (refinement along the edge), started between their
        best points with a step that spans both."""
        lines = self._lines()
        if self.rounds == 0:
            starts = sorted((key, q) for key, q in lines.values() if self._started(key))
            return dataclasses.replace(self, edge=tuple(Track(q, UNIT // 2, self.lattice.along, 2) for _, q in starts))
        chosen = self._pairs(lines)[: self.settings.width]
        return dataclasses.replace(self, edge=self.edge + tuple(self._between(*pair[2:]) for pair in chosen),
                                   split=self.split | {(line, other) for _, _, line, other, *_ in chosen})

    def _pairs(self, lines: dict) -> list:
        """``(T, T, line, other, point, point, j)`` of every two neighbouring lines (``other`` the next
        above ``line`` along the ``j``-th other axis) not split yet, at least two units apart, both
        with a converged best point: those with the best edges first."""
        pairs = []
        for line, j in itertools.product(lines, range(self.lattice.k - 1)):
            above = [o for o in lines if o[j] > line[j] and o[:j] + o[j + 1:] == line[:j] + line[j + 1:]]
            if above:
                other = min(above, key=lambda o: o[j])
                ((ta, _), qa), ((tb, _), qb) = sorted((lines[line], lines[other]))
                if other[j] - line[j] >= 2 and math.isfinite(tb) and (line, other) not in self.split:
                    pairs.append((ta, tb, line, other, qa, qb, j))
        return sorted(pairs)

    def _between(self, line, other, qa, qb, j) -> Track:
        """An edge track on the new line halfway between ``line`` and ``other``, between their best
        points ``qa`` and ``qb``, with a step that spans both."""
        axis, middle = self.lattice.edge_axis, list(line)
        middle[j] = (line[j] + other[j]) // 2
        centre = tuple(middle[:axis]) + ((qa[axis] + qb[axis]) // 2,) + tuple(middle[axis:])
        return Track(centre, max(UNIT >> 3, abs(qa[axis] - qb[axis])), self.lattice.along, 2)

    def _refilled(self) -> Refinement:
        """Each lane's tracks topped up to ``width`` (:meth:`_refill`)."""
        return dataclasses.replace(self, **{lane.name: self._refill(lane) for lane in self.lanes})

    def _refill(self, lane: Lane) -> Lane:
        """New tracks at the best points (finite objective) at least a coarse gap away from every
        centre held so far, so that they explore other cells (other stretches of the edge)."""
        need = self.settings.width - len(lane.tracks)
        if need <= 0:
            return lane
        tracks, visited = list(lane.tracks), list(lane.visited)
        for value, _, q in sorted((self.key(q, lane.robust), row, q) for row, q in self._search_rows()):
            if need == 0 or not self._started(value):
                break
            # (robust tracks: anywhere but where one was, since the seeds find new robust points)
            held = np.array([t.centre for t in tracks] if lane.robust else visited).reshape(-1, self.lattice.k)
            if q in visited or held.size and np.abs(held - np.array(q)).max(1).min() < UNIT:
                continue
            tracks.append(Track(q, UNIT // 2, *self.lattice.pattern(lane.robust)))
            visited.append(q)
            need -= 1
        return lane._replace(tracks=tuple(tracks), visited=tuple(visited))

    def _planned(self) -> tuple[Refinement, list, bool]:
        """This round's groups of new points, each all-or-nothing (a robust candidate needs its
        whole neighbourhood): the tracks' by rank (:meth:`_ranked`), then the edge tracks';
        whether anything is left to try; and the refinement whose tracks hold what they tried."""
        polls = {lane.name: [self._poll(t, lane.robust) for t in lane.tracks] for lane in self.lanes}
        seeds = None if self.robust is None else self._seeds()
        edge = [self._poll(t, False) for t in self.edge]
        order = self._ranked(polls, seeds) + edge
        alive = any(p.track is not None or p.groups for p in order)
        return self._polled(polls, edge, seeds, order), [g for p in order for g in p.groups if g], alive

    def _polled(self, polls: dict, edge: list, seeds: Poll | None, order: list) -> Refinement:
        """This refinement with its tracks as polled (holding what they tried), every lattice point
        they reached (in ``order``), and whether it sought robust seeds."""
        lanes = {lane.name: lane._replace(tracks=tuple(p.track for p in polls[lane.name])) for lane in self.lanes}
        polled = _merged(self.polled, (s for p in order for s in p.seen))
        seeded = self.seeded if seeds is None else bool(seeds.groups)
        return dataclasses.replace(self, polled=polled, edge=tuple(p.track for p in edge), seeded=seeded, **lanes)

    def _ranked(self, polls: dict, seeds: Poll | None) -> list:
        """The lanes' polls by rank: the best plain track's, the best robust track's, the robust
        seeds, then the next tracks'."""
        order = []
        for rank in range(self.settings.width):
            for lane in self.lanes:
                order += polls[lane.name][rank:rank + 1]
                order += [seeds] if lane.robust and rank == 0 else []
        return order

    def _poll(self, track: Track, robust: bool) -> Poll:
        """The new points of every lattice point the track polls this round (a robust track's
        candidates with their neighbourhoods, skipping those a known neighbour rules out)."""
        lattice, index = self.lattice, self.book.index
        centre, bound = lattice.values(track.centre), self.score(track.centre, robust)
        groups = [] if centre in index else [[centre]]  # a new line's first point
        seen, tried = [(centre, track.centre)], []
        for q, step in track.polls():
            if not lattice.holds(q):
                continue
            x = lattice.values(q)
            seen.append((x, q))
            wanted = lattice.neighbourhood(x) if robust else [x]
            known = [t for y in wanted if (t := self.book.t_of(y)) is not None]
            if robust and known and max(known) >= bound:
                continue  # its robust T cannot beat the centre's
            tried.append((q, step))
            groups.append([y for y in wanted if y not in index])
        return Poll(track._replace(tried=tuple(tried)), groups, seen)

    def _seeds(self) -> Poll:
        """The neighbourhoods of the robust seeds: until a robust point is found, twice as many each round."""
        seeds = self._robust_seeds(self.settings.width << min(self.misses, 4))
        return Poll(None, [[y for y in self.lattice.neighbourhood(x) if y not in self.book.index] for x in seeds], [])

    def _robust_seeds(self, count: int) -> list:
        """Points without a known robust T whose neighbourhoods are worth evaluating, by T: those
        with a failed point inside their δ-box (likely on a knife edge) last; none whose robust T
        cannot beat the best one."""
        bound, book = self.robust.best, self.book
        order = sorted((book.t[row], row) for row, _ in self._search_rows() if book.t[row] < bound)
        failed = np.array([x for x, t in zip(book.rows, book.t) if math.isinf(t)], np.float64)
        clear, suspects = [], []
        for _, row in order:
            x = book.rows[row]
            around = self.lattice.neighbourhood(x)
            if self.robust_t(x) is not None or max(book.t_of(y) or 0.0 for y in around) >= bound:
                continue
            (suspects if _inside(failed, around) else clear).append(x)
            if len(clear) >= count:
                break
        return (clear + suspects)[:count]

    def _choose(self, groups) -> tuple[list, bool]:
        """The groups that fit in what is left of ``max_cells``, in order; whether any did not."""
        left = self.lattice.box.max_cells - self.book.cells
        chosen, wanted = {}, False
        for group in groups:
            new = [y for y in group if y not in chosen]
            if (len(chosen) + len(new)) * self.settings.seeds.size <= left:
                chosen.update(dict.fromkeys(new))
            else:
                wanted = True
        return list(chosen), wanted

    # ------------------------------------------------------------------ the answer

    def answer(self) -> dict:
        """``best_steps`` and ``best_<name>``, ``seeds_median/min/max`` at that point and, when
        robust, ``robust_best_steps`` and ``robust_<name>`` (∞ and NaN where nothing converged)."""
        out = {}
        for lane in self.lanes:
            robust = lane.robust
            prefix = "robust" if robust else "best"
            value, row, _ = min(((self.score(q, robust), row, q) for row, q in self._search_rows()),
                                default=(math.inf, None, None))
            found = math.isfinite(value)
            out["robust_best_steps" if robust else "best_steps"] = value
            out.update({f"{prefix}_{n}": self.book.rows[row][i] if found else math.nan
                        for i, n in enumerate(self.lattice.box.names)})
            per_seed = (self.robust_seeds(self.book.rows[row]) if robust else self.book.per_seed(row)) if found \
                else np.full(1, np.inf)
            seeds = "robust_seeds" if robust else "seeds"
            out.update({f"{seeds}_median": float(np.median(per_seed)), f"{seeds}_min": float(per_seed.min()),
                        f"{seeds}_max": float(per_seed.max())})
        return out

    def describe(self) -> str:
        shown = {"T*_best": self.plain.best, **({"robust": self.robust.best} if self.robust is not None else {})}
        return ", ".join(f"{k} {v:g}" for k, v in shown.items())


def _improves(new: float, old: float, tol: float) -> bool:
    """Whether ``new`` beats ``old`` by ``tol`` (relative), or is a first finite value."""
    return new < old and (math.isinf(old) or old - new >= tol * old)


def _merged(polled: dict, seen) -> dict:
    """``polled`` and the ``(values, lattice point)`` pairs ``seen`` (values keep the first point that gave them)."""
    merged = dict(polled)
    for x, q in seen:
        merged.setdefault(x, q)
    return merged


def _inside(failed: np.ndarray, around: list) -> bool:
    """Whether a failed point lies inside the box of a neighbourhood (a knife-edge suspect)."""
    box = np.array(around)
    return bool(failed.size and np.all((failed >= box.min(0)) & (failed <= box.max(0)), axis=1).any())
