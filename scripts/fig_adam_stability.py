"""Does braking extend Adam's stable learning rate under delay? The stability atlas's question for
Adam and braked Adam, on settled runs.

Adam's step is bounded by about lr, so its loss need not grow exponentially and "not diverged
within the budget" does not define a boundary (scripts/compare_adam_braking.py shows it moving with
the budget). Here a learning rate is *unstable* when its noiseless run is transient or diverges
(status 2 or −1; settled or still on its way at the budget is not). Adam's unstable set is not an
interval — isolated transient runs at small lr, settled ones again at lr ≈ 1 without delay — so
x_onset is where instability sets in for good on a fine grid: λ_max times the largest grid lr below
the first run of ``RUN`` unstable ones. Beside it, the fastest settled run on the grid.

zhang N = 100 rotated (Haar Q, seed 0, as fig_adam_braking), λ_max = 1, b1 = 0.9 and optax's other
defaults, ρ ∈ {0 (Adam), 0.5, 1, 2}, D ∈ {0, 1, 2, 4, 8, 16}, 97 learning rates log-spaced over
[1e-4, 2], budget 20,000, target 0.01; one sweep per ρ (``nqm.sweep``).

    python scripts/fig_adam_stability.py [--smoke] [--redraw]
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

RHOS = [0.0, 0.5, 1.0, 2.0]  # 0: Adam itself
FULL = dict(dim=100, rotate=0, delays=[0, 1, 2, 4, 8, 16], lrs=np.geomspace(1e-4, 2.0, 97), budget=20_000)
# The smoke's budget is small beside Adam's memory (1/(1 − b2) = 1,000 steps, which its settled test waits
# out 64 times over): its work limit is raised so that its cells are decided, as the full size's are.
SMOKE = dict(dim=10, rotate=0, delays=[0, 4], lrs=np.geomspace(1e-3, 2.0, 12), budget=1_000, work_limit=400)
SETTLED, TRANSIENT, DIVERGED = 1, 2, -1
RUN = 3  # unstable grid learning rates in a row that mark the onset


def compute(smoke):
    import nqm

    size = SMOKE if smoke else FULL
    problem = nqm.zhang(size["dim"]).with_rotation(size["rotate"])
    runs = {}
    for rho in RHOS:
        method, extra = ("adam", {}) if rho == 0 else ("ab-adam", {"rho": [rho]})
        ds = nqm.sweep(method, lr=size["lrs"], b1=[0.9], delay=size["delays"], problem=problem,
                       max_steps=size["budget"], target=0.01, progress=False, work_limit=size.get("work_limit", 16),
                       **extra)
        # Adam's one momentum (0) kept as a scalar: a sweep's data says where its grid lies (nqm.save checks it)
        runs[rho] = ds[["steps", "status"]].squeeze("momentum").squeeze(drop=True).transpose("delay", "lr")
    data = stack(runs, "rho")
    return data.assign_attrs(spectrum=f"zhang(1/j, N={size['dim']}) rotated (seed {size['rotate']})",
                             max_steps=size["budget"], target=0.01, b1=0.9)


def edges(data):
    """Per (ρ, D): x_onset (the largest grid lr below the first ``RUN`` unstable ones in a row; the
    grid's largest if there is no such run, NaN if it starts at the smallest) and the fastest
    settled lr with its T."""
    lr = data.lr.values
    status, steps = data.status.values, data.steps.values  # (rho, delay, lr)
    unstable = (status == TRANSIENT) | (status == DIVERGED)
    runs = np.ones(unstable.shape[:-1] + (lr.size - RUN + 1,), bool)
    for k in range(RUN):
        runs &= unstable[..., k:lr.size - RUN + 1 + k]
    first = np.where(runs.any(-1), runs.argmax(-1), lr.size)
    stable = np.where(first > 0, lr[np.maximum(first - 1, 0)], np.nan)
    t = np.where(status == SETTLED, steps, np.inf)
    fastest = np.where(np.isfinite(t.min(-1)), lr[t.argmin(-1)], np.nan)
    dims = ("rho", "delay")
    return xr.Dataset({"x_onset": (dims, stable), "fastest_lr": (dims, fastest),
                       "fastest_t": (dims, np.where(np.isfinite(t.min(-1)), t.min(-1), np.nan))},
                      coords={"rho": data.rho, "delay": data.delay})


def draw(data):
    found = edges(data)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.8), layout="constrained")
    x = found.delay.values + 1
    for j, rho in enumerate(found.rho.values):
        label = "Adam" if rho == 0 else f"braked Adam, ρ = {rho:g}"
        style = dict(color=f"C{j}", marker="osD^"[j], ms=6, lw=1.2, label=label)
        left.plot(x, found.x_onset.sel(rho=rho), **style)
        right.plot(x, found.fastest_t.sel(rho=rho), **style)
    for ax in (left, right):
        ax.set(xscale="log", yscale="log", xlabel="delay D (axis: D + 1)")
        ax.set_xticks(x, [str(d) for d in found.delay.values])
        ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    left.set(ylabel="x_onset = λ_max · η (below 3 unstable lrs in a row)",
             title="where instability (transient or diverged runs) sets in for good")
    right.set(ylabel=f"T of the fastest settled lr (steps to loss < {data.attrs['target']:g})",
              title="the fastest settled run on the lr grid")
    a, lr = data.attrs, data.lr.values
    regime = f"{a['spectrum']}, noiseless, b1 = {a['b1']:g}, {lr.size} learning rates in [{lr[0]:g}, {lr[-1]:g}]"
    suptitle(fig, f"Adam and braked Adam under a constant delay: {regime}, budget {int(a['max_steps']):,}; "
                  "settled runs", fontsize=10)
    return fig


def claims(data):
    found, out = edges(data), {}
    for rho in found.rho.values:
        name = "adam" if rho == 0 else f"ab_adam_rho{rho:g}"
        for d in found.delay.values:
            point = found.sel(rho=rho, delay=d)
            out[f"{name}_d{int(d)}_x_onset"] = float(point.x_onset)
            out[f"{name}_d{int(d)}_fastest_t"] = float(point.fastest_t)
        if rho:
            for d in found.delay.values:
                ratio = float(found.x_onset.sel(rho=rho, delay=d) / found.x_onset.sel(rho=0.0, delay=d))
                out[f"{name}_d{int(d)}_x_onset_over_adam"] = ratio
    return out


main = FigureScript("fig_adam_stability", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
