"""Monte Carlo against exact expected dynamics: T over lr × momentum for SGDM and shifted momentum at
D = 0 and 4 with noise, from one noisy run per cell (`nqm sweep`) and from the expected loss
(`nqm expected`), with the contour E[L∞] = target on both: right of it the expected loss can never
reach the target."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.plots.heatmap import draw_panels  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402
from nqm.status import REACHED, TRANSIENT, t_star  # noqa: E402

METHODS = {"sgdm": "SGDM", "shifted": "shifted momentum"}
KINDS = {"mc": "Monte Carlo (one run per cell)", "exact": "exact expected loss"}
DELAYS = [0, 4]


def compute(smoke):
    import nqm
    from nqm import expected

    side, dim, steps, sigma, target = (5, 30, 1_000, 0.05, 0.01) if smoke else (16, 1000, 20_000, 0.05, 0.01)
    grid = dict(lr=np.geomspace(0.005, 2.0, side), momentum=np.linspace(0, 0.95, max(4, side * 3 // 4)),
                delay=DELAYS, noise=sigma, problem=nqm.zhang(dim), target=target, max_steps=steps)
    per_method, steady = {}, {}
    for method in METHODS:
        mc = nqm.sweep(method, progress=False, **grid).isel(noise=0, seed=0, drop=True)
        exact = expected.sweep(method, **grid).isel(noise=0, seed=0, drop=True)
        per_method[method] = stack({"mc": mc[["steps", "status", "loss"]], "exact": exact[["steps", "status", "loss"]]},
                                   "kind")
        steady[method] = exact.steady_state_loss
    data = stack(per_method, "method").assign(steady_state_loss=stack(steady, "method"))
    return data.assign_attrs(noise=sigma, mc_dtype="float32", exact_dtype="float64", mc_seed=0)


def draw(data):
    target = float(data.attrs["target"])
    panels, contours = {}, []
    for delay in data.delay.values:
        for method in data.method.values:
            for kind in data.kind.values:
                panel = data.sel({"method": method, "kind": kind, "delay": delay})
                panels[f"{METHODS[method]}, {KINDS[kind]}, D = {delay}"] = panel
                contours.append(data.steady_state_loss.sel({"method": method, "delay": delay}).transpose("momentum", "lr"))
    ncols = data.sizes["method"] * data.sizes["kind"]
    fig, axes = plt.subplots(data.sizes["delay"], ncols, figsize=(4.6 * ncols, 4.3 * data.sizes["delay"] + 1.0),
                             sharex=True, sharey=True, layout="constrained")
    draw_panels(fig, axes, panels, shrink=0.8)
    for ax, steady in zip(axes.flat, contours):
        ratio = np.log10(np.clip(steady.values, 1e-300, 1e300) / target)
        ax.contour(data.lr.values, data.momentum.values, ratio, levels=[0.0], colors="red", linewidths=1.6)
    axes[0, 0].plot([], [], color="red", lw=1.6, label="E[L∞] = target")
    axes[0, 0].legend(loc="lower left", fontsize=8, framealpha=0.8)
    a = data.attrs
    suptitle(fig, f"Monte Carlo vs exact expected dynamics on {a['spectrum']}, σ = {a['noise']:g}: steps to loss "
                  f"< {target:g}, budget {int(a['max_steps']):,}. Red: E[L∞] = target (beyond it the expected "
                  "loss never reaches the target)")
    return fig


def claims(data):
    out = {"cells_per_panel": data.sizes["lr"] * data.sizes["momentum"]}
    for method in data.method.values:
        for kind in data.kind.values:
            for delay in data.delay.values:
                panel = data.sel({"method": method, "kind": kind, "delay": delay})
                out[f"{method}_{kind}_d{delay}_t_star"] = t_star(panel)
                out[f"{method}_{kind}_d{delay}_converged"] = int((panel.status == REACHED).sum())
                out[f"{method}_{kind}_d{delay}_transient"] = int((panel.status == TRANSIENT).sum())
    return out


main = FigureScript("fig_expected", compute, draw, claims, doc=__doc__, dpi=140).main

if __name__ == "__main__":
    raise SystemExit(main())
