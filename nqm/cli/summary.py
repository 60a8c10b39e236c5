"""``nqm summary``: the per-panel table of a saved sweep: T*, best cell, converged area (+ CSV)."""

from __future__ import annotations

from nqm.cli import output
from nqm.cli.parser import InputFile, OutputFile

NAME = "summary"
HELP = "per-panel table of a saved sweep: T*, best cell, converged area (+ CSV)"


def add_parser(subparsers):
    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("result", type=InputFile, help="a netCDF result of nqm sweep")
    parser.add_argument("--csv", type=OutputFile, default=None, metavar="FILE", help="also write the table as CSV")
    parser.add_argument("--spread", action="store_true",
                        help="also the median/min/max of T* and of the converged area over the result's seeds")
    return parser


def run(args) -> None:
    from nqm import summary

    ds = output.sweep_of(args.result)
    table = summary.summarize(ds)
    print(summary.format_table(table))
    if args.spread:
        print(summary.spread(summary.summarize(ds, by_seed=True)).to_dataframe()
              .to_string(float_format=lambda x: f"{x:.4g}"))
    if args.csv:
        summary.to_csv(table, args.csv)
        print(f"wrote {args.csv}")
