"""AB paper Fig. 13: micro-stepping at high learning rates.

No noise, no delay, 10⁴ steps: T over lr × momentum for SGDM and for AB with S = 1, 4 and 16
micro-steps (Algorithm 10: the velocity update split into S parts, each braked against the partly
updated velocity). Learning rates reach far beyond SGDM's stability limit 2(1 + m)/λ_max.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.plots.heatmap import draw_panels, grid_panel  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402
from nqm.status import REACHED, t_star  # noqa: E402

RHO = 1.0
MICRO_STEPS = (1, 4, 16)


def panels(side, dim, steps):
    """``{title: sweep}``: SGDM and AB with S micro-steps, on one lr × momentum grid."""
    import nqm

    kw = dict(lr=np.geomspace(0.1, 30.0, side), momentum=np.linspace(0, 0.98, side), problem=nqm.zhang(dim),
              target=0.01, max_steps=steps, progress=False)
    out = {"SGDM": nqm.sweep("sgdm", **kw)}
    for s in MICRO_STEPS:
        out[f"AB ρ = {RHO:g}, S = {s}"] = nqm.sweep("ab", rho=RHO, micro_steps=s, **kw)
    return out


def compute(smoke):
    side, dim, steps = (6, 50, 1_000) if smoke else (28, 1000, 10_000)
    results = panels(side, dim, steps)
    data = stack({key: grid_panel(ds) for key, ds in zip(_keys(), results.values())}, "panel")
    return data.assign_coords(title=("panel", list(results))).assign_attrs(rho=RHO, delay=0, noise=0.0)


def _keys():
    return ["sgdm"] + [f"ab_s{s}" for s in MICRO_STEPS]


def draw(data):
    fig, axes = plt.subplots(1, data.sizes["panel"], figsize=(4.5 * data.sizes["panel"], 5.0), sharey=True,
                             layout="constrained")
    draw_panels(fig, axes, {str(p.title.values): p for p in _panels(data)})
    for ax, panel in zip(axes, _panels(data)):
        ax.set_title(ax.get_title() + f"\nlargest converging η = {largest_lr(panel):.3g}", fontsize=9.5)
    a = data.attrs
    suptitle(fig, f"AB paper Fig. 13: micro-stepping (AB at ρ = {a['rho']:g}) on {a['spectrum']}, no noise or delay: "
                  f"steps to loss < {a['target']:g}, budget {int(a['max_steps']):,}")
    return fig


def _panels(data):
    return [data.sel(panel=key) for key in data.panel.values]


def largest_lr(panel):
    return float(panel.lr.where(panel.status == REACHED).max())


def claims(data):
    out = {}
    for panel in _panels(data):
        key = str(panel.panel.values)
        out[f"{key}_t_star"] = t_star(panel)
        out[f"{key}_converged"] = int((panel.status == REACHED).sum())
        out[f"{key}_largest_lr"] = largest_lr(panel)
    stars = [out[f"{key}_t_star"] for key in data.panel.values]
    return {**out, "t_star_min": min(stars), "t_star_max": max(stars),
            "ab_s16_largest_lr_over_sgdm": out["ab_s16_largest_lr"] / out["sgdm_largest_lr"]}


main = FigureScript("fig_ab13_microsteps", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
