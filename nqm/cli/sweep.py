"""``nqm sweep``: steps to target over a hyperparameter grid → netCDF (+ heatmap), checkpointed."""

from __future__ import annotations

import os

from nqm.cli import groups, output
from nqm.cli.parser import joined
from nqm.errors import NqmError

NAME = "sweep"
HELP = "steps to target over a hyperparameter grid → netCDF (+ heatmap)"
INTERRUPTED = ("the sweep's checkpoint holds its finished and running cells: run the same command again to "
               "resume")


def add_parser(subparsers):
    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    grid = groups.grid(parser, delay_processes=True)
    groups.method(parser, grid)
    groups.problem(parser)
    run = groups.run_settings(parser, "target", "max_steps", "x64", "independent_noise", "chunk_steps", "devices",
                              "memory_budget", "progress")
    run.add_argument("--restart", action="store_true", help="ignore a checkpoint left by an interrupted run")
    groups.outputs(parser, "result file (netCDF)", plot="also write a heatmap (PNG/PDF/SVG)",
                   threshold=groups.THRESHOLD_HELP)
    return parser


def run(args) -> None:
    from nqm.io import check_writable, lock

    check_writable(args.out)
    output.check_figure(args.plot, args.threshold)
    with lock(args.out):
        _locked(args)


def _locked(args) -> None:
    import nqm

    partial = args.out + ".partial"
    if args.restart:
        for stale in (partial, partial + ".cells.npz"):
            if os.path.exists(stale):
                os.remove(stale)
    ds = nqm.sweep(
        args.method, lr=joined(args.lr), momentum=joined(args.momentum), delay=groups.delays(args),
        noise=joined(args.noise), seed=joined(args.seed), problem=groups.problem_from(args),
        **groups.method_options(args), **groups.settings(args), checkpoint=partial,
    )
    try:
        nqm.save(ds, args.out)
    except NqmError as exc:
        raise NqmError(f"{exc}; {_rescue(ds, args.out, partial)}") from None
    os.remove(partial)
    output.report(ds)
    print(f"wrote {args.out}")
    if args.plot:
        output.plot_result(ds, args.plot, args.threshold)


def _rescue(ds, out, partial) -> str:
    """Where the computed cells are, once ``out`` could not be written: the checkpoint if it holds
    them all, else a file in the temporary directory."""
    import tempfile

    from nqm.io import load, save

    try:
        if os.path.exists(partial) and (load(partial).status.values == ds.status.values).all():
            return (f"every computed cell is kept in {partial}: run the same command again, once it can be "
                    "written, to write it without computing anything")
    except NqmError:
        pass
    rescue = os.path.join(tempfile.gettempdir(), f"nqm-rescued-{os.getpid()}-{os.path.basename(out)}")
    try:
        save(ds, rescue)
    except NqmError:
        return "the computed cells could not be saved anywhere (no space left?)"
    return f"every computed cell is saved in {rescue}: copy it to {out} once there is room"
