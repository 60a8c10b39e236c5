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

import itertools

import numpy as np
import xarray as xr
from xarray.indexes import PandasIndex

from nqm.status import BUDGET, DIVERGED, REACHED, RUNNING, SKIPPED, TRANSIENT, UNDECIDED, meaning

GRID = ("momentum", "lr")  # the two dimensions of a heatmap panel
NOT_RUN = RUNNING  # status of cells a checkpoint has not finished yet


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
    status = xr.Variable(names, np.full(shape, NOT_RUN, np.int8), {"meaning": meaning(bool(attrs.get("first_passage")),
                                                                                    bool(attrs.get("skip_decided")))})
    return xr.Dataset(
        {
            "steps": xr.Variable(names, np.zeros(shape, np.int32), {"long_name": "steps to target (T)"}),
            "status": status,
            "loss": xr.Variable(names, np.full(shape, np.nan), {"long_name": "loss at the last step"}),
        },
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


def difference(saved: xr.Dataset, result: xr.Dataset) -> str | None:
    """What makes ``saved`` the result of another computation than ``result`` — its grid, or one of
    the attributes that identify a result (every setting that changes a number: the run settings,
    the method and its options, the delay processes and the full spectrum by digest, the nqm
    version) — or ``None`` when it is the same sweep. Values are compared exactly, never as text.

    Args:
      saved: the result in a checkpoint.
      result: the result the run would produce.

    Returns:
      A short reason, or ``None``.
    """
    if set(saved.dims) != set(result.dims) or any(not _same(saved[d].values, result[d].values) for d in result.dims):
        return "its grid differs"
    names = (set(saved.attrs) | set(result.attrs)) - NOT_IDENTITY
    for name in sorted(names, key=lambda n: (n not in _NAMES, n)):
        old, new = saved.attrs.get(name), result.attrs.get(name)
        if old is None or new is None or not _same(old, new):
            what = _NAMES.get(name, f"setting {name} differs")
            return f"{what} ({name}: checkpoint {_shown(old)}, now {_shown(new)})"
    return None


def fingerprint(ds: xr.Dataset) -> str:
    """A digest of what identifies ``ds`` as a computation (its grid and identifying attributes,
    in a form that survives a netCDF round trip): what files saved beside a result carry.

    Args:
      ds: the result.

    Returns:
      A sha256 hex digest.
    """
    import hashlib

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
