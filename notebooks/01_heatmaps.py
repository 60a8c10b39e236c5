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
# # Steps to target: SGDM vs Adaptive Braking under delay and noise
#
# A sweep over learning rate × momentum for a few delays `D` and noise scales `σ`, on the noisy
# quadratic model `L(w) = ½ Σ λ_j w_j²` with `λ_j = 1/j`. Each cell runs until the loss falls below
# the target and stays there (status 1, *settled*), or only touches it (2, *transient*: hatched),
# diverges (−1) or spends its step budget (0). With `ρ = 0`, AB *is* SGDM (bit for bit), so one AB
# sweep over `rho = [0, 0.5]` compares the two.
#
# Set `NQM_SMOKE=1` for a tiny run (CI executes this notebook that way).

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

import nqm
from nqm.thresholds.agreement import agreement
from nqm.status import t_star

SMOKE = os.environ.get("NQM_SMOKE") == "1"
N, STEPS, SIDE = (200, 2_000, 6) if SMOKE else (2_000, 50_000, 20)

# %%
ds = nqm.sweep(
    "ab",
    lr=np.geomspace(0.01, 4, SIDE),
    momentum=np.linspace(0, 0.98, SIDE),
    delay=[0, 4],
    noise=[0.0, 0.05],
    rho=[0.0, 0.5],
    problem=nqm.zhang(N),
    max_steps=STEPS,
)
ds

# %% [markdown]
# One panel per (D, σ, ρ): diverged cells black, cells out of budget white, the fastest cell starred.
# AB is not linear, so it has no derived threshold of its own; the dashed red line is SGDM's
# (AB at ρ = 0), derived from SGDM's update, drawn on every panel for reference.

# %%
from nqm.thresholds import derived

sgdm = derived.threshold_table("sgdm", delays=ds.delay.values.tolist(), momenta=ds.momentum.values)
fig = nqm.plot_heatmaps(ds, threshold=sgdm)
plt.show()

# %% [markdown]
# `T*` (the 1st percentile of T over converged cells) per panel, how many cells converge — settle
# below the target (status 1) — and how many only touched it (transient, status 2: hatched above):

# %%
for delay in ds.delay.values:
    for noise in ds.noise.values:
        row = []
        for rho in ds.rho.values:
            panel = ds.sel(delay=delay, noise=noise, rho=rho)
            row.append(f"rho={rho:g}: T*={t_star(panel):9.1f}, converged={int((panel.status == 1).sum()):3d}, "
                       f"transient={int((panel.status == 2).sum()):3d}")
        print(f"D={delay} sigma={noise:<5g}", " | ".join(row))

# %% [markdown]
# Where does the simulated divergence boundary of SGDM (AB at ρ = 0, σ = 0) sit relative to the
# threshold derived from SGDM's update? Fraction of cells outside a ±3 % band around η* whose status
# agrees with it (AB is not linear, so its own threshold would be simulated: `nqm threshold --simulate`):

# %%
agreement(ds.sel(rho=[0.0], noise=[0.0]), table=sgdm)
