"""One XLA CPU device per core, set before JAX starts its backends."""

import os

import jax


def use_every_core():
    """XLA runs one CPU device's loop on one core: expose a device per core, so that sweeps, which
    shard cells over devices, use them all. Only possible before JAX starts its backends, and only
    when the user has not chosen a device count (``XLA_FLAGS``); ``NQM_CPU_DEVICES`` overrides."""
    if "force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    try:
        jax.config.update("jax_num_cpu_devices", int(os.environ.get("NQM_CPU_DEVICES", os.cpu_count() or 1)))
    except RuntimeError:  # backends already running: keep what the user has
        pass


use_every_core()
