"""The sweep run both by two processes (tests/engine/multihost_worker.py) and by one (test_multihost.py)."""

import numpy as np

import nqm

GRID = dict(lr=np.geomspace(0.05, 3, 6), momentum=[0.0, 0.9], delay=[0, 2], noise=0.02, rho=[0.0, 0.5],
            problem=nqm.zhang(300), max_steps=2000, chunk_steps=300, progress=False)
