"""The noise question: does Adaptive Braking help when there is gradient noise but no delay?

The AB paper's Fig. 1 (second row) claims that with noise alone AB reaches the target faster (T*)
and over a wider region of (η, m). Here: SGDM and AB (ρ = 0.5, the paper's Fig. 1 setting) at
D = 0 on the 1/j spectrum, for σ from 0.01 to 1 and two targets, on one lr × momentum grid: T*
(left) and the number of converged cells (right).
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm import summary  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

SIGMAS = [0.01, 0.03, 0.1, 0.3, 1.0]
TARGETS = [0.01, 0.003]


def sweeps(side, dim, steps, sigmas=SIGMAS, targets=TARGETS):
    """Per target: an AB sweep over ρ ∈ {0, 0.5} (ρ = 0 is SGDM) and σ, at D = 0."""
    import nqm

    grid = dict(lr=np.geomspace(0.005, 4.0, side), momentum=np.linspace(0, 0.98, max(4, side * 3 // 4)),
                delay=0, noise=sigmas, rho=[0.0, 0.5], problem=nqm.zhang(dim), max_steps=steps, progress=False)
    return {target: nqm.sweep("ab", target=target, **grid) for target in targets}


def run(side, dim, steps, sigmas=SIGMAS, targets=TARGETS):
    """Per target: the summary table of :func:`sweeps`."""
    return {target: summary.summarize(ds) for target, ds in sweeps(side, dim, steps, sigmas, targets).items()}


def compute(smoke):
    side, dim, steps = (5, 50, 2_000) if smoke else (16, 1000, 20_000)
    return stack({t: ds[["steps", "status"]] for t, ds in sweeps(side, dim, steps).items()}, "target")


def tables(data):
    return {float(t): summary.summarize(data.sel(target=t)).sel(delay=0) for t in data.target.values}


def draw(data):
    a = data.attrs
    sigmas = data.noise.values
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.0), layout="constrained")
    for (target, table), style in zip(tables(data).items(), ("-", "--")):
        for rho, marker, name in ((0.0, "o", "SGDM"), (0.5, "s", "AB ρ = 0.5")):
            row = table.sel(rho=rho)
            left.loglog(sigmas, row.t_star, style, marker=marker, label=f"{name}, target {target:g}")
            right.semilogx(sigmas, row.converged, style, marker=marker, label=f"{name}, target {target:g}")
    cells = data.sizes["lr"] * data.sizes["momentum"]
    left.set(xlabel="noise σ", ylabel="T* (steps to target, fastest cells)", title="fastest trajectory", xlim=(0.007, 1.4))
    right.set(xlabel="noise σ", ylabel=f"converged cells (of {cells})", title="converging region", xlim=(0.007, 1.4))
    left.legend(fontsize=8)
    suptitle(fig, f"Noise without delay (D = 0): SGDM vs AB on {a['spectrum']}, lr {data.sizes['lr']} values in "
                  f"[{data.lr.values[0]:g}, {data.lr.values[-1]:g}] × m {data.sizes['momentum']} values in "
                  f"[0, {data.momentum.values[-1]:g}], budget {int(a['max_steps']):,}; a missing point: nothing converged")
    return fig


def claims(data):
    out = {}
    for target, table in tables(data).items():
        for rho, name in ((0.0, "sgdm"), (0.5, "ab")):
            for sigma in data.noise.values:
                row = table.sel(rho=rho, noise=sigma)
                out[f"{name}_target{target:g}_s{sigma:g}_t_star"] = float(row.t_star)
                out[f"{name}_target{target:g}_s{sigma:g}_converged"] = int(row.converged)
    return out


main = FigureScript("fig_noise_question", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
