"""The result schema shared by every grid of nqm (``nqm.sweep``, ``nqm.expected.sweep``): dimensions,
variables and the attributes that identify a result.

A result is an ``xarray.Dataset`` with dimensions ``delay, noise, [batch_size,] [the method's extra
hyperparameters,] seed, momentum, lr`` (each present even with one value; ``batch_size`` only in
a result swept over batch sizes, where ``noise`` is the single-example scale σ and a batch of B runs
with ``σ/√B``, :func:`nqm.conventions.batch_noise`), variables ``steps``
(T, or where the run stopped), ``status`` (:mod:`nqm.status`) and ``loss`` (the loss at ``steps``),
a ``mean_delay`` coordinate over ``delay``, and attributes recording every setting that changes a
result. No JAX here: reading and plotting a result never import the engine.
"""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import xarray as xr
from xarray.indexes import PandasIndex

from nqm.errors import NqmError
from nqm.status import BUDGET, DIVERGED, REACHED, RUNNING, SKIPPED, TRANSIENT, UNDECIDED, meaning, plural

GRID = ("momentum", "lr")  # the two dimensions of a heatmap panel
NOT_RUN = RUNNING  # status of cells a checkpoint has not finished yet

# Every kind of result nqm writes, and what writes it: told apart by what a result holds (kind), so
# that files written before kinds were named are known too.
KINDS = {
    "sweep": "a sweep (nqm sweep, nqm expected)",
    "search": "a search's points (nqm best)",
    "scaling": "a batch-size scaling (nqm scaling)",
    "trace": "a trace (nqm trace)",
    "threshold": "a threshold table (nqm threshold)",
    "transfer": "a transfer comparison (nqm transfer)",
}


def kind(ds: xr.Dataset) -> str | None:
    """Which of :data:`KINDS` ``ds`` is, by its variables and dimensions.

    Args:
      ds: a dataset.

    Returns:
      The kind's name, or ``None`` (no result of nqm: a figure's data, another program's file).
    """
    names = set(ds.data_vars)
    if {"status_predicted", "status_observed"} & names:
        return "transfer"
    if {"steps", "status"} <= names:
        return "search" if "point" in ds.steps.dims else "sweep"
    if "steps" in names and "answered" in names and "batch_size" in ds.steps.dims:
        return "scaling"
    if "threshold" in names:
        return "threshold"
    if "step" in ds.dims and "loss" in names:
        return "trace"
    return None


def check(ds: xr.Dataset) -> str | None:
    """The one schema check of results: what :func:`nqm.save` refuses, so that every result it
    writes is one that :func:`nqm.load`, ``nqm summary``, ``nqm plot`` and the figure scripts read.
    A sweep must be one :func:`grid` reads; a search's points must carry their learning rates.

    Args:
      ds: a dataset about to be saved.

    Returns:
      Its kind (:func:`kind`; ``None`` for a dataset that is no result, which is saved as it is).

    Raises:
      NqmError: a result its readers could not read, saying what is missing.
    """
    which = kind(ds)
    if which == "sweep":
        grid(ds)
    elif which == "search" and ("lr" not in ds.coords or ds.lr.dims != ("point",)):
        raise NqmError("a search's points need their learning rates (an lr coordinate over point); keep it")
    return which


def grid(ds: xr.Dataset) -> xr.Dataset:
    """A sweep result over its lr × momentum grid, as every reader of sweeps takes it: ``steps``
    and ``status`` over the same dimensions, among them lr and momentum with their values (learning
    rates > 0, momenta in [0, 1)). A result squeezed to one lr or one momentum (``ds.squeeze()``,
    which keeps its value as a scalar coordinate) gets its dimension back.

    Args:
      ds: a sweep result.

    Returns:
      ``ds``, with lr and momentum as dimensions.

    Raises:
      NqmError: not such a result, saying what is missing (e.g. an lr squeezed away with
        ``drop=True``, or a dropped coordinate).
    """
    if not isinstance(ds, xr.Dataset) or not {"steps", "status"} <= set(ds.data_vars):
        raise NqmError(f"a sweep result is needed (an xarray Dataset with steps and status over lr and momentum), "
                       f"got {type(ds).__name__}" + (f" with {', '.join(map(str, ds.data_vars)) or 'no variables'}"
                                                      if isinstance(ds, xr.Dataset) else ""))
    if set(ds.steps.dims) != set(ds.status.dims):
        raise NqmError(f"a sweep result has steps and status over the same dimensions, got {', '.join(ds.steps.dims)} "
                       f"and {', '.join(ds.status.dims)}")
    for name in GRID:
        if name not in ds.steps.dims:
            if name not in ds.coords or ds[name].ndim != 0:
                raise NqmError(f"the result has no {name} values (a dimension squeezed with drop=True, or a dropped "
                               f"coordinate): keep {name}, e.g. squeeze without drop=True")
            ds = ds.expand_dims(name)
        elif name not in ds.coords:
            raise NqmError(f"the result's {name} dimension has no values (its coordinate was dropped): keep it")
        values = ds[name].values
        low, high = (0.0, 1.0) if name == "momentum" else (0.0, np.inf)
        valid = values.dtype.kind in "iuf" and values.size and np.all((values >= low) & (values < high)) and \
            (name != "lr" or np.all(values > 0))
        if not valid:
            shown = ", ".join(map(str, values.ravel()[:3])) or "none"
            raise NqmError(f"the result's {name} values must be " + ("momenta in [0, 1)" if name == "momentum" else
                                                                        "learning rates > 0") + f", got {shown}")
    return ds


def dims(extra: tuple = (), batch: bool = False) -> list[str]:
    """The dimensions of a result, in order, with the method's extra hyperparameters ``extra``.

    Args:
      extra: the names of the method's extra hyperparameter dimensions.
      batch: whether the result has a ``batch_size`` dimension (after ``noise``).

    Returns:
      ``["delay", "noise", *extra, "seed", "momentum", "lr"]``, with ``"batch_size"`` after
      ``"noise"`` when ``batch``.
    """
    return ["delay", "noise", *(("batch_size",) if batch else ()), *extra, "seed", *GRID]


def panel_keys(ds: xr.Dataset) -> list[dict]:
    """The (delay, noise, method hyperparameter) combinations of a result, one dict per panel.

    Args:
      ds: a result (``steps`` and ``status`` over its dimensions).

    Returns:
      One ``{dimension: value}`` dict per panel, over every dimension but seed, momentum and lr.
    """
    dims = [d for d in ds.steps.dims if d not in ("seed", "momentum", "lr")]
    return [dict(zip(dims, values)) for values in itertools.product(*(ds[d].values for d in dims))]


def panels(ds: xr.Dataset) -> tuple[str, ...]:
    """The dimensions that index the panels of a result (all but the lr × momentum grid).

    Args:
      ds: a result (``steps`` and ``status`` over its dimensions).

    Returns:
      The dimension names of ``ds.steps`` other than momentum and lr (seed included).
    """
    return tuple(d for d in ds.steps.dims if d not in GRID)


def combine_seeds(ds: xr.Dataset) -> xr.Dataset:
    """One (steps, status) per cell over seeds: converged only if every seed converged (T = the
    median over seeds), diverged if any seed diverged, else transient if any seed was, else
    undecided if any seed was, skipped
    where every seed was (decided before running: it does not depend on the seed), otherwise budget
    exhausted. What a panel's T* is computed from, in figures, summaries and the sweep's
    closing lines alike.

    Args:
      ds: a result (``steps`` and ``status`` over its dimensions).

    Returns:
      ``ds`` without the seed dimension (``ds`` itself if it has none).
    """
    if "seed" not in ds.dims:
        return ds
    status = xr.where((ds.status == DIVERGED).any("seed"), DIVERGED,
                      xr.where((ds.status == REACHED).all("seed"), REACHED,
                               xr.where((ds.status == TRANSIENT).any("seed"), TRANSIENT,
                                        xr.where((ds.status == UNDECIDED).any("seed"), UNDECIDED,
                                                 xr.where((ds.status == SKIPPED).all("seed"), SKIPPED, BUDGET)))))
    steps = ds.steps.where(ds.status == REACHED).median("seed")
    return ds.drop_dims("seed").assign(steps=steps.fillna(0).astype(np.int64), status=status.astype(np.int8))


def outcomes(names: tuple, steps, status, loss, meaning: str) -> dict:
    """The variables every result of runs holds — ``steps``, ``status`` and ``loss`` over ``names`` —
    with the attributes that say what they are: a grid's (:func:`empty`), a list of points'
    (``nqm.evaluate``, a search's, the exact mode's), a transfer's runs.

    Args:
      names: their dimensions.
      steps, status, loss: their values.
      meaning: what the status codes mean (:func:`nqm.status.meaning`, or a transfer's own).

    Returns:
      ``{name: xarray.Variable}``.
    """
    return {"steps": xr.Variable(names, steps, {"long_name": "steps to target (T)"}),
            "status": xr.Variable(names, status, {"meaning": meaning}),
            "loss": xr.Variable(names, loss, {"long_name": "loss at the last step"})}


def threshold_table(values: dict, about: dict, delay, processes, momentum, extra: dict, attrs: dict) -> xr.Dataset:
    """A threshold table (``nqm threshold``: derived, from the polynomials, or simulated): its
    variables over ``delay, momentum[, the method's other hyperparameters]``, with the delays' means.

    Args:
      values: ``{name: array}``, each shaped as the dimensions.
      about: ``{name: long name}`` for those that have one.
      delay: the delay coordinate (integers, or labels where a process is not constant).
      processes: the delay processes, in its order.
      momentum: the momentum coordinate.
      extra: the other hyperparameters' coordinates, in the dimensions' order.
      attrs: the table's attributes.

    Returns:
      The dataset.
    """
    dims = ("delay", "momentum", *extra)
    return xr.Dataset({name: xr.Variable(dims, array, {"long_name": about[name]} if name in about else {})
                       for name, array in values.items()},
                      coords={"delay": delay, "momentum": momentum, **extra,
                              "mean_delay": ("delay", [p.mean for p in processes])}, attrs=attrs)


def empty(coords: dict, extra: tuple, attrs: dict, mean_delay) -> xr.Dataset:
    """A result with every cell not yet run: ``coords`` holds one array per dimension.

    Args:
      coords: one 1-D array per dimension of :func:`dims` (with ``batch_size`` if it has one).
      extra: the method's extra hyperparameter dimensions.
      attrs: the result's attributes (converted by :func:`attribute`).
      mean_delay: the mean delay of each delay, in the order of ``coords["delay"]``.

    Returns:
      The dataset: ``steps`` 0, ``status`` :data:`NOT_RUN`, ``loss`` NaN.
    """
    names = dims(extra, batch="batch_size" in coords)
    shape = tuple(coords[d].size for d in names)
    return xr.Dataset(
        outcomes(names, np.zeros(shape, np.int32), np.full(shape, NOT_RUN, np.int8), np.full(shape, np.nan),
                 meaning(bool(attrs.get("first_passage")), bool(attrs.get("skip_decided")))),
        coords={**{d: coords[d] for d in names}, "mean_delay": ("delay", list(mean_delay))},
        attrs={k: attribute(v) for k, v in attrs.items()},
    ).pipe(index_delays)


class DelayIndex(PandasIndex):
    """The ``delay`` index of a result that mixes constant delays and delay processes: its labels
    are spec strings, and an integer selects its constant (``ds.sel(delay=4)`` is
    ``ds.sel(delay="4")``)."""

    def sel(self, labels, method=None, tolerance=None):
        def label(value):
            if isinstance(value, (int, np.integer)) or (isinstance(value, (float, np.floating)) and float(value).is_integer()):
                return str(int(value))
            return value

        labels = {k: label(v) if np.ndim(v) == 0 else [label(x) for x in np.ravel(v)] for k, v in labels.items()}
        return super().sel(labels, method=method, tolerance=tolerance)


def index_delays(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with a :class:`DelayIndex` when its delays are labels (what :func:`nqm.load` restores).

    Args:
      ds: a result or a table with a ``delay`` coordinate.

    Returns:
      ``ds``, re-indexed or as it is.
    """
    if "delay" in ds.indexes and ds.delay.dtype.kind in "OUS" and not isinstance(ds.xindexes["delay"], DelayIndex):
        return ds.drop_indexes("delay").set_xindex("delay", DelayIndex)
    return ds


def attribute(value):
    """A setting as a netCDF attribute (numbers and strings only).

    Args:
      value: the setting.

    Returns:
      ``"none"`` for ``None``, an int for a bool, else ``value``.
    """
    if value is None:
        return "none"
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    return value


# Attributes that say how a result was computed but not what: a checkpoint may differ in these.
NOT_IDENTITY = frozenset({"jax_version", "method_title", "nqm_checksum", "platform"})
_NAMES = {"spectrum_sha256": "the problem's eigenvalues differ", "delay_sha256": "the delay processes differ",
          "nqm_version": "the nqm version differs"}


def difference(saved: xr.Dataset, result: xr.Dataset, where: str = "checkpoint") -> str | None:
    """What makes ``saved`` the result of another computation than ``result`` — its grid, or one of
    the attributes that identify a result (every setting that changes a number: the run settings,
    the method and its options, the delay processes and the full spectrum by digest, the nqm
    version) — or ``None`` when it is the same sweep. Values are compared exactly, never as text.

    Args:
      saved: the result in a checkpoint (or a file).
      result: the result the run would produce.
      where: what holds ``saved`` ("checkpoint", "file"), for the reason.

    Returns:
      A short reason, or ``None``.
    """
    if set(saved.dims) != set(result.dims):
        return f"its grid differs (dimensions {_shown(' '.join(map(str, saved.dims)))} in the {where}, " \
               f"{_shown(' '.join(map(str, result.dims)))} now)"
    for d in result.dims:
        if not _same(saved[d].values, result[d].values):
            if saved.sizes[d] == result.sizes[d]:
                return f"its grid differs (the values of {d})"
            return f"its grid differs ({d}: {plural(saved.sizes[d], 'value')} in the {where}, {result.sizes[d]:,} now)"
    names = (set(saved.attrs) | set(result.attrs)) - NOT_IDENTITY
    for name in sorted(names, key=lambda n: (n not in _NAMES, n)):
        old, new = saved.attrs.get(name), result.attrs.get(name)
        if old is None or new is None or not _same(old, new):
            what = _NAMES.get(name, f"setting {name} differs")
            return f"{what} ({name}: {_shown(old)} in the {where}, {_shown(new)} now)"
    return None


def fingerprint(ds: xr.Dataset) -> str:
    """A digest of what identifies ``ds`` as a computation (its grid and identifying attributes,
    in a form that survives a netCDF round trip): what files saved beside a result carry.

    Args:
      ds: the result.

    Returns:
      A sha256 hex digest.
    """
    parts = [(name, _canonical(value)) for name, value in sorted(ds.attrs.items()) if name not in NOT_IDENTITY]
    parts += [(d, _canonical(ds[d].values)) for d in sorted(ds.dims)]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _canonical(value):
    array = np.asarray(value)
    if array.dtype.kind in "biu":
        items = tuple(int(x) for x in array.ravel())
    elif array.dtype.kind == "f":
        items = tuple(float(x).hex() for x in array.ravel())
    else:
        items = tuple(str(x) for x in array.ravel())
    return items if array.ndim else items[0]


def _same(a, b) -> bool:
    return np.shape(a) == np.shape(b) and _canonical(a) == _canonical(b)


def _shown(value) -> str:
    if value is None:
        return "not recorded"
    text = " ".join(str(value).split())
    return text if len(text) <= 24 else text[:12] + "…"
