"""The loop: a jitted call advances a batch of cells by up to ``chunk_steps`` steps.

Inside, the batch is sharded over devices (``shard_map``) and each device walks its cells in
*blocks* small enough to stay in cache, in place in the donated batch, each block leaving its
``while_loop`` as soon as all its cells are done. The common noise of a chunk is drawn here too.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from nqm.engine import record
from nqm.engine.step import CellState, Inputs, Model, Spec, cell_step, normal, stop_block
from nqm.status import active

CELLS = "cells"  # the mesh axis over which cells are sharded


@functools.partial(jax.jit, static_argnums=(3, 4))
def common_noise(seed, t0, model: Model, steps: int, mesh: Mesh):
    """``σ``-free noise of steps ``t0 … t0+steps−1``, shaped ``N(0, H)``: one draw per step for all
    cells. Each device draws a share of the steps (with the same per-device program whatever the
    device count, so the same bits), then every device gets all of them."""
    def draw(t, model):
        return jax.vmap(lambda t: model.shape_noise(normal(jax.random.key(seed), t, model.lam)))(t)

    rows = -(-steps // mesh.size) * mesh.size
    noise = jax.shard_map(draw, mesh=mesh, in_specs=(PartitionSpec(CELLS), PartitionSpec()),
                          out_specs=PartitionSpec(CELLS))(t0 + jnp.arange(rows), model)
    return jax.lax.with_sharding_constraint(noise[:steps], NamedSharding(mesh, PartitionSpec()))


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def no_noise(shape, dtype, mesh: Mesh):
    """What :func:`common_noise` gives for noiseless cells to multiply by σ = 0: zeros of its shape
    and layout, drawn from nothing (the same program then runs on them, so the same bits)."""
    return jax.lax.with_sharding_constraint(jnp.zeros(shape, dtype), NamedSharding(mesh, PartitionSpec()))


@functools.partial(jax.jit, static_argnums=0, donate_argnums=1)
def advance(spec: Spec, cells: CellState, inputs: Inputs, model: Model, noise, schedule, row, t0, length, seed, limits) -> CellState:
    """Advance a batch of cells by up to ``length ≤ spec.chunk_steps`` steps from step ``t0``,
    step ``t0 + k`` taking the common noise ``noise[row + k]`` (``None``: independent noise) and
    the delay and worker ``schedule[i][row + k]``."""
    replicated, sharded = PartitionSpec(), PartitionSpec(CELLS)

    def per_device(cells, inputs, model, noise, schedule, row, t0, length, seed, limits):
        key = jax.random.key(seed)
        size = spec.block_cells
        blocks = cells.status.shape[0] // size
        chunk = (noise, schedule, row, t0, length, key, limits)
        if blocks == 1:
            return advance_block(spec, cells, inputs, model, *chunk)

        # Block by block, in place: each block is sliced out (into cache), advanced and written
        # back into the (donated) batch, which is never copied as a whole.
        def one_block(i, cells):
            block = jax.tree.map(lambda x: jax.lax.dynamic_slice_in_dim(x, i * size, size), (cells, inputs))
            done = advance_block(spec, *block, model, *chunk)
            return jax.tree.map(lambda x, y: jax.lax.dynamic_update_slice_in_dim(x, y, i * size, 0), cells, done)

        return jax.lax.fori_loop(0, blocks, one_block, cells)

    return jax.shard_map(
        per_device,
        mesh=spec.mesh,
        in_specs=(sharded, sharded) + (replicated,) * 8,
        out_specs=sharded,
    )(cells, inputs, model, noise, schedule, row, t0, length, seed, limits)


def advance_block(spec: Spec, cells: CellState, inputs: Inputs, model, noise, schedule, row, t0, length, key, limits) -> CellState:
    """At most ``length`` steps of a block of cells, leaving when all are done."""
    # λ as one materialised row per cell: XLA would otherwise broadcast it afresh at every step
    # for the loss's reduction (a full extra pass over the block).
    model = model._replace(lam=jnp.broadcast_to(model.lam, (cells.status.shape[0],) + model.lam.shape))
    step = jax.vmap(cell_step, in_axes=(None, None, None, 0, 0, Model(0, None, None, None), None, None, None))

    def running(carry):
        k, cells = carry
        return (k < length) & jnp.any(active(cells.status))

    def advance_one(carry):
        k, cells = carry
        shared = None if noise is None else noise[row + k]
        source = tuple(x[row + k] for x in schedule)
        new, values, outcome = step(spec, t0 + k, source, cells, inputs, model, shared, key, limits)
        if spec.stop.continues:  # the cells the stop rule keeps stepping: ended or kept
            new = stop_block(spec.stop, t0 + k + 1, cells, new, *outcome, limits[0])
        return k + 1, new._replace(trace=record.traced(spec.stride, new.trace, values, t0, k))

    return jax.lax.while_loop(running, advance_one, (jnp.int32(0), cells))[1]
