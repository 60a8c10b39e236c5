"""``nqm trace``: per-step diagnostics of one cell → netCDF (+ figure).

The variables are the recorders :data:`nqm.diagnostics.TRACE`, under their
:data:`nqm.diagnostics.RECORDERS` names (what :func:`nqm.plots.trace.plot_trace` reads).
"""

from __future__ import annotations

from nqm.cli import groups, output
from nqm.cli.parser import joined

NAME = "trace"
HELP = "per-step diagnostics of one cell → netCDF (+ figure)"


def add_parser(subparsers):
    parser = subparsers.add_parser(NAME, help=HELP, description=HELP)
    cell = groups.grid(parser, one_cell=True)
    groups.choices(cell, one=True)
    groups.method(parser, cell)
    groups.problem(parser)
    run = groups.run_settings(parser, "target", "x64", "independent_noise", help={
        "target": "report the first step with loss < target",
        "independent_noise": "noise drawn per cell, as nqm sweep's option"})
    run.add_argument("--steps", type=int, required=True, help="steps to run (no early stop)")
    run.add_argument("--stride", type=int, default=1, help="record every K-th step")
    groups.outputs(parser, "trace file (netCDF)", plot="also write a figure (PNG/PDF/SVG)")
    return parser


def run(args) -> None:
    from nqm import diagnostics
    from nqm.errors import NqmError
    from nqm.io import save

    output.check_figure(args.plot, force=args.force)
    ds = diagnostics.trajectory(
        args.method, problem=groups.problem_from(args), lr=joined(args.lr), momentum=joined(args.momentum),
        delay=args.delay, noise=joined(args.noise), seed=joined(args.seed), steps=args.steps, stride=args.stride,
        record=diagnostics.TRACE, summaries=True, **groups.settings(args), **groups.method_options(args),
        **groups.choices_from(args),
    )
    try:
        save(ds, args.out)
    except NqmError as exc:
        raise NqmError(f"{exc}; {output.rescue(ds, args.out, what='the trace')}") from None
    reached, target = int(ds.steps_to_target), args.target
    print(f"{args.steps:,} steps: loss {float(ds.loss[-1]):.3g} at the end; "
          + (f"loss < {target:g} first at step {reached:,}" if reached else f"never below {target:g}"))
    decay = ds.relative_energy_decay
    if decay.attrs.get("steps", args.steps) < args.steps:
        print(f"the run diverged: its relative energy decay covers the {decay.attrs['steps']:,} steps before")
    print(f"wrote {args.out}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        from nqm.plots.trace import plot_trace

        output.save_figure(plot_trace(ds), args.plot)
