"""AB paper Fig. 14: global against element-wise braking, and what a rotation does to them.

32 components log-uniform on [1e-4, 1], target 1e-5, D = 1, no noise; T over lr × momentum for
SGDM, AB with one global α, AB with one α per coordinate on the axis-aligned quadratic, and the
same element-wise AB on a randomly rotated copy (same eigenvalues). SGDM and global AB depend on
the problem only through its eigenvalues; element-wise AB depends on the basis.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.plots.heatmap import draw_panels, grid_panel  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402
from nqm.status import REACHED, t_star  # noqa: E402

RHO = 0.5
KEYS = ("sgdm", "ab_global", "ab_element", "ab_element_rotated")
ROTATION_SEED = 0


def panels(side, steps):
    """``{title: sweep}`` of the four settings, on one lr × momentum grid."""
    import nqm

    problem = nqm.loguniform(32)
    kw = dict(lr=np.geomspace(0.02, 4.0, side), momentum=np.linspace(0, 0.98, side), delay=1, target=1e-5,
              max_steps=steps, progress=False)
    return {
        "SGDM": nqm.sweep("sgdm", problem=problem, **kw),
        f"AB global, ρ = {RHO:g}": nqm.sweep("ab", problem=problem, rho=RHO, group="global", **kw),
        f"AB element-wise, ρ = {RHO:g}": nqm.sweep("ab", problem=problem, rho=RHO, group="element", **kw),
        f"AB element-wise, ρ = {RHO:g}, rotated H": nqm.sweep("ab", problem=problem.with_rotation(ROTATION_SEED),
                                                               rho=RHO, group="element", **kw),
    }


def compute(smoke):
    side, steps = (6, 5_000) if smoke else (28, 100_000)
    results = panels(side, steps)
    data = stack({key: grid_panel(ds) for key, ds in zip(KEYS, results.values())}, "panel")
    return data.assign_coords(title=("panel", list(results))).assign_attrs(
        rho=RHO, delay=1, noise=0.0, rotation_seed=ROTATION_SEED, spectrum="32 eigenvalues log-uniform on [1e-4, 1]")


def draw(data):
    fig, axes = plt.subplots(1, data.sizes["panel"], figsize=(4.5 * data.sizes["panel"], 5.0), sharey=True,
                             layout="constrained")
    draw_panels(fig, axes, {str(data.title.sel(panel=key).values): data.sel(panel=key) for key in data.panel.values})
    a = data.attrs
    suptitle(fig, f"AB paper Fig. 14: global vs element-wise braking on {a['spectrum']}, D = {a['delay']}, "
                  f"σ = 0: steps to loss < {a['target']:g}, budget {int(a['max_steps']):,} "
                  f"(rotated H: a Haar rotation, seed {a['rotation_seed']})")
    return fig


def claims(data):
    out = {}
    for key in data.panel.values:
        panel = data.sel(panel=key)
        out[f"{key}_t_star"] = t_star(panel)
        out[f"{key}_converged"] = int((panel.status == REACHED).sum())
    out["rotation_cost_percent"] = 100 * (out["ab_element_rotated_t_star"] / out["ab_element_t_star"] - 1)
    return out


main = FigureScript("fig_ab14_elementwise", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
