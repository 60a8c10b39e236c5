"""``nqm threshold``: stability thresholds x* = λ_max·η* of any method, derived from its own update
(linear methods: mean, mean-square or almost-sure under iid delays) or simulated by bisection."""

from __future__ import annotations

from nqm.cli import groups
from nqm.cli.parser import RANGES, joined
from nqm.conventions import family
from nqm.errors import NqmError

NAME = "threshold"
HELP = "stability thresholds x* = λ_max·η*: derived from the update (linear methods) or --simulate (any method)"
SIMULATION = ("steps", "seeds", "tol", "noise")


def add_parser(subparsers):
    from nqm import delays
    from nqm.search import simulated
    from nqm.thresholds.derived import CRITERIA

    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    grid = parser.add_argument_group(f"thresholds over (each takes {RANGES})")
    grid.add_argument("--delay", nargs="+", default=None, metavar="D",
                      help="constant delays (default: 0 … 64; with --simulate 0, 1, 2, 4, …, 64; none when --delay-dist is given)")
    grid.add_argument("--delay-dist", nargs="+", default=None, metavar="SPEC", help=f"delay processes: {delays.syntax()}")
    grid.add_argument("--momentum", nargs="+", default=None, metavar="M",
                      help="momenta m in [0, 1) (default: 0; none for a method without momentum: adam, lion)")
    groups.method(parser, grid)
    parser.add_argument("--criterion", choices=CRITERIA, default=None,
                        help="under iid delays, the stability of the mean dynamics (Giladi et al.), of the second "
                             "moments, or of single runs (the top Lyapunov exponent; with its error) "
                             "(default: mean); all three agree for a constant delay")
    simulation = parser.add_argument_group("simulated thresholds (any method, any delay process)")
    simulation.add_argument("--simulate", action="store_true",
                           help="the largest lr whose run is stable (its loss stays finite in float64 and does not grow over the "
                                "second half of --steps), by bisection with the engine: growth, not whether a run stays "
                                "below a target — below this lr a run may still level out above one, or, for AB, leave it "
                                "from its floor, which nqm sweep's settled test (status 1) asks")
    for name in SIMULATION:
        default = simulated.simulated_threshold.__kwdefaults__[name]
        kind = {"steps": int, "seeds": int}.get(name, float)
        simulation.add_argument(f"--{name}", type=kind, default=None, help={
            "steps": "the budget of each run (growth is read over its second half)",
            "seeds": "seeds per case (noise and random delays): min, median and max reported",
            "tol": "relative width of the final brackets",
            "noise": "gradient-noise scale σ"}[name] + f" (default: {default:g})")
    groups.problem(parser, default="one eigenvalue λ = 1 for --simulate")
    groups.outputs(parser, "netCDF file for the table", required=False)
    return parser


def has_momentum(method: str) -> bool:
    """Whether ``method`` has a momentum axis (``--momentum`` then defaults to 0; else it takes none)."""
    from nqm.optimizers.base import hyperparameters

    return "momentum" in hyperparameters(method)._fields


def run(args) -> None:
    from nqm.io import check_writable, save

    if args.out:
        check_writable(args.out)
    # A simulated table bisects each delay with the engine: powers of two keep the default to seconds.
    default = [0, 1, 2, 4, 8, 16, 32, 64] if args.simulate else range(65)
    delays, momenta = groups.delays(args, default=default), joined(args.momentum)
    if momenta is None and has_momentum(family(args.method)):
        momenta = [0.0]
    options = groups.method_options(args)
    method = args.method
    if args.simulate:
        if args.criterion is not None:
            raise NqmError("--criterion chooses among derived thresholds; drop it with --simulate")
        from nqm.search.simulated import simulated_threshold

        given = {name: getattr(args, name) for name in SIMULATION if getattr(args, name) is not None}
        problem = groups.problem_from(args) if groups.problem_given(args) else None
        ds = simulated_threshold(family(method), momentum=momenta, delay=delays,
                                 problem=problem, progress=True, **given, **options)
        columns = ["threshold", "threshold_min", "threshold_max"]
    else:
        unused = [f"--{name}" for name in SIMULATION if getattr(args, name) is not None]
        if unused or groups.problem_given(args):
            raise NqmError(f"{(unused or ['the problem options'])[0]} applies to --simulate (a derived threshold "
                           "is of one eigenvalue, x* = λ·η*)")
        from nqm.thresholds import derived

        ds = derived.threshold_table(method, delays=delays, momenta=momenta, criterion=args.criterion or "mean",
                                    **options)
        columns = ["threshold"] + (["threshold_error"] if bool((ds.threshold_error > 0).any()) else [])
    print(f"{method}, {ds.attrs['criterion']} thresholds x* = lambda_max * eta*")
    print(ds[columns].to_dataframe().drop(columns="mean_delay", errors="ignore")
          .to_string(float_format=lambda x: f"{x:.6g}"))
    if args.out:
        save(ds, args.out)
        print(f"wrote {args.out}")
