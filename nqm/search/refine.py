"""The refinement behind :func:`nqm.best`: a lattice over the box, a book of the evaluated points,
and pattern-search tracks that propose each round's points (the design is told in :mod:`nqm.search`).

Pure bookkeeping (numpy only): the caller evaluates the points a round asks for and stores them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import NamedTuple

import numpy as np

from nqm.conventions import DECAYS
from nqm.status import DIVERGED, REACHED, SKIPPED


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


LEVELS = 8  # halvings of a coarse gap: a 9-point lr box of 200x refines down to steps of ~0.3 %


@dataclasses.dataclass
class Track:
    """A pattern search: its centre (lattice coordinates), its step (lattice units), the
    directions it polls at ``scales`` steps a round (step, step/2, …), and the ``(point, step)``
    pairs it tried this round."""

    centre: tuple
    step: int
    directions: list
    scales: int
    tried: list = dataclasses.field(default_factory=list)


class Book:
    """Every evaluated point in evaluation order, keyed by its exact values, with its T: the median
    over seeds of the steps where every seed settled, ∞ where one did not (an answer must hold for
    each draw of the noise), and ``median``: that median with an unsettled seed counting as ∞."""

    def __init__(self):
        self.index, self.rows, self.round, self.nudge = {}, [], [], []
        self.steps, self.status, self.loss, self.t, self.median, self.rest = [], [], [], [], [], []
        self.cells = 0

    def add(self, points, nudges, round_number, steps, status, loss):
        for j, (x, nudge) in enumerate(zip(points, nudges)):
            self.index[x] = len(self.rows)
            self.rows.append(x)
            self.round.append(round_number)
            self.nudge.append(nudge)
            self.steps.append(steps[:, j])
            self.status.append(status[:, j])
            self.loss.append(loss[:, j])
            per_seed = self.per_seed(len(self.rows) - 1)
            self.median.append(float(np.median(per_seed)))
            self.t.append(self.median[-1] if np.isfinite(per_seed).all() else math.inf)
            # where T is ∞, how close it came: the median final loss, a diverged seed counting as ∞
            failed = (status[:, j] == DIVERGED) | (status[:, j] == SKIPPED)
            self.rest.append(float(np.median(np.where(failed, np.inf, loss[:, j]))))
        self.cells += int(np.count_nonzero(status != SKIPPED))  # the cells run (a skipped point costs nothing)

    def t_of(self, x) -> float | None:
        row = self.index.get(x)
        return None if row is None else self.t[row]

    def per_seed(self, row: int) -> np.ndarray:
        """Each seed's steps at a point, ∞ where that seed did not converge (settle)."""
        return np.where(self.status[row] == REACHED, self.steps[row], np.inf).astype(np.float64)


class Refinement:
    """The coarse grid, then each round's new points, and the answer.

    ``settings`` (:class:`nqm.search.setup.Settings`) give ``delta`` (the nudge, or ``None``),
    ``seeds``, ``tol``, ``width`` and ``patience``; ``box`` (:class:`nqm.search.setup.Box`) gives
    ``names`` (every parameter), ``fixed`` (name → value), ``axes`` (the searched :class:`Axis`),
    ``coarse`` and ``max_cells``. The box is an integer lattice of
    ``unit = 2**LEVELS`` units per coarse gap, so every search point has exact values.
    """

    def __init__(self, settings, box):
        self.settings, self.box = settings, box
        self.k = len(box.axes)
        self.unit = 2**LEVELS
        self.size = (box.coarse - 1) * self.unit
        self.axis_of = {a.name: a for a in box.axes}
        self.directions = [d for d in itertools.product((-1, 0, 1), repeat=self.k) if any(d)]
        # A robust candidate costs its 3^k-point neighbourhood: beyond two axes, robust tracks poll
        # only the 2k compass points, at one step a round.
        compass = [d for d in self.directions if sum(map(abs, d)) == 1]
        self.pattern = {False: (self.directions, 2), True: (self.directions, 2) if self.k <= 2 else (compass, 1)}
        self.kinds = (False, True) if settings.delta is not None else (False,)  # plain T, robust T
        self.book, self.lattice = Book(), {}  # lattice: values -> lattice coordinates of search points
        # Tracks by kind: plain (False), robust (True), and "edge": plain ones along lines.
        self.tracks = {kind: [] for kind in self.kinds + ("edge",)}
        names = [a.name for a in box.axes]
        self.edge_axis = next((names.index(n) for n in ("lr", "momentum") if n in names), None) if self.k > 1 else None
        self.along = [tuple(s if i == self.edge_axis else 0 for i in range(self.k)) for s in (1, -1)]
        self.split = set()  # pairs of neighbouring lines split by a new one
        self.visited = {kind: [] for kind in self.kinds}  # every centre a track has held
        self.bests = {kind: math.inf for kind in self.kinds}
        self.rounds, self.stale, self.stopped = 0, 0, ""
        self.misses, self.seeded = 0, False  # rounds without a robust point; whether the last one sought it

    # ------------------------------------------------------------------ points and their values

    def values(self, q) -> tuple:
        """The full parameter tuple (in ``names`` order) of lattice point ``q``."""
        given = dict(self.box.fixed)
        given.update((a.name, a.at(c, self.size)) for a, c in zip(self.box.axes, q))
        x = tuple(float(given[n]) for n in self.box.names)
        self.lattice.setdefault(x, tuple(q))
        return x

    def neighbourhood(self, x) -> list:
        """``x`` and its nudges: every combination of ``v(1 ± δ)`` per searched parameter (x first)."""
        options = [(v,) + self.axis_of[n].nudged(v, self.settings.delta) if n in self.axis_of else (v,)
                   for n, v in zip(self.box.names, x)]
        return list(dict.fromkeys(itertools.product(*options)))

    def robust_t(self, x) -> float | None:
        """The robust T of ``x``: the median over seeds of :meth:`robust_seeds`; ``None`` while some
        neighbours are unknown (∞ as soon as ``x`` failed in a seed or a neighbour in most seeds)."""
        per_seed = self.robust_seeds(x)
        return None if per_seed is None else float(np.median(per_seed))

    def robust_seeds(self, x) -> np.ndarray | None:
        """Each seed's own robust T at ``x``: the largest of its steps over the neighbourhood (∞ where
        a neighbour did not converge in that seed); ``None`` while some neighbours are unknown, or
        ∞ in every seed once ``x`` itself failed in a seed or a known neighbour in most seeds."""
        around = self.neighbourhood(x)
        rows = [row for y in around if (row := self.book.index.get(y)) is not None]
        centre = self.book.t_of(x)
        if (centre is not None and math.isinf(centre)) or any(math.isinf(self.book.median[row]) for row in rows):
            return np.full(self.settings.seeds.size, np.inf)
        if len(rows) < len(around):
            return None
        return np.max([self.book.per_seed(row) for row in rows], axis=0)

    def score(self, q, robust: bool) -> float:
        """The objective at lattice point ``q`` (T, or robust T); ∞ where unknown."""
        x = self.values(q)
        value = self.robust_t(x) if robust else self.book.t_of(x)
        return math.inf if value is None else value

    def key(self, q, robust: bool) -> tuple:
        """What tracks minimise: the objective, then (plain tracks, where T is ∞) the final loss,
        which leads from cells out of budget toward a thin band of converging ones."""
        row = None if robust else self.book.index.get(self.values(q))
        return (self.score(q, robust), math.inf if row is None else self.book.rest[row])

    def _started(self, key: tuple) -> bool:
        """Whether a track may start at a point of this key: it converged, or (while no point has)
        it ran out of budget."""
        return math.isfinite(key[0]) or (math.isinf(self.bests[False]) and math.isfinite(key[1]))

    def _search_rows(self) -> list:
        """``(row, lattice coordinates)`` of every evaluated search point (not the nudges)."""
        return [(row, self.lattice[x]) for row, x in enumerate(self.book.rows) if not self.book.nudge[row]]

    # ------------------------------------------------------------------ rounds

    def coarse_grid(self) -> list:
        return [self.values(q) for q in itertools.product(range(0, self.size + 1, self.unit), repeat=self.k)]

    def store(self, points, nudges, steps, status, loss):
        self.book.add(points, [False] * len(points) if nudges is None else nudges, self.rounds, steps, status, loss)

    def next_round(self) -> tuple[list, list]:
        """The next round's new points and whether each is only a nudge; empty once the search stops."""
        if not self._improving():
            return [], []
        while True:
            self._update()
            self._refill()
            groups, alive = self._plan()
            if not alive:
                self.stopped = "refined"
                return [], []
            points, wanted = self._choose(groups)
            if points:
                self.rounds += 1
                return points, [x not in self.lattice for x in points]
            if wanted:
                self.stopped = "max_cells"
                return [], []
            # every point the tracks asked for is known already: move or shrink them, and ask again

    def _improving(self) -> bool:
        """Update the best values; false once ``patience`` rounds in a row improved none by ``tol``."""
        improved = False
        for kind in self.kinds:
            new = min((self.score(q, kind) for _, q in self._search_rows()), default=math.inf)
            old, self.bests[kind] = self.bests[kind], new
            improved |= new < old and (math.isinf(old) or old - new >= self.settings.tol * old)
        robust = True in self.kinds and math.isinf(self.bests[True]) and self.seeded
        self.misses = self.misses + 1 if robust else 0
        searching = robust or math.isinf(self.bests[False])
        if self.rounds and not searching:  # (no round is stale while a first point is sought)
            self.stale = 0 if improved else self.stale + 1
            self.stopped = "tol" if self.stale >= self.settings.patience else ""
        return not self.stopped

    def _update(self):
        """Move each track to the best point it tried if that beats its centre, doubling the step
        that found it (so a track can travel along the edge); else shrink its step below the
        finest it polled. Tracks whose step is gone, or that meet another, end."""
        for kind, tracks in self.tracks.items():
            kept, robust = [], kind is True
            for track in tracks:
                best, value, scale = track.centre, self.key(track.centre, robust), None
                for q, step in track.tried:
                    if (v := self.key(q, robust)) < value:
                        best, value, scale = q, v, step
                if scale is None:
                    track.step >>= track.scales
                else:
                    track.centre, track.step = best, min(2 * scale, self.unit // 2)
                    self.visited.get(kind, []).append(best)
                track.tried = []
                if track.step and all(t.centre != track.centre for t in kept):
                    kept.append(track)
            self.tracks[kind] = kept
        if self.edge_axis is not None:
            self._split_lines()

    def _lines(self) -> dict:
        """The best evaluated search point of every line along the edge axis: line → (key, point)."""
        axis, lines = self.edge_axis, {}
        for row, q in self._search_rows():
            line, key = q[:axis] + q[axis + 1:], (self.book.t[row], self.book.rest[row])
            if line not in lines or key < lines[line][0]:
                lines[line] = (key, q)
        return lines

    def _split_lines(self):
        """Edge tracks. After the coarse grid, one on every coarse line along the edge axis (lr if
        searched, else momentum), at the line's best point, polling along the line only: they find
        the edge on every line, hence the best stretch of the edge, not only the neighbourhood of
        the best coarse point. Then, each round, ``width`` new lines halfway between two
        neighbouring lines with the best edges (refinement along the edge), started between their
        best points with a step that spans both."""
        axis, lines = self.edge_axis, self._lines()
        if self.rounds == 0:
            starts = sorted((key, q) for key, q in lines.values() if self._started(key))
            self.tracks["edge"] = [Track(q, self.unit // 2, self.along, 2) for _, q in starts]
            return
        pairs = []
        for key in lines:
            for j in range(self.k - 1):  # the next line above along each other axis
                rest = key[:j] + key[j + 1:]
                above = [o for o in lines if o[j] > key[j] and o[:j] + o[j + 1:] == rest]
                if above:
                    other = min(above, key=lambda o: o[j])
                    ((ta, _), qa), ((tb, _), qb) = sorted((lines[key], lines[other]))
                    if other[j] - key[j] >= 2 and math.isfinite(tb) and (key, other) not in self.split:
                        pairs.append((ta, tb, key, other, qa, qb, j))
        for _, _, key, other, qa, qb, j in sorted(pairs)[: self.settings.width]:
            self.split.add((key, other))
            middle = list(key)
            middle[j] = (key[j] + other[j]) // 2
            centre = tuple(middle[:axis]) + ((qa[axis] + qb[axis]) // 2,) + tuple(middle[axis:])
            step = max(self.unit >> 3, abs(qa[axis] - qb[axis]))
            self.tracks["edge"].append(Track(centre, step, self.along, 2))

    def _refill(self):
        """New tracks at the best points (finite objective) at least a coarse gap away from every
        centre held so far, so that they explore other cells (other stretches of the edge)."""
        for kind in self.kinds:
            need = self.settings.width - len(self.tracks[kind])
            ranked = sorted((self.key(q, kind), row, q) for row, q in self._search_rows()) if need > 0 else []
            for value, _, q in ranked:
                if need == 0 or not self._started(value):
                    break
                # (robust tracks: anywhere but where one was, since the seeds find new robust points)
                held = [t.centre for t in self.tracks[kind]] if kind else self.visited[kind]
                held = np.array(held).reshape(-1, self.k)
                if q in self.visited[kind] or held.size and np.abs(held - np.array(q)).max(1).min() < self.unit:
                    continue
                self.tracks[kind].append(Track(q, self.unit // 2, *self.pattern[kind]))
                self.visited[kind].append(q)
                need -= 1

    def _plan(self) -> tuple[list, bool]:
        """This round's groups of new points, each all-or-nothing (a robust candidate needs its
        whole neighbourhood): the best plain track, the robust seeds, the best robust track, the
        next ones, then the edge tracks; and whether anything is left to try."""
        groups, alive = [], False
        for rank in range(self.settings.width):
            for kind in self.kinds:
                if rank < len(self.tracks[kind]):
                    alive = True
                    groups += self._poll(self.tracks[kind][rank], kind)
                if kind and rank == 0:  # until a robust point is found, twice as many each round
                    seeds = self._robust_seeds(self.settings.width << min(self.misses, 4))
                    alive, self.seeded = alive or bool(seeds), bool(seeds)
                    groups += [[y for y in self.neighbourhood(x) if y not in self.book.index] for x in seeds]
        for track in self.tracks["edge"]:
            alive = True
            groups += self._poll(track, False)
        return [g for g in groups if g], alive

    def _poll(self, track: Track, robust: bool) -> list:
        """The new points of every lattice point the track polls this round (a robust track's
        candidates with their neighbourhoods, skipping those a known neighbour rules out)."""
        centre, groups = self.score(track.centre, robust), []
        if self.values(track.centre) not in self.book.index:  # a new line's first point
            groups.append([self.values(track.centre)])
        steps = [track.step >> j for j in range(track.scales) if track.step >> j]
        for step, d in itertools.product(steps, track.directions):
            q = tuple(c + step * s for c, s in zip(track.centre, d))
            if not all(0 <= c <= self.size for c in q):
                continue
            x = self.values(q)
            wanted = self.neighbourhood(x) if robust else [x]
            known = [t for y in wanted if (t := self.book.t_of(y)) is not None]
            if robust and known and max(known) >= centre:
                continue  # its robust T cannot beat the centre's
            track.tried.append((q, step))
            groups.append([y for y in wanted if y not in self.book.index])
        return groups

    def _robust_seeds(self, count: int) -> list:
        """Points without a known robust T whose neighbourhoods are worth evaluating, by T: those
        with a failed point inside their δ-box (likely on a knife edge) last; none whose robust T
        cannot beat the best one."""
        bound = self.bests[True]
        order = sorted((self.book.t[row], row) for row, _ in self._search_rows() if self.book.t[row] < bound)
        failed = np.array([x for x, t in zip(self.book.rows, self.book.t) if math.isinf(t)], np.float64)
        clear, suspects = [], []
        for _, row in order:
            x = self.book.rows[row]
            around = self.neighbourhood(x)
            if self.robust_t(x) is not None or max(self.book.t_of(y) or 0.0 for y in around) >= bound:
                continue
            box = np.array(around)
            inside = failed.size and np.all((failed >= box.min(0)) & (failed <= box.max(0)), axis=1).any()
            (suspects if inside else clear).append(x)
            if len(clear) >= count:
                break
        return (clear + suspects)[:count]

    def _choose(self, groups) -> tuple[list, bool]:
        """The groups that fit in what is left of ``max_cells``, in order; whether any did not."""
        left = self.box.max_cells - self.book.cells
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
        for kind in self.kinds:
            prefix = "robust" if kind else "best"
            value, row, _ = min(((self.score(q, kind), row, q) for row, q in self._search_rows()),
                                default=(math.inf, None, None))
            found = math.isfinite(value)
            out["robust_best_steps" if kind else "best_steps"] = value
            out.update({f"{prefix}_{n}": self.book.rows[row][i] if found else math.nan
                        for i, n in enumerate(self.box.names)})
            per_seed = (self.robust_seeds(self.book.rows[row]) if kind else self.book.per_seed(row)) if found \
                else np.full(1, np.inf)
            seeds = "robust_seeds" if kind else "seeds"
            out.update({f"{seeds}_median": float(np.median(per_seed)), f"{seeds}_min": float(per_seed.min()),
                        f"{seeds}_max": float(per_seed.max())})
        return out

    def describe(self) -> str:
        shown = {"T*_best": self.bests[False], **({"robust": self.bests[True]} if True in self.kinds else {})}
        return ", ".join(f"{k} {v:g}" for k, v in shown.items())
