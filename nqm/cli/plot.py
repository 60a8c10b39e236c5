"""``nqm plot``: the heatmaps of a saved sweep (or ``nqm expected`` result)."""

from __future__ import annotations

from nqm.cli import groups, output
from nqm.cli.parser import InputFile, OutputFile

NAME = "plot"
HELP = "heatmap of a saved sweep"


def add_parser(subparsers):
    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("result", type=InputFile, help="a netCDF result of nqm sweep")
    parser.add_argument("--out", type=OutputFile, required=True, help="figure file (PNG/PDF/SVG)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing --out file that is not a figure "
                                                             "nqm drew (never done without it)")
    groups.threshold_option(parser)
    return parser


def run(args) -> None:
    ds = output.sweep_of(args.result)  # the input first: what is wrong with it is said before the figure's name
    output.check_figure(args.out, force=args.force, label="--out")
    output.plot_result(ds, args.out, args.threshold)
