"""The multi-host code path: two processes joined by jax.distributed give the single-process result."""

import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import nqm
from multihost_grid import GRID
from nqm.engine import layout

HERE = pathlib.Path(__file__).parent


def test_two_processes_match_one(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    out = tmp_path / "two.nc"
    env = dict(os.environ, PYTHONPATH=str(HERE))
    workers = [subprocess.Popen([sys.executable, str(HERE / "multihost_worker.py"), address, str(i), str(out)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for i in range(2)]
    logs = [w.communicate(timeout=300)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), "\n".join(log[-2000:] for log in logs)
    two = nqm.load(out)
    one = nqm.sweep("ab", **GRID)
    assert two.drop_attrs().identical(one.drop_attrs())


def test_put_and_fetch_give_back_the_host_copy():
    """What carries state between the host and the devices of every process (nqm.engine.layout's put
    and fetch, which the two processes above use across hosts): one process gets back what it put."""
    devices = jax.devices()
    sharding = NamedSharding(Mesh(np.array(devices), ("cells",)), PartitionSpec("cells"))
    cells = 3 * len(devices)
    tree = {"w": np.arange(cells * 4, dtype=np.float32).reshape(cells, 4), "t": np.arange(cells, dtype=np.int32)}
    back = layout.fetch(layout.put(tree, sharding))
    assert all(np.array_equal(back[k], tree[k]) and back[k].dtype == tree[k].dtype for k in tree)
