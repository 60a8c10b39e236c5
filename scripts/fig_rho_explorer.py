"""The ρ explorer's view, drawn once: AB at ρ = 0.5 against SGDM on zhang N = 1,000 at its default
cell (η = 0.03, m = 0.9, D = 4, σ = 0.01, seed 0), 2,000 steps — what ``nqm.plots.explore.rho_explorer()``
shows in a notebook before a slider moves. Left: the loss of both (same noise, same delays);
middle: each eigencomponent's energy at the last step; right: AB's relative energy decay E/E_SGDM.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from nqm.plots.script import FigureScript  # noqa: E402


def compute(smoke):
    import nqm
    from nqm.plots.explore import rho_view

    dim, steps = (50, 200) if smoke else (1000, 2000)
    return rho_view(problem=nqm.zhang(dim), steps=steps)


def draw(data):
    from nqm.plots.explore import draw_rho_view

    return draw_rho_view(data)


def claims(data):
    decay = data.relative_energy_decay
    final = data.loss.isel(step=-1)
    return {"rho": float(data.rho.values[-1]), "sgdm_final_loss": float(final.sel(rho=0.0)),
            "sgdm_final_loss_log10": float(np.log10(final.sel(rho=0.0))),
            "ab_final_loss": float(final.isel(rho=-1)), "ab_energy_decay_top": float(decay[0]),
            "components_damped_faster": int((decay < 1).sum()), "components": int(decay.size),
            "steps": int(data.attrs["steps"]), "nonfinite": int((~np.isfinite(data.loss)).sum())}


main = FigureScript("fig_rho_explorer", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
