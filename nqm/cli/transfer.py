"""``nqm transfer``: a real model's NQM, its prediction against the model trained → netCDF.

See :mod:`nqm.transfer.compare`: the NQM measured at the model's starting point (a problem nqm
ships, or ``--model MODULE:FUNCTION``), then the same lr × momentum grid run as that NQM and as the
model, per method and delay. Every value is checked before any work; the report says, wherever a
number is missing, why.
"""

from __future__ import annotations

import numpy as np

from nqm.cli import groups, output
from nqm.cli.parser import RANGES, joined

NAME = "transfer"
HELP = "a real model's NQM: its prediction against the model trained under delay → netCDF"


def add_parser(subparsers):
    from nqm.transfer.compare import METHODS, RHO
    from nqm.transfer.problems import PROBLEMS

    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--problem", choices=sorted(PROBLEMS), default=None,
                       help="a real problem nqm ships (default: digits-logistic; digits-*: scikit-learn's bundled "
                            "digits, pip install -e \".[transfer]\")")
    model.add_argument("--model", default=None, metavar="MODULE:FUNCTION",
                       help="your model: FUNCTION() (or FUNCTION(seed)) in MODULE, importable from the working "
                            "directory, returns (loss, params, data) as in docs/your-model.md")
    parser.add_argument("--target", type=float, default=None,
                        help="the model's training loss to reach (default: the problem's own; for --model a tenth "
                             "of its initial loss)")
    parser.add_argument("--method", nargs="+", default=list(METHODS), metavar="M",
                        help="methods with a momentum (ab once per --rho)")
    parser.add_argument("--rho", nargs="+", default=[str(RHO)], metavar="V",
                        help="AB's braking coefficients ρ >= 0 (several: one row each, and the best ρ)")
    parser.add_argument("--delay", nargs="+", type=int, default=[0, 4], metavar="D", help="constant delays, distinct")
    grid = parser.add_argument_group(f"grid (each takes {RANGES})")
    grid.add_argument("--lr", nargs="+", required=True, metavar="V", help="learning rates η > 0")
    grid.add_argument("--momentum", nargs="+", required=True, metavar="V", help="momenta m in [0, 1)")
    run = parser.add_argument_group("run")
    run.add_argument("--steps", type=int, default=2000, help="steps per run")
    run.add_argument("--batch-size", nargs="+", type=int, default=None, metavar="B",
                     help="examples per step (default: the whole data, no gradient noise); several, increasing: "
                          "a batch_size dimension and the critical batch sizes")
    run.add_argument("--seed", nargs="+", type=int, default=[0], metavar="S",
                     help="the problem's, the minibatches' and the NQM's noise seed (several: a seed dimension, "
                          "each seed its own starting point and runs)")
    run.add_argument("--top", type=int, default=None,
                     help="top eigenvalues reported (and, for a model measured by Lanczos, found by it; default 16)")
    run.add_argument("--x64", action="store_true", help="the model and its NQM in float64")
    groups.outputs(parser, "the comparison")
    return parser


def run(args) -> None:
    from nqm.errors import NqmError
    from nqm.io import save
    from nqm.transfer.compare import transfer

    ds = transfer(args.problem, model=args.model, target=args.target, methods=args.method, delays=args.delay,
                  lr=joined(args.lr), momentum=joined(args.momentum), steps=args.steps,
                  batch_size=_one_or_list(args.batch_size), seed=_one_or_list(args.seed), x64=args.x64, top=args.top,
                  rho=joined(args.rho))
    try:
        save(ds, args.out)
    except NqmError as exc:
        raise NqmError(f"{exc}; {output.rescue(ds, args.out, what='the comparison')}") from None
    for seed in ds.seed.values if "seed" in ds.dims else [None]:
        one = ds if seed is None else ds.sel(seed=seed)
        prefix = "" if seed is None else f"seed {seed}: "
        _measured(one, prefix)
        for size in one.batch_size.values if "batch_size" in one.dims else [None]:
            _report(one if size is None else one.sel(batch_size=size), prefix + ("" if size is None else f"B = {size}: "))
        if "critical_batch_size_observed" in one:
            _critical(one, prefix)
    print(f"wrote {args.out}")


def _one_or_list(values):
    """A value given once as that value (no dimension), several as a list (``None``: not given)."""
    return values if values is None or len(values) > 1 else values[0]


def _value(ds, name):
    """A number measured per seed (a variable) or once (an attribute)."""
    return float(ds[name]) if name in ds else ds.attrs[name]


def _measured(ds, prefix: str) -> None:
    """What the NQM is: its spectrum and what it dropped, its noise, where it starts, its target."""
    a = ds.attrs
    dropped = int(_value(ds, "measured_dropped"))
    print(f"{prefix}{a['description']}")
    print(f"{prefix}its NQM: {int(_value(ds, 'nqm_dim'))} eigenvalues, λ_max {_value(ds, 'lam_max'):.4g} "
          f"({a['measured_method']}); " + (
              f"{dropped} dropped at or below {a['measured_floor']:g} × λ_max (their sum "
              f"{_value(ds, 'measured_dropped_curvature'):.3g}, the lowest eigenvalue "
              f"{_value(ds, 'measured_lowest_eigenvalue'):.3g}, {_value(ds, 'measured_dropped_gradient_share'):.1%} of "
              "‖g₀‖² along them)" if dropped else "none dropped (every eigenvalue positive)"))
    print(f"{prefix}σ per example {_value(ds, 'sigma_per_example'):.3g} ± {_value(ds, 'sigma_spread'):.2g} (the "
          "λ-weighted spread of σ over the directions measured); the NQM starts from the model's initial error, "
          f"loss {_value(ds, 'nqm_initial_loss'):.4g} against the model's {_value(ds, 'initial_loss'):.4g}")
    target = _value(ds, "nqm_target")
    print(f"{prefix}target {a['target']:.4g}; the NQM's {target:.4g} (the same decrease)" +
          ("" if target > 0 else ": not above 0, the NQM's minimum is above the target, so no NQM run reaches it"))


def _report(ds, prefix: str) -> None:
    """One seed's comparison: per method, delay and momentum, best steps and both edges, NQM / model
    with the derived threshold; then the ranks. A missing number says why."""
    unreachable = _value(ds, "nqm_target") <= 0
    print(f"{prefix}NQM / model per method, delay and momentum: the fastest settled cell's steps; the stability "
          "boundary (the largest lr below the first run out of bounds; > grid: the model's is beyond the grid) "
          "and the derived threshold x*/λ_max; the largest lr that settles:")
    for method in ds.method.values:
        for delay in ds.delay.values:
            for m in ds.momentum.values:
                cell = ds.sel({"method": method, "delay": delay, "momentum": m})
                steps = _pair(*(_steps(cell, side, unreachable) for side in ("predicted", "observed")))
                stable = _pair(*(_edge(cell, "stable", side) for side in ("predicted", "observed")))
                settles = _pair(*(_edge(cell, "settled", side, unreachable) for side in ("predicted", "observed")))
                threshold = float(cell.lr_threshold)
                shown = f"{threshold:.3g}" if np.isfinite(threshold) else "— (not a linear method)"
                print(f"  {method:>11} D = {delay} m = {m:g}: steps {steps}; stable {stable}, threshold {shown}; "
                      f"settles {settles}")
    many = ds.sizes["method"] >= 3
    print("the methods' ranking by best steps, NQM against model (Spearman; same fastest" +
          ("; best ρ NQM / model" if "best_rho_observed" in ds else "") + "):")
    for delay in ds.delay.values:
        row = ds.sel(delay=delay)
        cells = []
        for m, r, same in zip(ds.momentum.values, row.rank_correlation.values, row.same_fastest.values):
            spearman = f"{r:.2f}" if np.isfinite(r) else (
                "— (a rank correlation needs 3 methods)" if not many else "— (one side ranks every method alike)")
            fastest = "yes" if same else ("no" if np.isfinite(row.best_steps_observed.sel(momentum=m).values).any()
                                          and np.isfinite(row.best_steps_predicted.sel(momentum=m).values).any()
                                          else "— (a side where none settles)")
            rho = ""
            if "best_rho_observed" in ds:
                rho = ", " + " / ".join(f"{x:g}" if np.isfinite(x) else "— (no AB row settles)" for x in (
                    float(row.best_rho_predicted.sel(momentum=m)), float(row.best_rho_observed.sel(momentum=m))))
            cells.append(f"m = {m:g}: {spearman}, {fastest}{rho}")
        print(f"  D = {delay}: " + "; ".join(cells))


def _pair(predicted: tuple, observed: tuple) -> str:
    """``NQM / model``, each ``(text, reason)``; one reason said once where both miss for it."""
    (p, why_p), (o, why_o) = predicted, observed
    if why_p and why_p == why_o:
        return f"{p} / {o} ({why_p})"
    return f"{p}{f' ({why_p})' if why_p else ''} / {o}{f' ({why_o})' if why_o else ''}"


def _steps(cell, side: str, unreachable: bool) -> tuple:
    value = float(cell[f"best_steps_{side}"])
    if np.isfinite(value):
        return f"{value:.0f}", ""
    if side == "predicted" and unreachable:
        return "—", "the target is below the NQM's minimum"
    return "—", "none settles"


def _edge(cell, edge: str, side: str, unreachable: bool = False) -> tuple:
    value = float(cell[f"lr_{edge}_{side}"])
    if np.isfinite(value):
        return f"{value:.3g}", "> grid" if side == "observed" and bool(cell[f"{edge}_beyond_grid"]) else ""
    if edge == "stable":
        return "—", "the smallest lr goes out of bounds"
    if side == "predicted" and unreachable:
        return "—", "the target is below the NQM's minimum"
    return "—", "none settles"


def _critical(ds, prefix: str) -> None:
    """The critical batch sizes, NQM against model (— where a curve rises with the batch size)."""
    print(f"{prefix}critical batch size, NQM / model (—: the curve rises with B or a side never settles, none given; "
          "inf: none reached twice perfect scaling):")
    shown = lambda x: "—" if np.isnan(x) else f"{x:.3g}"
    for method in ds.method.values:
        row = ds.sel({"method": method})  # (a keyword "method" would be sel's own fill method)
        print(f"  {method:>11}: " + "; ".join(f"D = {d}: {shown(p)} / {shown(o)}" for d, p, o in zip(
            ds.delay.values, row.critical_batch_size_predicted.values, row.critical_batch_size_observed.values)))
