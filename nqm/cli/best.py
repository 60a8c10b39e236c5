"""``nqm best``: the smallest T over a box of hyperparameters, by successive refinement; robust to a
nudge (``--robust δ``) and over seeds (``--seeds K``); every evaluated point in the file."""

from __future__ import annotations

import os

from nqm.cli import groups, output
from nqm.errors import NqmError

NAME = "best"
HELP = "the smallest T over a box of hyperparameters (search), robust to a nudge, over seeds → netCDF (+ JSON)"
BOX = "a value V (fixed) or LO:HI (searched"


def interrupted(args) -> str:
    """What an interrupted search leaves: its checkpoint, once a round was kept."""
    partial = args.out + ".partial"
    if os.path.exists(partial):
        return f"the checkpoint {partial} holds every round evaluated so far: run the same command again to resume"
    return "no round had finished, nothing was kept: the search starts over when run again"


def add_parser(subparsers):
    parser = subparsers.add_parser(NAME, help=HELP, description=HELP + ". T*_best is one point's own T, what "
                                   "nqm sweep gives there, not the grids' 1st-percentile T*.")
    search_arguments(parser, lambda cell: cell.add_argument(
        "--batch-size", type=float, default=None, metavar="B",
        help="a batch size B, an integer >= 1: --noise is then the single-example σ and every point runs with σ/√B "
             "(default: none, --noise is the points' σ)"))
    parser.add_argument("--restart", action="store_true", help="ignore a checkpoint left by an interrupted run")
    parser.add_argument("--json", action="store_true", help="print the answer as one JSON object, the last line")
    groups.outputs(parser, "every evaluated point and the answer (netCDF)")
    return parser


def search_arguments(parser, batch_size) -> None:
    """The box, the cells, the problem, the run settings and the search's options of ``nqm best``
    (also ``nqm scaling``'s); ``batch_size(group)`` adds the command's own ``--batch-size`` to the cells."""
    from nqm import search
    from nqm.optimizers import methods
    from nqm.grids import all_hyper_dims, hyper_dims

    box = parser.add_argument_group("the box (each a value V, fixed, or LO:HI, searched)")
    box.add_argument("--lr", required=True, metavar="V|LO:HI", help=f"{BOX} on a log scale)")
    box.add_argument("--momentum", default=None, metavar="V|LO:HI",
                     help=f"{BOX} on log(1 - m); required by a method with a momentum, none for adam, lion)")
    for name in all_hyper_dims():
        owners = [m for m in methods() if name in hyper_dims(m)]
        box.add_argument("--" + name.replace("_", "-"), default=None, metavar="V|LO:HI",
                         help=f"{', '.join(owners)}: {BOX} on a log scale; default: the sweep's)")
    box.add_argument("--ema", default=None, metavar="V|LO:HI",
                     help=f"iterate averaging's rate γ in [0, 1): {BOX} on log(1 - γ); T read on the average; "
                          "default: none)")
    parser.add_argument("--schedule", default=None, metavar="SPEC",
                        help="a learning-rate schedule multiplying lr at every point: constant, step:S:R, warmup:S or "
                             "cosine:S (default: none)")
    parser.add_argument("--method", choices=methods(), default=groups.default_of(search.best, "method"),
                        help="optimizer")
    groups.method_option_flags(parser, skip=all_hyper_dims())
    cell = parser.add_argument_group("the cells")
    cell.add_argument("--delay", default=None, metavar="D", help="a constant delay (default: 0)")
    cell.add_argument("--delay-dist", default=None, metavar="SPEC", help="a delay process (instead of --delay)")
    cell.add_argument("--noise", type=float, default=0.0, help="gradient-noise scale σ")
    batch_size(cell)
    groups.problem(parser)
    groups.run_settings(parser, "target", "max_steps", "work_limit", "first_passage", "x64", "independent_noise",
                        "progress")
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
    search_.add_argument("--objective", choices=("first", "stay"), default=groups.default_of(search.best, "objective"),
                         help="rank points by the first passage T (first) or by the first step after which the loss "
                              "stays below the target (stay; noiseless runs, or --expected at any noise)")


def search_options(args) -> dict:
    """The keyword arguments of :func:`nqm.search.best` that :func:`search_arguments` read (all but
    ``batch_size`` and the checkpoint), checked in the command's words."""
    from nqm.config import checked_config
    from nqm.grids import all_hyper_dims

    if args.delay is not None and args.delay_dist is not None:
        raise NqmError("give either --delay or --delay-dist: a search runs under one delay")
    if args.expected:
        _exact_mode(args)
    box = {"lr": _box(args.lr, "--lr"), "momentum": None if args.momentum is None else _box(args.momentum, "--momentum")}
    box.update({n: _box(getattr(args, n), "--" + n.replace("_", "-")) for n in (*all_hyper_dims(), "ema")
                if getattr(args, n) is not None})
    if args.schedule is not None:
        box["schedule"] = args.schedule
    _first_grid(box, args)
    settings = groups.settings(args)
    checked_config(**settings)  # every run setting checked, also those the exact mode then leaves out
    if args.expected:  # what the exact mode takes (the others were refused above)
        settings = {k: v for k, v in settings.items() if k in ("target", "max_steps", "progress")}
    return dict(method=args.method, delay=args.delay_dist or _delay(args.delay), noise=args.noise, seeds=args.seeds,
                objective=args.objective, seed=args.seed, robust=args.robust, tol=args.tol, max_cells=args.max_cells,
                expected=args.expected, problem=groups.problem_from(args), **box,
                **groups.method_options(args, grids=False), **settings)


def run(args) -> None:
    import json

    from nqm import search
    from nqm.checkpoint import StaleCheckpoint, before_work
    from nqm.io import discard, save

    options = search_options(args)
    partial = args.out + ".partial"
    # --out is checked once the search knows its settings, before it evaluates a point.
    guard = before_work(lambda settings: output.replacing(args.out, settings, what="search", force=args.force))
    try:
        with guard:
            ds = search.best(options.pop("method"), batch_size=args.batch_size, checkpoint=partial,
                             restart=args.restart, **options)
    except StaleCheckpoint as exc:
        raise NqmError(f"{exc.reason}; run again with --restart to start over") from None
    answer = json.dumps(search.answer(ds))
    print(search.describe(ds))  # before the write: a failed write loses no answer
    try:
        save(ds, args.out)
    except NqmError as exc:
        if args.json:
            print(answer)
        raise NqmError(f"{exc}; {output.rescue(ds, args.out, partial, 'every evaluated point')}") from None
    discard(partial)
    print(f"wrote {args.out}")
    if args.json:
        print(answer)


def _exact_mode(args) -> None:
    """``--expected`` with what it cannot take, refused in the command's words."""
    from nqm import delays, expected

    if args.method not in expected.methods():
        raise NqmError(f"--expected needs a linear method ({', '.join(expected.methods())}), not --method "
                       f"{args.method}; drop --expected to search it with the engine")
    if args.delay_dist is not None and delays.pmf(args.delay_dist) is None:
        raise NqmError(f"--expected needs a constant or iid delay, not the worker pool {args.delay_dist} (no delay "
                       "pmf); drop --expected to search it with the engine")
    if args.seeds != 1:
        raise NqmError("--expected has no seeds (the expectation is exact): drop --seeds")
    given = [flag for flag, on in (("--x64", args.x64), ("--independent-noise", args.independent_noise)) if on]
    if given:
        raise NqmError(f"--expected computes the expectation exactly, in float64, with no noise drawn: drop "
                       f"{' and '.join(given)}")


def _first_grid(box: dict, args) -> None:
    """Refuse a --max-cells below the first grid, in the command's words (it has no --coarse)."""
    from nqm.search.setup import COARSE
    from nqm.validate import BOUNDS, MAX_CELLS, count

    count(args.seeds, "--seeds", high=BOUNDS["seeds"])  # the bounds first: the grid below never asks for more
    count(args.max_cells, "--max-cells", high=MAX_CELLS)
    searched = sum(isinstance(v, tuple) for v in box.values())
    cells = COARSE.get(searched, 4) ** searched * max(args.seeds, 1)
    if searched and args.max_cells < cells:
        raise NqmError(f"--max-cells {args.max_cells} is too small for the first grid ({cells:,} cells: "
                       f"{COARSE.get(searched, 4)} points per searched parameter, {searched} searched"
                       f"{f', x {args.seeds} seeds' if args.seeds > 1 else ''}); give --max-cells {cells} or more")


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
