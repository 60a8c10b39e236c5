"""AB paper, Figure 1: steps to target over learning rate × momentum, SGDM vs Adaptive Braking.

Rows (D, σ) = (0, 0), (0, σ), (D, 0), (D, σ); columns SGDM and AB with ρ = 0.5. The paper does
not publish its delay, noise or grid; the defaults here are where the contrast shows (see the
README). Sizes:

    --smoke   N = 100, 6 × 6 grid, 2 000 steps          (seconds; CI)
    (default) N = 10⁴, 24 × 24 grid, 100 000 steps      (the committed figure; about an hour on one core)

The paper's scale (N = 10⁴, 32 × 32, 500,000 steps) is ``scripts/fig1_paper.py``.

The sweep is checkpointed next to the output: an interrupted run resumes where it stopped.
"""

from __future__ import annotations


import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.plots.heatmap import draw_panels  # noqa: E402
from nqm.plots.script import FigureScript, suptitle  # noqa: E402
from nqm.status import REACHED, TRANSIENT, t_star  # noqa: E402

SIZES = {
    "smoke": dict(dim=100, side=6, max_steps=2_000),
    "default": dict(dim=10_000, side=24, max_steps=100_000),
    "paper": dict(dim=10_000, side=32, max_steps=500_000),
}
OPTIONS = {
    "--delay": dict(type=int, default=4, help="the delayed rows' D (default 4)"),
    "--noise": dict(type=float, default=0.05, help="the noisy rows' σ (default 0.05)"),
    "--rho": dict(type=float, default=0.5, help="AB's ρ (default 0.5)"),
    "--no-progress": dict(action="store_true", help="no progress bar"),
}


def compute(smoke, delay=4, noise=0.05, rho=0.5, no_progress=False, checkpoint=None):
    import nqm

    size = "smoke" if smoke else "default"
    s = SIZES[size]
    return nqm.sweep(
        "ab",
        lr=np.geomspace(0.01, 4.0, s["side"]),
        momentum=np.linspace(0.0, 0.98, s["side"]),
        delay=[0, delay],
        noise=[0.0, noise],
        rho=[0.0, rho],  # ρ = 0 is SGDM, bit for bit
        problem=nqm.zhang(s["dim"]),
        max_steps=s["max_steps"],
        checkpoint=checkpoint,
        progress=not no_progress,
    ).assign_attrs(fig1_size=size)


def _name(rho):
    return "SGDM" if rho == 0 else f"AB ρ = {rho:g}"


def panels(ds, column: str) -> dict:
    """Figure 1's panels in reading order, ``{(D, σ, value of column): panel}``: a row per (D, σ),
    a column per value of ``column`` (``rho`` here, ``method`` in fig1_paper)."""
    return {(d, n, c): ds.sel({"delay": d, "noise": n, column: c}).isel(seed=0)  # sel(method=…) is sel's own
            for d in ds.delay.values for n in ds.noise.values for c in ds[column].values}


def heading(ds) -> str:
    """The first line of Figure 1's title: the target, spectrum, budget, grid and seed."""
    a = ds.attrs
    return (f"Steps to loss < {a['target']:g} on the NQM, {a['spectrum']}, budget {int(a['max_steps']):,} steps, "
            f"{ds.sizes['lr']} × {ds.sizes['momentum']} grid (lr × m), seed {ds.seed.values[0]}")


def draw(ds):
    titled = {f"{_name(r)}, D = {d}, σ = {n:g}": panel for (d, n, r), panel in panels(ds, "rho").items()}
    fig, axes = plt.subplots(ds.sizes["delay"] * ds.sizes["noise"], ds.sizes["rho"],
                             figsize=(4.6 * ds.sizes["rho"] + 1.0, 3.2 * ds.sizes["delay"] * ds.sizes["noise"] + 1.2),
                             sharex=True, sharey=True, layout="constrained", squeeze=False)
    draw_panels(fig, axes, titled, shrink=0.6)
    suptitle(fig, heading(ds) + "\nT* = 1st percentile of T over the cells that converge")
    return fig


def claims(ds):
    out = {}
    for (d, n, r), panel in panels(ds, "rho").items():
        key = f"{'sgdm' if r == 0 else 'ab'}_d{d}_s{n:g}"
        out[f"{key}_converged"] = int((panel.status == REACHED).sum())
        out[f"{key}_transient"] = int((panel.status == TRANSIENT).sum())
        out[f"{key}_t_star"] = t_star(panel)
    out["minutes"] = float(ds.attrs["wall_seconds"]) / 60  # the sweep's wall time, as the data file records it
    return out


main = FigureScript("fig1_heatmaps", compute, draw, claims, doc=__doc__, options=OPTIONS, checkpoint=True).main

if __name__ == "__main__":
    raise SystemExit(main())
