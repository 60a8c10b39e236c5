"""One process of a two-process sweep (jax.distributed on CPU); run by test_multihost.py."""

import os
import sys

os.environ["JAX_NUM_CPU_DEVICES"] = "1"  # one device per process (the suite's own count is inherited)

import jax  # noqa: E402

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))

import nqm  # noqa: E402
from multihost_grid import GRID  # noqa: E402

assert jax.process_count() == 2 and len(jax.devices()) == 2 and len(jax.local_devices()) == 1
nqm.save(nqm.sweep("ab", **GRID), sys.argv[3])  # only process 0 writes
