"""``nqm scaling``: steps against batch size — the best settled T at each batch size (one ``nqm best``
search each), perfect scaling and the critical batch size."""

from __future__ import annotations

import os

from nqm.cli import best, groups, output
from nqm.errors import NqmError

NAME = "scaling"


def interrupted(args) -> str:
    """What an interrupted run leaves: its checkpoint, once a batch size's search was kept."""
    partial = args.out + ".partial"
    if os.path.exists(partial):
        return (f"the checkpoint {partial} holds every batch size searched so far: run the same command again to "
                "continue with the next")
    return "no batch size had finished, nothing was kept: the run starts over when run again"

HELP = "steps against batch size: the best T per batch size, perfect scaling, the critical batch size → netCDF (+ plot)"


def add_parser(subparsers):
    parser = subparsers.add_parser(NAME, help=HELP, description=HELP + ". Each batch size B runs with noise σ/√B "
                                   "(σ = --noise, the single-example scale); without --expected the exact mode is "
                                   "used wherever it applies (a linear method, a constant or iid delay, one seed).")
    best.search_arguments(parser, lambda cell: cell.add_argument(
        "--batch-size", nargs="+", required=True, metavar="B",
        help="the batch sizes, integers >= 1 (at least two; ranges such as geom:1:1024:11)"))
    parser.add_argument("--restart", action="store_true", help="ignore a checkpoint left by an interrupted run")
    parser.add_argument("--json", action="store_true", help="print the steps per batch size and the critical batch "
                                                            "size as one JSON object, the last line")
    groups.outputs(parser, "steps per batch size (netCDF)", plot="also draw steps against batch size (PNG/PDF/SVG)")
    return parser


def run(args) -> None:
    import json

    import numpy as np

    from nqm.io import save
    from nqm.plots.scaling import plot_scaling
    from nqm.search.scaling import exact_applies, scaling

    output.check_figure(args.plot, force=args.force)
    # The exact mode wherever it applies (as the API does), its options then checked as --expected's.
    args.expected = args.expected or exact_applies(args.method, args.delay_dist or args.delay or 0, args.seeds,
                                                   args.x64, args.independent_noise)
    options = best.search_options(args)
    ds = scaling(options.pop("method"), batch_size=groups.batch_sizes(args), checkpoint=args.out + ".partial",
                 restart=args.restart, **options)
    for b, s, why in zip(ds.batch_size.values, ds.steps.values, ds.miss.values):
        print(f"B = {b:>6,}: {f'{s:,.0f} steps' if np.isfinite(s) else f'no answer ({why})'}")
    critical = ds.attrs["critical_batch_size"]
    print(f"critical batch size: {critical:,.1f} ({ds.attrs['evaluation']})" if np.isfinite(critical) else
          "critical batch size: beyond the largest batch size given" if critical == np.inf else
          "critical batch size: none (a batch size has no answer)" if not ds.answered.values.all() else
          "critical batch size: undefined (no batch size converged)")
    try:
        save(ds, args.out)
    except NqmError as exc:
        raise NqmError(f"{exc}; {output.rescue(ds, args.out)}") from None
    print(f"wrote {args.out}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        output.save_figure(plot_scaling(ds), args.plot)
    if args.json:
        number = lambda x: None if not np.isfinite(x) else float(x)
        print(json.dumps({"batch_size": ds.batch_size.values.tolist(), "steps": [number(s) for s in ds.steps.values],
                          "critical_batch_size": number(critical)}))
