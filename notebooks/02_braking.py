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
# # The braking coefficient ρ: how Adaptive Braking dampens delayed oscillations
#
# Adaptive Braking scales the gradient by `α = 1 − ρ cos(g, v)` before it enters the velocity.
# With delay, the top eigencomponents of SGDM oscillate and grow; AB sees `g` and `v` point against
# each other and brakes. Here: T* as a function of ρ, then per-step diagnostics of one setting
# (α, loss, per-component energy, and the relative energy decay against SGDM).
#
# Set `NQM_SMOKE=1` for a tiny run.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

import nqm
from nqm import diagnostics
from nqm.sweeps import t_star

SMOKE = os.environ.get("NQM_SMOKE") == "1"
N, STEPS, SIDE = (200, 2_000, 5) if SMOKE else (2_000, 50_000, 16)
DELAY = 4
problem = nqm.zhang(N)

# %% [markdown]
# ## T* against ρ

# %%
rhos = np.linspace(0, 1.0, 3 if SMOKE else 11)
ds = nqm.sweep("ab", lr=np.geomspace(0.01, 2, SIDE), momentum=np.linspace(0, 0.95, SIDE), delay=DELAY,
               noise=0.0, rho=rhos, problem=problem, max_steps=STEPS)
best = [t_star(ds.sel(rho=r)) for r in rhos]
converged = [int((ds.sel(rho=r).status == 1).sum()) for r in rhos]
fig, ax = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
ax[0].plot(rhos, best, "o-")
ax[0].set(xlabel="braking coefficient ρ", ylabel="T* (steps)", yscale="log", title=f"fastest trajectory, D = {DELAY}")
ax[1].plot(rhos, converged, "o-")
ax[1].set(xlabel="braking coefficient ρ", ylabel="cells reaching the target", title="size of the converging region")
plt.show()

# %% [markdown]
# ## One trajectory: an lr/momentum where SGDM diverges at this delay
#
# Pick the cell with the largest learning rate at m = 0.9 where AB with ρ = 0.5 converges but SGDM does not.

# %%
m = float(ds.momentum.sel(momentum=0.9, method="nearest"))
ok = (ds.sel(rho=0.5, momentum=m).status == 1) & (ds.sel(rho=0.0, momentum=m).status == -1)
lr = float(ds.lr.where(ok.squeeze(), drop=True).max()) if bool(ok.any()) else float(ds.lr[SIDE // 2])
steps = 300 if SMOKE else 3000
record = ("loss", "alpha", "energy", "energy_ratio")
ab = diagnostics.trajectory(problem, "ab", lr=lr, momentum=m, rho=0.5, delay=DELAY, steps=steps, record=record)
sgdm = diagnostics.trajectory(problem, "ab", lr=lr, momentum=m, rho=0.0, delay=DELAY, steps=steps, record=record)
print(f"lr = {lr:.3g}, m = {m:.2f}, D = {DELAY}")

# %%
fig, ax = plt.subplots(1, 3, figsize=(13, 3.4), layout="constrained")
ax[0].semilogy(sgdm.step, sgdm.loss, label="SGDM")
ax[0].semilogy(ab.step, ab.loss, label="AB ρ = 0.5")
ax[0].set(xlabel="step", ylabel="loss", title="loss")
ax[0].legend()
ax[1].plot(ab.step, ab.alpha, lw=0.6)
ax[1].set(xlabel="step", ylabel="α", title="braking factor α = 1 − ρ cos(g, v)")
top = 3
for k in range(top):
    ax[2].semilogy(ab.step, ab.energy.isel(component=k), label=f"λ = {float(ab.eigenvalue[k]):.2g}")
ax[2].set(xlabel="step", ylabel="energy", title=f"AB: energy of the top {top} components")
ax[2].legend()
plt.show()

# %% [markdown]
# Relative energy decay per component (geometric mean of `E_{t+1}/Ê_{t+1}` along the AB
# trajectory; below 1, AB removes that component's energy faster than an SGDM step would):

# %%
decay = diagnostics.relative_energy_decay(ab.energy_ratio)
fig, ax = plt.subplots(figsize=(5, 3.4), layout="constrained")
ax.semilogx(ab.eigenvalue, decay, ".")
ax.axhline(1, color="0.5", lw=0.8)
ax.set(xlabel="eigenvalue λ", ylabel="relative energy decay", title="AB vs SGDM, per component")
plt.show()
