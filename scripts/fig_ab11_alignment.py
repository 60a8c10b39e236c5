"""AB paper Fig. 11: how well the update follows the gradient, cos(−Δw, g), against the alignment
cos(g, v) the brake reacts to, for gradient/velocity ratios r = ‖g‖/‖v‖ ∈ {0.1, 0.2, 0.5, 0.8}.

Heavy ball steps along u = m v + α g (α = 1 for SGDM, α = 1 − ρ cos(g, v) for AB), so with
c = cos(g, v):

    cos(u, g) = (m c + α r) / sqrt(m² + 2 m α r c + α² r²).

Lines: this closed form, SGDM dashed, AB ρ = 2 solid. Points: steps measured by the engine
(``update_alignment`` against ``gradient_velocity_cosine``) whose r lies within 10 % of a line's.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.script import FigureScript, suptitle  # noqa: E402

RATIOS = (0.1, 0.2, 0.5, 0.8)
RHOS = (0.0, 2.0)
LRS = (0.02, 0.1, 0.3)
RUN = dict(delay=2, noise=0.05, seed=1)
RECORD = ("update_alignment", "gradient_velocity_cosine", "gradient_velocity_ratio")


def alignment(c, r, m, rho):
    """cos(m v + α g, g) for cos(g, v) = c, ‖g‖/‖v‖ = r, α = 1 − ρ c."""
    alpha = 1.0 - rho * c
    return (m * c + alpha * r) / np.sqrt(m**2 + 2 * m * alpha * r * c + (alpha * r) ** 2)


def measured(rho, m, steps, dim, x64=False):
    """Per-step (cos(g, v), r, cos(−Δw, g)) of noisy delayed runs at a few learning rates."""
    import nqm
    from nqm import diagnostics

    runs = [diagnostics.trajectory("ab", problem=nqm.zhang(dim), lr=lr, momentum=m, rho=rho, steps=steps, record=RECORD,
                                   x64=x64, **RUN) for lr in LRS]
    cat = lambda name: np.concatenate([ds[name].values[5:] for ds in runs])
    return cat("gradient_velocity_cosine"), cat("gradient_velocity_ratio"), cat("update_alignment")


def compute(smoke):
    """The engine's steps whose r is within 10 % of a line's: (c, cos(u, g)) and which line."""
    steps, dim, m = (300, 50, 0.9) if smoke else (3000, 1000, 0.9)
    per_rho = []
    for rho in RHOS:
        c, r, u = measured(rho, m, steps, dim)
        line = np.full(r.shape, -1)
        for k, ratio in enumerate(RATIOS):
            line[np.abs(r / ratio - 1) < 0.1] = k
        keep = line >= 0
        per_rho.append((c[keep], u[keep], line[keep], float(np.nanmin(r))))
    width = max(1, max(len(p[0]) for p in per_rho))
    pad = lambda x, fill: np.concatenate([x, np.full(width - len(x), fill, dtype=x.dtype)])
    return xr.Dataset(
        {"gradient_velocity_cosine": (("rho", "point"), np.stack([pad(p[0], np.nan) for p in per_rho])),
         "update_alignment": (("rho", "point"), np.stack([pad(p[1], np.nan) for p in per_rho])),
         "line": (("rho", "point"), np.stack([pad(p[2], -1) for p in per_rho]).astype(np.int8)),
         "min_ratio": ("rho", [p[3] for p in per_rho])},
        coords={"rho": list(RHOS), "ratio": list(RATIOS)},
        attrs={"dim": dim, "steps": steps, "momentum": m, "lrs": list(LRS), **RUN,
               "spectrum": f"zhang(1/j, N={dim})", "points": "steps from 5 on whose r is within 10 % of a ratio"},
    )


def draw(data):
    m = float(data.attrs["momentum"])
    c = np.linspace(-1, 1, 401)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), sharey=True, layout="constrained")
    colors = plt.cm.viridis(np.linspace(0, 0.85, len(RATIOS)))
    for ax, rho in zip(axes, data.rho.values):
        point = data.sel(rho=rho)
        for k, (ratio, color) in enumerate(zip(data.ratio.values, colors)):
            ax.plot(c, alignment(c, ratio, m, rho), color=color, lw=2, ls="--" if rho == 0 else "-",
                    label=f"r = {ratio:g} (closed form)")
            near = point.line.values == k
            ax.plot(point.gradient_velocity_cosine.values[near], point.update_alignment.values[near], "o",
                    color=color, ms=3, alpha=0.6, label=f"engine steps, r within 10 % ({near.sum()})")
        ax.axhline(0, color="grey", lw=0.6)
        name = "SGDM" if rho == 0 else f"AB, ρ = {rho:g}"
        ax.set(title=f"{name}, m = {m:g}", xlabel="cos(g, v): gradient–velocity alignment", xlim=(-1, 1),
               ylim=(-1.05, 1.05))
        ax.legend(fontsize=7, loc="lower right", ncols=2)
    axes[0].set_ylabel("cos(−Δw, g): update–gradient alignment")
    a = data.attrs
    lrs = ", ".join(f"{lr:g}" for lr in np.atleast_1d(a["lrs"]))
    suptitle(fig, f"AB paper Fig. 11: the update direction m v + α g against the gradient (r = ‖g‖/‖v‖). "
                  f"Points: steps of D = {a['delay']}, σ = {a['noise']:g} runs on {a['spectrum']} "
                  f"(lr {lrs}; {int(a['steps']):,} steps each, seed {a['seed']})")
    return fig


def claims(data):
    out = {}
    for rho in data.rho.values:
        name = "sgdm" if rho == 0 else "ab"
        line = data.line.sel(rho=rho).values
        out.update({f"{name}_points_r{ratio:g}": int((line == k).sum()) for k, ratio in enumerate(data.ratio.values)})
        out[f"{name}_min_ratio"] = float(data.min_ratio.sel(rho=rho))
    return out


main = FigureScript("fig_ab11_alignment", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
