"""nqm: the Noisy Quadratic Model under gradient delay.

    import nqm
    ds = nqm.sweep("ab", lr=np.geomspace(1e-2, 2, 16), momentum=[0, .5, .9], delay=[0, 4], noise=[0, .01])
    nqm.plot_heatmaps(ds)

Conventions (model, update rules, status codes) are those of DESIGN.md §1–2, repeated in the
docstrings of :mod:`nqm.problem`, :mod:`nqm.optimizers` and :mod:`nqm.engine`.
"""

import os as _os

import jax as _jax

__version__ = "0.1.0"


def _one_device_per_core():
    # XLA runs one CPU device's loop on one core: expose a device per core so that sweeps, which
    # shard cells over devices, use them all. Only possible before JAX starts its backends, and
    # only when the user has not chosen a device count already.
    if "force_host_platform_device_count" in _os.environ.get("XLA_FLAGS", ""):
        return
    count = int(_os.environ.get("NQM_CPU_DEVICES", _os.cpu_count() or 1))
    try:
        _jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        pass


_one_device_per_core()

from nqm.engine import BUDGET, DIVERGED, REACHED, RunConfig, simulate  # noqa: E402
from nqm.errors import NqmError  # noqa: E402
from nqm.problem import Problem, explicit, loguniform, zhang  # noqa: E402
from nqm.sweeps import load, save, sweep  # noqa: E402
from nqm.plots.heatmap import plot_heatmaps  # noqa: E402

__all__ = [
    "BUDGET", "DIVERGED", "REACHED", "NqmError", "Problem", "RunConfig",
    "explicit", "load", "loguniform", "plot_heatmaps", "save", "simulate", "sweep", "zhang",
]
