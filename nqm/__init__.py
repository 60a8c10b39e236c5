"""nqm: the Noisy Quadratic Model under gradient delay.

    import nqm
    ds = nqm.sweep("ab", lr=np.geomspace(1e-2, 2, 16), momentum=[0, .5, .9], delay=[0, 4], noise=[0, .01])
    nqm.plot_heatmaps(ds)

Conventions (model, update rules, status codes) are those of docs/conventions.md, repeated in the
docstrings of :mod:`nqm.problem`, :mod:`nqm.optimizers` and :mod:`nqm.engine`. Names are loaded on
first use, so that e.g. ``nqm.thresholds.polynomials`` (numpy/scipy only) does not pay for importing JAX;
so are the submodules (``nqm.summary.summarize(ds)`` after ``import nqm`` alone).
"""

import importlib
import importlib.util

__version__ = "0.4.0"

_EXPORTS = {
    "BUDGET": "nqm.engine", "DIVERGED": "nqm.engine", "REACHED": "nqm.engine",
    "RunConfig": "nqm.engine", "simulate": "nqm.engine",
    "NqmError": "nqm.errors", "use_every_core": "nqm.devices",
    "Problem": "nqm.problem", "explicit": "nqm.problem", "loguniform": "nqm.problem", "zhang": "nqm.problem",
    "load": "nqm.io", "save": "nqm.io", "sweep": "nqm.sweeps", "best": "nqm.search", "trajectory": "nqm.diagnostics", "t_star": "nqm.status",
    "plot_heatmaps": "nqm.plots.heatmap",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # a submodule, on first use
    raise AttributeError(f"module 'nqm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
