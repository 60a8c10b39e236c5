"""Does a real model's NQM predict its critical batch size under delay, and the ranking of methods?

`nqm transfer` with minibatches, on the two small real problems of ``fig_transfer`` — multinomial
logistic regression and a 64–32–10 tanh network on scikit-learn's bundled digits — from their
starting points: the NQM measured there (Hessian spectrum and per-example gradient noise), then
the same grid — lr (log-spaced) × momentum {0, 0.9} — run as that NQM and as the model, SGDM,
shifted momentum and AB at ρ ∈ {0.5, 2}, constant delay D ∈ {0, 4, 16}, batch sizes B of 8 to 512
examples drawn without replacement (the NQM has as many examples as the model, so the same
finite-population noise), one budget; three seeds (each its own starting point, measurement,
minibatch order and NQM noise).

Left: the critical batch size (the fastest steps over the grid reach twice perfect scaling) against
D, predicted by the NQM (dashed) and observed on the model (solid), both read from the smallest B
where both settle (``nqm.transfer.compare.critical``), median over seeds, bars the seeds' min–max;
a seed whose curve rises with B (more than 10 % between two sizes: less noise cannot need more
steps, so the grid missed) gives none, and a point needs every seed. Right: the fastest steps
against B at D = 4, SGDM, each seed.

    python scripts/fig_transfer_batch.py [--smoke] [--redraw]
"""

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from nqm.plots.script import FigureScript, suptitle  # noqa: E402

FULL = dict(problems=["digits-logistic", "digits-mlp"], methods=["sgdm", "shifted", "ab"], rho=[0.5, 2.0],
            delays=[0, 4, 16], momenta=[0.0, 0.9], lr=(0.02, 20.0, 10), sizes=[8, 32, 128, 512], steps=1000,
            seeds=[0, 1, 2], shown_delay=4)
SMOKE = dict(problems=["digits-logistic"], methods=["sgdm", "ab"], rho=[0.5, 2.0], delays=[2], momenta=[0.9],
             lr=(0.1, 10.0, 3), sizes=[16, 64], steps=30, seeds=[0], shown_delay=2)
KEPT = ("critical_batch_size_predicted", "critical_batch_size_observed", "consistent_predicted", "consistent_observed",
        "fastest_steps_predicted", "fastest_steps_observed", "rank_correlation", "same_fastest", "best_rho_predicted",
        "best_rho_observed")
SIDES = ("observed", "predicted")


def compute(smoke, checkpoint=None):
    """Each (problem, seed) is its own comparison, kept in ``checkpoint`` as it finishes (a rerun
    resumes), then the seeds of a problem side by side."""
    import json
    import os

    import xarray as xr

    from nqm.io import write_bytes
    from nqm.transfer.compare import transfer

    size = SMOKE if smoke else FULL
    lr = np.geomspace(*size["lr"])
    done = json.loads(open(checkpoint).read()) if checkpoint and os.path.exists(checkpoint) else {}
    out = {"grid": {**size, "lr": lr.tolist()}, "problems": {}}
    for problem in size["problems"]:
        for seed in size["seeds"]:
            if f"{problem}|{seed}" not in done:
                ds = transfer(problem, methods=size["methods"], rho=size["rho"], delays=size["delays"], lr=lr,
                              momentum=size["momenta"], steps=size["steps"], batch_size=size["sizes"], seed=seed)
                done[f"{problem}|{seed}"] = ds.to_dict()
                if checkpoint:
                    write_bytes(checkpoint, json.dumps(done).encode())
        seeds = [xr.Dataset.from_dict(done[f"{problem}|{seed}"]) for seed in size["seeds"]]
        ds = xr.concat(seeds, "seed")
        out["problems"][problem] = {"rows": ds.method.values.tolist(), "lam_max": [s.attrs["lam_max"] for s in seeds],
                                    "sigma": [s.attrs["sigma_per_example"] for s in seeds],
                                    "description": seeds[0].attrs["description"],
                                    **{k: {"dims": list(ds[k].dims), "values": ds[k].values.tolist()} for k in KEPT}}
    return out


def _array(found, name):
    """A kept variable as an array, NaN for the JSON's nulls."""
    return np.array(found[name]["values"], dtype=float)


def _over_seeds(found, side):
    """(row, delay) → the median over seeds and its min–max, NaN unless every seed has a value."""
    values = _array(found, f"critical_batch_size_{side}")  # (seed, method, delay)
    whole = np.isfinite(values).all(0) | np.isinf(values).all(0)
    return tuple(np.where(whole, f(values, 0), np.nan) for f in (np.median, np.min, np.max))


def draw(data):
    size = data["grid"]
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 5.2), layout="constrained")
    ax = axes[0]
    delays = np.array(size["delays"])
    styles = dict(zip(next(iter(data["problems"].values()))["rows"], ("o", "s", "D", "^")))
    for (p, (problem, found)), (side, ls) in itertools.product(enumerate(data["problems"].items()),
                                                               zip(SIDES, ("-", "--"))):
        median, low, high = _over_seeds(found, side)
        for r, row in enumerate(found["rows"]):
            shift = 1 + 0.05 * (r - 1.5)
            finite = np.isfinite(median[r])
            ax.errorbar((delays + 1)[finite] * shift, median[r][finite],
                        yerr=[(median[r] - low[r])[finite], (high[r] - median[r])[finite]], color=f"C{p}", ls=ls,
                        marker=styles[row], mfc="none" if side == "predicted" else f"C{p}", capsize=3, lw=1.1)
    drawn = any(np.isfinite(_over_seeds(f, side)[0]).any() for f in data["problems"].values() for side in SIDES)
    ax.set(xscale="log", yscale="log" if drawn else "linear", xlabel="delay D (axis: D + 1)", ylabel="critical batch size B*",
           title="critical batch size B*: model (solid), its NQM (dashed)")
    ax.set_xticks(delays + 1, [str(d) for d in delays])
    ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    handles = [plt.Line2D([], [], color=f"C{p}", label=problem) for p, problem in enumerate(data["problems"])]
    handles += [plt.Line2D([], [], ls="", marker=m, color="k", label=row) for row, m in styles.items()]
    ax.legend(handles=handles, fontsize=8)
    ax = axes[1]
    j = size["delays"].index(size["shown_delay"])
    for (p, (problem, found)), (side, ls) in itertools.product(enumerate(data["problems"].items()),
                                                               zip(SIDES, ("-", "--"))):
        steps = _array(found, f"fastest_steps_{side}")[:, found["rows"].index("sgdm"), j]  # (seed, batch size)
        for s, curve in enumerate(steps):
            ax.plot(size["sizes"], curve, color=f"C{p}", ls=ls, marker="o", ms=3, alpha=0.8,
                    label=f"{problem}, {'model' if side == 'observed' else 'NQM'}" if s == 0 else None)
    drawn = any(np.isfinite(_array(f, f"fastest_steps_{side}")).any() for f in data["problems"].values() for side in SIDES)
    ax.set(xscale="log", yscale="log" if drawn else "linear", xlabel="batch size B", ylabel="fastest steps over the grid",
           title=f"SGDM at D = {size['shown_delay']}: fastest steps against B, each seed")
    ax.legend(fontsize=8)
    suptitle(fig, f"A real model's NQM against the model, minibatches: {size['steps']:,} steps, lr grid of "
                  f"{len(size['lr'])} from {size['lr'][0]:g} to {size['lr'][-1]:g} × momentum "
                  f"{', '.join(f'{m:g}' for m in size['momenta'])}, B ∈ {{{', '.join(map(str, size['sizes']))}}}, "
                  f"{len(size['seeds'])} seeds\nleft: median over seeds, bars min–max; a missing point: some seed has none "
                  f"(its curve rises with B, no B settles on both sides, or none reaches twice perfect scaling); "
                  f"right: a gap where no cell settled",
             fontsize=10)
    return fig


def claims(data):
    out = {}
    ratios, misses = [], 0
    for found in data["problems"].values():
        predicted, observed = (_array(found, f"critical_batch_size_{s}") for s in ("predicted", "observed"))
        misses += int((~np.isfinite(predicted) & ~np.isinf(predicted)).sum() +
                      (~np.isfinite(observed) & ~np.isinf(observed)).sum())
        both = np.isfinite(predicted) & np.isfinite(observed)
        ratios += (predicted[both] / observed[both]).tolist()
    out["critical_compared"], out["critical_no_answer"] = len(ratios), misses
    for (problem, found), side in itertools.product(data["problems"].items(), SIDES):  # SGDM's, as drawn
        median = _over_seeds(found, side)[0][found["rows"].index("sgdm")]
        out |= {f"{problem}_sgdm_d{d}_{side}": float(v) for d, v in zip(data["grid"]["delays"], median) if np.isfinite(v)}
    if ratios:
        out["critical_ratio_median"] = float(np.median(ratios))
        out["critical_ratio_min"], out["critical_ratio_max"] = float(min(ratios)), float(max(ratios))
    correlation = np.concatenate([_array(f, "rank_correlation").ravel() for f in data["problems"].values()])
    same = np.concatenate([_array(f, "same_fastest").ravel() for f in data["problems"].values()])
    out["rank_cases"] = int(np.isfinite(correlation).sum())
    if out["rank_cases"]:
        out["rank_correlation_median"] = float(np.nanmedian(correlation))
        out["rank_correlation_negative"] = int((correlation[np.isfinite(correlation)] < 0).sum())
    out["same_fastest_fraction"] = float(same.mean())
    rho = [(_array(f, "best_rho_predicted").ravel(), _array(f, "best_rho_observed").ravel())
           for f in data["problems"].values()]
    predicted, observed = (np.concatenate(x) for x in zip(*rho))
    both = np.isfinite(predicted) & np.isfinite(observed)
    out["best_rho_cases"], out["best_rho_same"] = int(both.sum()), int((predicted[both] == observed[both]).sum())
    return out


main = FigureScript("fig_transfer_batch", compute, draw, claims, doc=__doc__, checkpoint=True).main

if __name__ == "__main__":
    raise SystemExit(main())
