"""The stability atlas: the largest stable learning rate of every method under gradient delay.

x* = λ_max·η*, the largest stable learning rate in units of the top curvature. For the linear
methods it is derived from the method's own update (``nqm.thresholds.derived``: the spectral radius of its
transition matrix); for AB, DC-ASGD and adaptive restart it is simulated (``nqm.search.simulated``: the
largest lr whose noiseless run does not diverge within the budget, by bisection), on the 1/j
spectrum (λ_max = 1). Every simulated boundary is checked below itself: where a run at a smaller
lr diverges, the stable set is not an interval and the atlas draws the edge of the interval that
starts at 0 (open markers: the higher edge the bisection found).

Row 1: x* against the constant delay D at m = 0.9, and at each method's most stable momentum.
Row 2: AB's boundary for ρ ∈ {0.5, 1, 2} against momentum, beside SGDM's, at two delays.
Row 3: iid delays τ ~ uniform{1..b}: the mean, mean-square and almost-sure thresholds of SGD and
SGDM against the fraction of single runs (one eigenvalue, many drawn schedules) that diverge.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from nqm.plots.script import FigureScript, stack, suptitle  # noqa: E402

LINEAR = ("sgdm", "nesterov", "shifted", "staleness", "dana", "ormo", "ormo-da")
SIMULATED = ("ab", "dc-asgd", "restart")
NAMES = {"sgdm": "SGDM", "nesterov": "Nesterov", "shifted": "shifted momentum", "staleness": "staleness-aware lr",
         "dana": "DANA", "ormo": "OrMo", "ormo-da": "OrMo-DA", "ab": "AB", "dc-asgd": "DC-ASGD",
         "restart": "adaptive restart"}
COLOURS = dict(zip(NAMES, plt.get_cmap("tab10").colors))
MARKERS = dict(zip(NAMES, "osD^v<>PXh"))
RHO_COLOURS = {0.5: "tab:blue", 1.0: "tab:red", 2.0: "tab:green"}
M_SHOWN = 0.9  # the momentum of the first panel
TINY_TARGET = 1e-30  # a run stops only when it diverges (or its loss underflows)
CONVERGED_LOSS = 1e-12  # DC-ASGD's check: converged when the loss ends below this (L(w₀) = 0.5)

FULL = dict(delays=[0, 1, 2, 4, 8, 16, 32, 64], momenta=np.round(np.arange(50) * 0.02, 2),
            sim_momenta=[0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.94, 0.98], rhos=[0.0, 0.5, 1.0, 2.0],
            panel_delays=[4, 32], dim=100, steps=20_000, tol=1e-3, check=16, dc_steps=50_000,
            iid=[2, 4, 8, 16], iid_momenta=[0.0, 0.5], ratios=np.round(np.linspace(0.85, 1.05, 41), 4), seeds=64,
            iid_steps=50_000, lyapunov_steps=100_000)
SMOKE = dict(delays=[0, 2], momenta=[0.0, 0.9], sim_momenta=[0.0, 0.9], rhos=[0.5, 1.0], panel_delays=[2],
             dim=8, steps=500, tol=2e-2, check=3, dc_steps=1_000, iid=[2], iid_momenta=[0.0],
             ratios=np.linspace(0.85, 1.05, 5), seeds=2, iid_steps=1_000, lyapunov_steps=2_048)


def below_boundary(method, table, fractions, problem, steps):
    """Check a simulated ``table`` below its boundary: run every case at ``f·x*`` for each ``f`` in
    ``fractions`` (all < 1; one engine run per delay). Returns ``(first_diverged, interval)``: the
    smallest such lr that diverged (NaN if none), and the edge of the stable interval from 0 — x*
    itself, or the checked rate just below the first that diverged (NaN if the smallest did)."""
    from nqm import sweeps
    from nqm.status import DIVERGED

    x = table.threshold.transpose("delay", "momentum", ...)
    first, interval = np.full(x.shape, np.nan), x.values.copy()
    for i, delay in enumerate(x.delay.values):
        flat = x.values[i].ravel()
        cases = np.flatnonzero(np.isfinite(flat) & (flat > 0))
        if not cases.size:
            continue
        where = np.unravel_index(cases, x.shape[1:])
        values = {name: np.repeat(x[name].values[index], fractions.size) for name, index in zip(x.dims[1:], where)}
        lr = (flat[cases, None] * fractions).ravel() / problem.lam_max
        ds = sweeps.evaluate(method, lr=lr, delay=int(delay), problem=problem, target=TINY_TARGET, max_steps=steps,
                             progress=False, **values)
        diverged = (ds.status.values[0] == DIVERGED).reshape(cases.size, fractions.size)
        k = diverged.argmax(1)
        hole = diverged.any(1)
        first[i].flat[cases[hole]] = fractions[k[hole]] * flat[cases[hole]]
        edge = np.where(k[hole] > 0, fractions[np.maximum(k[hole] - 1, 0)], np.nan)
        interval[i].flat[cases[hole]] = edge * flat[cases[hole]]
    coords = {d: x[d] for d in x.dims}
    return xr.DataArray(first, dims=x.dims, coords=coords), xr.DataArray(interval, dims=x.dims, coords=coords)


def simulated(method, c, problem, fractions, **grids):
    """The simulated boundary of ``method`` over delays × momenta (× ``grids``): ``threshold``
    (bisection), ``first_diverged`` and ``interval`` (see :func:`below_boundary`)."""
    from nqm.search.simulated import simulated_threshold

    table = simulated_threshold(method, momentum=c["sim_momenta"], delay=c["delays"], steps=c["steps"], tol=c["tol"],
                                problem=problem, **grids)
    first, interval = below_boundary(method, table, fractions, problem, c["steps"])
    return xr.Dataset({"threshold": table.threshold.transpose(*first.dims), "first_diverged": first,
                       "interval": interval})


def iid_part(c):
    """Thresholds of SGD/SGDM under uniform{1..b} by the three criteria, and where single runs diverge."""
    import nqm
    from nqm import sweeps
    from nqm.thresholds import derived
    from nqm.status import DIVERGED

    specs = [f"uniform:1:{b}" for b in c["iid"]]
    tables = {k: derived.threshold_table("sgdm", delays=specs, momenta=c["iid_momenta"], criterion=k,
                                        steps=c["lyapunov_steps"]) for k in derived.CRITERIA}
    ratios = np.asarray(c["ratios"], dtype=float)
    shape = (len(specs), len(c["iid_momenta"]))
    fraction, first = np.zeros(shape + ratios.shape), np.full(shape + (c["seeds"],), np.nan)
    for i, spec in enumerate(specs):
        mean = tables["mean"].threshold.values[i]
        ds = sweeps.evaluate("sgdm", lr=(mean[:, None] * ratios).ravel(), momentum=np.repeat(c["iid_momenta"], ratios.size),
                             delay=spec, seed=list(range(c["seeds"])), problem=nqm.explicit([1.0]), target=TINY_TARGET,
                             max_steps=c["iid_steps"], progress=False)
        diverged = (ds.status.values == DIVERGED).reshape(c["seeds"], *shape[1:], ratios.size)
        fraction[i] = diverged.mean(0)
        first[i] = np.where(diverged.any(-1), ratios[diverged.argmax(-1)], np.nan).T
    dims = ("iid_delay", "iid_momentum")
    rename = {"delay": "iid_delay", "momentum": "iid_momentum", "mean_delay": "iid_mean_delay"}
    thresholds = stack({k: t.threshold for k, t in tables.items()}, "criterion").rename(rename)
    return xr.Dataset(
        {"iid_threshold": thresholds.drop_attrs(),
         "iid_threshold_error": tables["almost-sure"].threshold_error.rename(rename).drop_attrs(),
         "iid_diverged_fraction": (dims + ("ratio",), fraction,
                                   {"long_name": "fraction of seeds diverged at lr = ratio · x*_mean"}),
         "iid_first_diverged_ratio": (dims + ("seed",), first,
                                      {"long_name": "per seed, the smallest ratio (to x*_mean) at which the run diverged"})},
        coords={"ratio": ratios, "seed": np.arange(c["seeds"])})


def compute(smoke):
    import nqm
    from nqm import sweeps
    from nqm.thresholds.derived import threshold_table
    from nqm.search.simulated import simulated_threshold
    from nqm.optimizers.base import hyperparameters
    from nqm.status import REACHED

    c = SMOKE if smoke else FULL
    problem = nqm.zhang(c["dim"])
    fractions = np.geomspace(0.1, 0.995, c["check"])
    derived = stack({m: threshold_table(m, delays=c["delays"], momenta=c["momenta"]).threshold.drop_attrs()
                     for m in LINEAR}, "linear_method")
    ab = simulated("ab", c, problem, fractions, rho=c["rhos"])
    dc = simulated("dc-asgd", c, problem, fractions).squeeze("lambda_dc", drop=True)
    restart = simulated("restart", c, problem, fractions)
    # AB on one eigenvalue (nqm threshold --simulate's default problem): there cos(g, v) = ±1 exactly.
    one = simulated_threshold("ab", momentum=c["sim_momenta"], delay=c["panel_delays"][0], rho=c["rhos"],
                              steps=c["steps"], tol=c["tol"]).threshold.squeeze("delay", drop=True).drop_vars("mean_delay", errors="ignore")
    # DC-ASGD's correction is cubic in w: at the minimum it linearises to SGDM. Does it converge
    # just below and just above SGDM's derived x* (one eigenvalue, where its components decouple)?
    sgdm = derived.sel(linear_method="sgdm", momentum=c["sim_momenta"])
    factors = np.array([0.8, 1.25])
    converged = np.zeros((len(c["delays"]), len(c["sim_momenta"]), factors.size), bool)
    for i, delay in enumerate(c["delays"]):
        lr = (sgdm.values[i][:, None] * factors).ravel()
        ds = sweeps.evaluate("dc-asgd", lr=lr, momentum=np.repeat(c["sim_momenta"], factors.size), delay=delay,
                                 problem=nqm.explicit([1.0]), target=TINY_TARGET, max_steps=c["dc_steps"],
                                 progress=False).isel(seed=0)
        # A 1-D oscillation passes near 0, so a loss *once* below a target proves nothing: the final one.
        converged[i] = ((ds.status.values == REACHED) | (ds.loss.values < CONVERGED_LOSS)).reshape(
            len(c["sim_momenta"]), factors.size)
    rename = {"momentum": "sim_momentum"}
    parts = [derived.rename("derived").to_dataset(), iid_part(c)]
    for name, part in (("ab", ab), ("dc_asgd", dc), ("restart", restart)):
        parts.append(part.rename({k: f"{name}_{k}" for k in part.data_vars}).rename(rename))
    data = xr.merge(parts, compat="no_conflicts", join="outer", combine_attrs="drop")
    defaults = hyperparameters("dc-asgd")._field_defaults
    return data.assign(
        ab_one_eigenvalue=one.rename(rename).assign_attrs(long_name="AB's simulated x* on one eigenvalue λ = 1"),
        dc_asgd_converged=(("delay", "sim_momentum", "factor"), converged,
                           {"long_name": f"DC-ASGD's loss ended below {CONVERGED_LOSS:g} at lr = factor · SGDM's x*"}),
    ).assign_coords(factor=factors).assign_attrs(
        criterion="mean (constant delays: all criteria agree)", problem=f"zhang N = {c['dim']} (λ_j = 1/j, λ_max = 1)",
        steps=c["steps"], tol=c["tol"], noise=0.0, seeds=1, seed=0, lambda_dc=defaults["lambda_dc"],
        ab_default_rho=0.5, panel_delays=c["panel_delays"], one_eigenvalue_delay=c["panel_delays"][0],
        check_fractions=f"{c['check']} rates from 0.1 x* to 0.995 x* (geometric)", dc_steps=c["dc_steps"],
        iid_problem="one eigenvalue λ = 1, noiseless", iid_steps=c["iid_steps"], iid_seeds=c["seeds"],
        iid_target=TINY_TARGET, lyapunov_steps=c["lyapunov_steps"], convention="v = m v + g, w -= lr v (undampened)",
        momentum_grid=f"{len(c['momenta'])} momenta from {min(c['momenta']):g} to {max(c['momenta']):g}",
        sim_momentum_grid=", ".join(f"{m:g}" for m in c["sim_momenta"]))


# ----------------------------------------------------------------------------- drawing


def _curves(data):
    """x* per method over delay: at m = 0.9 and the best over momentum (with its argmax); the
    simulated ones at AB's default ρ and DC-ASGD's λ_dc, DC-ASGD's being where runs stay bounded."""
    m_fine, m_sim = data.momentum.values, data.sim_momentum.values
    out = {}
    for method in LINEAR:
        x = data.derived.sel(linear_method=method).values
        out[method] = (x[:, np.isclose(m_fine, M_SHOWN)][:, 0], x.max(1), m_fine[x.argmax(1)])
    for method, x in (("ab", data.ab_interval.sel(rho=data.attrs["ab_default_rho"])),
                      ("restart", data.restart_interval), ("dc-asgd", data.dc_asgd_interval)):
        x = x.transpose("delay", "sim_momentum").values
        best = np.nanmax(x, 1)
        out[method] = (x[:, np.isclose(m_sim, M_SHOWN)][:, 0], best, m_sim[np.nanargmax(x, 1)])
    return out


def _delay_axis(ax, delays):
    ax.set_xticks(range(len(delays)), [str(d) for d in delays])
    ax.set(xlabel="constant delay D (steps)", yscale="log")
    ax.grid(True, which="major", alpha=0.3)


def _row_delays(fig, data):
    curves = _curves(data)
    delays = data.delay.values
    pos = np.arange(delays.size)
    axes = fig.subplots(1, 2, sharey=True)
    sgd = data.derived.sel(linear_method="sgdm", momentum=0.0).values
    for k, ax in enumerate(axes):
        ax.plot(pos, sgd, color="0.6", lw=5, alpha=0.45, zorder=1, label="SGD (m = 0), derived")
        for n, method in enumerate((*LINEAR, "ab", "restart", "dc-asgd")):
            y, marker = curves[method][k], MARKERS[method]
            style = dict(color=COLOURS[method], marker=marker, ms=9 - 0.5 * n, mfc="none" if n % 2 else COLOURS[method],
                         lw=1.4)
            if method in SIMULATED:
                label = {"ab": f"AB (ρ = {data.attrs['ab_default_rho']:g}), simulated",
                         "restart": "adaptive restart, simulated",
                         "dc-asgd": "DC-ASGD: bounded, NOT converging (see text)"}[method]
                style.update(ls=":" if method == "dc-asgd" else "--", alpha=0.6 if method == "dc-asgd" else 1)
            else:
                label = f"{NAMES[method]}, derived"
            ax.plot(pos, y, label=label, **style)
            if k == 1 and method in ("ab", "restart"):
                for p, yy, m in zip(pos, y, curves[method][2]):
                    ax.annotate(f"{m:g}", (p, yy), textcoords="offset points", xytext=(6, -3), fontsize=7,
                                color=COLOURS[method])
        _delay_axis(ax, delays)
    axes[0].set(ylabel="x* = λ_max · η*  (largest stable lr)",
                title=f"at momentum m = {M_SHOWN:g}")
    axes[1].set(title="at each method's most stable momentum (argmax over m of x*)")
    axes[1].text(0.02, 0.03, f"derived: argmax over {data.attrs['momentum_grid']};\nall linear methods at D ≥ 1: "
                 "m = 0, i.e. SGD\n(staleness: SGD × D); simulated: over m ∈ {" + data.attrs["sim_momentum_grid"]
                 + "},\nbest m written beside each point", transform=axes[1].transAxes, fontsize=7.5, va="bottom",
                 bbox=dict(fc="white", ec="0.8", alpha=0.9))
    axes[1].legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    suptitle(fig, "Largest stable learning rate against delay: derived from the update (linear methods, solid) or "
                  f"simulated (dashed: {data.attrs['problem']}, noiseless, budget {int(data.attrs['steps']):,} steps, "
                  f"bisection to {data.attrs['tol']:g}; DC-ASGD λ_dc = {data.attrs['lambda_dc']:g})", fontsize=10)


def _row_ab(fig, data):
    shown = np.atleast_1d(data.attrs["panel_delays"])
    axes = np.atleast_1d(fig.subplots(1, shown.size, sharey=True))
    m_fine, m_sim = data.momentum.values, data.sim_momentum.values
    for ax, delay in zip(axes, shown):
        ax.plot(m_fine, data.derived.sel(linear_method="sgdm", delay=delay), color="k", lw=1.6, label="SGDM, derived")
        if 0.0 in data.rho.values:
            ax.plot(m_sim, data.ab_threshold.sel(delay=delay, rho=0.0), "o", color="0.45", ms=3.5,
                    label="AB ρ = 0 (= SGDM), simulated")
        for rho, colour in RHO_COLOURS.items():
            if rho not in data.rho.values:
                continue
            interval = data.ab_interval.sel(delay=delay, rho=rho).values
            bisected = data.ab_threshold.sel(delay=delay, rho=rho).values
            ax.plot(m_sim, interval, "s-", color=colour, ms=5, label=f"AB ρ = {rho:g}, simulated")
            islands = bisected > interval * (1 + 1e-9)
            ax.vlines(m_sim[islands], interval[islands], bisected[islands], color=colour, lw=0.8, ls=":")
            ax.plot(m_sim[islands], bisected[islands], "s", mfc="none", color=colour, ms=6)
        ax.set(yscale="log", xlabel="momentum m", title=f"D = {delay}")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("x* = λ_max · η*")
    axes[-1].plot([], [], "s", mfc="none", color="0.3", label="open: a higher stable island\n(a smaller lr diverges)")
    axes[-1].legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    suptitle(fig, "Adaptive Braking against momentum: filled = edge of the stable interval from lr = 0 (checked on "
                  f"{data.attrs['check_fractions']}); SGDM's derived boundary in black", fontsize=10)


def _row_iid(fig, data):
    specs = data.iid_delay.values
    axes = np.atleast_1d(fig.subplots(1, specs.size, sharey=True))
    ratios = data.ratio.values
    colours = dict(zip(data.iid_momentum.values, ["tab:blue", "tab:orange", "tab:green"]))
    for ax, spec in zip(axes, specs):
        ax.axvline(1.0, color="k", ls="--", lw=1.2)
        for m, colour in colours.items():
            x = data.iid_threshold.sel(iid_delay=spec, iid_momentum=m)
            mean = float(x.sel(criterion="mean"))
            name = "SGD" if m == 0 else f"SGDM m = {m:g}"
            ax.plot(ratios, data.iid_diverged_fraction.sel(iid_delay=spec, iid_momentum=m), "-", color=colour, lw=1.8,
                    label=f"{name}: runs diverged")
            ax.axvline(float(x.sel(criterion="mean-square")) / mean, color=colour, ls=":", lw=1.4)
            sure, error = float(x.sel(criterion="almost-sure")) / mean, 2 * float(
                data.iid_threshold_error.sel(iid_delay=spec, iid_momentum=m)) / mean
            ax.axvspan(sure - error, sure + error, color=colour, alpha=0.25, lw=0)
            ax.axvline(sure, color=colour, lw=1.0)
        ax.set(xlabel="lr / η* of the mean dynamics", xlim=(ratios[0], ratios[-1]), ylim=(-0.03, 1.03),
               title=f"τ ~ uniform{{1..{spec.split(':')[-1]}}}")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("fraction of runs diverged")
    handles = axes[-1].get_legend_handles_labels()[0]
    handles += [plt.Line2D([], [], color="k", ls="--"), plt.Line2D([], [], color="0.3", ls=":"),
                plt.Line2D([], [], color="0.3", lw=1.0)]
    labels = [h.get_label() for h in handles[:-3]] + ["mean (Giladi et al.)", "mean-square",
                                                      "almost-sure (band: ±2 s.e.)"]
    axes[-1].legend(handles, labels, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    a = data.attrs
    suptitle(fig, f"Random delays: which threshold single runs follow ({a['iid_problem']}, {int(a['iid_seeds'])} "
                  f"seeds = drawn schedules per point, budget {int(a['iid_steps']):,} steps; almost-sure from "
                  f"{int(a['lyapunov_steps']):,} steps of a drawn schedule)", fontsize=10)


def draw(data):
    fig = plt.figure(figsize=(15, 15), layout="constrained")
    top, middle, bottom = fig.subfigures(3, 1, height_ratios=[1.25, 1, 0.85])
    _row_delays(top, data)
    _row_ab(middle, data)
    _row_iid(bottom, data)
    return fig


# ----------------------------------------------------------------------------- claims


def claims(data):
    """The numbers the README quotes: x* and ratios at stated D and m, the budget's bias, AB's islands,
    DC-ASGD's convergence check, and where single runs diverge under iid delays."""
    out = {}
    derived = lambda method, d, m: float(data.derived.sel(linear_method=method, delay=d, momentum=m))
    ab = lambda d, m, rho, var="interval": float(data[f"ab_{var}"].sel(delay=d, sim_momentum=m, rho=rho))
    curves = _curves(data)
    delays = list(data.delay.values)
    for d in delays:
        for m in (0.0, M_SHOWN):
            out[f"sgdm_d{d}_m{m:g}"] = derived("sgdm", d, m)
            for rho in data.rho.values:
                out[f"ab_rho{rho:g}_d{d}_m{m:g}"] = ab(d, m, rho)
                out[f"ab_rho{rho:g}_over_sgdm_d{d}_m{m:g}"] = ab(d, m, rho) / derived("sgdm", d, m)
        for method in LINEAR + ("ab", "restart", "dc-asgd"):
            out[f"{method}_over_sgdm_d{d}_m{M_SHOWN:g}"] = curves[method][0][delays.index(d)] / derived("sgdm", d, M_SHOWN)
            out[f"{method}_best_over_sgd_d{d}"] = curves[method][1][delays.index(d)] / derived("sgdm", d, 0.0)
            out[f"{method}_best_momentum_d{d}"] = curves[method][2][delays.index(d)]
        best_rho = data.ab_interval.sel(delay=d).max("sim_momentum")
        for rho in data.rho.values:
            out[f"ab_rho{rho:g}_best_over_sgd_d{d}"] = float(best_rho.sel(rho=rho)) / derived("sgdm", d, 0.0)
            out[f"ab_rho{rho:g}_best_momentum_d{d}"] = float(
                data.sim_momentum[data.ab_interval.sel(delay=d, rho=rho).argmax("sim_momentum")])
    linear_best = data.derived.max("momentum") / data.derived.sel(linear_method="sgdm", momentum=0.0)
    out["linear_best_equals_sgd_from_d1"] = float(np.abs(linear_best.drop_sel(linear_method="staleness")
                                                          .sel(delay=[d for d in delays if d >= 1]) - 1).max() < 1e-9)
    # The budget's bias: AB at ρ = 0 is SGDM bit for bit, simulated against derived.
    if 0.0 in data.rho.values:
        bias = data.ab_threshold.sel(rho=0.0) / data.derived.sel(linear_method="sgdm", momentum=data.sim_momentum) - 1
        out["budget_bias_percent_max"] = 100 * float(bias.max())
        out["budget_bias_percent_min"] = 100 * float(bias.min())
    islands = data.ab_interval < data.ab_threshold * (1 - 1e-9)
    for rho in data.rho.values:
        out[f"ab_rho{rho:g}_island_cases"] = int(islands.sel(rho=rho).sum())
    out["ab_cases_per_rho"] = int(islands.sel(rho=data.rho.values[0]).size)
    out["restart_island_cases"] = int((data.restart_interval < data.restart_threshold * (1 - 1e-9)).sum())
    out["dc_asgd_island_cases"] = int((data.dc_asgd_interval < data.dc_asgd_threshold * (1 - 1e-9)).sum())
    d1 = int(data.attrs["one_eigenvalue_delay"])
    for rho in data.rho.values:
        for m in (0.5, M_SHOWN):
            if m in data.sim_momentum.values:
                out[f"ab_one_eigenvalue_rho{rho:g}_d{d1}_m{m:g}"] = float(data.ab_one_eigenvalue.sel(rho=rho, sim_momentum=m))
                out[f"ab_zhang_rho{rho:g}_d{d1}_m{m:g}"] = ab(d1, m, rho, "threshold")
    conv = data.dc_asgd_converged
    out["dc_asgd_converged_below_percent"] = 100 * float(conv.sel(factor=0.8).mean())
    out["dc_asgd_converged_above_percent"] = 100 * float(conv.sel(factor=1.25).mean())
    # Random delays.
    x = data.iid_threshold
    ratios = data.ratio.values
    for spec in data.iid_delay.values:
        b = spec.split(":")[-1]
        for m in data.iid_momentum.values:
            cell = dict(iid_delay=spec, iid_momentum=m)
            mean = float(x.sel(criterion="mean", **cell))
            key = f"b{b}_m{m:g}"
            out[f"iid_{key}_mean"] = mean
            out[f"iid_{key}_mean_square_over_mean"] = float(x.sel(criterion="mean-square", **cell)) / mean
            out[f"iid_{key}_almost_sure_over_mean"] = float(x.sel(criterion="almost-sure", **cell)) / mean
            out[f"iid_{key}_almost_sure_error_over_mean"] = float(data.iid_threshold_error.sel(**cell)) / mean
            fraction = data.iid_diverged_fraction.sel(**cell).values
            out[f"iid_{key}_half_diverged_ratio"] = float(ratios[np.argmax(fraction >= 0.5)]) if (fraction >= 0.5).any() else None
            first = data.iid_first_diverged_ratio.sel(**cell).values
            out[f"iid_{key}_first_diverged_ratio_min"] = float(np.nanmin(first)) if np.isfinite(first).any() else None
            out[f"iid_{key}_first_diverged_ratio_max"] = float(np.nanmax(first)) if np.isfinite(first).any() else None
            ms = out[f"iid_{key}_mean_square_over_mean"]
            out[f"iid_{key}_diverged_percent_at_mean_square"] = 100 * float(np.interp(ms, ratios, fraction))
    pick = lambda suffix: [v for k, v in out.items() if k.startswith("iid_") and k.endswith(suffix) and v is not None]
    out["iid_mean_square_over_mean_min"] = min(pick("_mean_square_over_mean"))
    out["iid_almost_sure_over_mean_min"] = min(pick("_almost_sure_over_mean"))
    out["iid_almost_sure_over_mean_max"] = max(pick("_almost_sure_over_mean"))
    out["iid_half_diverged_ratio_min"] = min(pick("_half_diverged_ratio"))
    out["iid_half_diverged_ratio_max"] = max(pick("_half_diverged_ratio"))
    out["iid_first_diverged_ratio_min"] = min(pick("_first_diverged_ratio_min"))
    out["iid_diverged_percent_at_mean_square_max"] = max(pick("_diverged_percent_at_mean_square"))
    return out


main = FigureScript("fig_stability_atlas", compute, draw, claims, doc=__doc__).main

if __name__ == "__main__":
    raise SystemExit(main())
