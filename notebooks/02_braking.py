# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Choosing the braking coefficient ρ
#
# Adaptive Braking scales each gradient by `α = 1 − ρ cos(g, v)` before it enters the velocity:
# when a delayed gradient points against the velocity (`cos < 0`) the step is *amplified* towards
# it, when it points along it the step is *braked*. This notebook asks how much braking to use,
# where, and why it works:
#
# 1. how T\* depends on ρ across delays D and noise σ;
# 2. whether the grouping (one α, α per block, α per coordinate) and micro-stepping matter;
# 3. braking the velocity only, or the weight step only;
# 4. what α actually does during a run (its distribution);
# 5. which eigencomponents lose energy faster than under SGDM, for a few ρ.
#
# The sizes below run in a few minutes on a laptop; `NQM_SMOKE=1` runs a toy version.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

import nqm
from nqm import diagnostics, summary

SMOKE = os.environ.get("NQM_SMOKE") == "1"
N, STEPS, SIDE = (32, 2_000, 5) if SMOKE else (100, 20_000, 12)
DELAYS = [0, 2, 8] if SMOKE else [0, 1, 2, 4, 8, 16]
RHOS = [0.0, 0.5, 1.0] if SMOKE else [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0]
problem = nqm.zhang(N)
grid = dict(lr=np.geomspace(0.005, 2.0, SIDE), momentum=np.linspace(0, 0.95, max(4, SIDE * 2 // 3)),
            problem=problem, max_steps=STEPS, progress=False)

# %% [markdown]
# ## 1. T\* over (ρ, D), without and with noise
#
# One AB sweep over ρ × D × σ, summarised per panel (`nqm.summary.summarize`): the colour is T\*
# relative to SGDM's (ρ = 0) at the same D and σ, so blue means braking helps.

# %%
table = summary.summarize(nqm.sweep("ab", delay=DELAYS, noise=[0.0, 0.05], rho=RHOS, **grid))
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained", sharey=True)
for ax, sigma in zip(axes, [0.0, 0.05]):
    t = table.t_star.sel(noise=sigma).transpose("rho", "delay")
    ratio = t / t.sel(rho=0.0)
    mesh = ax.imshow(ratio.values, origin="lower", cmap="RdBu_r", vmin=0.4, vmax=1.6, aspect="auto")
    ax.set(xticks=range(len(DELAYS)), xticklabels=DELAYS, yticks=range(len(RHOS)), yticklabels=RHOS,
           xlabel="delay D", title=f"σ = {sigma:g}: T*(ρ) / T*(SGDM)")
    for (i, j), value in np.ndenumerate(ratio.values):
        ax.text(j, i, "—" if np.isnan(value) else f"{value:.2f}", ha="center", va="center", fontsize=8)
axes[0].set_ylabel("ρ")
fig.colorbar(mesh, ax=axes, shrink=0.9, label="< 1: faster than SGDM")
plt.show()

# %% [markdown]
# Without delay braking does not pay: at D = 0, ρ > 0 is no faster than SGDM, and with noise it is
# 20–30 % slower. From D = 1 on, ρ = 0.75 (or 1 with noise at large D) cuts T\* by 25–50 %;
# smaller ρ helps less, and ρ ≥ 1.5 is erratic — sometimes slower than SGDM. Near its optimum the
# choice is flat: anything in [0.75, 1] is close to the best.

# %% [markdown]
# ## 2. Grouping and micro-stepping
#
# AB can compute one α for all parameters (`global`, rotation-invariant), one per block of
# coordinates, or one per coordinate (`element`); micro-stepping splits the velocity update in S
# parts, each braked against the partly updated velocity. Here at D = 4, ρ = 0.75.

# %%
D = 4 if not SMOKE else 2
variants = {"global": {}, "blocks:8": {"group": "blocks:8"}, "element": {"group": "element"},
            "global, S = 4": {"micro_steps": 4}, "element, S = 4": {"group": "element", "micro_steps": 4}}
rows = {}
for name, options in variants.items():
    ds = nqm.sweep("ab", delay=D, rho=0.75, **grid, **options)
    rows[name] = (nqm.sweeps.t_star(ds), int((ds.status == 1).sum()))
sgdm = nqm.sweep("sgdm", delay=D, **grid)
rows["SGDM"] = (nqm.sweeps.t_star(sgdm), int((sgdm.status == 1).sum()))
for name, (ts, area) in rows.items():
    print(f"{name:>16}: T* = {ts:8.1f}   converged cells = {area}")

# %% [markdown]
# One global α is the fastest here, and every AB variant converges more cells than SGDM. A separate
# α per coordinate (on the axis-aligned NQM, per eigencomponent) or per block is slower at this
# delay: braking each mode on its own noisy alignment throws away the global picture that the
# delay distorts. That is not universal — on Figure 14's 32-component problem (D = 1) element-wise
# AB is the fastest — so it is worth a sweep. Micro-stepping matters at learning rates far above
# SGDM's limit (Figure 13), not at the fastest cells of this grid.

# %% [markdown]
# ## 3. Brake the velocity, the step, or both?
#
# `vel-only` brakes the velocity but steps with the unbraked `m v + g`; `weight-only` keeps the
# velocity unbraked and steps with the braked one (AB paper, Fig. 12).

# %%
for mode in ("both", "vel-only", "weight-only"):
    ds = nqm.sweep("ab", delay=D, rho=0.75, mode=mode, **grid)
    print(f"{mode:>12}: T* = {nqm.sweeps.t_star(ds):8.1f}   converged cells = {int((ds.status == 1).sum())}")

# %% [markdown]
# Braking the velocity is what matters: `vel-only` keeps most of the gain, `weight-only` (braking
# only the step while the velocity keeps accumulating unbraked gradients) is no better than SGDM.

# %% [markdown]
# ## 4. What α does during a run
#
# The distribution of α over the steps of one run (a histogram kept on the device by
# `trajectory(..., summaries=True)`), at the fastest AB cell of section 2's global sweep.

# %%
best = nqm.sweep("ab", delay=D, rho=0.75, **grid).squeeze()
cell = best.steps.where(best.status == 1).argmin(...)
lr, m = float(best.lr[cell["lr"]]), float(best.momentum[cell["momentum"]])
fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
for rho in (0.5, 0.75, 1.0):
    run = diagnostics.trajectory("ab", problem=problem, lr=lr, momentum=m, rho=rho, delay=D, steps=min(STEPS, 3000),
                                 record=(), summaries=True)
    counts, edges = run.alpha_histogram.values[1:-1], run.alpha_bin.values[1:]
    ax.stairs(counts / counts.sum(), edges, label=f"ρ = {rho:g}: mean {run.attrs.get('alpha_mean', np.nan):.2f}")
ax.set(xlim=(-0.1, 2.1), xlabel="α", ylabel="fraction of steps", title=f"α over a run: η = {lr:.3g}, m = {m:.2f}, D = {D}")
ax.legend()
plt.show()

# %% [markdown]
# At this fast cell the momentum is small, so the velocity is nearly the last (braked) gradient and
# cos(g, v) is close to ±1: α sits at 1 − ρ on most steps (the delayed gradient agrees with the
# velocity, and AB takes a much smaller step than SGDM) and at 1 + ρ on the steps where they are
# opposed (the turns of the delayed oscillation). With ρ = 1 most steps are almost skipped.

# %% [markdown]
# ## 5. Which components lose energy faster than under SGDM?
#
# The relative energy decay compares, from the same state and gradient, the energy of each
# eigencomponent after an AB step with that after an SGDM step (geometric mean over the run; below
# 1 AB dissipates faster). Here over the first 300 steps, where the delay would make the large
# components grow.

# %%
fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
for rho in (0.25, 0.75, 1.5):
    run = diagnostics.trajectory("ab", problem=problem, lr=lr, momentum=m, rho=rho, delay=D, steps=300, record=(),
                                 summaries=True, x64=True)
    ax.semilogx(run.eigenvalue, run.relative_energy_decay, ".", label=f"ρ = {rho:g}")
ax.axhline(1, color="grey", ls=":")
ax.set(xlabel="eigenvalue λ", ylabel="E / E_SGDM", title="relative energy decay per component (steps 1–300)")
ax.legend()
plt.show()

# %% [markdown]
# Braking acts where the delay hurts: with ρ = 0.75 the largest-eigenvalue components, which
# oscillate under delay, lose energy 2–4× faster than under SGDM, while the slow components are left
# alone (ratio ≈ 1); ρ = 0.25 damps them a little. ρ = 1.5 overshoots: its amplification when
# cos(g, v) < 0 (α up to 2.5) pumps energy into the middle of the spectrum — the erratic T\* of
# section 1.
