"""The integer lattice over a search's box, and the pattern-search tracks that move on it
(:mod:`nqm.search.refine`): plain values, never changed in place."""

from __future__ import annotations

import itertools
from typing import NamedTuple

LEVELS = 8  # halvings of a coarse gap: a 9-point lr box of 200x refines down to steps of ~0.3 %
UNIT = 2**LEVELS  # lattice units per coarse gap


class Track(NamedTuple):
    """A pattern search: its centre (lattice coordinates), its step (lattice units), the
    directions it polls at ``scales`` steps a round (step, step/2, …), and the ``(point, step)``
    pairs it tried this round."""

    centre: tuple
    step: int
    directions: tuple
    scales: int
    tried: tuple = ()

    def polls(self):
        """Every ``(point, step)`` it polls this round, in or out of the box."""
        steps = [self.step >> j for j in range(self.scales) if self.step >> j]
        for step, d in itertools.product(steps, self.directions):
            yield tuple(c + step * s for c, s in zip(self.centre, d)), step

    def moved(self, key) -> Track:
        """At the best point it tried if that beats its centre (by ``key``), with twice the step that
        found it (so a track can travel along the edge); else where it was, its step shrunk below the
        finest it polled."""
        best, value, scale = self.centre, key(self.centre), None
        for q, step in self.tried:
            if (v := key(q)) < value:
                best, value, scale = q, v, step
        if scale is None:
            return self._replace(step=self.step >> self.scales, tried=())
        return self._replace(centre=best, step=min(2 * scale, UNIT // 2), tried=())


class Lattice(NamedTuple):
    """The integer lattice over a search's ``box`` (:class:`nqm.search.setup.Box`: ``names``,
    ``fixed``, ``axes``, ``coarse``, ``max_cells``): ``UNIT`` units per coarse gap, ``0 … size`` per
    axis, so every search point has exact values; its points' nudges by ``delta`` and the tracks'
    directions on it."""

    box: object
    delta: float | None
    size: int
    axis_of: dict
    directions: tuple  # every neighbour on the lattice: {−1, 0, 1}^k but 0
    edge_axis: int | None  # the axis edge tracks poll along: lr if searched, else momentum (k > 1)
    along: tuple  # the two directions along it

    @classmethod
    def of(cls, box, delta: float | None) -> Lattice:
        k, edge = len(box.axes), _edge_axis([a.name for a in box.axes])
        return cls(box, delta, (box.coarse - 1) * UNIT, {a.name: a for a in box.axes},
                   tuple(d for d in itertools.product((-1, 0, 1), repeat=k) if any(d)), edge,
                   tuple(tuple(s if i == edge else 0 for i in range(k)) for s in (1, -1)))

    @property
    def k(self) -> int:
        return len(self.box.axes)

    def pattern(self, robust: bool) -> tuple:
        """A free track's directions and scales. A robust candidate costs its 3^k-point neighbourhood:
        beyond two axes, robust tracks poll only the 2k compass points, at one step a round."""
        if robust and self.k > 2:
            return tuple(d for d in self.directions if sum(map(abs, d)) == 1), 1
        return self.directions, 2

    def coarse_grid(self) -> list:
        return list(itertools.product(range(0, self.size + 1, UNIT), repeat=self.k))

    def holds(self, q) -> bool:
        return all(0 <= c <= self.size for c in q)

    def values(self, q) -> tuple:
        """The full parameter tuple (in ``names`` order) of lattice point ``q``."""
        given = dict(self.box.fixed)
        given.update((a.name, a.at(c, self.size)) for a, c in zip(self.box.axes, q))
        return tuple(float(given[n]) for n in self.box.names)

    def neighbourhood(self, x) -> list:
        """``x`` and its nudges: every combination of ``v(1 ± δ)`` per searched parameter (x first)."""
        options = [(v,) + self.axis_of[n].nudged(v, self.delta) if n in self.axis_of else (v,)
                   for n, v in zip(self.box.names, x)]
        return list(dict.fromkeys(itertools.product(*options)))


def _edge_axis(names: list) -> int | None:
    """The axis edge tracks poll along: lr if searched, else momentum; none for one axis."""
    if len(names) < 2:
        return None
    return next((names.index(n) for n in ("lr", "momentum") if n in names), None)
