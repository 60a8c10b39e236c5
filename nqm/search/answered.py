"""A search that converges, or says that it did not: :func:`nqm.best`, rerun until its answer can be
drawn as a value.

A search *misses* (:func:`misses`) when no point settled; when its answer lies on an edge of its
box that the parameter's domain extends beyond (lr at either end; a decay rate such as momentum at
its upper end, or at a lower end above 0), where a wider box might do better; or when it stopped at
its cell limit (``max_cells``) rather than on its tolerance (or with nothing left to refine) —
unless the same search with half its cells found an answer within twice its tolerance of it (its
answer no longer moves as the cells double). :func:`answered_best` reruns a search that misses with
twice the cells, the box widened 4× past each edge its answer sits on (on the axis's own scale), up
to :data:`ATTEMPTS` searches; what still misses is *no answer*: its result says so (``answered`` 0,
``miss`` the reasons), and a figure draws a gap there, never a value.
"""

from __future__ import annotations

import math

import xarray as xr

from nqm.conventions import DECAYS
from nqm.errors import NqmError

ATTEMPTS = 2  # the search and one rerun
GROWTH = 2  # a rerun has this many times the cells
WIDEN = 4.0  # ... and each edge the answer sits on moved out this many times (1 − x for a decay rate)
UNIT = frozenset({"power"})  # parameters in [0, 1]


def misses(ds: xr.Dataset) -> list[str]:
    """Why a :func:`nqm.best` result is not an answer to draw as a value (empty: it is one).

    Args:
      ds: a result of :func:`nqm.best` (with ``half_steps``, the answer of the same search with half
        its cells, where :func:`answered_best` ran one).

    Returns:
      The reasons, each a short phrase (``"stopped at the cell limit"``, ``"lr on the box's upper
      edge"``, ``"no point settled"``).
    """
    robust = ds.attrs["robust"] != "none"
    best = float(ds.attrs["robust_best_steps" if robust else "best_steps"])
    if not math.isfinite(best):
        return ["no point settled" if not robust else "no point settled with its whole neighbourhood"]
    reasons = [f"{name} on the box's {'lower' if side == 0 else 'upper'} edge" for name, side in _edges(ds)]
    if ds.attrs["stopped"] == "max_cells":
        half = float(ds.attrs.get("half_steps", math.nan))
        moved = abs(1 - best / half) if math.isfinite(half) else math.nan
        if not moved <= 2 * float(ds.attrs["tol"]):
            reasons.insert(0, "stopped at the cell limit" + (f" ({moved:.1%} from half its cells)"
                                                                if math.isfinite(moved) else ""))
    return reasons


def answered_best(method: str = "sgdm", *, attempts: int = ATTEMPTS, **search) -> xr.Dataset:
    """:func:`nqm.best`, rerun with more cells and a wider box while it misses (module docstring).

    Args:
      method: as :func:`nqm.best`.
      attempts: the most searches (the first one included).
      **search: the arguments of :func:`nqm.best` (a ``checkpoint`` is used by the first search only).

    Returns:
      The last search's result, with attributes ``answered`` (1 or 0), ``miss`` (the reasons it still
      misses, ``"; "``-joined, empty when answered), ``attempts`` (the searches run) and
      ``cells_total`` (the cells they ran together: a rerun of the same box runs only the cells past
      the last one's limit).
    """
    from nqm.search.api import best  # here: judging a result needs no JAX, searching does

    ds, attempt = best(method, **search), 1
    cells = int(ds.attrs["cells"])
    while (reasons := misses(ds)) and attempt < attempts:
        wider = _widened(ds, search)
        if reasons == ["no point settled"] and wider == search:
            break  # nothing to widen: more cells of the same box rarely settle what none did
        same = wider == search  # the same search with more cells: its points are the rerun's first ones
        key = "robust_best_steps" if ds.attrs["robust"] != "none" else "best_steps"
        half = float(ds.attrs[key]) if same else math.nan  # (another box: not the same search)
        search = {**wider, "max_cells": GROWTH * int(ds.attrs["max_cells"]), "checkpoint": None}
        try:
            rerun = best(method, **search, reuse=ds if same else None).assign_attrs(half_steps=half)
        except NqmError:  # a widened box the method refuses: keep the last result, which misses
            break
        # (the same search's rerun holds every point of the last one, which it did not run again)
        attempt, cells = attempt + 1, cells + int(rerun.attrs["cells"]) - (int(ds.attrs["cells"]) if same else 0)
        ds = rerun
    reasons = misses(ds)
    return ds.assign_attrs(answered=int(not reasons), miss="; ".join(reasons), attempts=attempt, cells_total=cells)


def _edges(ds: xr.Dataset) -> list[tuple[str, int]]:
    """``(name, side)`` for each searched parameter whose answer lies on a box end (0 lower, 1
    upper) that its domain extends beyond."""
    robust = ds.attrs["robust"] != "none"
    box = dict(part.split("=") for part in ds.attrs["box"].split(", "))
    out = []
    for name in filter(None, ds.attrs["searched"].split(",")):
        value = float(ds.attrs[f"{'robust' if robust else 'best'}_{name}"])
        for side, end in enumerate(float(x) for x in box[name].split(":")):
            if math.isclose(value, end, rel_tol=1e-9, abs_tol=1e-300) and not _domain_end(name, end):
                out.append((name, side))
    return out


def _domain_end(name: str, end: float) -> bool:
    """Whether ``end`` is where the parameter's domain itself ends (nothing lies beyond it)."""
    return end == 0.0 and (name in DECAYS or name in UNIT) or (name in UNIT and end == 1.0)


def _widened(ds: xr.Dataset, search: dict) -> dict:
    """``search`` with each box edge the answer sits on moved out (:data:`WIDEN`)."""
    search = dict(search)
    for name, side in _edges(ds):
        lo, hi = (float(x) for x in search[name])
        if name in DECAYS:
            lo, hi = (max(0.0, 1.0 - (1.0 - lo) * WIDEN), hi) if side == 0 else (lo, 1.0 - (1.0 - hi) / WIDEN)
        elif name in UNIT:
            lo, hi = (lo / WIDEN, hi) if side == 0 else (lo, min(1.0, hi * WIDEN))
        else:
            lo, hi = (lo / WIDEN, hi) if side == 0 else (lo, hi * WIDEN)
        search[name] = (lo, hi)
    return search
