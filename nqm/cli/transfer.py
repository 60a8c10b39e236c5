"""``nqm transfer``: a real model's NQM, its prediction against the model trained → netCDF.

See :mod:`nqm.transfer.compare`: the NQM measured at the model's starting point, then the same
lr × momentum grid run as that NQM and as the model, per method and delay.
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
    parser.add_argument("--problem", choices=sorted(PROBLEMS), default="digits-logistic",
                        help="the real problem (digits-*: scikit-learn's bundled digits, pip install -e \".[transfer]\")")
    parser.add_argument("--method", nargs="+", default=list(METHODS), metavar="M",
                        help="methods with a momentum (ab once per --rho)")
    parser.add_argument("--rho", nargs="+", default=[str(RHO)], metavar="V",
                        help="AB's braking coefficients ρ >= 0 (several: one row each, and the best ρ)")
    parser.add_argument("--delay", nargs="+", type=int, default=[0, 4], metavar="D", help="constant delays")
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
    run.add_argument("--x64", action="store_true", help="the model and its NQM in float64")
    groups.outputs(parser, "the comparison")
    return parser


def run(args) -> None:
    from nqm.errors import NqmError
    from nqm.io import save
    from nqm.transfer.compare import transfer

    ds = transfer(args.problem, methods=args.method, delays=args.delay, lr=joined(args.lr),
                  momentum=joined(args.momentum), steps=args.steps, batch_size=_one_or_list(args.batch_size),
                  seed=_one_or_list(args.seed), x64=args.x64, rho=joined(args.rho))
    try:
        save(ds, args.out)
    except NqmError as exc:
        raise NqmError(f"{exc}; {output.rescue(ds, args.out, what='the comparison')}") from None
    for seed in ds.seed.values if "seed" in ds.dims else [None]:
        one = ds if seed is None else ds.sel(seed=seed)
        prefix = "" if seed is None else f"seed {seed}: "
        for size in one.batch_size.values if "batch_size" in one.dims else [None]:
            _report(one if size is None else one.sel(batch_size=size), prefix + ("" if size is None else f"B = {size}: "))
        if "critical_batch_size_observed" in one:
            _critical(one, prefix)
    print(f"wrote {args.out}")


def _one_or_list(values):
    """A value given once as that value (no dimension), several as a list (``None``: not given)."""
    return values if values is None or len(values) > 1 else values[0]


def _report(ds, prefix: str) -> None:
    """One seed's comparison: its NQM, both edges per method and delay, and the ranks."""
    lam, sigma = (float(ds[k]) if k in ds else ds.attrs[k] for k in ("lam_max", "sigma_per_example"))
    print(f"{prefix}{ds.attrs['description']}; λ_max {lam:.4g}, σ per example {sigma:.3g}")
    for edge, what in (("stable", "the stability boundary (the largest lr below the first run out of bounds)"),
                       ("settled", "the largest lr that settles")):
        print(f"{what}, NQM / model (> grid: the model's edge is beyond the grid's largest lr):")
        for method in ds.method.values:
            for delay in ds.delay.values:
                row = ds.sel({"method": method, "delay": delay})
                cells = [f"m = {m:g}: {p:.3g} / {o:.3g}{' (> grid)' if e else ''}" for m, p, o, e in
                         zip(ds.momentum.values, row[f"lr_{edge}_predicted"].values, row[f"lr_{edge}_observed"].values,
                             row[f"{edge}_beyond_grid"].values)]
                print(f"  {method:>11} D = {delay}: " + "; ".join(cells))
    print("the methods' ranking by best steps, NQM against model (Spearman; same fastest" +
          ("; best ρ NQM / model" if "best_rho_observed" in ds else "") + "):")
    for delay in ds.delay.values:
        row = ds.sel(delay=delay)
        cells = [f"m = {m:g}: {r:.2f}, {'yes' if same else 'no'}" +
                 (f", {float(row.best_rho_predicted.sel(momentum=m)):g} / {float(row.best_rho_observed.sel(momentum=m)):g}"
                  if "best_rho_observed" in ds else "")
                 for m, r, same in zip(ds.momentum.values, row.rank_correlation.values, row.same_fastest.values)]
        print(f"  D = {delay}: " + "; ".join(cells))


def _critical(ds, prefix: str) -> None:
    """The critical batch sizes, NQM against model (— where a curve rises with the batch size)."""
    print(f"{prefix}critical batch size, NQM / model (—: the curve rises with B, none given; inf: none reached):")
    shown = lambda x: "—" if np.isnan(x) else f"{x:.3g}"
    for method in ds.method.values:
        row = ds.sel({"method": method})  # (a keyword "method" would be sel's own fill method)
        print(f"  {method:>11}: " + "; ".join(f"D = {d}: {shown(p)} / {shown(o)}" for d, p, o in zip(
            ds.delay.values, row.critical_batch_size_predicted.values, row.critical_batch_size_observed.values)))
