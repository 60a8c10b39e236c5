"""Zhang et al. (2019)'s batch-size question on their NQM, without delay: the best steps to the target
against batch size for SGD, momentum and preconditioning, and where each stops paying (the critical
batch size).

zhang spectrum (λ_j = 1/j), N = 1,000, D = 0, single-example noise σ = 0.3 (a batch of B runs with
σ/√B), target 0.01, budget 200,000 steps. Each point is the smallest T of the exact expected loss
over a box (``nqm scaling``: one ``nqm best`` search per B, the exact mode): SGD over lr, SGDM over
lr × m (m ≤ 0.9999), preconditioned SGD (``precond``, p = 0.5: H^(−1/2), Zhang et al.'s model of
Adam) over lr. Dotted: perfect scaling from the smallest batch size; diamonds: the critical batch
size, where steps reach twice perfect scaling. Exact: no seeds, no spread.

    python scripts/fig_batch_scaling.py [--smoke] [--redraw]
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.scaling import plot_scaling  # noqa: E402
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

METHODS = {"sgd": "SGD", "sgdm": "SGDM (m searched)", "precond": "preconditioned SGD (p = 0.5)"}
FULL = dict(dim=1_000, budget=200_000, sizes=2 ** np.arange(0, 15, 2))  # B = 1, 4, …, 16,384
SMOKE = dict(dim=20, budget=2_000, sizes=np.array([1, 16, 256]))
SIGMA, TARGET = 0.3, 0.01


def compute(smoke):
    import nqm
    from nqm.search.scaling import scaling

    size = SMOKE if smoke else FULL
    common = dict(batch_size=size["sizes"], noise=SIGMA, delay=0, problem=nqm.zhang(size["dim"]), target=TARGET,
                  max_steps=size["budget"], progress=False)
    # Each box holds its method's stable learning rates (λ_max = 1: SGD and precond below 2, SGDM below 2(1 + m)).
    boxes = {"sgd": dict(lr=(1e-4, 2.0), momentum=0.0), "sgdm": dict(lr=(1e-5, 4.0), momentum=(0.0, 0.9999)),
             "precond": dict(lr=(1e-4, 2.0), momentum=0.0, power=0.5)}
    found = {m: scaling(m, expected=True, **boxes[m], **common) for m in METHODS}
    critical = xr.DataArray([found[m].attrs["critical_batch_size"] for m in METHODS], dims="method")
    data = stack({m: found[m][["steps", "perfect", "lr", "momentum"]] for m in METHODS}, "method")
    first = found["sgd"].attrs
    return data.assign(critical_batch_size=critical).assign_attrs(
        {k: first[k] for k in ("spectrum", "dim", "target", "max_steps", "delay", "evaluation")}, noise=SIGMA,
        power=0.5, momentum_box="sgdm: m in [0, 0.9999]; sgd and precond: m = 0")


def draw(data):
    # sel({"method": m}): sel(method=...) would be sel's own inexact-match option
    results = [data.sel({"method": m}).drop_vars("method").assign_attrs(
        data.attrs, critical_batch_size=float(data.critical_batch_size.sel({"method": m}))) for m in data.method.values]
    fig = plot_scaling(*results, labels=[METHODS[m] for m in data.method.values])
    fig.set_size_inches(8.5, 5.6)
    a = data.attrs
    suptitle(fig, f"Best steps to loss < {a['target']:g} against batch size: {a['spectrum']}, D = {a['delay']}, "
                  f"σ = {a['noise']:g} per example (σ/√B per batch)\nbudget {int(a['max_steps']):,}, "
                  f"{a['evaluation']} (no seeds); ◇ critical batch size: steps reach 2 × perfect scaling")
    return fig


def claims(data):
    out = {}
    for m in data.method.values:
        row = data.sel({"method": m})
        out[f"{m}_critical_batch_size"] = float(row.critical_batch_size)
        out[f"{m}_steps_b{int(row.batch_size[0])}"] = float(row.steps[0])
        out[f"{m}_steps_b{int(row.batch_size[-1])}"] = float(row.steps[-1])
    out["precond_over_sgd_critical"] = out["precond_critical_batch_size"] / out["sgd_critical_batch_size"]
    out["sgdm_over_sgd_critical"] = out["sgdm_critical_batch_size"] / out["sgd_critical_batch_size"]
    return out


main = FigureScript("fig_batch_scaling", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
