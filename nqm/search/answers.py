"""Figure data made of :func:`nqm.best` searches: run a set of them (resumable, one file of the
finished ones) and keep of each its answer, its regime and the spread over seeds, as plain JSON.

The numbers kept per search (``outcome``):

* ``t_star`` / ``point``: T*_best, the smallest T found, and where (T: a point's own steps to the
  target, the median over seeds);
* ``robust_t_star`` / ``robust_point``: robust T*_best at nudge δ, the smallest over points of
  the largest T in the point's ±δ neighbourhood (see :mod:`nqm.search`);
* ``seeds``: at the plain point, the median/min/max over seeds of its own steps;
* ``robust_seeds``: at the robust point, each seed's own robust T (the largest of that seed's steps
  over the neighbourhood), median/min/max over seeds: the seed spread of the robust number;
* ``edges``: the searched parameters whose robust (else plain) answer lies on its box's edge
  (``"lr=hi"``...), where a wider box might do better;
* ``answered``, ``miss``, ``attempts``, ``cells_total``: whether the search answered
  (:mod:`nqm.search.answered`: :func:`run` reruns a search that misses with more cells and a wider
  box), why not, the searches it took and the cells they ran; :func:`value` is NaN where it did not
  answer;
* ``cells``, ``rounds``, ``stopped``, ``wall_seconds`` and the regime (method, delay, noise,
  problem, target, budget, box, seeds, δ).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time

import numpy as np
import xarray as xr

from nqm import sharing
from nqm.errors import NqmError
from nqm.io import check_writable, json_plain, write_bytes
from nqm.search.answered import misses
from nqm.search.refine import Axis
from nqm.status import REACHED

__all__ = ["REGIME", "answer", "answered", "describe", "outcome", "run", "seed_bars", "value", "which_t"]

REGIME = ("method", "delay", "noise", "batch_size", "spectrum", "target", "max_steps", "seeds", "seed", "robust", "box",
          "searched", "max_cells", "tol", "dtype", "first_passage", "objective")


def answer(ds: xr.Dataset) -> dict:
    """The answer of a :func:`nqm.best` result as the JSON object ``nqm best`` prints: ``t_star`` (T*_best,
    ``None`` if no point converged), ``point``, [``robust_t_star``, ``robust_point``,] [``seeds``
    (median/min/max T over seeds at ``point``; ``None`` stands for a seed that did not converge),]
    ``cells``.

    Args:
      ds: a result of :func:`nqm.best`.

    Returns:
      The dict.

    Raises:
      NqmError: ``ds`` is not a result of :func:`nqm.best`.
    """
    if "best_steps" not in ds.attrs or "parameters" not in ds.attrs:
        raise NqmError("this is not a result of nqm.best (no best_steps attribute); run nqm.best or load its file")
    names = ds.attrs["parameters"].split(",")

    def number(value):
        value = float(value)
        return None if not np.isfinite(value) else int(value) if value == int(value) else value

    def point(prefix):
        values = [ds.attrs[f"{prefix}_{n}"] for n in names]
        return None if any(np.isnan(v) for v in values) else {n: float(v) for n, v in zip(names, values)}

    out = {"t_star": number(ds.attrs["best_steps"]), "point": point("best")}
    if ds.attrs["robust"] != "none":
        out.update(robust_t_star=number(ds.attrs["robust_best_steps"]), robust_point=point("robust"))
    if int(ds.attrs["seeds"]) > 1:
        out["seeds"] = {k: number(ds.attrs[f"seeds_{k}"]) for k in ("median", "min", "max")}
        if ds.attrs["robust"] != "none" and "robust_seeds_median" in ds.attrs:
            out["robust_seeds"] = {k: number(ds.attrs[f"robust_seeds_{k}"]) for k in ("median", "min", "max")}
    out["cells"] = int(ds.attrs["cells"])
    return out


def describe(ds: xr.Dataset) -> str:
    """The answer of a :func:`nqm.best` result in words, with its regime.

    Args:
      ds: a result of :func:`nqm.best`.

    Returns:
      Several lines of text.
    """
    found, a = answer(ds), ds.attrs

    def at(point):
        return ", ".join(f"{k} = {v:.6g}" for k, v in point.items())

    batch = f" per example, batch size {int(a['batch_size'])}" if "batch_size" in a else ""
    lines = [f"{a['method']} under delay {a['delay']}, noise {float(a['noise']):g}{batch}, {a.get('spectrum', '')}, target "
             f"{float(a['target']):g}, budget {int(a['max_steps']):,}: {found['cells']:,} cells in {int(a['rounds'])} "
             f"rounds (stopped: {a['stopped']})"]
    lines.append(f"T*_best = {found['t_star']:,} steps at {at(found['point'])}" if found["t_star"] is not None else
                 "no point of the box reached the target")
    if "robust_t_star" in found:
        lines.append(f"robust T*_best (every nudge by 1 ± {float(a['robust']):g}) = {found['robust_t_star']:,} steps at "
                     f"{at(found['robust_point'])}" if found["robust_t_star"] is not None else
                     "no point whose every nudge converges was found")
    if "seeds" in found:
        s = found["seeds"]
        shown = {k: "not reached" if v is None else f"{v:,}" for k, v in s.items()}  # None: a seed that did not converge
        lines.append(f"over {int(a['seeds'])} seeds: no seed converged" if s["min"] is None else
                     f"over {int(a['seeds'])} seeds at that point: median {shown['median']}, min {shown['min']}, "
                     f"max {shown['max']}")
    return "\n".join(lines)


def outcome(ds, points: bool = False) -> dict:
    """The answer of one :func:`nqm.best` result with its seed spreads, edges and regime (JSON-ready);
    ``points``: also every evaluated search point (values, T, robust T) for drawing a landscape.

    Args:
      ds: a result of :func:`nqm.best`.
      points: also keep the evaluated search points.

    Returns:
      The outcome, a dict of the keys listed in the module docstring.
    """

    found, a = answer(ds), ds.attrs
    out = {k: found.get(k) for k in ("t_star", "point", "robust_t_star", "robust_point", "seeds")}
    out.update(_spreads(ds, found))
    at = found.get("robust_point") or found["point"]
    out["edges"] = [] if at is None else _edges(a, at)
    reasons = misses(ds)
    out.update(cells=int(a["cells"]), rounds=int(a["rounds"]), stopped=a["stopped"], answered=not reasons,
               miss="; ".join(reasons), attempts=int(a.get("attempts", 1)),
               cells_total=int(a.get("cells_total", a["cells"])))
    out["regime"] = {k: json_plain(a[k]) for k in REGIME if k in a}
    if points:
        out["points"] = _points(ds)
    return out


def _spreads(ds, found: dict) -> dict:
    """The seeds' spread at the plain point (where the answer did not give it) and of each seed's
    own robust T at the robust point."""
    names, searched = ds.attrs["parameters"].split(","), ds.attrs["searched"].split(",")
    t = np.where(ds.status.values == REACHED, ds.steps.values, np.inf)  # (seed, point)
    rows = {tuple(float(ds[n].values[i]) for n in names): i for i in range(ds.sizes["point"])}
    out = {"robust_seeds": None}
    if found.get("seeds") is None and found["point"] is not None:
        out["seeds"] = _spread(t[:, rows[tuple(found["point"][n] for n in names)]])
    if found.get("robust_point"):
        delta, x = float(ds.attrs["robust"]), found["robust_point"]
        options = [(x[n],) + Axis(n, 0.0, 1.0).nudged(x[n], delta) if n in searched else (x[n],) for n in names]
        around = [rows[y] for y in dict.fromkeys(itertools.product(*options))]
        out["robust_seeds"] = _spread(t[:, around].max(axis=1))
    return out


def _spread(values) -> dict:
    values = np.asarray(values, np.float64)
    return {"median": _number(np.median(values)), "min": _number(values.min()), "max": _number(values.max())}


def _edges(attrs, at: dict) -> list[str]:
    """The searched parameters whose answer ``at`` lies on its box's edge (``"lr=hi"``, …)."""
    box = dict(part.split("=") for part in attrs["box"].split(", "))
    return [f"{n}={side}" for n in attrs["searched"].split(",") for side, end in zip(("lo", "hi"), box[n].split(":"))
            if _on(at[n], float(end))]


def _points(ds) -> dict:
    """Every evaluated search point (not the nudges): its values, T and robust T."""
    search = ds.nudge.values == 0
    out = {n: [float(v) for v in ds[n].values[search]] for n in ds.attrs["searched"].split(",")}
    out["t"] = [_number(v) for v in ds.median_steps.values[search]]
    if "robust_steps" in ds:
        out["robust_t"] = [_number(v) for v in ds.robust_steps.values[search]]
    return out


def run(jobs: dict, checkpoint: str | None = None, points=lambda key: False, log=print, wait: float = 30.0) -> dict:
    """Every search of ``jobs`` (``{key: keyword arguments of nqm.best}``): ``{key: outcome}``.

    With ``checkpoint`` (a JSON file), each finished search is written there at once, and a search
    already there with the same arguments is not run again: an interrupted run resumes. Several
    processes may share one checkpoint (the same script started once per core, :mod:`nqm.sharing`):
    each claims a search before running it, leaves the searches other live processes hold to them,
    and reads their outcomes once they let them go (``wait`` seconds between looks). A search's
    outcome does not depend on who runs it. ``points(key)``: whether to keep that search's evaluated points.

    Args:
      jobs: ``{key: keyword arguments of nqm.best}``.
      checkpoint: the JSON file of finished searches, or ``None`` (none).
      points: ``points(key) -> bool``, keep that search's points.
      log: called with one line per search run.
      wait: seconds between looks at the searches other processes run.

    Returns:
      ``{key: outcome}``, in the order of ``jobs``.

    Raises:
      NqmError: the checkpoint is not valid JSON.
    """
    from nqm.search.answered import answered_best  # here: reading answers needs no JAX, searching does

    if checkpoint:
        check_writable(checkpoint)
    results, asked = {}, {key: _describe(kwargs) for key, kwargs in jobs.items()}
    for key in sharing.each(jobs, checkpoint, wait=wait, log=log):
        done = _finished(checkpoint)
        if key in done and done[key].get("asked") == asked[key]:
            results[key] = done[key]["outcome"]  # finished before, here or by another process
            continue
        start = time.perf_counter()
        ds = answered_best(**{"progress": False, **jobs[key]})
        found = outcome(ds, points=points(key))
        found["wall_seconds"] = round(time.perf_counter() - start, 1)
        results[key] = found
        log(f"{key}: robust T*_best {found['robust_t_star']}, T*_best {found['t_star']}, {found['cells']} cells, "
            f"{found['wall_seconds']} s")
        if checkpoint:
            with sharing.locked(checkpoint):
                done = _read(checkpoint)
                done[key] = {"asked": asked[key], "outcome": found}
                write_bytes(checkpoint, (json.dumps(done) + "\n").encode())
    return {key: results[key] for key in jobs}


def _finished(checkpoint: str | None) -> dict:
    """The finished searches in ``checkpoint`` (none without one)."""
    if not checkpoint:
        return {}
    with sharing.locked(checkpoint):
        return _read(checkpoint)


def _read(checkpoint: str) -> dict:
    if not os.path.exists(checkpoint):
        return {}
    try:
        return json.loads(open(checkpoint).read())
    except ValueError as exc:
        raise NqmError(f"cannot read the checkpoint {checkpoint} ({exc}); delete it to start over") from None


def answered(found) -> bool:
    """Whether a search's outcome is an answer to draw (:mod:`nqm.search.answered`): recorded as
    such, or — for an outcome recorded before the rule — one that stopped on its tolerance (or had
    nothing left to refine) and whose answer lies on no box edge that its domain extends beyond.

    Args:
      found: an outcome (:func:`outcome`), or ``None``.

    Returns:
      ``False`` for ``None``.
    """
    if found is None:
        return False
    if "answered" in found:
        return bool(found["answered"])
    domain_ends = {f"{name}=lo" for name in ("momentum", "b1", "b2", "decay")}
    return found.get("stopped") != "max_cells" and not set(found.get("edges") or ()) - domain_ends


def value(found, key: str = "robust_t_star") -> float:
    """One number of an outcome (``robust_t_star`` by default) as a float; NaN where there is none
    (no outcome, nothing found, or a search that did not answer: :mod:`nqm.search.answered`).

    Args:
      found: an outcome (:func:`outcome`), or ``None``.
      key: the outcome's key.

    Returns:
      The number, or NaN.
    """
    return np.nan if not answered(found) or found.get(key) is None else float(found[key])


def which_t(found) -> str:
    """The T a search ranked points by, in words (for a figure's labels).

    Args:
      found: an outcome (:func:`outcome`).

    Returns:
      ``"first passage of settled runs"``, ``"steps to stay below the target"``, or, for a search
      under ``first_passage=True`` (or one recorded before the settled definition, whose regime does
      not say), ``"first passage (touching the target counts)"``.
    """
    regime = found["regime"]
    if regime.get("first_passage", 1):
        return "first passage (touching the target counts)"
    return "steps to stay below the target" if regime.get("objective") == "stay" else "first passage of settled runs"


def seed_bars(found) -> tuple[float, float]:
    """The min and max over seeds of each seed's own robust T (NaN where unknown; the max is NaN
    when a seed has no robust T there).

    Args:
      found: an outcome (:func:`outcome`), or ``None``.

    Returns:
      ``(min, max)``.
    """
    seeds = found.get("robust_seeds") if answered(found) else None
    if not seeds or seeds["min"] is None:
        return np.nan, np.nan
    return float(seeds["min"]), np.nan if seeds["max"] is None else float(seeds["max"])


def _describe(kwargs) -> str:
    """The arguments of a search as text (a problem by its description), to recognise it again."""
    def text(value):
        if hasattr(value, "describe"):
            return json.dumps(value.describe(), sort_keys=True)
        return repr(json_plain(value))
    return json.dumps({k: text(v) for k, v in sorted(kwargs.items())})


def _on(value: float, end: float) -> bool:
    return math.isclose(value, end, rel_tol=1e-5, abs_tol=1e-12)


def _number(value):
    value = float(value)
    return None if not math.isfinite(value) else int(value) if value == int(value) else value
