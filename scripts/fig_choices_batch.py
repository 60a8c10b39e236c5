"""Zhang et al. (2019)'s other algorithmic choices against batch size, without and with delay:
iterate averaging (EMA) and a step decay of the learning rate, beside momentum and preconditioning.

zhang spectrum (λ_j = 1/j), N = 100, σ = 0.3 per example (a batch of B runs with σ/√B), target
0.01, budget 20,000 steps, the exact expected loss, a constant delay D ∈ {0, 4, 16}, B = 1, 4, …,
16,384. Each point is the fewest steps to the target at that B over its choice's box (``nqm
scaling``: one ``nqm best`` search per B, within 1 %): SGD over lr; SGDM over lr × m (m ≤ 0.9999:
the best momentum, not a fixed 0.9); preconditioned SGD (``precond``, p = 0.5) over lr; SGD and
SGDM with an iterate average ŵ (``ema``; the target read on ŵ) over lr (× m) × γ, γ ∈ [0, 0.9999]
(the best γ; γ = 0 is no average); SGD and SGDM with a step decay ``step:S:0.1`` (× 0.1 from step S
on), lr (× m) searched at S = T/8, T/4, T/2 and 3T/4, T the same method's steps with a constant
learning rate at that B and D, each search's budget T: the fewest of those and T itself (a
breakpoint past T is the constant run). Panels: steps against B at each delay, ◇ where steps
reach twice perfect scaling (the critical batch size); the critical batch size against D. Exact:
no seeds, no spread.

    python scripts/fig_choices_batch.py [--smoke] [--redraw]
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
sys.path.insert(0, str(Path(__file__).parent))  # fig_batch_delay's boxes and claims, beside this script

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from fig_batch_delay import BOXES, SIGMA, TARGET, critical_claims  # noqa: E402  (the same boxes and noise)
from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

# choice: (legend label, method, extra box, colour, line style, marker)
CHOICES = {
    "sgd": ("SGD", "sgd", {}, "black", "-", "o"),
    "sgd_ema": ("SGD + EMA (γ searched)", "sgd", {"ema": (0.0, 0.9999)}, "C1", "-", "o"),
    "sgd_step": ("SGD + step decay (S chosen)", "sgd", None, "C2", "-", "o"),
    "sgdm": ("SGDM (m searched)", "sgdm", {}, "black", "--", "s"),
    "sgdm_ema": ("SGDM + EMA (m, γ searched)", "sgdm", {"ema": (0.0, 0.9999)}, "C1", "--", "s"),
    "sgdm_step": ("SGDM + step decay (S chosen)", "sgdm", None, "C2", "--", "s"),
    "precond": ("preconditioned SGD (p = 0.5)", "precond", {}, "C0", ":", "^"),
}
RATE = 0.1  # the step decay's factor R
# claim: (choice, choice): the first's steps over the second's (> 1: the second needs fewer)
GAINS = {"ema_gain": ("sgd", "sgd_ema"), "step_gain": ("sgd", "sgd_step"), "precond_gain": ("sgd", "precond"),
         "momentum_gain": ("sgd", "sgdm"), "momentum_gain_ema": ("sgd_ema", "sgdm_ema"),
         "momentum_gain_step": ("sgd_step", "sgdm_step")}
FULL = dict(dim=100, budget=20_000, sizes=4 ** np.arange(8), delays=[0, 4, 16], fractions=(0.125, 0.25, 0.5, 0.75),
            search={}, decay_cells=600)
SMOKE = dict(dim=10, budget=1_000, sizes=np.array([1, 16, 256]), delays=[0, 4], fractions=(0.5,),
             search=dict(tol=0.2, patience=1, coarse=4), decay_cells=40)  # coarse searches: seconds, not minutes
POINT = ("lr", "momentum", "ema", "step_at")  # a curve's point at each batch size (step_at: S, NaN without decay)
# choice: the choices whose every point is also one of its points (m = 0; γ = 0; no decay)
NESTED = {"sgd_ema": ("sgd",), "sgd_step": ("sgd",), "sgdm": ("sgd",), "sgdm_ema": ("sgdm", "sgd_ema"),
          "sgdm_step": ("sgdm", "sgd_step")}


def common(size):
    import nqm

    return dict(noise=SIGMA, problem=nqm.zhang(size["dim"]), target=TARGET, progress=False, expected=True,
                **size["search"])


def constant_curve(name, size, delay):
    """``nqm scaling`` of one choice with a constant learning rate: its answer at each batch size."""
    from nqm.search.scaling import scaling

    _, method, extra, *_ = CHOICES[name]
    ds = scaling(method, batch_size=size["sizes"], delay=delay, max_steps=size["budget"], **BOXES[method], **extra,
                 **common(size))
    ema = ds.ema if "ema" in ds else xr.zeros_like(ds.lr)
    return ds[["steps", "answered", "lr", "momentum"]].assign(ema=ema, step_at=xr.full_like(ds.lr, np.nan))


def decayed(method, constant, size, delay):
    """The fewest steps at each batch size over step decays at S = f T (f in ``size["fractions"]``, T
    the constant run's steps, each search's budget T); ∞ where none reaches the target within T."""
    from nqm.search.answered import answered_best
    from nqm.search.answers import answer

    out = constant.copy(deep=True)
    out["steps"][:], out["answered"][:] = np.inf, 0
    for i, (b, t) in enumerate(zip(out.batch_size.values, constant.steps.values)):
        for f in size["fractions"] if np.isfinite(t) else ():
            s = max(1, round(f * t))
            ds = answered_best(method, batch_size=int(b), delay=delay, max_steps=int(t), schedule=f"step:{s}:{RATE}",
                               max_cells=size["decay_cells"], **BOXES[method], **common(size))
            found = answer(ds)
            if ds.attrs["answered"] and found["t_star"] is not None and found["t_star"] < out.steps.values[i]:
                for key, value in dict(steps=found["t_star"], step_at=s, answered=1, **found["point"]).items():
                    out[key].values[i] = value
    return out


def point_options(method, ema, step_at):
    """The settings of one point beyond lr and momentum: precond's power, the average, the decay."""
    extra = dict(power=0.5) if method == "precond" else {}
    if ema > 0:
        extra["ema"] = ema
    if np.isfinite(step_at):
        extra["schedule"] = f"step:{int(step_at)}:{RATE}"
    return extra


def steps_at(method, point, batch_size, delay, size):
    """T of the expected loss at ``point`` (lr, momentum, ema, step_at) and one batch size (∞ unless settled)."""
    import nqm
    from nqm.status import SETTLED

    lr, momentum, ema, step_at = (float(point[k]) for k in POINT)
    ds = nqm.expected.sweep(method, lr=lr, momentum=momentum, delay=int(delay), noise=SIGMA, batch_size=int(batch_size),
                            problem=nqm.zhang(size["dim"]), target=TARGET, max_steps=size["budget"],
                            **point_options(method, ema, step_at))
    return float(ds.steps.values.ravel()[0]) if ds.status.values.ravel()[0] == SETTLED else np.inf


def best_found(raw, size):
    """Each choice's fewest steps at each batch size over the points found for it: its own search's,
    those of the choices it contains (:data:`NESTED`) and the next smaller batch size's, evaluated
    here (less noise never needs more steps: E[L_t] is its noiseless part plus σ² times a sum of
    squares). ``steps_searched`` keeps the choice's own search; the steps of a choice without an
    answer at a batch size are NaN there."""
    order = ("delay", "method", "batch_size")
    v = {k: raw[k].transpose(*order).values.astype(float) for k in ("steps", "answered", *POINT)}
    v["steps"] = np.where(np.isnan(v["steps"]), np.inf, v["steps"])
    names, sizes = list(raw.method.values), raw.batch_size.values

    def take(to, source, steps):
        for k in ("answered", *POINT):
            v[k][to] = v[k][source]
        v["steps"][to] = steps

    for mi, name in enumerate(names):  # CHOICES lists a choice after those it contains
        for di, d in enumerate(raw.delay.values):
            for bi, b in enumerate(sizes):
                for other in (names.index(n) for n in NESTED.get(name, ())):
                    if v["steps"][di, other, bi] < v["steps"][di, mi, bi]:
                        take((di, mi, bi), (di, other, bi), v["steps"][di, other, bi])
                if bi and v["steps"][di, mi, bi - 1] < v["steps"][di, mi, bi]:
                    point = {k: v[k][di, mi, bi - 1] for k in POINT}
                    take((di, mi, bi), (di, mi, bi - 1), steps_at(CHOICES[name][1], point, b, d, size))
    v["steps"] = np.where(v["answered"] == 1, v["steps"], np.nan)
    v["answered"] = v["answered"].astype(np.int8)
    return raw.assign(steps_searched=raw.steps, **{k: (order, v[k]) for k in v})


def stays(data, size):
    """``steps_stay``: the first step from which the expected loss stays below the target at each
    curve's point (∞ where it is above the target at the end of the budget)."""
    import nqm
    from nqm.expected import expected_loss

    stay = xr.full_like(data.steps, np.nan)
    cells = ((d, n, b) for d in data.delay.values for n in data.method.values for b in data.batch_size.values)
    for d, name, b in cells:
        at = {"delay": d, "method": name, "batch_size": b}
        if not np.isfinite(float(data.steps.sel(at))):
            continue
        lr, momentum, ema, step_at = (float(data[k].sel(at)) for k in POINT)
        method = CHOICES[name][1]
        curve = expected_loss(nqm.zhang(size["dim"]), method=method, lr=lr, momentum=momentum, delay=int(d),
                              noise=SIGMA / np.sqrt(b), steps=size["budget"], **point_options(method, ema, step_at))
        above = np.flatnonzero(~(curve < TARGET))  # curve[t - 1] is E[L] after step t
        stay.loc[at] = 1 if not above.size else np.inf if above[-1] == curve.size - 1 else above[-1] + 2
    return data.assign(steps_stay=stay)


def scaled(data):
    """Each curve's perfect scaling (from its smallest batch size with steps) and critical batch size
    (NaN unless every batch size answered), as ``nqm scaling`` defines them."""
    from nqm.search.scaling import critical_batch_size

    b = data.batch_size.values

    def perfect(steps):
        known = np.flatnonzero(np.isfinite(steps))
        return steps[known[0]] * b[known[0]] / b if known.size else np.full(b.size, np.nan)

    each = dict(input_core_dims=[["batch_size"]], vectorize=True)
    critical = xr.apply_ufunc(lambda s, a: critical_batch_size(b, s) if a.all() else np.nan, data.steps,
                              data.answered, input_core_dims=[["batch_size"]] * 2, vectorize=True)
    return data.assign(perfect=xr.apply_ufunc(perfect, data.steps, output_core_dims=[["batch_size"]], **each),
                       critical_batch_size=critical)


def compute(smoke):
    size = SMOKE if smoke else FULL
    per_delay = {}
    for delay in size["delays"]:
        found = {name: constant_curve(name, size, delay) for name, c in CHOICES.items() if c[2] is not None}
        for name, (_, method, extra, *_) in CHOICES.items():
            if extra is None:
                found[name] = decayed(method, found[method], size, delay)
        per_delay[delay] = stack({name: found[name] for name in CHOICES}, "method")
    data = scaled(stays(best_found(stack(per_delay, "delay"), size), size))
    return data.transpose("delay", "method", "batch_size").assign_attrs(
        spectrum="zhang", dim=size["dim"], target=TARGET, max_steps=size["budget"], noise=SIGMA, power=0.5,
        evaluation="exact expected dynamics", decay_rate=RATE, decay_fractions=list(size["fractions"]),
        boxes="sgd: lr in [1e-5, 2], m = 0; sgdm: lr in [1e-5, 4], m in [0, 0.9999]; precond: lr in [1e-5, 2], "
              "m = 0; + EMA: gamma in [0, 0.9999]; + step decay: step:S:0.1 at S = f T, T the constant run's "
              "steps (the search's budget), lr (x m) searched",
        points="each curve the fewest steps of its own search, of the choices it contains (m = 0, gamma = 0, "
               "no decay) and of the next smaller batch size's point evaluated here; steps_searched: its own search")


def draw(data):
    fig, axes = plt.subplots(2, 2, figsize=(12.5, 10.5), layout="constrained")
    panels = list(axes.flat)
    b = data.batch_size.values
    for ax, d in zip(panels, data.delay.values):
        for name, (label, _, _, color, style, marker) in CHOICES.items():
            curve = data.sel({"method": name, "delay": d})
            steps, back = curve.steps.values, curve.steps_stay.values > curve.steps.values
            ax.plot(b, steps, ls=style, color=color, label=label)
            ax.plot(b[~back], steps[~back], marker, color=color, ms=5)
            ax.plot(b[back], steps[back], marker, color=color, mfc="white", ms=5)
            critical = float(curve.critical_batch_size)
            if np.isfinite(critical):
                at = np.exp(np.interp(np.log(critical), np.log(b), np.log(steps)))
                ax.plot([critical], [at], "D", ms=9, mfc="none", mew=1.5, color=color)
        ax.set(xscale="log", yscale="log", title=f"constant delay D = {d}", xlabel="batch size B (noise σ/√B)",
               ylabel=f"fewest steps to loss < {data.attrs['target']:g} (first passage)")
        ax.grid(True, which="both", alpha=0.3)
        plain_numbers(ax.yaxis)
    for ax in panels[data.delay.size:-1]:  # fewer delays than panels (the smoke size)
        ax.set_visible(False)
    right = panels[-1]
    for name, (label, _, _, color, style, marker) in CHOICES.items():
        right.plot(data.delay.values + 1, data.critical_batch_size.sel({"method": name}), marker=marker, ls=style,
                   color=color, mfc="white", ms=7, label=label)
    right.set(xscale="log", yscale="log", xlabel="delay D (axis: D + 1)", title="critical batch size against delay",
              ylabel="critical batch size (steps = 2 × perfect scaling)")
    right.set_xticks(data.delay.values + 1, [str(d) for d in data.delay.values])
    right.xaxis.set_minor_formatter(NullFormatter())
    plain_numbers(right.yaxis)
    right.grid(True, which="both", alpha=0.3)
    panels[0].plot([], [], "o", color="grey", mfc="white", label="hollow: the expected loss comes back above the "
                   "target after T")
    panels[0].plot([], [], "D", mfc="none", mew=1.5, color="grey", label="critical batch size (2 × perfect scaling)")
    panels[0].legend(fontsize=8)
    a = data.attrs
    suptitle(fig, f"Which choices matter at which batch sizes, under delay: {a['spectrum']} N = {a['dim']}, "
                  f"σ = {a['noise']:g} per example (σ/√B per batch), target {a['target']:g}, budget "
                  f"{int(a['max_steps']):,}\n{a['evaluation']} (no seeds); at each B the best lr (and m, γ) searched; "
                  "step decay: lr × 0.1 from step S = f × the constant run's steps, the best f of "
                  f"{', '.join(f'{f:g}' for f in np.atleast_1d(a['decay_fractions']))}, or none")
    return fig


def plain_numbers(axis):
    """A log axis labelled 3, 10, 300 rather than 3 × 10⁰: its decades, and 2 and 5 between them where it spans
    less than two decades."""
    def minor(value, _):
        low, high = sorted(axis.get_view_interval())
        return f"{value:g}" if np.log10(high / low) < 2 and f"{value:e}"[0] in "25" else ""

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def claims(data):
    out = critical_claims(data)
    first, last = (int(b) for b in data.batch_size.values[[0, -1]])
    for d in (int(d) for d in data.delay.values):
        at = lambda name, b, key="steps": float(data[key].sel({"method": name, "delay": d, "batch_size": b}))
        for name in data.method.values:
            for b in (first, last):
                out[f"{name}_steps_b{b}_d{d}"], out[f"{name}_stay_b{b}_d{d}"] = at(name, b), at(name, b, "steps_stay")
        for b in (first, last):  # > 1: the second choice needs fewer steps
            for key, (num, den) in GAINS.items():
                out[f"{key}_b{b}_d{d}"] = at(num, b) / at(den, b)
            stay = lambda name: at(name, b, "steps_stay")
            out[f"momentum_gain_step_stay_b{b}_d{d}"] = stay("sgd_step") / stay("sgdm_step")
            out[f"sgd_ema_gamma_b{b}_d{d}"] = at("sgd_ema", b, "ema")
        for name in ("sgdm", "precond", "sgd_ema", "sgd_step", "sgdm_ema", "sgdm_step"):
            out[f"{name}_over_sgd_critical_d{d}"] = out[f"{name}_critical_d{d}"] / out[f"sgd_critical_d{d}"]
    return out


main = FigureScript("fig_choices_batch", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
