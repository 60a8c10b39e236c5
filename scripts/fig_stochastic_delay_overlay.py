"""Stochastic delays: the simulated divergence boundary against Giladi et al.'s threshold η*(m).

Top row: noiseless SGDM heatmaps (T over lr × momentum; m = 0 is SGD) under iid delays
τ ~ uniform{1..b} (b = 2, 4, 8) and the discretised Gaussian of mean 4, with the threshold of the
mean dynamics, η*(m) = x*(pmf, m)/λ_max, drawn on top and the agreement outside ±3 % of η* in each
title. Bottom row: where single trajectories actually stop converging, on one eigenvalue (λ = 1):
the fraction of seeds that diverge at lr = r·η*(m), for m = 0, 0.5, 0.9.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.heatmap import draw_panels, overlay_threshold  # noqa: E402
from nqm.plots.script import FigureScript, suptitle  # noqa: E402

PROCESSES = ["uniform:1:2", "uniform:1:4", "uniform:1:8", "gaussian:4"]
MOMENTA = [0.0, 0.5, 0.9]
BAND = 0.03
LINE = np.linspace(0, 0.95, 60)  # momenta of the drawn threshold line


def boundary_scan(process: str, ratios, seeds, steps):
    """Fraction of seeds diverging at lr = r·η*(m) on λ = 1, per momentum (rows) and ratio (columns)."""
    import nqm
    from nqm import delays
    from nqm.thresholds import polynomials

    pmf = delays.pmf(delays.process(process))
    rows = []
    for m in MOMENTA:
        eta = float(polynomials.threshold("sgdm", momentum=m, pmf=pmf))
        ds = nqm.sweep("sgdm", lr=eta * np.asarray(ratios), momentum=m, delay=process, seed=seeds,
                       problem=nqm.explicit([1.0]), target=1e-8, max_steps=steps, progress=False)
        rows.append((ds.status == -1).mean("seed").squeeze().values)
    return np.array(rows)


def compute(smoke):
    import nqm
    from nqm.thresholds.polynomials import threshold_dataset
    from nqm.thresholds.agreement import agreement

    side, dim, steps, seeds, points = (8, 50, 2_000, [0, 1], 5) if smoke else (40, 100, 100_000, list(range(10)), 25)
    ds = nqm.sweep("sgdm", lr=np.geomspace(0.003, 2.0, side), momentum=np.linspace(0, 0.95, side), delay=PROCESSES,
                   problem=nqm.zhang(dim), target=1e-6, max_steps=steps, progress=False)
    agreed = [agreement(ds.sel(delay=[p]), band=BAND) for p in PROCESSES]
    ratios = np.linspace(0.85, 1.15, points)
    diverged = np.stack([boundary_scan(p, ratios, seeds, steps) for p in PROCESSES])
    lines = threshold_dataset("sgdm", delays=PROCESSES, momenta=LINE).threshold
    return ds.isel(noise=0, seed=0, drop=True)[["steps", "status"]].assign(
        x_star=(("delay", "line_momentum"), lines.values, {"long_name": "x* of the mean dynamics, the dashed line"}),
        agreement=("delay", [a["fraction"] for a in agreed]),
        compared=("delay", [a["compared"] for a in agreed]),
        diverged_fraction=(("delay", "scan_momentum", "ratio"), diverged,
                           {"long_name": "fraction of seeds diverged on λ = 1 at lr = ratio · η*(m)"}),
    ).assign_coords(scan_momentum=MOMENTA, ratio=ratios, line_momentum=LINE).assign_attrs(
        noise=0.0, band=BAND, scan_seeds=len(seeds), scan_problem="one eigenvalue λ = 1", scan_target=1e-8)


def crossing(row, ratios):
    """The smallest ratio at which half of the seeds diverge (NaN if none)."""
    return float(ratios[np.argmax(row >= 0.5)]) if (row >= 0.5).any() else float("nan")


def draw(data):
    processes = [str(p) for p in data.delay.values]
    fig, axes = plt.subplots(2, len(processes), figsize=(4.6 * len(processes) + 1, 8.6), layout="constrained")
    panels = {f"τ ~ {p} (E[τ] = {float(data.mean_delay.sel(delay=p)):.2f})\n{100 * float(data.agreement.sel(delay=p)):.1f} % "
              f"of {int(data.compared.sel(delay=p))} cells agree": data.sel(delay=p) for p in processes}
    draw_panels(fig, axes[0], panels)
    ratios = data.ratio.values
    table = xr.Dataset({"threshold": data.x_star.rename(line_momentum="momentum")}, attrs={"criterion": "mean"})
    for ax, p, bottom in zip(axes[0], processes, axes[1]):
        overlay_threshold(ax, data, {"delay": p}, table)
        for m in data.scan_momentum.values:
            bottom.plot(ratios, data.diverged_fraction.sel(delay=p, scan_momentum=m), "o-", ms=3, label=f"m = {m:g}")
        bottom.axvline(1.0, color="red", ls="--", lw=1.2)
        bottom.set(xlabel="lr / η*(m)", ylim=(-0.03, 1.03),
                   title=f"τ ~ {p}: one eigenvalue, {data.attrs['scan_seeds']} seeds",
                   ylabel="fraction of seeds diverged" if p == processes[0] else None)
        bottom.title.set_fontsize(9.5)
        bottom.legend(fontsize=8, loc="upper left")
    a = data.attrs
    suptitle(fig, f"Noiseless SGDM under iid delays on {a['spectrum']} (loss < {a['target']:g}, budget "
                  f"{int(a['max_steps']):,}); red dashed: η* of the mean dynamics (Giladi et al.), {a['convention']}")
    return fig


def claims(data):
    """Per delay law: the agreement, and per momentum the ratios lr/η* at which the first seed and
    half of the seeds diverge; then their ranges over all laws and momenta."""
    out = {}
    ratios = data.ratio.values
    for p in data.delay.values:
        out[f"{p}_agreement_percent"] = 100 * float(data.agreement.sel(delay=p))
        for m in data.scan_momentum.values:
            row = data.diverged_fraction.sel(delay=p, scan_momentum=m).values
            out[f"{p}_m{m:g}_half_diverge_ratio"] = crossing(row, ratios)
            out[f"{p}_m{m:g}_first_divergence_ratio"] = float(ratios[np.argmax(row > 0)]) if (row > 0).any() else None
    pick = lambda suffix: [v for k, v in out.items() if k.endswith(suffix) and v is not None]
    return {**out, "agreement_percent_min": min(pick("_agreement_percent")),
            "agreement_percent_max": max(pick("_agreement_percent")),
            "first_divergence_ratio_min": min(pick("_first_divergence_ratio")),
            "half_diverge_ratio_min": min(pick("_half_diverge_ratio")),
            "half_diverge_ratio_max": max(pick("_half_diverge_ratio"))}


main = FigureScript("fig_stochastic_delay_overlay", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
