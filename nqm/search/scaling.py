"""Steps against batch size: how far a larger batch buys fewer steps (Zhang et al. 2019's question),
under delay.

For each batch size B of a list, :func:`scaling` asks :func:`nqm.search.best` for the smallest
settled T over the same box, the batch running with noise ``σ/√B`` (σ the single-example scale).
Steps fall in proportion to B while the noise sets the pace (*perfect scaling*), then flatten once
the curvature does. Definitions, anchored at the smallest batch size B₁ whose search converged::

    perfect scaling     S_perfect(B) = S(B₁) · B₁ / B
    critical batch size B* = the smallest B with S(B) ≥ 2 · S_perfect(B): steps twice what perfect
                        scaling would give, interpolated log-log between the batch sizes searched
                        (∞ where no batch size of the list gets there).

Each batch size's search must answer (:mod:`nqm.search.answered`: rerun with more cells and a wider
box while it misses), and the curve must be consistent — less noise cannot need more steps, so a
batch size whose best steps exceed a smaller one's beyond both seed spreads is searched again, and
has no answer if it still does. Where a batch size has no answer, its steps are NaN (a gap) and
the curve has no critical batch size (NaN).
"""

from __future__ import annotations

import io
import json
import math
import os

import numpy as np
import xarray as xr

import nqm.expected
from nqm import delays, grids, validate
from nqm.progress import bar as progress_bar
from nqm.errors import NqmError
from nqm.io import discard, load_bytes, to_bytes, write_bytes
from nqm.search.answered import ATTEMPTS, GROWTH, answered_best
from nqm.search.answers import answer

REGIME = ("method", "delay", "noise", "target", "max_steps", "spectrum", "dim", "seeds", "seed", "robust", "objective",
          "first_passage", "tol", "max_cells", "box", "searched")  # the searches' attributes a curve keeps
FACTOR = 2.0  # the critical batch size: where steps reach this many times perfect scaling
DEFINITION = ("critical_batch_size: the smallest B where the best steps S(B) reach 2 x perfect scaling "
              "S(B1) B1 / B (B1 the smallest batch size whose search converged), log-log interpolated between "
              "the batch sizes searched; inf where none gets there")


def critical_batch_size(batch_size, steps, factor: float = FACTOR) -> float:
    """The critical batch size of a steps-against-batch-size curve (see the module's docstring).

    Args:
      batch_size: the batch sizes, increasing.
      steps: the best steps at each (NaN or ∞ where the target was not reached).
      factor: how many times perfect scaling marks the critical batch size.

    Returns:
      B* (a float; ``inf`` where no batch size reaches ``factor`` × perfect scaling, NaN where no
      search converged).

    Examples:
      >>> round(critical_batch_size([1, 2, 4, 8, 16], [800, 400, 220, 160, 140]), 2)  # 1.6 × perfect at 8, 2.8 × at 16
      10.55
    """
    b, s = validate.floats(batch_size, "batch_size"), validate.floats(steps, "steps")
    if b.shape != s.shape or b.ndim != 1:
        raise NqmError(f"batch_size and steps must be two lists of one length, got {b.size} and {s.size} values")
    if not (np.all(b >= 1) and np.all(np.diff(b) > 0)):
        raise NqmError("batch_size must be increasing batch sizes >= 1")
    done = np.flatnonzero(np.isfinite(s))
    if done.size == 0:
        return float("nan")
    b, s = b[done[0]:], np.where(np.isfinite(s[done[0]:]), s[done[0]:], np.inf)
    ratio = s * b / (s[0] * b[0])  # S(B) / S_perfect(B), 1 at the anchor
    past = np.flatnonzero(ratio >= factor)
    if past.size == 0:
        return float("inf")
    i = past[0]
    if not np.isfinite(ratio[i]):
        return float(b[i])  # past it between the two, but no steps to interpolate with: the upper end
    x = (np.log(factor) - np.log(ratio[i - 1])) / (np.log(ratio[i]) - np.log(ratio[i - 1]))
    return float(np.exp(np.log(b[i - 1]) + x * (np.log(b[i]) - np.log(b[i - 1]))))


def _consistent(method: str, asked: list, results: list) -> list:
    """The searches of a curve, each batch size's rerun (:func:`nqm.search.answered.answered_best`,
    twice the cells) while its best steps exceed a smaller batch size's beyond both spreads and the
    tolerance — less noise cannot need more steps, so the larger batch size's search missed — and
    marked unanswered where it still does."""
    results = list(results)
    for j in range(len(results)):
        for _ in range(ATTEMPTS):
            if not _rises(results, j):
                break
            results[j] = answered_best(method, **{**asked[j], "checkpoint": None,
                                                  "max_cells": GROWTH * int(results[j].attrs["max_cells"])})
        if _rises(results, j):
            miss = "; ".join(filter(None, [results[j].attrs["miss"], "its best steps exceed a smaller batch size's"]))
            results[j] = results[j].assign_attrs(answered=0, miss=miss)
    return results


def _rises(results: list, j: int) -> bool:
    """Whether answered search ``j`` needs more steps than an answered one before it, beyond the
    seeds' spread of both and the search tolerance."""
    def span(ds):
        found = answer(ds)
        key = "robust_seeds" if "robust_seeds" in found else "seeds" if "seeds" in found else None
        t = found["robust_t_star" if "robust_t_star" in found else "t_star"]
        if key is None:
            return t, t
        return found[key]["min"] if found[key]["min"] is not None else t, found[key]["max"] or math.inf

    if not results[j].attrs["answered"]:
        return False
    low, _ = span(results[j])
    tol = float(results[j].attrs["tol"])
    return any(ds.attrs["answered"] and low > (1 + tol) * span(ds)[1] for ds in results[:j])


def exact_applies(method: str, delay, seeds: int = 1, x64: bool = False, independent_noise: bool = False) -> bool:
    """Whether :func:`scaling` searches the exact expected loss when ``expected`` is not given: a
    linear method under a constant or iid delay, one seed, neither ``x64`` nor ``independent_noise``.

    Args:
      method: the method's name.
      delay: its delay (a constant, or a process or its spec).
      seeds, x64, independent_noise: the search's settings of those names.

    Returns:
      ``True`` where the exact mode applies.
    """
    return bool(method in nqm.expected.methods() and delays.pmf(delay) is not None and seeds == 1 and not x64
                and not independent_noise)


def scaling(method: str = "sgdm", *, batch_size, noise: float, delay=0, expected: bool | None = None,
            progress: bool = True, checkpoint=None, restart: bool = False, **search) -> xr.Dataset:
    """The best settled steps at each batch size, perfect scaling and the critical batch size.

    Args:
      method: a name from :func:`nqm.optimizers.methods`.
      batch_size: the batch sizes B (integers >= 1, at least two; a list or a range such as
        ``np.geomspace``'s integers).
      noise: the single-example noise scale σ > 0 (a batch of B runs with ``σ/√B``).
      delay: one constant delay or delay process.
      expected: search the exact expected loss (:mod:`nqm.expected`); ``None``: wherever it applies
        (a linear method under a constant or iid delay, one seed, no ``x64`` or ``independent_noise``),
        else the Monte Carlo engine.
      progress: a bar over the batch sizes.
      checkpoint: a file that keeps each batch size's search as it finishes, so that an interrupted
        run called again with the same arguments continues with the next one (``None``: none).
      restart: ignore (and replace) a checkpoint of other arguments rather than refuse it.
      **search: the box and the settings of :func:`nqm.search.best` (``lr``, ``momentum``, a method's
        hyperparameters, ``seeds``, ``robust``, ``tol``, ``max_cells``, ``problem``, ``target``,
        ``max_steps``, ``objective``, …): the same for every batch size.

    Returns:
      A Dataset over ``batch_size``: ``steps`` (each batch size's T*_best, or its robust T where
      ``robust`` is given; NaN where its search has no answer), ``answered`` and ``miss`` (whether
      it answered, and why not), ``perfect`` (perfect scaling from the anchor), the best point's
      hyperparameters, and with ``seeds`` > 1 ``steps_min``/``steps_max`` (each seed's own T at
      that point); attributes ``critical_batch_size`` (:func:`critical_batch_size`; NaN unless
      every batch size answered) and the regime.

    Raises:
      NqmError: fewer than two batch sizes, a noise that is not > 0, or what :func:`nqm.search.best` refuses.

    Examples:
      SGD on a 20-dimensional problem, without delay, by the exact mode:

      >>> import nqm
      >>> from nqm.search.scaling import scaling
      >>> ds = scaling("sgd", batch_size=[1, 16, 256, 4096], noise=1.0, lr=(1e-3, 2.0), momentum=0,
      ...              problem=nqm.zhang(20), max_steps=20_000, progress=False)
      >>> ds.steps.values.tolist()
      [4543.0, 292.0, 29.0, 16.0]
      >>> round(ds.attrs["critical_batch_size"], 1)
      331.1
    """
    sigma, sizes = _checked(noise, batch_size)
    if expected is None:
        expected = exact_applies(method, delay, search.get("seeds", 1), search.get("x64"), search.get("independent_noise"))
    asked = [dict(batch_size=int(b), noise=sigma, delay=delay, expected=expected,
                  **({} if expected else {"progress": False}), **search) for b in sizes]
    kept = _Kept(checkpoint, method, asked, restart)
    results = [kept.get(i) or kept.put(i, answered_best(method, **kwargs)) for i, kwargs in
               enumerate(progress_bar(progress, iterable=asked, desc=f"{method} batch sizes", unit="B"))]
    curve = _curve(sizes, _consistent(method, asked, results), search.get("robust") is not None, expected)
    kept.discard()
    return curve


class _Kept:
    """The batch sizes' searches kept in ``path`` as each finishes (their results' netCDF bytes, and
    what was asked, so that a checkpoint of other arguments is never taken for this run's)."""

    def __init__(self, path, method: str, asked: list, restart: bool):
        self.path, self.results = path, {}
        self.asked = json.dumps({"method": method, "asked": asked}, sort_keys=True, default=_described)
        if path is None or not os.path.isfile(path):
            return
        try:
            with np.load(path) as saved:
                same = str(saved["asked"]) == self.asked
                found = {int(k[1:]): bytes(saved[k]) for k in saved.files if k.startswith("b")}
        except Exception:  # a damaged or foreign file: refused below, like one of other arguments
            same, found = False, {}
        if not same and not restart:
            raise NqmError(f"the checkpoint {path} is of another scaling run (or damaged); run again with --restart "
                           "(restart=True) to start over")
        if same:
            self.results = {i: load_bytes(data) for i, data in found.items()}

    def get(self, i: int):
        return self.results.get(i)

    def put(self, i: int, result: xr.Dataset) -> xr.Dataset:
        self.results[i] = result
        if self.path is not None:
            arrays = {f"b{k}": np.frombuffer(to_bytes(v), np.uint8) for k, v in self.results.items()}
            buffer = io.BytesIO()
            np.savez(buffer, asked=np.array(self.asked), **arrays)
            write_bytes(self.path, buffer.getvalue())
        return result

    def discard(self) -> None:
        if self.path is not None:
            discard(self.path)


def _described(value):
    """A checkpoint's words for what JSON does not hold (a problem, a delay process, an array)."""
    if hasattr(value, "describe"):
        return value.describe()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return getattr(value, "label", repr(value))


def _where(answers: list, names: list, robust: bool) -> dict:
    """Each batch size's answer: the point's parameters, and with seeds the spread of their steps."""
    points = [a["robust_point" if robust else "point"] or {} for a in answers]
    out = {name: ("batch_size", np.array([p.get(name, np.nan) for p in points])) for name in names}
    if "seeds" in answers[0]:
        spread = [a["robust_seeds" if robust else "seeds"] or {} for a in answers]
        for k in ("min", "max"):
            out[f"steps_{k}"] = ("batch_size", np.array([_or_inf(s.get(k)) for s in spread], np.float64))
    return out


def _or_inf(value) -> float:
    return np.inf if value is None else value


def _checked(noise, batch_size) -> tuple[float, np.ndarray]:
    """The single-example noise scale and the batch sizes, sorted (one-line errors)."""
    sigma = validate.number(noise, "noise")
    if not (np.isfinite(sigma) and sigma > 0):
        raise NqmError(f"noise must be the single-example noise scale sigma > 0, got {noise!r}: without noise every "
                       "batch size runs the same steps")
    sizes = grids.batch_sizes(batch_size, np.array([sigma]), "float64")
    if sizes.size < 2:
        raise NqmError(f"give at least two batch sizes to scale over, got {sizes.tolist()}")
    return sigma, np.sort(sizes)


def _curve(sizes: np.ndarray, results: list, robust: bool, expected: bool) -> xr.Dataset:
    """Steps against batch size from each batch size's search (see :func:`scaling`'s Returns)."""
    answers = [answer(ds) for ds in results]
    answered = np.array([ds.attrs["answered"] for ds in results], np.int8)
    found = [a["robust_t_star" if robust else "t_star"] for a in answers]
    steps = np.array([np.nan if t is None or not ok else t for t, ok in zip(found, answered)], np.float64)
    anchor = np.flatnonzero(np.isfinite(steps))
    perfect = np.full(sizes.size, np.nan) if anchor.size == 0 else steps[anchor[0]] * sizes[anchor[0]] / sizes
    out = xr.Dataset({"steps": ("batch_size", steps, {"long_name": ("robust T*_best" if robust else "T*_best")
                                                     + " (NaN: no answer, see miss)"}),
                      "perfect": ("batch_size", perfect, {"long_name": "perfect scaling: S(B1) B1 / B"}),
                      "answered": ("batch_size", answered,
                                   {"long_name": "1: the search answered (nqm.search.answered); 0: no answer"}),
                      "miss": ("batch_size", np.array([ds.attrs["miss"] for ds in results], object),
                               {"long_name": "why a search gave no answer (empty where it did)"})},
                     coords={"batch_size": sizes})
    out = out.assign(_where(answers, results[0].attrs["parameters"].split(","), robust))
    first = results[0].attrs
    critical = critical_batch_size(sizes, steps) if answered.all() else float("nan")
    return out.assign_attrs({k: first[k] for k in REGIME if k in first},
                            evaluation="exact expected dynamics" if expected else "Monte Carlo (nqm.sweep's engine)",
                            critical_batch_size=critical, critical_definition=DEFINITION,
                            batch_noise="a batch of B runs with noise sigma/sqrt(B), sigma the single-example scale")
