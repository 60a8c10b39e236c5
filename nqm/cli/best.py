"""``nqm best``: the smallest T over a box of hyperparameters, by successive refinement; robust to a
nudge (``--robust δ``) and over seeds (``--seeds K``); every evaluated point in the file."""

from __future__ import annotations

from nqm.cli import groups
from nqm.errors import NqmError

NAME = "best"
HELP = "the smallest T over a box of hyperparameters (search), robust to a nudge, over seeds → netCDF (+ JSON)"
INTERRUPTED = "nothing was written; the search starts over when run again"
BOX = "a value V (fixed) or LO:HI (searched"


def add_parser(subparsers):
    from nqm import jobs, search
    from nqm.optimizers import methods
    from nqm.jobs import all_hyper_dims

    parser = subparsers.add_parser(NAME, help=HELP, description=HELP + ". T*_best is one point's own T, what "
                                   "nqm sweep gives there, not the grids' 1st-percentile T*.")
    box = parser.add_argument_group("the box (each a value V, fixed, or LO:HI, searched)")
    box.add_argument("--lr", required=True, metavar="V|LO:HI", help=f"{BOX} on a log scale)")
    box.add_argument("--momentum", required=True, metavar="V|LO:HI", help=f"{BOX} on log(1 - m))")
    for name in all_hyper_dims():
        owners = [m for m in methods() if name in jobs.hyper_dims(m)]
        box.add_argument("--" + name.replace("_", "-"), default=None, metavar="V|LO:HI",
                         help=f"{', '.join(owners)}: {BOX} on a log scale; default: the sweep's)")
    parser.add_argument("--method", choices=methods(), default=groups.default_of(search.best, "method"),
                        help="optimizer")
    groups.method_option_flags(parser)
    cell = parser.add_argument_group("the cells")
    cell.add_argument("--delay", default=None, metavar="D", help="a constant delay (default: 0)")
    cell.add_argument("--delay-dist", default=None, metavar="SPEC", help="a delay process (instead of --delay)")
    cell.add_argument("--noise", type=float, default=0.0, help="gradient-noise scale σ")
    groups.problem(parser)
    groups.run_settings(parser, "target", "max_steps", "first_passage", "x64", "independent_noise", "progress")
    search_ = parser.add_argument_group("the search")
    for name, kind, text in (("seeds", int, "evaluate every point on seeds --seed … --seed + K - 1; rank by the median T"),
                             ("seed", int, "the first seed"),
                             ("robust", float, "also the smallest robust T: the largest T over every nudge by 1 ± δ"),
                             ("tol", float, "stop once rounds improve no best T by this fraction"),
                             ("max_cells", int, "the most cells (points × seeds) to evaluate")):
        default = groups.default_of(search.best, name)
        search_.add_argument("--" + name.replace("_", "-"), type=kind, default=default, help=text)
    search_.add_argument("--expected", action="store_true",
                         help="evaluate the exact expected loss (linear methods; constant or iid delays) instead of Monte Carlo")
    parser.add_argument("--json", action="store_true", help="print the answer as one JSON object, the last line")
    groups.outputs(parser, "every evaluated point and the answer (netCDF)")
    return parser


def run(args) -> None:
    import json

    from nqm import search
    from nqm.io import save
    from nqm.jobs import all_hyper_dims

    if args.delay is not None and args.delay_dist is not None:
        raise NqmError("give either --delay or --delay-dist: a search runs under one delay")
    box = {"lr": _box(args.lr, "--lr"), "momentum": _box(args.momentum, "--momentum")}
    box.update({n: _box(getattr(args, n), "--" + n.replace("_", "-")) for n in all_hyper_dims()
                if getattr(args, n) is not None})
    settings = groups.settings(args)
    if args.expected:
        settings = {k: v for k, v in settings.items() if k in ("target", "max_steps", "progress")}
    ds = search.best(args.method, delay=args.delay_dist or _delay(args.delay), noise=args.noise, seeds=args.seeds,
                     seed=args.seed, robust=args.robust, tol=args.tol, max_cells=args.max_cells, expected=args.expected,
                     problem=groups.problem_from(args), **box, **groups.method_options(args, grids=False), **settings)
    save(ds, args.out)
    found = search.answer(ds)
    print(search.describe(ds))
    print(f"wrote {args.out}")
    if args.json:
        print(json.dumps(found))


def _box(text: str, flag: str):
    """``V`` → a number (fixed); ``LO:HI`` → a pair (searched)."""
    parts = str(text).split(":")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2):
        raise NqmError(f"{flag} takes a value V or a box LO:HI, got {text!r}")
    return values[0] if len(values) == 1 else tuple(values)


def _delay(text):
    return 0 if text is None else text
