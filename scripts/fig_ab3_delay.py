"""AB paper Fig. 3: with delay, a setting where SGDM is unstable and AB converges, and why: AB
brakes the largest eigencomponents, the ones the delay destabilises.

Left and middle: the three largest-eigenvalue components' loss under SGDM and AB (ρ = 0.5), same
start, no noise; right: AB's relative energy decay E/E_SGDM per component (geometric mean over the
first steps; below 1, AB removes that component's energy faster than an SGDM step from the same state).
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.script import FigureScript, suptitle  # noqa: E402

# Found by a sweep (lr 16 × m 12 on zhang N = 1000, D = 4, σ = 0): SGDM diverges within ~100 steps
# here, AB reaches loss 0.01 after about 4.5k steps.
CELL = dict(lr=0.5428835233189814, momentum=0.0890909090909091, delay=4, noise=0.0, seed=0)
TARGET = 0.01
RHOS = (0.0, 0.5)
DIVERGE_FACTOR = 1e6  # a sweep's divergence bound: loss > 10⁶ · L(w₀)


def runs(dim, steps, stride):
    """``{ρ: trace}`` of SGDM (ρ = 0) and AB from the same state (float64)."""
    import nqm
    from nqm import diagnostics

    # float64: AB drives the largest components below float32's range long before the target.
    kw = dict(CELL, steps=steps, stride=stride, record=("loss", "component_loss"), summaries=True, target=TARGET,
              x64=True)
    return {rho: diagnostics.trajectory("ab", problem=nqm.zhang(dim), rho=rho, **kw) for rho in RHOS}


def compute(smoke):
    import nqm
    from nqm import diagnostics

    dim, steps, stride, decay_steps = (50, 500, 5, 100) if smoke else (1000, 6_000, 5, 300)
    results = runs(dim, steps, stride)
    # The decay over the first steps, where the delay would make the large components grow.
    early = diagnostics.trajectory("ab", problem=nqm.zhang(dim), rho=0.5, **dict(CELL, steps=decay_steps), record=(),
                                   summaries=True, x64=True)
    first = results[0.0]
    return xr.Dataset(
        {"loss": (("rho", "step"), np.stack([ds.loss.values for ds in results.values()])),
         "component_loss": (("rho", "step", "top"),
                            np.stack([ds.component_loss.isel(component=slice(0, 3)).values for ds in results.values()])),
         "steps_to_target": ("rho", [int(ds.steps_to_target) for ds in results.values()]),
         "relative_energy_decay": ("component", early.relative_energy_decay.values)},
        coords={"rho": list(RHOS), "step": first.step.values, "eigenvalue": ("component", early.eigenvalue.values)},
        attrs={**CELL, "dim": dim, "spectrum": first.attrs["spectrum"], "steps": steps, "stride": stride,
               "target": TARGET, "decay_steps": decay_steps, "dtype": "float64"},
    )


def stop_index(run):
    """How many traced points to draw: up to where a sweep stops the cell (the target, or the
    divergence bound measured from the first traced loss)."""
    reached = int(run.steps_to_target)
    bound = np.flatnonzero(~(run.loss.values <= DIVERGE_FACTOR * float(run.loss[0]))
                           | (run.step.values >= (reached or np.inf)))
    return bound[0] + 1 if bound.size else run.sizes["step"]


def draw(data):
    a = data.attrs
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), layout="constrained")
    for ax, rho in zip(axes, data.rho.values):
        run = data.sel(rho=rho)
        name = "SGDM (AB ρ = 0)" if rho == 0 else f"AB ρ = {rho:g}"
        reached = int(run.steps_to_target)
        end = stop_index(run)
        for k in range(run.sizes["top"]):
            y = run.component_loss.values[:end, k]
            # A component that underflows float64 (below 1e-308) ends its line instead of plunging.
            ax.semilogy(data.step.values[:end], np.where(y > 0, y, np.nan), lw=1,
                        label=f"λ = {float(data.eigenvalue[k]):.3g}")
        ax.set(title=f"{name}: " + (f"loss < {a['target']:g} at step {reached:,}" if reached else "diverges"),
               xlabel="step", ylabel="½ λ u² (three largest components)")
        ax.legend(fontsize=8)
    axes[2].semilogx(data.eigenvalue, data.relative_energy_decay, ".", ms=3)
    axes[2].axhline(1.0, color="grey", ls=":")
    axes[2].set(title=f"relative energy decay of AB against SGDM, steps 1–{a['decay_steps']}", xlabel="eigenvalue λ",
                ylabel="E / E_SGDM (geometric mean; < 1: damped faster)")
    suptitle(fig, f"AB paper Fig. 3: delay, no noise — {a['spectrum']}, η = {a['lr']:.4g}, m = {a['momentum']:.3g}, "
                  f"D = {a['delay']}, σ = 0, float64; traced every {a['stride']} steps")
    return fig


def claims(data):
    sgdm = data.sel(rho=0.0)
    top = sgdm.component_loss.isel(top=0)
    within = top.where(data.step <= 100, drop=True)
    return {"ab_t": int(data.steps_to_target.sel(rho=0.5)), "sgdm_t": int(sgdm.steps_to_target),
            "sgdm_diverged_at": int(data.step[stop_index(sgdm) - 1]),
            "sgdm_top_growth_100_steps": float(within.max() / top[0]),
            "ab_energy_decay_top": float(data.relative_energy_decay[0]),
            "ab_energy_removal_speedup_top": 1 / float(data.relative_energy_decay[0])}


main = FigureScript("fig_ab3_delay", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
