"""Which delay remedies survive large delays: T* against D for every method (the NQM analogue of the
AB paper's Fig. 4), and heatmaps under heterogeneous workers.

Top: for every registered method, T* (the fastest trajectory over a learning rate × momentum grid,
and over its own extra hyperparameter — AB's ρ, DC-ASGD's λ_dc — when it has one) against the
constant delay D, noiseless and noisy; a missing point means no cell of the grid converged.
Bottom: T over lr × momentum for a few methods under a pool of workers of which a quarter are four
times slower (`workers:K:slow=0.25:4`).
"""

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.heatmap import draw_panels, grid_panel  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402
from nqm.status import t_star  # noqa: E402

EXTRA_GRIDS = {"rho": [0.25, 0.5, 1.0], "lambda_dc": [0.1, 0.5, 2.0]}  # swept where a method has them
HETEROGENEOUS = ["sgdm", "ab", "shifted", "ormo", "dana", "staleness"]


def best_t_star(method, delays, noise, grid):
    """T* per delay: the best panel over the method's extra hyperparameters."""
    import nqm
    from nqm.sweeps import hyper_dims

    extra = {name: EXTRA_GRIDS[name] for name in hyper_dims(method) if name in EXTRA_GRIDS}
    ds = nqm.sweep(method, delay=delays, noise=noise, **grid, **extra)
    out = []
    for d in delays:
        panel = ds.sel(delay=d, noise=noise)
        values = [t_star(panel.sel(dict(zip(extra, combo)))) for combo in itertools.product(*extra.values())]
        out.append(np.nanmin(values) if np.isfinite(values).any() else np.nan)
    return np.array(out)


def compute(smoke):
    import nqm
    from nqm.optimizers import methods

    if smoke:
        delays, side, dim, steps, noise, workers = [0, 2, 8], 5, 32, 1_000, 0.05, "workers:4:slow=0.25:4"
    else:
        delays, side, dim, steps, noise, workers = [0, 1, 2, 4, 8, 16, 32, 64], 14, 100, 20_000, 0.05, "workers:16:slow=0.25:4"
    grid = dict(lr=np.geomspace(0.005, 2.0, side), momentum=np.linspace(0.0, 0.95, max(4, side // 2)),
                problem=nqm.zhang(dim), target=0.01, max_steps=steps, progress=False)
    names = methods()
    curves = np.array([[best_t_star(method, delays, sigma, grid) for sigma in (0.0, noise)] for method in names])
    shown = [m for m in HETEROGENEOUS if m in names]
    pool = stack({m: grid_panel(nqm.sweep(m, delay=workers, noise=noise, **grid))[["steps", "status"]] for m in shown},
                 "pool_method")
    best = xr.DataArray(curves, dims=("method", "noise", "delay"),
                        coords={"method": list(names), "noise": [0.0, noise], "delay": delays})
    grids = " / ".join("{" + ", ".join(f"{v:g}" for v in values) + "}" for values in EXTRA_GRIDS.values())
    return pool.assign(best_t_star=best).assign_attrs(workers=workers, pool_noise=noise, extra_grids=grids)


def draw(data):
    a = data.attrs
    delays = data.delay.values
    pool = data.pool_method.values
    fig = plt.figure(figsize=(4.2 * max(3, len(pool)), 9.6), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.15, 1])
    curves = top.subplots(1, 2, sharey=True)
    markers = "osD^v<>ph*Xd"
    for ax, sigma in zip(curves, data.noise.values):
        for method, marker in zip(data.method.values, itertools.cycle(markers)):
            ax.plot(delays + 0.5, data.best_t_star.sel({"method": method, "noise": sigma}), marker=marker, ms=5,
                    label=method)
        ax.set(xscale="log", yscale="log", xlabel="delay D (+0.5, to show D = 0 on a log axis)",
               title=f"σ = {sigma:g}: fastest trajectory over the grid")
        ax.set_xticks(delays + 0.5, [str(d) for d in delays])
        ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    curves[0].set_ylabel(f"T* (steps to loss < {a['target']:g})")
    curves[1].legend(fontsize=8, ncols=2)
    suptitle(top, f"Every method at its best: lr {data.sizes['lr']} values in [{data.lr.values[0]:g}, "
                  f"{data.lr.values[-1]:g}] × m {data.sizes['momentum']} values in [0, {data.momentum.values[-1]:g}] "
                  f"× (AB) ρ or (DC-ASGD) λ_dc in {a['extra_grids']}; {a['spectrum']}, budget {int(a['max_steps']):,}")
    axes = bottom.subplots(1, len(pool), sharey=True, squeeze=False)[0]
    draw_panels(bottom, axes, {str(m): data.sel(pool_method=m) for m in pool})
    suptitle(bottom, f"Heterogeneous workers {a['workers']} (a quarter of them 4× slower), σ = {a['pool_noise']:g}; "
                     "AB at ρ = 0.5, DC-ASGD at its default λ_dc")
    return fig


def claims(data):
    out = {}
    for method in data.method.values:
        for sigma in data.noise.values:
            for d in data.delay.values:
                out[f"{method}_t_star_d{d}_s{sigma:g}"] = float(data.best_t_star.sel({"method": method, "noise": sigma,
                                                                                   "delay": d}))
    for m in data.pool_method.values:
        out[f"{m}_workers_t_star"] = t_star(data.sel(pool_method=m))
    return out


main = FigureScript("fig_methods_vs_delay", compute, draw, claims, doc=__doc__, dpi=140).main

if __name__ == "__main__":
    raise SystemExit(main())
