"""One XLA CPU device per core: a choice made once per process, before JAX starts its backends.

XLA runs one CPU device's loop on one core, and sweeps shard their cells over devices, so a
process that exposes a device per core uses them all. The ``nqm`` command makes this choice for
itself; a Python program makes it by calling :func:`use_every_core` before its first JAX
computation (importing nqm changes nothing). Results are the same bits on any number of devices.
"""

from __future__ import annotations

import os
import sys


def use_every_core(count: int | None = None) -> int:
    """Expose ``count`` XLA CPU devices (default: ``NQM_CPU_DEVICES``, else one per core).

    Does nothing when the user has chosen a device count (``JAX_NUM_CPU_DEVICES``, or
    ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``) or when JAX's backends already
    run (the count can no longer change). Before JAX is imported, only the environment is set, so
    a command that never runs JAX does not pay for importing it.

    Args:
      count: how many CPU devices; ``None`` for ``NQM_CPU_DEVICES`` or the number of cores.

    Returns:
      the number of CPU devices asked for, or 0 where nothing was changed.

    Example:
      >>> import nqm
      >>> nqm.use_every_core() >= 0  # before the first JAX computation
      True
    """
    if "force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "") or "JAX_NUM_CPU_DEVICES" in os.environ:
        return 0
    count = int(os.environ.get("NQM_CPU_DEVICES", os.cpu_count() or 1)) if count is None else int(count)
    if "jax" not in sys.modules:
        os.environ["JAX_NUM_CPU_DEVICES"] = str(count)  # JAX reads it when it starts
        return count
    import jax  # already imported: only its configuration can still say it

    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # backends already running: keep what the process has
        return 0
    return count
