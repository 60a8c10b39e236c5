"""The new batch-size question: how delay moves the critical batch size.

The regime of ``fig_batch_scaling`` (zhang spectrum, N = 1,000, σ = 0.3 per example, σ/√B per batch,
target 0.01, budget 200,000, the exact expected loss; B = 1, 4, …, 16,384) under a constant delay
D ∈ {0, 1, 4, 16}: for SGD (lr searched), SGDM (lr × m, m ≤ 0.9999) and preconditioned SGD
(``precond``, p = 0.5, lr searched), the best steps at each B (``nqm scaling``) and the critical
batch size, where steps reach twice perfect scaling. Left: steps against B at D = 16 (dotted:
D = 0). Right: the critical batch size against D. Exact: no seeds, no spread; each search stops
within 1 % of its best T.

    python scripts/fig_batch_delay.py [--smoke] [--redraw]
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

METHODS = {"sgd": "SGD", "sgdm": "SGDM (m searched)", "precond": "preconditioned SGD (p = 0.5)"}
FULL = dict(dim=1_000, budget=200_000, sizes=2 ** np.arange(0, 15, 2), delays=[0, 1, 4, 16])
SMOKE = dict(dim=20, budget=2_000, sizes=np.array([1, 16, 256]), delays=[0, 4])
SIGMA, TARGET = 0.3, 0.01
# Each box holds its method's stable learning rates (λ_max = 1).
BOXES = {"sgd": dict(lr=(1e-5, 2.0), momentum=0.0), "sgdm": dict(lr=(1e-5, 4.0), momentum=(0.0, 0.9999)),
         "precond": dict(lr=(1e-5, 2.0), momentum=0.0, power=0.5)}


def searches(size, delay):
    """``nqm scaling`` of every method under one constant delay, at ``size``'s batch sizes."""
    import nqm
    from nqm.search.scaling import scaling

    common = dict(batch_size=size["sizes"], noise=SIGMA, problem=nqm.zhang(size["dim"]), target=TARGET,
                  max_steps=size["budget"], progress=False, expected=True)
    return {m: scaling(m, delay=delay, **BOXES[m], **common) for m in METHODS}


def compute(smoke):
    size = SMOKE if smoke else FULL
    per_delay = {}
    for delay in size["delays"]:
        found = searches(size, delay)
        critical = xr.DataArray([found[m].attrs["critical_batch_size"] for m in METHODS], dims="method")
        per_delay[delay] = stack({m: found[m][["steps", "perfect", "lr", "momentum"]] for m in METHODS},
                                 "method").assign(critical_batch_size=critical)
    first = found["sgd"].attrs
    return stack(per_delay, "delay").assign_attrs(
        {k: first[k] for k in ("spectrum", "dim", "target", "max_steps", "evaluation")}, noise=SIGMA, power=0.5,
        boxes="sgd: lr in [1e-5, 2], m = 0; sgdm: lr in [1e-5, 4], m in [0, 0.9999]; precond: lr in [1e-5, 2], m = 0")


def draw(data):
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 5.0), layout="constrained")
    last, first = data.delay.values[-1], data.delay.values[0]
    for j, m in enumerate(data.method.values):  # sel({...}): sel(method=...) is sel's own option
        color = f"C{j}"
        at = lambda d: data.sel({"method": m, "delay": d})
        left.plot(data.batch_size, at(last).steps, "o-", color=color, ms=4, label=f"{METHODS[m]}, D = {last}")
        left.plot(data.batch_size, at(first).steps, ":", color=color, lw=1.2, label=f"{METHODS[m]}, D = {first}")
        right.plot(data.delay.values + 1, data.critical_batch_size.sel({"method": m}), "D-", color=color, mfc="white",
                   ms=7, label=METHODS[m])
    left.set(xscale="log", yscale="log", xlabel="batch size B (noise σ/√B)",
             ylabel=f"best steps to loss < {data.attrs['target']:g}")
    left.legend(fontsize=7.5)
    left.grid(True, which="both", alpha=0.3)
    right.set(xscale="log", yscale="log", xlabel="delay D (axis: D + 1)",
              ylabel="critical batch size (steps = 2 × perfect scaling)")
    right.set_xticks(data.delay.values + 1, [str(d) for d in data.delay.values])
    right.xaxis.set_minor_formatter(NullFormatter())
    right.set_yticks([3, 10, 30, 100, 300, 1000])
    right.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    right.yaxis.set_minor_formatter(NullFormatter())
    right.legend(fontsize=8)
    right.grid(True, which="both", alpha=0.3)
    a = data.attrs
    suptitle(fig, f"How delay moves the critical batch size: {a['spectrum']}, σ = {a['noise']:g} per example "
                  f"(σ/√B per batch), budget {int(a['max_steps']):,}\n{a['evaluation']} (no seeds); "
                  "constant delay D, the best lr (and m) searched at every batch size")
    return fig


def critical_claims(data):
    """Each method's critical batch size per delay, and its drop from the first delay to the last."""
    out = {}
    first, last = data.delay.values[0], data.delay.values[-1]
    for m in data.method.values:
        for d in data.delay.values:
            out[f"{m}_critical_d{int(d)}"] = float(data.critical_batch_size.sel({"method": m, "delay": d}))
        out[f"{m}_critical_drop_d{int(last)}"] = out[f"{m}_critical_d{int(first)}"] / out[f"{m}_critical_d{int(last)}"]
    return out


def claims(data):
    out, last = critical_claims(data), data.delay.values[-1]
    for m in data.method.values:
        out[f"{m}_steps_b{int(data.batch_size[-1])}_d{int(last)}"] = float(
            data.steps.sel({"method": m, "delay": last}).values[-1])
    return out


main = FigureScript("fig_batch_delay", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
