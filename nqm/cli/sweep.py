"""``nqm sweep``: steps to target over a hyperparameter grid → netCDF (+ heatmap), checkpointed."""

from __future__ import annotations

import os

from nqm.cli import groups, output
from nqm.cli.parser import joined
from nqm.errors import NqmError

NAME = "sweep"
HELP = "steps to target over a hyperparameter grid → netCDF (+ heatmap)"


def interrupted(args) -> str | None:
    """What an interrupted sweep leaves: its checkpoint, once one was written."""
    partial = args.out + ".partial"
    if os.path.exists(partial):
        return f"the checkpoint {partial} holds the finished and running cells: run the same command again to resume"
    return None


def add_parser(subparsers):
    parser = subparsers.add_parser(NAME, help=HELP, description=HELP + ". Status 1, settled: the run reached the target "
                                   "and stays below it for good (its settled test, attribute settled_test; not the same "
                                   "question as nqm threshold --simulate's, which asks whether a run grows); 2 transient, 3 "
                                   "undecided within --work-limit, 0 out of budget, -1 diverged.")
    grid = groups.grid(parser, delay_processes=True, batch=True)
    groups.choices(grid)
    groups.method(parser, grid)
    groups.problem(parser)
    run = groups.run_settings(parser, "target", "max_steps", "work_limit", "first_passage", "skip_decided", "x64",
                              "independent_noise", "chunk_steps", "devices", "memory_budget", "progress")
    run.add_argument("--restart", action="store_true", help="ignore a checkpoint left by an interrupted run")
    run.add_argument("--stay", action="store_true", help="also give steps_stay: the first step after which the loss "
                                                         "stays below the target (settled noiseless cells)")
    groups.outputs(parser, "result file (netCDF)", plot="also write a heatmap (PNG/PDF/SVG)",
                   threshold=groups.THRESHOLD_HELP)
    return parser


def run(args) -> None:
    import nqm
    from nqm.checkpoint import StaleCheckpoint, before_work
    from nqm.io import discard

    output.check_figure(args.plot, args.threshold, force=args.force)
    partial = args.out + ".partial"
    # --out is checked once the sweep knows its grid and settings, before it computes a cell.
    guard = before_work(lambda planned: output.replacing(args.out, planned, force=args.force))
    try:
        with guard:
            ds = nqm.sweep(
                args.method, lr=joined(args.lr), momentum=joined(args.momentum), delay=groups.delays(args),
                noise=joined(args.noise), seed=joined(args.seed), batch_size=groups.batch_sizes(args),
                problem=groups.problem_from(args), **groups.method_options(args), **groups.settings(args),
                **groups.choices_from(args),
                checkpoint=partial, restart=args.restart, stay=args.stay,
            )
    except StaleCheckpoint as exc:
        raise NqmError(f"{exc.reason}; run again with --restart to start over") from None
    try:
        nqm.save(ds, args.out)
    except NqmError as exc:
        raise NqmError(f"{exc}; {output.rescue(ds, args.out, partial)}") from None
    discard(partial)
    output.report(ds)
    print(f"wrote {args.out}")
    if args.plot:
        output.plot_result(ds, args.plot, args.threshold)
