"""Command line: ``nqm sweep | plot | threshold | bench`` (also ``python -m nqm``).

Bad input ends with one line ``nqm: error: …`` on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

import numpy as np

from nqm import validate
from nqm.errors import NqmError
from nqm.validate import MAX_VALUES

LINEAR_METHODS = ("sgd", "sgdm", "nesterov", "shifted")  # nqm.expected.METHODS, without importing JAX for --help
DEFAULT_BINS = 100  # nqm.expected.DEFAULT_BINS

_ALIASES = {"mode": ("--ab-mode",)}  # earlier names of derived options
_METHOD_COMMANDS = ("sweep", "trace")  # subcommands that take a method and its options (need the registry)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of usage + message
        raise NqmError(f"{message} (see '{self.prog} --help')")


def values(text: str) -> list[float]:
    """One CLI value: a number, ``geom:START:STOP:NUM`` or ``lin:START:STOP:NUM``."""
    kind, _, rest = text.partition(":")
    if not rest:
        try:
            return [float(text)]
        except ValueError:
            raise NqmError(f"{text!r} is not a number, geom:START:STOP:NUM or lin:START:STOP:NUM") from None
    parts = rest.split(":")
    try:
        start, stop, num = float(parts[0]), float(parts[1]), int(parts[2])
        if len(parts) != 3 or num < 1 or not (np.isfinite(start) and np.isfinite(stop)):
            raise ValueError
    except (ValueError, IndexError):
        raise NqmError(f"{text!r}: write {kind}:START:STOP:NUM with NUM a positive integer") from None
    if num > MAX_VALUES:
        raise NqmError(f"{text!r}: {num:,} values is more than {MAX_VALUES:,} in one axis; sweep it in parts")
    if kind == "geom":
        if start <= 0 or stop <= 0:
            raise NqmError(f"{text!r}: a geometric range needs START > 0 and STOP > 0")
        return list(np.geomspace(start, stop, num))
    if kind == "lin":
        return list(np.linspace(start, stop, num))
    raise NqmError(f"{text!r}: unknown range {kind!r}; use geom:START:STOP:NUM or lin:START:STOP:NUM")


def _joined(items: list[str] | None) -> list[float] | None:
    return None if items is None else [x for item in items for x in values(item)]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; the method options (read off the optimizer registry, which imports JAX) are
    added only when ``command`` needs them, so that e.g. ``nqm threshold`` starts fast."""
    from nqm import __version__

    parser = _Parser(prog="nqm", description="Noisy Quadratic Model under gradient delay: sweeps, traces, "
                     "summaries and stability thresholds. Value lists take numbers, geom:START:STOP:NUM or "
                     "lin:START:STOP:NUM.")
    parser.add_argument("--version", action="version", version=f"nqm {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser = functools.partial(sub.add_parser, formatter_class=argparse.ArgumentDefaultsHelpFormatter)

    s = sub.add_parser("sweep", help="steps to target over a hyperparameter grid → netCDF (+ heatmap)", description="steps to target over a hyperparameter grid → netCDF (+ heatmap)")
    grid = s.add_argument_group("grid (each takes numbers, geom:START:STOP:NUM or lin:START:STOP:NUM)")
    grid.add_argument("--lr", nargs="+", required=True, metavar="V", help="learning rates η > 0")
    grid.add_argument("--momentum", nargs="+", required=True, metavar="V", help="momenta m in [0, 1)")
    grid.add_argument("--delay", nargs="+", default=None, metavar="D", help="constant delays (default 0)")
    grid.add_argument("--delay-dist", nargs="+", default=None, metavar="SPEC",
                      help="delay processes: uniform:A:B | gaussian:MU | pmf:P0,P1,... | workers:K[:slow=F:S]")
    grid.add_argument("--noise", nargs="+", default=["0"], metavar="S", help="gradient-noise scales σ >= 0")
    grid.add_argument("--seed", nargs="+", default=["0"], metavar="S", help="noise (and delay) seeds")
    if command in _METHOD_COMMANDS:
        _method_arguments(s, grid)
    _problem_arguments(s)
    run = s.add_argument_group("run")
    run.add_argument("--target", type=float, default=0.01, help="stop a cell once its loss is below this")
    run.add_argument("--max-steps", type=int, default=100_000, help="step budget per cell")
    run.add_argument("--x64", action="store_true", help="simulate in float64")
    run.add_argument("--independent-noise", action="store_true", help="noise drawn per cell, not shared")
    run.add_argument("--chunk-steps", type=int, default=1000, help="steps per compiled call (progress, checkpoints)")
    run.add_argument("--devices", type=int, default=None, help="devices to shard over (default all)")
    run.add_argument("--memory-budget", type=float, default=None, metavar="GIB",
                     help="GiB of simulation state held at once; larger grids run in groups (default: half the "
                          "accelerator memory, or 4 GiB on CPU)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--restart", action="store_true", help="ignore a checkpoint left by an interrupted run")
    s.add_argument("--out", required=True, help="result file (netCDF)")
    s.add_argument("--plot", default=None, metavar="FIGURE", help="also write a heatmap (PNG/PDF/SVG)")
    s.add_argument("--threshold", action="store_true", help="overlay the linear-stability threshold on --plot")

    tr = sub.add_parser("trace", help="per-step diagnostics of one cell → netCDF (+ figure)", description="per-step diagnostics of one cell → netCDF (+ figure)")
    cell = tr.add_argument_group("the cell (one value each)")
    cell.add_argument("--lr", nargs="+", required=True, metavar="V", help="learning rate η > 0")
    cell.add_argument("--momentum", nargs="+", required=True, metavar="V", help="momentum m in [0, 1)")
    cell.add_argument("--delay", default="0", metavar="D", help="a constant delay or a --delay-dist SPEC (default 0)")
    cell.add_argument("--noise", nargs="+", default=["0"], metavar="S", help="gradient-noise scale σ")
    cell.add_argument("--seed", nargs="+", default=["0"], metavar="S", help="noise (and delay) seed")
    if command == "trace":
        _method_arguments(tr, cell)
    _problem_arguments(tr)
    run = tr.add_argument_group("run")
    run.add_argument("--steps", type=int, required=True, help="steps to run (no early stop)")
    run.add_argument("--stride", type=int, default=1, help="record every K-th step (default 1)")
    run.add_argument("--target", type=float, default=0.01, help="report the first step with loss < target (default 0.01)")
    run.add_argument("--x64", action="store_true", help="simulate in float64")
    run.add_argument("--independent-noise", action="store_true", help="noise drawn per cell, as nqm sweep's option")
    tr.add_argument("--out", required=True, help="trace file (netCDF)")
    tr.add_argument("--plot", default=None, metavar="FIGURE", help="also write a figure (PNG/PDF/SVG)")

    ex = sub.add_parser("expected", help="exact expected steps to target and steady-state loss (linear methods) → netCDF")
    ex.add_argument("--method", choices=LINEAR_METHODS, default="sgdm", help="linear method")
    grid = ex.add_argument_group("grid (each takes numbers, geom:START:STOP:NUM or lin:START:STOP:NUM)")
    grid.add_argument("--lr", nargs="+", required=True, metavar="V", help="learning rates η > 0")
    grid.add_argument("--momentum", nargs="+", required=True, metavar="V", help="momenta m in [0, 1)")
    grid.add_argument("--delay", nargs="+", default=["0"], metavar="D", help="constant delays")
    grid.add_argument("--noise", nargs="+", default=["0"], metavar="S", help="gradient-noise scales σ >= 0")
    ex.add_argument("--dampening", action="store_true", help="v = m v + (1-m) g (Giladi et al.)")
    ex.add_argument("--bins", type=int, nargs="?", const=DEFAULT_BINS, default=None, metavar="B",
                    help=f"group the eigenvalues into B log-spaced bins (B = {DEFAULT_BINS} if not given; default: every eigenvalue)")
    _problem_arguments(ex)
    ex.add_argument("--target", type=float, default=0.01, help="target expected loss")
    ex.add_argument("--max-steps", type=int, default=100_000, help="step budget per cell")
    ex.add_argument("--out", required=True, help="result file (netCDF)")
    ex.add_argument("--plot", default=None, metavar="FIGURE", help="also write a heatmap (PNG/PDF/SVG)")
    ex.add_argument("--threshold", action="store_true", help="overlay the linear-stability threshold on --plot")

    p = sub.add_parser("plot", help="heatmap of a saved sweep", description="heatmap of a saved sweep")
    p.add_argument("result", help="a netCDF result of nqm sweep")
    p.add_argument("--out", required=True, help="figure file (PNG/PDF/SVG)")
    p.add_argument("--threshold", action="store_true", help="overlay the linear-stability threshold")

    su = sub.add_parser("summary", help="per-panel table of a saved sweep: T*, best cell, converged area (+ CSV)", description="per-panel table of a saved sweep: T*, best cell, converged area (+ CSV)")
    su.add_argument("result", help="a netCDF result of nqm sweep")
    su.add_argument("--csv", default=None, metavar="FILE", help="also write the table as CSV")
    su.add_argument("--spread", action="store_true",
                    help="also the median/min/max of T* and of the converged area over the result's seeds")

    t = sub.add_parser("threshold", help="characteristic-polynomial stability thresholds x* = a·η*", description="characteristic-polynomial stability thresholds x* = a·η*")
    t.add_argument("--method", choices=("sgd", "sgdm", "shifted"), default="sgdm", help="update rule")
    t.add_argument("--delay", nargs="+", default=None, metavar="T", help="constant delays τ (default 0)")
    t.add_argument("--momentum", nargs="+", default=["0"], metavar="M", help="momenta m in [0, 1)")
    t.add_argument("--dampening", action="store_true", help="v = m v + (1-m) g (Giladi et al.)")
    t.add_argument("--delay-dist", default=None, metavar="DIST", help="uniform:A:B | gaussian:MU")
    t.add_argument("--out", default=None, help="netCDF file for the table")

    b = sub.add_parser("bench", help="throughput against a fused-update probe and a numpy loop", description="throughput against a fused-update probe and a numpy loop")
    b.add_argument("--cells", type=int, default=256, help="cells in the grid")
    b.add_argument("--dim", type=int, default=10_000, help="N")
    b.add_argument("--steps", type=int, default=2000, help="steps per timed run")
    b.add_argument("--quick", action="store_true", help="a small, fast configuration (for CI)")
    b.add_argument("--check", action="store_true",
                   help="exit with status 1 unless the throughput targets are met (see nqm.bench.TARGETS)")
    return parser


def _method_arguments(parser, grid):
    """``--method``, each family's swept hyperparameters and its options, read off the registry:
    a new family needs no edit here."""
    from nqm.optimizers import methods
    from nqm.optimizers.base import documentation, hyperparameters, options
    from nqm.sweeps import all_hyper_dims

    parser.add_argument("--method", choices=methods(), default="sgdm", help="optimizer (default sgdm)")
    for name in all_hyper_dims():
        owners = [m for m in methods() if name in hyperparameters(m)._fields]
        default = hyperparameters(owners[0])._field_defaults.get(name)
        grid.add_argument("--" + name.replace("_", "-"), nargs="+", default=None, metavar="V",
                          help=f"{', '.join(owners)} hyperparameter" + (f" (default {default:g})" if default is not None else ""))
    group = parser.add_argument_group("method options (each applies to the methods named)")
    seen = {}
    for method in methods():
        docs = documentation(method)
        for name, parameter in options(method).items():
            seen.setdefault(name, (parameter, docs.get(name, ""), []))[2].append(method)
    for name, (parameter, doc, owners) in seen.items():
        flags = ["--" + name.replace("_", "-"), *_ALIASES.get(name, ())]
        default = parameter.default
        text = f"{doc} [{', '.join(owners)}; default {default}]".replace("``", "").replace("%", "%%").strip()
        if isinstance(default, bool):
            group.add_argument(*flags, dest=name, action="store_true", default=None, help=text)
        else:
            kind = type(default) if isinstance(default, (int, float)) else (
                float if "float" in str(parameter.annotation) else int if "int" in str(parameter.annotation) else str)
            group.add_argument(*flags, dest=name, type=kind, default=None, metavar=name.upper(), help=text)


def _method_options(args) -> dict:
    """The method's hyperparameter grids and options given on the command line (None: not given)."""
    from nqm.optimizers import methods
    from nqm.optimizers.base import options
    from nqm.sweeps import all_hyper_dims

    names = {n for m in methods() for n in options(m)}
    given = {n: getattr(args, n) for n in names}
    given.update({n: _joined(getattr(args, n)) for n in all_hyper_dims()})
    return {k: v for k, v in given.items() if v is not None}


def _delays(args) -> list:
    """``--delay`` (constants) and ``--delay-dist`` (processes) as one list for the delay dimension."""
    constants = _joined(args.delay) or ([] if args.delay_dist else [0.0])
    return [*constants, *(args.delay_dist or [])]


def _problem_arguments(s):
    g = s.add_argument_group("problem")
    g.add_argument("--spectrum", choices=("zhang", "loguniform"), default="zhang")
    g.add_argument("--dim", type=int, default=None, help="N (default 10000; not with --eigenvalues)")
    g.add_argument("--lo", type=float, default=None, help="smallest eigenvalue of loguniform (default 1e-4)")
    g.add_argument("--hi", type=float, default=None, help="largest eigenvalue of loguniform (default 1)")
    g.add_argument("--eigenvalues", nargs="+", type=float, default=None, metavar="E", help="explicit spectrum")
    g.add_argument("--rotate", type=int, default=None, metavar="SEED", help="random rotation of H")


def _problem(args):
    from nqm import problem

    if args.eigenvalues is not None and (args.dim is not None or args.spectrum != "zhang"):
        raise NqmError("--eigenvalues gives the whole spectrum: drop --dim and --spectrum")
    if args.spectrum != "loguniform" and (args.lo is not None or args.hi is not None):
        raise NqmError("--lo and --hi set the loguniform spectrum: add --spectrum loguniform or drop them")
    if args.rotate is not None and args.rotate < 0:
        raise NqmError(f"--rotate takes a seed >= 0, got {args.rotate}")
    dim = validate.count(10_000 if args.dim is None else args.dim, "--dim", high=10**7)
    if args.eigenvalues is not None:
        lam = np.asarray(args.eigenvalues)
        if not (np.isfinite(lam).all() and (lam > 0).all()):
            raise NqmError("--eigenvalues must be finite numbers > 0")
        p = problem.explicit(lam)
    elif args.spectrum == "loguniform":
        p = problem.loguniform(dim, 1e-4 if args.lo is None else args.lo, 1.0 if args.hi is None else args.hi)
    else:
        p = problem.zhang(dim)
    return p.with_rotation(args.rotate)


def _sweep(args):
    from nqm.io import check_writable, lock

    check_writable(args.out)
    _check_figure(args.plot, args.threshold)
    with lock(args.out):
        _locked_sweep(args)


def _locked_sweep(args):
    import nqm

    partial = args.out + ".partial"
    if args.restart:
        for stale in (partial, partial + ".cells.npz"):
            if os.path.exists(stale):
                os.remove(stale)
    ds = nqm.sweep(
        args.method,
        lr=_joined(args.lr), momentum=_joined(args.momentum), delay=_delays(args),
        noise=_joined(args.noise), seed=_joined(args.seed), problem=_problem(args), **_method_options(args),
        target=args.target, max_steps=args.max_steps, x64=args.x64, independent_noise=args.independent_noise,
        chunk_steps=args.chunk_steps, devices=args.devices, progress=not args.no_progress,
        memory_budget=None if args.memory_budget is None else _positive(args.memory_budget, "--memory-budget") * 2**30,
        checkpoint=partial,
    )
    try:
        nqm.save(ds, args.out)
    except NqmError as exc:
        raise NqmError(f"{exc}; {_rescue(ds, args.out, partial)}") from None
    os.remove(partial)
    _summary(ds)
    print(f"wrote {args.out}")
    if args.plot:
        _plot(ds, args.plot, args.threshold)


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


TRACED = {"loss": "loss", "alpha": "alpha", "velocity_norm": "velocity_norm", "gvr": "gradient_velocity_ratio",
          "update_alignment": "update_alignment", "gradient_velocity_cosine": "gradient_velocity_cosine",
          "gradient_norm": "gradient_norm"}


def _trace(args):
    from nqm import diagnostics
    from nqm.io import check_writable, save

    check_writable(args.out)
    _check_figure(args.plot)
    ds = diagnostics.trajectory(
        _problem(args), args.method, lr=_joined(args.lr), momentum=_joined(args.momentum), delay=args.delay,
        noise=_joined(args.noise), seed=_joined(args.seed), steps=args.steps, stride=args.stride,
        record=tuple(TRACED.values()), summaries=True, target=args.target, x64=args.x64,
        independent_noise=args.independent_noise, **_method_options(args),
    )
    ds = ds.rename({v: k for k, v in TRACED.items() if k != v})
    save(ds, args.out)
    reached = int(ds.steps_to_target)
    print(f"{args.steps:,} steps: loss {float(ds.loss[-1]):.3g} at the end; "
          + (f"loss < {args.target:g} first at step {reached:,}" if reached else f"never below {args.target:g}"))
    print(f"wrote {args.out}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        from nqm.plots.trace import plot_trace

        _savefig(plot_trace(ds), args.plot)


def _summary(ds):
    from nqm.plots.heatmap import combine_seeds
    from nqm.status import format_t_star, plural, t_star

    status = ds.status.values
    # T* as the heatmap computes it: over the cells combined across seeds (median T).
    print(f"{plural(status.size, 'cell')}: {int((status == 1).sum()):,} reached the target, "
          f"{int((status == -1).sum()):,} diverged, {int((status == 0).sum()):,} ran out of budget; "
          f"best {format_t_star(t_star(combine_seeds(ds)))} (1st percentile of T, interpolated)")


def _positive(value, name):
    if not (np.isfinite(value) and value > 0):
        raise NqmError(f"{name} must be a number > 0, got {value}")
    return value


def _check_figure(path, threshold=False):
    """A figure's path and format, checked before any work."""
    if path is None:
        if threshold:
            raise NqmError("--threshold draws on the figure: give --plot FIGURE too")
        return
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    from nqm.io import check_writable

    check_writable(path)
    kind = os.path.splitext(path)[1].lstrip(".").lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if kind not in formats:
        raise NqmError(f"cannot write figure {path}: unknown format {kind!r}; use one of {', '.join(sorted(formats))}")


def _plot(ds, path, threshold):
    import matplotlib

    matplotlib.use("Agg")
    from nqm.plots.heatmap import plot_heatmaps
    from nqm.io import check_writable

    check_writable(path)
    missing = [k for k in ("lam_max", "method") if threshold and k not in ds.attrs]
    if missing:
        raise NqmError(f"--threshold needs the result's attribute(s) {', '.join(missing)} (the problem's largest "
                       "eigenvalue and the method), which nqm sweep writes; this file lacks them")
    _savefig(plot_heatmaps(ds, threshold=threshold), path)


def _savefig(fig, path):
    try:
        fig.savefig(path, dpi=150)
    except (OSError, ValueError) as exc:
        raise NqmError(f"cannot write figure {path}: {exc}") from None
    print(f"wrote {path}")


def _expected(args):
    from nqm import expected
    from nqm.io import check_writable, lock, save

    check_writable(args.out)
    _check_figure(args.plot, args.threshold)
    if args.bins is not None:
        validate.count(args.bins, "--bins")
    with lock(args.out):
        ds = expected.sweep(args.method, lr=_joined(args.lr), momentum=_joined(args.momentum),
                            delay=_joined(args.delay), noise=_joined(args.noise), problem=_problem(args),
                            bins=args.bins, dampening=args.dampening, target=args.target, max_steps=args.max_steps)
        save(ds, args.out)
    _summary(ds)
    print(f"{int((ds.reachable == 0).sum()):,} of {ds.reachable.size:,} cells can never reach the target in expectation")
    print(f"wrote {args.out}")
    if args.plot:
        _plot(ds, args.plot, args.threshold)


def _summary_command(args):
    from nqm import load, summary

    ds = load(args.result)
    if args.csv:
        from nqm.io import check_writable

        check_writable(args.csv)
    table = summary.summarize(ds)
    print(summary.format_table(table))
    if args.spread:
        print(summary.spread(table).to_dataframe().to_string(float_format=lambda x: f"{x:.4g}"))
    if args.csv:
        summary.to_csv(table, args.csv)
        print(f"wrote {args.csv}")


def _threshold(args):
    from nqm import stability

    if args.out:
        from nqm.io import check_writable

        check_writable(args.out)
    ds = stability.threshold_dataset(
        args.method, delays=_joined(args.delay), momenta=_joined(args.momentum),
        dampening=args.dampening, delay_dist=args.delay_dist,
    )
    print(ds.threshold.to_pandas().to_string(float_format=lambda x: f"{x:.6g}"))
    if args.out:
        from nqm.io import save

        save(ds, args.out)
        print(f"wrote {args.out}")


def _bench(args):
    from nqm import bench

    for name in ("cells", "dim", "steps"):
        validate.count(getattr(args, name), f"--{name}")
    result = bench.main(cells=args.cells, dim=args.dim, steps=args.steps, quick=args.quick)
    return 1 if args.check and result["targets_missed"] else 0


def main(argv=None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        command = next((a for a in argv if not a.startswith("-")), None)
        args = build_parser(command).parse_args(argv)
        if args.command == "plot":
            from nqm import load

            _check_figure(args.out)
            _plot(load(args.result), args.out, args.threshold)
            return 0
        return {"sweep": _sweep, "trace": _trace, "expected": _expected, "summary": _summary_command, "threshold": _threshold, "bench": _bench}[args.command](args) or 0
    except NqmError as exc:
        print(f"nqm: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `nqm threshold ... | head`: the reader left, nothing is wrong
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("nqm: interrupted; the sweep's checkpoint holds its finished and running cells: run the same "
              "command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
