"""``nqm threshold``: characteristic-polynomial stability thresholds x* = a·η* (numpy only: starts fast)."""

from __future__ import annotations

from nqm.cli import groups
from nqm.cli.parser import joined

NAME = "threshold"
HELP = "characteristic-polynomial stability thresholds x* = a·η*"


def add_parser(subparsers):
    from nqm import stability

    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    parser.add_argument("--method", choices=stability.METHODS, default="sgdm", help="update rule")
    parser.add_argument("--delay", nargs="+", default=None, metavar="T",
                        help="constant delays τ, or the values of an incomplete --delay-dist's last parameter "
                             "(default: 0 … 64, or a range per family; see nqm.stability.threshold_dataset)")
    parser.add_argument("--momentum", nargs="+", default=["0"], metavar="M", help="momenta m in [0, 1)")
    parser.add_argument("--dampening", action="store_true", help="v = m v + (1-m) g (Giladi et al.)")
    parser.add_argument("--delay-dist", default=None, metavar="DIST",
                        help=f"a delay distribution: {stability.DIST_SYNTAX}; without its last value, swept over "
                             "--delay (default: constant delays)")
    groups.outputs(parser, "netCDF file for the table", required=False)
    return parser


def run(args) -> None:
    from nqm import stability

    ds = stability.threshold_dataset(args.method, delays=joined(args.delay), momenta=joined(args.momentum),
                                     dampening=args.dampening, delay_dist=args.delay_dist)
    print(ds.threshold.to_pandas().to_string(float_format=lambda x: f"{x:.6g}"))
    if args.out:
        from nqm.io import save

        save(ds, args.out)
        print(f"wrote {args.out}")
