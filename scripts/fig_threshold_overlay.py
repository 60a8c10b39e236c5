"""Simulated divergence boundary vs the linear-stability threshold η*(m) (Giladi et al. 2020).

Noiseless SGDM and shifted momentum (undampened, the AB paper's convention) on the NQM, heatmaps of
T over lr × momentum for several delays, with the characteristic-polynomial threshold
η*(m) = x*(D, m)/λ_max drawn on top. The title of each panel gives the fraction of cells outside a
±3 % band around η* whose simulated status (diverged or not) agrees with the linear prediction.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.heatmap import draw_panels, overlay_threshold  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

METHODS = {"sgdm": "SGDM", "shifted": "shifted momentum"}
DELAYS = [1, 4, 8]
BAND = 0.03
LINE = np.linspace(0, 0.95, 60)  # momenta of the drawn threshold line


def compute(smoke):
    import nqm
    from nqm.thresholds.polynomials import threshold_dataset
    from nqm.thresholds.agreement import agreement

    side, dim, steps = (8, 50, 2_000) if smoke else (40, 100, 100_000)
    # A low target: just above η* the unstable mode starts tiny, and the loss may dip below a higher
    # target before it blows up.
    kw = dict(lr=np.geomspace(0.003, 2.0, side), momentum=np.linspace(0, 0.95, side), delay=DELAYS,
              problem=nqm.zhang(dim), target=1e-6, max_steps=steps, progress=False)
    results = {method: nqm.sweep(method, **kw) for method in METHODS}
    agreed = {method: [agreement(ds.sel(delay=[d]), band=BAND) for d in DELAYS] for method, ds in results.items()}
    data = stack({m: ds.isel(noise=0, seed=0, drop=True) for m, ds in results.items()}, "method")
    lines = xr.concat([threshold_dataset(m, delays=DELAYS, momenta=LINE).threshold for m in METHODS],
                      "method").rename(momentum="line_momentum")
    return data.assign(
        x_star=(lines.dims, lines.values, {"long_name": "stability threshold x* (Giladi et al.), the dashed line"}),
        agreement=(("method", "delay"), [[a["fraction"] for a in agreed[m]] for m in METHODS]),
        compared=(("method", "delay"), [[a["compared"] for a in agreed[m]] for m in METHODS]),
    ).assign_coords(line_momentum=LINE).assign_attrs(noise=0.0, band=BAND)


def draw(data):
    fig, axes = plt.subplots(data.sizes["method"], data.sizes["delay"], figsize=(4.4 * data.sizes["delay"] + 1, 8.4),
                             sharex=True, sharey=True, layout="constrained", squeeze=False)
    panels = {}
    for method in data.method.values:
        for delay in data.delay.values:
            cell = data.sel({"method": method, "delay": delay})
            panels[f"{METHODS[method]}, D = {delay}: {100 * float(cell.agreement):.1f} % of "
                   f"{int(cell.compared)} cells agree"] = cell
    draw_panels(fig, axes, panels, shrink=0.8)
    for row, method in zip(axes, data.method.values):
        one = data.sel({"method": method}).assign_attrs(method=str(method))
        table = xr.Dataset({"threshold": one.x_star.rename(line_momentum="momentum")}, attrs={"criterion": "mean"})
        for ax, delay in zip(row, data.delay.values):
            overlay_threshold(ax, one, {"delay": delay}, table)
    a = data.attrs
    suptitle(fig, f"Noiseless sweeps on {a['spectrum']}: steps to loss < {a['target']:g}, budget {int(a['max_steps']):,}. "
                  f"Red dashed: linear-stability threshold η*(m) = x*/λ_max, {a['convention']}; agreement counted "
                  f"outside ±{100 * a['band']:g}\u00a0% of η*")
    return fig


def claims(data):
    out = {}
    for method in data.method.values:
        for delay in data.delay.values:
            cell = data.sel({"method": method, "delay": delay})
            out[f"{method}_d{delay}_agreement_percent"] = 100 * float(cell.agreement)
            out[f"{method}_d{delay}_compared"] = int(cell.compared)
    return out


main = FigureScript("fig_threshold_overlay", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
