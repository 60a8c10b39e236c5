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
    groups.threshold_option(parser)
    return parser


def run(args) -> None:
    from nqm.io import load

    output.check_figure(args.out)
    output.plot_result(load(args.result), args.out, args.threshold)
