"""nqm against a plain JAX/optax implementation of the same runs, timed in one process.

The peer is what a researcher would write in an afternoon: the NQM in its eigenbasis, the delay a
ring of the last D + 1 weight vectors, the noise σ√λ ξ drawn once per step for every cell (as nqm
draws it), SGDM as ``optax.sgd`` (its trace is the heavy ball's velocity) with the hyperparameters
vmapped through ``optax.inject_hyperparams``, AB as the same optax SGD fed the braked gradient
``(1 − ρ cos(g, v)) g``; one ``lax.scan`` over the budget, vmapped over the cells, recording the
first step whose loss is below the target. It runs every cell for the whole budget (no early exit,
no settled test). nqm runs ``nqm.sweep(..., first_passage=True)``: the same first passage, with its
early exit and its blocked, sharded loop.

Per case (N, method, delay, noise): both wall times after a warm-up call of the same shapes (the
compilation is not counted; best of ``--repeat``), the peer's rate in element-steps/s (cells × N ×
budget), and the ratio peer time / nqm time (> 1: nqm is faster). Noiseless cases also compare T
cell by cell: the counts of equal T and the largest difference; with ``--x64`` (both in float64)
every T must be equal, or the script exits with status 1.

    python scripts/bench_peer.py [--quick] [--x64] [--repeat R]
"""

import argparse
import itertools
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import nqm
from nqm.bench import timed

EPS = 1e-12  # AB's floor of ‖g‖‖v‖, as nqm's default


def peer(lam, delay, sigma, steps, target, braked):
    """A jitted ``f(lr, momentum, rho, key)`` → T per cell (0: not reached) of SGDM or, ``braked``,
    global AB on the NQM ``lam``, every cell stepped for ``steps`` steps; ``lr``, ``momentum`` and
    ``rho`` one value per cell (``rho`` ignored unless braked)."""
    dtype = lam.dtype
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1, momentum=0.5)
    slots = delay + 1

    def init(lr, m):
        state = opt.init(jnp.ones_like(lam))
        return state._replace(hyperparams=dict(state.hyperparams, learning_rate=lr, momentum=m))

    def step(r, carry, z):
        w, ring, state, t, first = carry
        g = lam * ring[(t + 1) % slots] + sigma * jnp.sqrt(lam) * z  # w_{t−D}: the oldest slot
        if braked:  # AB: brake the gradient against the velocity before it enters it
            v = state.inner_state[0].trace
            cos = jnp.vdot(g, v) / jnp.maximum(jnp.linalg.norm(g) * jnp.linalg.norm(v), EPS)
            g = (1 - r * cos) * g
        update, state = opt.update(g, state)
        w = w + update
        ring = ring.at[(t + 1) % slots].set(w)
        loss = 0.5 * jnp.vdot(lam * w, w)
        first = jnp.where((first == 0) & (loss < target), t + 1, first)
        return (w, ring, state, t + 1, first), None

    def run(lr, m, r, noise):
        w = jnp.ones_like(lam)
        carry = (w, jnp.broadcast_to(w, (slots, lam.size)), init(lr, m), jnp.int32(0), jnp.int32(0))
        return jax.lax.scan(lambda c, z: step(r, c, z), carry, noise)[0][-1]

    @jax.jit
    def cells(lr, m, r, key):
        noise = jax.random.normal(key, (steps, lam.size), dtype)  # one draw per step, shared by the cells
        return jax.vmap(run, in_axes=(0, 0, 0, None))(lr, m, r, noise)

    return cells


def case(dim, method, delay, sigma, side, steps, x64, repeat):
    problem = nqm.zhang(dim)
    lrs, momenta = np.geomspace(0.02, 0.3, side), np.linspace(0.3, 0.9, side)
    rho = 0.5 if method == "ab" else None
    m, lr = (x.ravel() for x in np.meshgrid(momenta, lrs, indexing="ij"))
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        run = peer(jnp.asarray(problem.eigenvalues, dtype), delay, sigma, steps, 0.01, braked=rho is not None)
        args = (jnp.asarray(lr, dtype), jnp.asarray(m, dtype), jnp.full(lr.size, rho or 0.0, dtype), jax.random.PRNGKey(0))
        peer_s, theirs = timed(lambda: np.asarray(run(*args)), repeat, warm_up=True)  # returns once done
    options = {} if rho is None else {"rho": rho}
    nqm_s, ours = timed(lambda: nqm.sweep(method, lr=lrs, momentum=momenta, delay=delay, noise=sigma, problem=problem,
                                          max_steps=steps, first_passage=True, x64=x64, progress=False, **options),
                        repeat, warm_up=True)
    row = {"dim": dim, "method": method, "delay": delay, "noise": sigma, "cells": lr.size, "steps": steps,
           "peer_s": round(peer_s, 3), "nqm_s": round(nqm_s, 3),
           "peer_element_steps_per_s": float(f"{lr.size * dim * steps / peer_s:.3g}"),
           "peer_over_nqm": round(peer_s / nqm_s, 2)}
    if sigma == 0:
        t_nqm = np.where(ours.status.values == 1, ours.steps.values, 0).reshape(-1)  # momentum-major, as the peer's
        row.update(t_reached=int((t_nqm > 0).sum()), t_equal=int((t_nqm == theirs).sum()),
                   t_max_difference=int(np.abs(t_nqm - theirs).max()))
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 100 and 1,000, 4 × 4 cells, 500 steps (for CI)")
    parser.add_argument("--x64", action="store_true", help="both in float64: T must then agree on every cell")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    nqm.use_every_core()
    dims, side, steps = ((100, 1000), 4, 500) if args.quick else ((1000, 10_000), 8, 3000)
    failed = False
    for dim, method, (delay, sigma) in itertools.product(dims, ("sgdm", "ab"), ((0, 0.0), (8, 0.0), (8, 0.01))):
        row = case(dim, method, delay, sigma, side, steps, args.x64, args.repeat)
        failed |= args.x64 and row.get("t_equal", row["cells"]) != row["cells"]
        print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
