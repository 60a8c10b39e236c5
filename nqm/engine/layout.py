"""How a run is laid out: devices, cache blocks, batch and group sizes within the memory budget;
moving state between the host and the devices (also across hosts); repacking running cells.

Cells are sharded over one XLA device per core (or over the accelerators, and over the devices of
every host under ``jax.distributed``). A device advances its share in cache-sized *blocks*; a
jitted call takes a *batch* of whole blocks per device; grids larger than the memory budget run in
*groups* of batches, one group after the other.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nqm.delays import History
from nqm.engine.loop import CELLS
from nqm.engine.step import Spec
from nqm.engine.stop import FirstPassage, StopRule
from nqm.errors import NqmError
from nqm.optimizers import Optimizer
from nqm.problem import Problem
from nqm.validate import format_bytes


BLOCK_ELEMENTS = 2**15  # elements per cache block on CPU (measured: N = 10⁴ runs best in 2-cell blocks, N ≤ 4096 in 8)
# Elements per block on an accelerator: enough to fill it, few enough that finished cells are repacked
# away (measured on one H200: Figure 1's AB panel, N = 10⁴, runs 1.9× faster in 128-cell blocks than in
# one block of all 1,024 cells, which carries every finished cell to the last one's step; the same T).
ACCELERATOR_BLOCK_ELEMENTS = 2**20
CHUNK_STEPS = 1000  # steps per jitted call, unless set ...
# ... or more, up to 16×, where a chunk would advance fewer elements than this: the host's work
# between chunks (status, progress, the next call) cost a sweep of 16 cells at N = 20 a quarter of its time.
CHUNK_ELEMENTS = 2**24


class Layout(NamedTuple):
    spec: Spec
    batch_cells: int
    group_cells: int
    sharding: NamedSharding


def choose(problem: Problem, optimizer: Optimizer, history: History, cells: int, config, dtype,
           record: tuple = (), summaries: tuple = (), stride: int = 1, stop: StopRule = FirstPassage(),
           stop_bytes: int = 0, averaged: bool = False, schedule=None) -> Layout:
    """Choose devices, cache blocks, batch and group sizes for a run (``stop_bytes``: what its stop
    rule keeps per cell; ``averaged``: each cell keeps its averaged iterate too; ``schedule``: the
    learning-rate schedule compiled in, or ``None``)."""
    devices = jax.devices()
    count = len(devices) if config.devices is None else config.devices
    if not 1 <= count <= len(devices):
        raise NqmError(f"devices must be between 1 and {len(devices)} here, got {config.devices}")
    mesh = Mesh(np.array(devices[:count]), (CELLS,))
    itemsize = jnp.dtype(dtype).itemsize
    state = jax.eval_shape(optimizer.init, jax.ShapeDtypeStruct((problem.dim,), dtype))
    kept = history.by_worker or optimizer.sent is not None  # the current weights apart from the history
    # The history, the current weights if kept apart, the optimizer state and the cell's row of λ.
    vectors = history.slots + 1 + int(kept) + int(averaged)
    cell_bytes = itemsize * (vectors * problem.dim + sum(math.prod(x.shape) for x in jax.tree.leaves(state))) \
        + int(stop_bytes)
    budget = config.memory_budget
    if budget is None:  # half of an accelerator's memory, or 4 GiB of host memory
        limit = (devices[0].memory_stats() or {}).get("bytes_limit") if devices[0].platform != "cpu" else None
        budget = count * limit / 2 if limit else 4 * 2**30
    # Compaction may hold two copies of the state for a moment: count it twice.
    fits = int(budget // (2 * cell_bytes))
    block = config.block_cells if config.block_cells is not None else block_size(
        devices[0].platform, problem.dim, math.ceil(cells / count), fits // count)
    if block < 1:
        raise NqmError(f"block_cells must be >= 1, got {block}")
    unit = count * block
    wanted = config.batch_cells or max(unit, 64)
    batch = unit * math.ceil(min(wanted, cells) / unit)
    if fits < batch:
        raise NqmError(
            f"one batch of {batch} cells needs {format_bytes(2 * batch * cell_bytes)} but the memory budget is "
            f"{format_bytes(budget)}; raise memory_budget (--memory-budget, in GiB), or in Python lower the run "
            "settings batch_cells and block_cells"
        )
    group = batch * max(1, fits // batch)
    chunk = int(config.chunk_steps) if config.chunk_steps is not None else chunk_length(batch * problem.dim)
    if chunk < 1:
        raise NqmError(f"chunk_steps must be >= 1, got {config.chunk_steps}")
    if not config.independent_noise:  # a chunk's common noise is drawn at once: at most half the budget
        step_noise = 2 * problem.dim * itemsize  # the draw and its laid-out copy (a batch, checked above, is larger)
        chunk = min(chunk, max(1, int(budget // 2 // step_noise)))  # shorter chunks: the same numbers, less memory
    spec = Spec(optimizer, int(history.slots), bool(history.by_worker), chunk, block, bool(config.independent_noise),
                mesh, record, summaries, stride, stop, bool(averaged), schedule)
    return Layout(spec, batch, group, NamedSharding(mesh, PartitionSpec(CELLS)))


def chunk_length(batch_elements: int) -> int:
    """The steps of a chunk, when not set: :data:`CHUNK_STEPS`, doubled (at most 4 times) while a
    chunk advances fewer than :data:`CHUNK_ELEMENTS` elements. A cell's numbers do not depend on it.

    Args:
      batch_elements: the elements a step advances (cells per batch × N).

    Returns:
      Steps per chunk.
    """
    steps = CHUNK_STEPS
    while steps < 16 * CHUNK_STEPS and steps * batch_elements < CHUNK_ELEMENTS:
        steps *= 2
    return steps


def block_size(platform: str, dim: int, per_device: int, fits: int) -> int:
    """Cells a device advances together in one block, on ``platform`` ("cpu" or an accelerator's),
    for cells of ``dim`` elements, ``per_device`` cells to run on each device and room for ``fits``.

    On CPU: enough elements per step to amortise a step's fixed cost (tens of small kernels), few
    enough that XLA does not split a block's loops over the core pool the other device is using. A
    step touches a few vectors per cell (two rows of the history, however deep), so N alone sets it,
    never the grid — nor how few cells a run has (a run of 2 cells would go faster in blocks of
    2): the block's size may change the rounding (AB at N = 2,000 in blocks of 2 and of 8 differs in
    the last bits; 4 and 8 agree, tests/engine/test_engine.py). On an accelerator: the fewest cells, a
    power of two, that hold :data:`ACCELERATOR_BLOCK_ELEMENTS` elements, fewer where the grid or the
    memory holds fewer.
    """
    if platform == "cpu":
        return 2 ** int(math.log2(min(8, max(2, BLOCK_ELEMENTS // dim))))
    filled = 2 ** math.ceil(math.log2(max(1.0, ACCELERATOR_BLOCK_ELEMENTS / dim)))
    return max(1, min(filled, per_device, fits))


def put(tree, sharding):
    """Host arrays → global arrays laid out by ``sharding``. Every process holds the same host
    copy and contributes its own shards, so this also works across hosts (jax.distributed)."""
    return jax.tree.map(lambda x: jax.make_array_from_callback(np.shape(x), sharding, lambda i: np.asarray(x)[i]), tree)


def fetch(tree):
    """Global arrays → host numpy arrays (gathered from every process when spread over hosts)."""
    def get(x):
        return np.asarray(x if x.is_fully_addressable else multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(get, tree)


def split(tree, start, size, sharding):
    return put(jax.tree.map(lambda x: x[start:start + size], tree), sharding)


def blocks(per_cell, layout: Layout):
    """A (batch, cell) array as (batch, device, block, cell-in-block)."""
    devices = layout.sharding.mesh.size
    return per_cell.reshape(len(per_cell), devices, -1, layout.spec.block_cells)


def worth_compacting(owner, layout: Layout) -> bool:
    """Repack once a tenth of the blocks still stepping could be freed (a block costs a full
    block's work while any of its cells runs; a block with none is skipped)."""
    busy = int(blocks(owner >= 0, layout).any(-1).sum())
    needed = math.ceil(int((owner >= 0).sum()) / layout.spec.block_cells)
    return needed <= 0.9 * busy


def compact(batches, owner, layout: Layout):
    """Repack the running cells densely into blocks, spread evenly over batches and devices.

    Slots are filled in the order (cell in shard, batch, device), so every device's share of
    every batch holds its running cells first; the blocks behind them hold only finished cells
    (from the same batches) and cost nothing.
    """
    size = layout.batch_cells
    flat_owner = owner.reshape(-1)
    running = np.flatnonzero(flat_owner >= 0)
    count = math.ceil(len(running) / size)
    devices = layout.sharding.mesh.size
    slots = np.arange(count * size).reshape(count, devices, size // devices).transpose(2, 0, 1).reshape(-1)
    order = np.empty(count * size, np.int64)
    order[slots[: len(running)]] = running
    order[slots[len(running):]] = np.flatnonzero(flat_owner < 0)[: count * size - len(running)]
    # On the host: a plain copy, with no compilation for each new number of cells.
    merged = jax.tree.map(lambda *xs: np.concatenate(xs), *fetch(batches))
    picked = jax.tree.map(lambda x: x[order], merged)
    new = [tuple(split(tree, i * size, size, layout.sharding) for tree in picked) for i in range(count)]
    return new, flat_owner[order].reshape(count, size)
