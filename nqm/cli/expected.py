"""``nqm expected``: exact expected steps to target and steady-state loss of the linear methods under
constant (``--delay``) or iid (``--delay-dist``) delays → netCDF (+ heatmap). The methods, the default bins and the defaults come from :mod:`nqm.expected`."""

from __future__ import annotations

from nqm import validate
from nqm.cli import groups, output
from nqm.cli.parser import joined

NAME = "expected"
HELP = "exact expected steps to target and steady-state loss (linear methods) → netCDF"


def add_parser(subparsers):
    from nqm import expected

    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("--method", choices=expected.methods(), default=groups.default_of(expected.sweep, "method"),
                        help="linear method")
    grid = groups.grid(parser, delay_processes=True, seeds=False, batch=True)
    groups.choices(grid)
    parser.add_argument("--dampening", action="store_true", help="v = m v + (1-m) g (Giladi et al.)")
    parser.add_argument("--bins", type=int, nargs="?", const=expected.DEFAULT_BINS, default=None, metavar="B",
                        help=f"group the eigenvalues into B log-spaced bins (--bins alone: B = {expected.DEFAULT_BINS}; "
                             "default: every eigenvalue, no bins)")
    parser.add_argument("--power", type=float, default=None, metavar="P",
                        help="precond's p of H^(-p), one value (default 0.5; precond only)")
    parser.add_argument("--stay", action="store_true",
                        help="also give steps_stay: the first step after which the expected loss stays below the target")
    groups.exact_method(parser, grid)  # a registered linear method's own hyperparameters and options
    groups.problem(parser)
    groups.run_settings(parser, "target", "max_steps", "first_passage", help={"target": "target expected loss"})
    groups.outputs(parser, "result file (netCDF)", plot="also write a heatmap (PNG/PDF/SVG)",
                   threshold=groups.THRESHOLD_HELP)
    return parser


def run(args) -> None:
    from nqm import expected
    from nqm.errors import NqmError
    from nqm.io import save

    output.check_figure(args.plot, args.threshold, force=args.force)
    if args.bins is not None:
        validate.count(args.bins, "--bins")
    ds = expected.sweep(args.method, lr=joined(args.lr), momentum=joined(args.momentum), delay=groups.delays(args),
                        noise=joined(args.noise), batch_size=groups.batch_sizes(args), problem=groups.problem_from(args), bins=args.bins,
                        dampening=args.dampening, stay=args.stay, power=args.power, **groups.exact_own(args),
                        **groups.settings(args), **groups.choices_from(args))
    try:
        save(ds, args.out)
    except NqmError as exc:
        raise NqmError(f"{exc}; {output.rescue(ds, args.out)}") from None
    output.report(ds)
    print(f"{int((ds.reachable == 0).sum()):,} of {ds.reachable.size:,} cells can never reach the target in expectation")
    print(f"wrote {args.out}")
    if args.plot:
        output.plot_result(ds, args.plot, args.threshold)
