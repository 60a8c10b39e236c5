"""``nqm bench``: the engine's throughput against a fused-update probe and a numpy loop."""

from __future__ import annotations

from nqm.cli.groups import default_of

NAME = "bench"
HELP = "throughput against a fused-update probe and a numpy loop"


def add_parser(subparsers):
    from nqm import bench

    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("--cells", type=int, default=default_of(bench.main, "cells"), help="cells in the grid")
    parser.add_argument("--dim", type=int, default=default_of(bench.main, "dim"), help="N")
    parser.add_argument("--steps", type=int, default=default_of(bench.main, "steps"), help="steps per timed run")
    parser.add_argument("--quick", action="store_true", help="a small, fast configuration (for CI)")
    parser.add_argument("--check", action="store_true",
                        help="exit with status 1 unless the throughput targets are met (see nqm.bench.TARGETS)")
    return parser


def run(args) -> int:
    from nqm import bench

    result = bench.main(cells=args.cells, dim=args.dim, steps=args.steps, quick=args.quick)
    return 1 if args.check and result["targets_missed"] else 0
