"""``nqm bench``: engine throughput against a fused-update probe and a plain numpy loop, in one run.

An *element-step* advances one eigencomponent of one cell by one step. Printed: a table, the
verdict on :data:`TARGETS` (which hold for the default size on a 2-core CPU; ``--check`` makes a
miss exit with status 1), then, as the last line, one JSON object with the measured rates and
their ratios.

* ``probe``: the minimal jitted, vmapped heavy-ball update ``v = m v + λ⊙w; w = w − η v`` over
  the same cells × N, no delay, noise or loss: the practical roofline for this work.
  ``probe_tiled`` is the same update with the engine's layout (cache blocks, one shard per
  device), for reference.
* ``probe_loss``, ``probe_sgdm``, ``probe_ab``: the tiled probe plus, step by step, what an exact
  first passage needs — each cell's loss ``½ Σ λ w²`` and a flag when it falls below the target;
  then the gradient at the weights D steps old (a ring) and the noise; then AB's three reductions
  ``⟨g, v⟩, ‖g‖², ‖v‖²`` and its braking (:func:`probe`). The last two are the least that an
  engine which knows the step each cell crosses must compute, written as one plain XLA program:
  ``sgdm_vs_probe_sgdm`` and ``ab_vs_probe_ab`` say how far nqm is from it, and
  ``probe_*_vs_probe`` what XLA:CPU itself makes of that work against the bare update.
* ``numpy``: the loop a researcher writes by hand (SGDM with delay and noise, one cell at a
  time), timed on a few cells and scaled.
* ``sgdm`` / ``ab`` / ``adam``: the engine on a noisy delayed grid for a fixed number of steps
  (``adam`` is optax's, through the bridge: ``adam_vs_sgdm`` is what the bridge costs per step).
* ``iid_vs_constant``, ``workers_vs_constant``, ``slow_workers_vs_constant``: SGDM under the
  random delays of :data:`DELAYS` (iid uniform, a pool of 16 exponential workers, the same with a
  quarter of them 4× slower; mean delay 15 each) against a constant delay of 15, at a long budget
  (:data:`LONG_STEPS`: the largest delay a schedule holds grows with the budget, and with it any
  ring that must reach back that far).
* ``early exit``: a grid whose cells stop at very different steps (between a few and 4× the
  budget's steps). Its efficiency is the useful cell-steps Σ_cells T_cell divided by the cell-steps
  the devices computed (``Outcome.work``: a cache block steps all its cells while any of them runs;
  padding counts): at most 1, and 1 when no finished cell is ever carried along. The time the same
  run takes against the full-grid rate is printed beside it, for reference.

Targets hold at the default size (:data:`DEFAULT`) only; a run of another size (``--quick``, the CI
configuration, or other ``--cells/--dim/--steps``) prints its ratios without verdicts.
"""

from __future__ import annotations

import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import nqm
from nqm import engine, validate
from nqm.engine.layout import block_size
from nqm.optimizers import make
from nqm.status import BUDGET, DIVERGED, REACHED

DELAY, NOISE = 8, 0.01
DEFAULT = {"cells": 256, "dim": 10_000, "steps": 2000}  # the size the targets are set for
QUICK = {"cells": 32, "dim": 2000, "steps": 200}
# Random delays against a constant one of the same mean (15), at a budget where a deep ring shows.
DELAYS = {"constant": 15, "iid": "uniform:0:30", "workers": "workers:16", "slow_workers": "workers:16:slow=0.25:4"}
LONG_CELLS, LONG_STEPS = 32, 20_000

# What this benchmark must show on a 2-core CPU at its default size (``nqm bench --check``).
TARGETS = {"sgdm_vs_probe": 0.5, "ab_vs_probe": 0.35, "sgdm_vs_numpy": 20.0, "early_exit_efficiency": 0.7,
           "iid_vs_constant": 0.8, "workers_vs_constant": 0.8, "slow_workers_vs_constant": 0.8}


def check(cells: int, dim: int, steps: int) -> None:
    """The benchmark's sizes within :data:`nqm.validate.BOUNDS` (its probe holds cells × N of w and v)."""
    cells = validate.count(cells, "cells", high=validate.BOUNDS["cells"])
    dim = validate.count(dim, "dim", high=validate.BOUNDS["dim"])
    validate.count(steps, "steps", high=validate.BOUNDS["steps"] // 4)  # the early-exit run takes 4 × steps
    if cells * dim > validate.BOUNDS["elements"]:
        raise nqm.NqmError(f"cells × dim = {cells * dim:,} is more than {validate.BOUNDS['elements']:,}; "
                           "benchmark fewer cells or a smaller dim")


def missed_targets(result: dict) -> list[str]:
    """The targets of :data:`TARGETS` that ``result`` falls short of."""
    return [name for name, floor in TARGETS.items() if not result[name] >= floor]


PROBES = ("update", "loss", "sgdm", "ab")  # the probe's work per step: see probe()


def probe(lam, cells: int, steps: int, tiled: bool, work: str = "update"):
    """The probe as ``(program, arguments)``: ``program(*arguments)`` runs ``steps`` steps of the
    fused momentum update on ``cells`` cells (lr 0.1–1, with delay 0.001–0.02; m 0.9, w₀ = 1) and
    returns ``(w, v, crossed)``. ``work`` (one of :data:`PROBES`) is the update alone; ``"loss"``:
    with each cell's loss every step and whether it fell below 0.01; ``"sgdm"``: the loss, a
    gradient read from a ring of the last D + 1 weights (D = :data:`DELAY`) and noise σ√λ ⊙ ξ_t, one
    row per step shared by the cells and drawn beforehand (as the engine draws a chunk's) — the
    least an exact first passage of delayed noisy SGDM computes; ``"ab"``: that and AB's braking
    (ρ = 0.5)."""
    n, slots = lam.size, DELAY + 1
    delayed = work in ("sgdm", "ab")  # (at the engine's benchmark cells' lr: under delay 0.1–1 diverges)
    lr = (jnp.geomspace(0.001, 0.02, cells) if delayed else jnp.linspace(0.1, 1.0, cells)).astype(jnp.float32)[:, None]
    momentum = jnp.full((cells, 1), 0.9, jnp.float32)
    draws = steps if delayed else 1
    noise = NOISE * jnp.sqrt(lam) * jax.random.normal(jax.random.key(0), (draws, n), jnp.float32)
    total = lambda x: jnp.sum(x, axis=-1, keepdims=True)

    def run(w, v, lr, momentum, noise):
        def body(t, carry):
            w, v, crossed, ring = carry
            if delayed:
                g = lam * jax.lax.dynamic_index_in_dim(ring, (t - DELAY) % slots, 1, keepdims=False) + noise[t]
            else:
                g = lam * w
            if work == "ab":  # g scaled by 1 − ρ cos(g, v)
                g = g * (1 - 0.5 * total(g * v) / jnp.sqrt(total(g * g) * total(v * v) + 1e-12))
            v = momentum * v + g
            w = w - lr * v
            if work != "update":
                crossed = crossed | (0.5 * total(lam * w * w) < 0.01)
            if delayed:
                ring = jax.lax.dynamic_update_index_in_dim(ring, w[:, None], (t + 1) % slots, 1)
            return w, v, crossed, ring

        ring = jnp.broadcast_to(w[:, None], (w.shape[0], slots if delayed else 1, n))
        return jax.lax.fori_loop(0, steps, body, (w, v, jnp.zeros_like(w[:, :1], bool), ring))[:3]

    if tiled:
        devices = jax.devices()
        mesh = jax.sharding.Mesh(np.array(devices), ("cells",))
        # 8 cells on CPU (2 to 16 give the same within 10 %); an accelerator's blocks as the engine's
        # (or its whole share, where they do not divide it).
        share = cells // len(devices)
        block = 8 if devices[0].platform == "cpu" else block_size(devices[0].platform, n, share, share)
        block = block if share % block == 0 else share
        spec, everywhere = jax.sharding.PartitionSpec("cells"), jax.sharding.PartitionSpec()

        def per_device(w, v, lr, momentum, noise):
            shape = lambda x: x.reshape((-1, block) + x.shape[1:])
            out = jax.lax.map(lambda a: run(*a, noise), (shape(w), shape(v), shape(lr), shape(momentum)))
            return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), out)

        fn = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=(spec,) * 4 + (everywhere,), out_specs=spec))
    else:
        fn = jax.jit(run)
    return fn, (jnp.ones((cells, n), jnp.float32), jnp.zeros((cells, n), jnp.float32), lr, momentum, noise)


def probe_rate(lam, cells: int, steps: int, tiled: bool, work: str = "update") -> float:
    """Element-steps per second of :func:`probe`."""
    fn, args = probe(lam, cells, steps, tiled, work)
    jax.block_until_ready(fn(*args))
    return cells * lam.size * steps / timed(lambda: jax.block_until_ready(fn(*args)), repeats=3)[0]


def numpy_rate(lam: np.ndarray, cells: int, steps: int) -> float:
    """Element-steps per second of a hand-written numpy loop (SGDM, delay D, noise σ), per cell."""
    rng = np.random.default_rng(0)
    sqrt_lam = np.sqrt(lam)

    def loop():
        for lr in np.linspace(0.1, 0.5, cells):
            history = [np.ones_like(lam) for _ in range(DELAY + 1)]
            w, v = np.ones_like(lam), np.zeros_like(lam)
            for _ in range(steps):
                g = lam * history[0] + NOISE * sqrt_lam * rng.standard_normal(lam.size)
                v = 0.9 * v + g
                w = w - lr * v
                history = history[1:] + [w]
                if 0.5 * np.dot(lam, w * w) < 0.01:
                    break

    return cells * lam.size * steps / timed(loop)[0]


def engine_rate(problem, method: str, cells: int, steps: int, chunk: int, delay=DELAY) -> float:
    """Element-steps per second of the engine over a fixed number of steps (no early exit)."""
    optimizer = make(method, delay=delay, problem=problem)
    # lr and momentum as the benchmark sets them, every other hyperparameter at its default (rho 0.5 for ab).
    hyper = {"lr": np.geomspace(0.001, 0.02, cells), "momentum": np.full(cells, 0.9), "rho": np.full(cells, 0.5)}
    defaults = optimizer.hyper._field_defaults
    hyper = {k: hyper[k] if k in hyper else np.full(cells, defaults[k]) for k in optimizer.hyper._fields}
    config = engine.RunConfig(target=-1.0, diverge_factor=np.inf, chunk_steps=chunk, progress=False)
    run = lambda n: engine.simulate(problem, engine.Cells(optimizer, hyper, np.full(cells, NOISE), delay),
                                    dataclasses.replace(config, max_steps=n))
    run(chunk)  # compile
    return cells * problem.dim * steps / timed(lambda: run(steps), repeats=2)[0]


def early_exit(problem, cells: int, budget: int, chunk: int, full_rate: float) -> tuple[float, float, dict]:
    """``(efficiency, time ratio, counts)`` of a grid whose cells stop anywhere between a few and
    ``budget`` steps: useful cell-steps over computed cell-steps, and the useful element-steps over
    what the elapsed time buys at the full-grid rate ``full_rate`` (noisy; may exceed 1).

    Target loss 1 (from L(w₀) ≈ 4.9 at N = 10⁴): on this lr × momentum grid a fifth of the cells
    reach it after 2k–8k steps, half diverge within a few hundred and the rest use the budget.
    """
    side = int(round(np.sqrt(cells)))
    lr, m = np.meshgrid(np.geomspace(0.005, 1.0, side), np.linspace(0.0, 0.95, cells // side))
    hyper = {"lr": lr.ravel(), "momentum": m.ravel()}
    config = engine.RunConfig(target=1.0, max_steps=budget, chunk_steps=chunk, progress=False)
    optimizer = make("sgdm", delay=DELAY)
    sigma = np.full(lr.size, NOISE)
    cells = engine.Cells(optimizer, hyper, sigma, DELAY)
    engine.simulate(problem, cells, dataclasses.replace(config, max_steps=chunk))
    elapsed, out = timed(lambda: engine.simulate(problem, cells, config), repeats=2)
    useful = float(out.steps.sum())
    counts = {"reached": int((out.status == REACHED).sum()), "diverged": int((out.status == DIVERGED).sum()),
              "budget": int((out.status == BUDGET).sum()), "steps_min": int(out.steps.min()), "steps_max": int(out.steps.max())}
    return useful / float(out.work[0]), useful * problem.dim / (elapsed * full_rate), counts


def timed(fn, repeats: int = 1, warm_up: bool = False):
    """``(seconds, result)`` of the fastest of ``repeats`` calls of ``fn`` (wall clock), after one
    call that is not timed if ``warm_up`` (compilation, caches). The fastest: the machine is shared,
    and a slow outlier in one of two timings would skew their ratio. The one timer of ``nqm bench``
    and of the ``scripts/bench_*.py``."""
    if warm_up:
        fn()
    best = (np.inf, None)
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, (time.perf_counter() - start, result), key=lambda x: x[0])
    return best


def children_cpu_seconds() -> float:
    """User and system CPU seconds of the finished child processes so far: beside :func:`timed`,
    what a command timed from outside cost (less sensitive than its wall time to other work)."""
    import resource  # POSIX only, and only the benchmarks that run commands need it

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ratios(rates: dict) -> dict:
    """The ratios of the measured ``rates`` (element-steps/s by name) that the report prints and
    the targets read."""
    return {
        "sgdm_vs_probe": rates["sgdm"] / rates["probe"],
        "ab_vs_probe": rates["ab"] / rates["probe"],
        "adam_vs_sgdm": rates["adam"] / rates["sgdm"],
        "sgdm_vs_probe_tiled": rates["sgdm"] / rates["probe_tiled"],
        **{f"probe_{work}_vs_probe": rates[f"probe_{work}"] / rates["probe"] for work in PROBES[1:]},
        "sgdm_vs_probe_sgdm": rates["sgdm"] / rates["probe_sgdm"],
        "ab_vs_probe_ab": rates["ab"] / rates["probe_ab"],
        "sgdm_vs_numpy": rates["sgdm"] / rates["numpy"],
        **{f"{name}_vs_constant": rates[f"sgdm_{name}"] / rates["sgdm_constant"] for name in DELAYS if name != "constant"},
    }


def main(cells: int = DEFAULT["cells"], dim: int = DEFAULT["dim"], steps: int = DEFAULT["steps"],
         quick: bool = False) -> dict:
    if quick:
        cells, dim, steps = QUICK.values()
    check(cells, dim, steps)
    problem = nqm.zhang(dim)
    lam = jnp.asarray(problem.eigenvalues, jnp.float32)
    chunk = max(steps // 4, 50)
    long_steps = LONG_STEPS if not quick else 10 * steps
    rates = {
        "probe": probe_rate(lam, cells, steps, tiled=False),
        "probe_tiled": probe_rate(lam, cells, steps, tiled=True),
        **{f"probe_{work}": probe_rate(lam, cells, steps, tiled=True, work=work) for work in PROBES[1:]},
        "numpy": numpy_rate(problem.eigenvalues, cells=2, steps=max(steps // 10, 20)),
        "sgdm": engine_rate(problem, "sgdm", cells, steps, chunk),
        "ab": engine_rate(problem, "ab", cells, steps, chunk),
        "adam": engine_rate(problem, "adam", cells, steps, chunk),
        **{f"sgdm_{name}": engine_rate(problem, "sgdm", min(cells, LONG_CELLS), long_steps, 1000, delay=delay)
           for name, delay in DELAYS.items()},
    }
    efficiency, time_ratio, counts = early_exit(problem, cells, budget=4 * steps, chunk=chunk, full_rate=rates["sgdm"])
    devices = jax.devices()
    print(f"nqm bench: {cells} cells x N={dim}, D={DELAY}, sigma={NOISE}, {steps} steps, {len(devices)} "
          f"{devices[0].platform} device(s); random delays: {min(cells, LONG_CELLS)} cells x {long_steps:,} steps, "
          f"{', '.join(str(d) for d in DELAYS.values())}")
    print(f"{'':<22}{'elem-steps/s':>14}{'vs probe':>10}")
    for name, rate in rates.items():
        print(f"{name:<22}{rate:>14.3e}{rate / rates['probe']:>10.3f}")
    ratio = ratios(rates)
    print(f"what an exact first passage costs under XLA (the probes in the engine's layout): each cell's loss every "
          f"step takes the update to {ratio['probe_loss_vs_probe']:.2f}x the probe, the delay ring and noise to "
          f"{ratio['probe_sgdm_vs_probe']:.2f}x (nqm SGDM runs at {ratio['sgdm_vs_probe_sgdm']:.2f}x that), AB's "
          f"braking to {ratio['probe_ab_vs_probe']:.2f}x (nqm AB: {ratio['ab_vs_probe_ab']:.2f}x that)")
    print(f"early exit: {efficiency:.3f} of the computed cell-steps were useful; the run took "
          f"{1 / time_ratio:.2f}x the time of its useful work at the full-grid rate; {counts}")
    result = {
        **{f"{name}_elem_steps_per_s": rate for name, rate in rates.items()},
        **ratio,
        "early_exit_efficiency": efficiency,
        "early_exit_time_ratio": time_ratio,
        "cells": cells, "dim": dim, "steps": steps, "long_steps": long_steps, "delay": DELAY, "noise": NOISE,
        "devices": len(devices),
        "backend": devices[0].platform,
    }
    at_default = {"cells": cells, "dim": dim, "steps": steps} == DEFAULT
    result["targets_missed"] = missed_targets(result) if at_default else []
    result["verdicts"] = at_default
    if at_default:
        verdict = ", ".join(f"{k} {result[k]:.3g} < {TARGETS[k]}" for k in result["targets_missed"])
        print(f"targets ({', '.join(f'{k} >= {v}' for k, v in TARGETS.items())}): "
              f"{'missed: ' + verdict if verdict else 'all met'}")
    else:
        print(f"no verdicts: the targets hold at the default size ({DEFAULT['cells']} cells x N={DEFAULT['dim']:,} x "
              f"{DEFAULT['steps']:,} steps), not at this one")
    print(json.dumps(result))
    return result
