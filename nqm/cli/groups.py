"""Argument groups the commands share, and reading them back as API arguments.

Each fact is written once, where it belongs: the run settings default to the fields of
:class:`nqm.engine.RunConfig`, the method and its options are read off the optimizer registry,
the problem's sizes off :mod:`nqm.problem`. The groups that import JAX (run settings, method) are
built only for the command being run.
"""

from __future__ import annotations

import dataclasses
import inspect

from nqm import validate
from nqm.cli.parser import RANGES, InputFile, OutputFile, ResultFile, joined, positive
from nqm.errors import NqmError

GIB = 2**30
_ALIASES = {"mode": ("--ab-mode",)}  # earlier names of method options

# RunConfig field → (type, help) of its option; the default is RunConfig's own.
_RUN = {
    "target": (float, "stop a cell once its loss is below this"),
    "max_steps": (int, "step budget per cell of its first passage; with its settled test a cell takes at most "
                       "--work-limit times as many steps"),
    "x64": (bool, "simulate in float64"),
    "independent_noise": (bool, "noise drawn per cell, not shared"),
    "chunk_steps": (int, "steps per compiled call (progress, checkpoints; default: 1000, up to 16x that for a "
                         "small problem)"),
    "devices": (int, "devices to shard over (default: all devices)"),
    "memory_budget": (float, "GiB of simulation state held at once; larger grids run in groups "
                             "(default: half the accelerator memory, or 4 GiB on CPU)"),
    "progress": (bool, "no progress bar"),
    "first_passage": (bool, "count a run that reaches the target as converged even if it does not stay there "
                            "(the AB paper's definition: status 1 is the first passage, never 2)"),
    "skip_decided": (bool, "do not run cells known before running not to settle (status -2: a linear method's exact "
                           "test fails, or a noiseless run ends as an unstable linear method); settled cells are unchanged"),
    "work_limit": (float, "the most steps a cell takes, its settled test included (the run past its first passage "
                          "and any floor probe), as a multiple of --max-steps; a cell whose verdict needs more is "
                          "status 3, undecided"),
}


def default_of(function, name: str):
    """The default of ``function``'s parameter ``name`` (so that the CLI never restates it)."""
    return inspect.signature(function).parameters[name].default


def grid(parser, *, one_cell: bool = False, delay_processes: bool = False, seeds: bool = True, batch: bool = False):
    """``--lr``, ``--momentum``, ``--delay`` (and ``--delay-dist``), ``--noise`` (and ``--seed``, and
    with ``batch`` ``--batch-size``): value lists, or with ``one_cell`` the values of one cell (a list
    there is an error of the API)."""
    from nqm import delays

    title = "the cell (one value each)" if one_cell else f"grid (each takes {RANGES})"
    group = parser.add_argument_group(title)
    what = ("learning rate", "momentum", "gradient-noise scale", "noise (and delay) seed") if one_cell else \
        ("learning rates", "momenta", "gradient-noise scales", "noise (and delay) seeds")
    group.add_argument("--lr", nargs="+", required=True, metavar="V", help=f"{what[0]} η > 0")
    group.add_argument("--momentum", nargs="+", default=None, metavar="V",
                       help=f"{what[1]} m in [0, 1) (required by a method with a momentum; adam, lion take none)")
    if one_cell:
        group.add_argument("--delay", default="0", metavar="D", help=f"a constant delay or a process: {delays.syntax()}")
    elif delay_processes:
        group.add_argument("--delay", nargs="+", default=None, metavar="D",
                           help="constant delays (default: 0, or none when --delay-dist is given)")
        group.add_argument("--delay-dist", nargs="+", default=None, metavar="SPEC",
                           help=f"delay processes: {delays.syntax()}")
    else:
        group.add_argument("--delay", nargs="+", default=["0"], metavar="D", help="constant delays")
    group.add_argument("--noise", nargs="+", default=["0"], metavar="S", help=f"{what[2]} σ >= 0")
    if batch:
        group.add_argument("--batch-size", nargs="+", default=None, metavar="B",
                           help="batch sizes B, integers >= 1: a batch_size dimension; --noise is then the "
                                "single-example σ and a batch runs with σ/√B (default: none, --noise is each cell's σ)")
    if seeds:
        group.add_argument("--seed", nargs="+", default=["0"], metavar="S", help=what[3])
    return group


def choices(group, one: bool = False) -> None:
    """``--ema`` and ``--schedule`` in ``group``: iterate averaging's rates and learning-rate schedules
    (value lists, dimensions of the result; with ``one`` a single value each)."""
    from nqm.schedules import SYNTAX

    many = {} if one else {"nargs": "+"}
    group.add_argument("--ema", default=None, metavar="γ", **many,
                       help=("the iterate average's rate" if one else "iterate averaging's rates") + " γ in [0, 1): "
                       "ŵ ← γ ŵ + (1 − γ) w, T and the status read on ŵ (default: none)")
    group.add_argument("--schedule", default=None, metavar="SPEC", **many,
                       help=("a learning-rate schedule" if one else "learning-rate schedules") + f" multiplying lr: {SYNTAX} "
                       "(default: none, a constant lr)")


def choices_from(args) -> dict:
    """``ema=`` and ``schedule=`` of :func:`choices`' flags (left out where not given)."""
    ema, schedule = getattr(args, "ema", None), getattr(args, "schedule", None)
    out = {}
    if ema is not None:
        try:
            out["ema"] = joined(ema) if isinstance(ema, list) else joined([ema])[0]
        except NqmError as exc:
            raise NqmError(f"--ema: {exc}") from None
    if schedule is not None:
        out["schedule"] = schedule
    return out


def batch_sizes(args) -> list | None:
    """``--batch-size`` as numbers, a value within 1e-9 of an integer taken as that integer (what a
    ``geom:1:64:7`` range means); ``None`` when it was not given."""
    import numpy as np

    given = joined(getattr(args, "batch_size", None))
    near = lambda x: np.isfinite(x) and abs(x - round(x)) <= 1e-9 * max(1.0, abs(x))
    return None if given is None else [round(x) if near(x) else x for x in given]


def delays(args, default=(0,)) -> list:
    """``--delay`` (constants) and ``--delay-dist`` (processes) as one list for the delay dimension
    (``default`` when neither is given)."""
    processes = getattr(args, "delay_dist", None) or []
    return [*(joined(args.delay) or ([] if processes else list(default))), *processes]


def method(parser, grid_group) -> None:
    """``--method`` (every registered name), each family's swept hyperparameters (in
    ``grid_group``) and its options, read off the registry: a new family needs no edit here."""
    from nqm.optimizers import methods
    from nqm.optimizers.base import hyperparameters
    from nqm.grids import all_hyper_dims
    from nqm.sweeps import sweep

    parser.add_argument("--method", choices=methods(), default=default_of(sweep, "method"), help="optimizer")
    for name in all_hyper_dims():
        _hyper_flag(grid_group, name, methods(), _also_option(name))
    method_option_flags(parser, skip=all_hyper_dims())


def _hyper_flag(grid_group, name: str, among, note: str = "") -> None:
    """The value-list flag of the hyperparameter ``name`` of the methods ``among`` that have it."""
    from nqm.optimizers.base import hyperparameters

    owners = [m for m in among if name in hyperparameters(m)._fields]
    defaults = {m: hyperparameters(m)._field_defaults.get(name) for m in owners}
    shown = "" if None in defaults.values() else f" (default: {defaults[owners[0]]:g})" \
        if len(set(defaults.values())) == 1 else f" (default: {', '.join(f'{m} {v:g}' for m, v in defaults.items())})"
    grid_group.add_argument("--" + name.replace("_", "-"), nargs="+", default=None, metavar="V",
                            help=f"{', '.join(owners)} hyperparameter{shown}{note}")


def _exact_own() -> tuple[list, tuple, tuple]:
    """The exact mode's methods (registry names, precond's p aside: --power), their own
    hyperparameters beyond lr and momentum and their options but dampening (its own flag)."""
    from nqm import expected
    from nqm.conventions import family
    from nqm.expected.reduced import PRECOND
    from nqm.grids import hyper_dims
    from nqm.optimizers.base import options

    among = list(dict.fromkeys(family(m) for m in expected.methods() if m != PRECOND))
    hyper = tuple(dict.fromkeys(f for m in among for f in hyper_dims(m)))
    named = tuple(dict.fromkeys(o for m in among for o in options(m) if o != "dampening" and o not in hyper))
    return among, hyper, named


def exact_method(parser, grid_group) -> None:
    """The own hyperparameters (value lists, in ``grid_group``) and options of the exact mode's
    methods, read off the registry: a linear method registered in a study's module (``--import``)
    needs no edit here."""
    from nqm.optimizers.base import options

    among, hyper, named = _exact_own()
    free = lambda name: "--" + name.replace("_", "-") not in parser._option_string_actions  # noqa: E731
    hyper, named = tuple(filter(free, hyper)), tuple(filter(free, named))  # none takes the command's own flags
    for name in hyper:
        _hyper_flag(grid_group, name, among)
    method_option_flags(parser, skip=[o for m in among for o in options(m) if o not in named], among=among)
    parser.set_defaults(exact_own=(hyper, named))


def exact_own(args) -> dict:
    """The exact mode's own hyperparameters (value lists) and options given on the command line
    (:func:`exact_method`); one that the method does not take is refused by the exact mode."""
    hyper, named = args.exact_own
    given = {n: joined(getattr(args, n)) for n in hyper} | {n: getattr(args, n) for n in named}
    return {k: v for k, v in given.items() if v is not None}


def _also_option(name: str) -> str:
    """The note on a hyperparameter's flag that is also some method's option (adam's and ab's --eps)."""
    from nqm.optimizers import methods
    from nqm.optimizers.base import documentation, options

    owners = [m for m in methods() if name in options(m)]
    if not owners:
        return ""
    values = ", ".join(f"{m} {options(m)[name].default}" for m in owners)
    return f"; one value as an option of {', '.join(owners)} ({values}): {documentation(owners[0])[name]}"


def method_option_flags(parser, skip=(), among=None) -> None:
    """Each family's options (``--dampening``, ``--group``, …), read off the registry (but those in
    ``skip``: a flag the grid group already has, as a hyperparameter of another method; ``among``:
    the methods whose options to offer, default every one)."""
    from nqm.optimizers import methods
    from nqm.optimizers.base import documentation, options

    seen = {}
    for name_ in methods() if among is None else among:
        docs = documentation(name_)
        for name, parameter in options(name_).items():
            if name not in skip:
                seen.setdefault(name, (parameter, docs.get(name, ""), []))[2].append(name_)
    if not seen:
        return
    group = parser.add_argument_group("method options (each applies to the methods named)")
    for name, (parameter, doc, owners) in seen.items():
        flags = ["--" + name.replace("_", "-"), *_ALIASES.get(name, ())]
        default = parameter.default
        # The family's default goes in the text: the option's own default is None ("not given"),
        # so that an option given to a method without it is an error rather than ignored.
        shown = "" if isinstance(default, bool) else f"; default: {'unset' if default is None else default}"
        text = f"{doc} [{', '.join(owners)}{shown}]".replace("``", "").replace("%", "%%").strip()
        if isinstance(default, bool):
            group.add_argument(*flags, dest=name, action="store_true", default=None, help=text)
        else:
            annotation = str(parameter.annotation)
            kind = type(default) if isinstance(default, (int, float)) else (
                float if "float" in annotation else int if "int" in annotation else str)
            group.add_argument(*flags, dest=name, type=kind, default=None, metavar=name.upper(), help=text)


def method_options(args, grids: bool = True) -> dict:
    """The method's options and (``grids``) hyperparameter grids given on the command line."""
    from nqm.optimizers import methods
    from nqm.optimizers.base import options
    from nqm.grids import all_hyper_dims

    hyper = all_hyper_dims()  # their flags are the grid's (or the box's), even where also an option
    given = {n: getattr(args, n) for m in methods() for n in options(m) if n not in hyper}
    if grids:
        given.update({n: joined(getattr(args, n)) for n in hyper})
        # A flag that is a hyperparameter of some methods and an option of this one (ab's --eps): one value.
        own = options(args.method) if args.method in methods() else {}
        for n in (n for n in hyper if n in own and given.get(n) is not None):
            if len(given[n]) != 1:
                raise NqmError(f"--{n.replace('_', '-')} is an option of {args.method}: give one value")
            kind = type(own[n].default) if isinstance(own[n].default, (int, float)) else float
            given[n] = kind(given[n][0])
    return {k: v for k, v in given.items() if v is not None}


def problem(parser, default: str | None = None) -> None:
    """The quadratic: ``--spectrum``, ``--dim``, ``--lo``/``--hi``, ``--eigenvalues``, ``--rotate``
    (``default``: what a command uses when none is given, if not zhang's)."""
    from nqm.problem import loguniform, zhang

    group = parser.add_argument_group("problem" + (f" (default: {default})" if default else ""))
    group.add_argument("--spectrum", choices=("zhang", "loguniform"), default="zhang", help="eigenvalue spectrum")
    group.add_argument("--dim", type=int, default=None,
                       help=f"N (default: {default_of(zhang, 'dim')}; not with --eigenvalues)")
    for bound, what in (("lo", "smallest"), ("hi", "largest")):
        group.add_argument(f"--{bound}", type=float, default=None,
                           help=f"{what} eigenvalue of loguniform (default: {default_of(loguniform, bound):g})")
    group.add_argument("--eigenvalues", nargs="+", type=float, default=None, metavar="E", help="explicit spectrum")
    group.add_argument("--rotate", type=int, default=None, metavar="SEED",
                       help="random rotation of H (default: no rotation, axis-aligned)")


def problem_given(args) -> bool:
    """Whether any option of the problem group was given."""
    return any(getattr(args, k) is not None for k in ("dim", "lo", "hi", "eigenvalues", "rotate")) or \
        args.spectrum != "zhang"


def problem_from(args):
    """The :class:`nqm.problem.Problem` the problem group describes."""
    import numpy as np

    from nqm.problem import explicit, loguniform, zhang

    if args.eigenvalues is not None and (args.dim is not None or args.spectrum != "zhang"):
        raise NqmError("--eigenvalues gives the whole spectrum: drop --dim and --spectrum")
    if args.spectrum != "loguniform" and (args.lo is not None or args.hi is not None):
        raise NqmError("--lo and --hi set the loguniform spectrum: add --spectrum loguniform or drop them")
    if args.rotate is not None and args.rotate < 0:
        raise NqmError(f"--rotate takes a seed >= 0, got {args.rotate}")
    dim = validate.count(default_of(zhang, "dim") if args.dim is None else args.dim, "--dim", high=validate.BOUNDS["dim"])
    if args.eigenvalues is not None:
        lam = np.asarray(args.eigenvalues)
        if not (np.isfinite(lam).all() and (lam > 0).all()):
            raise NqmError("--eigenvalues must be finite numbers > 0")
        p = explicit(lam)
    elif args.spectrum == "loguniform":
        p = loguniform(dim, **{k: getattr(args, k) for k in ("lo", "hi") if getattr(args, k) is not None})
    else:
        p = zhang(dim)
    return p.with_rotation(args.rotate)


def run_settings(parser, *names: str, help: dict | None = None):
    """Options for the named fields of :class:`nqm.engine.RunConfig`, with its defaults (``help``:
    a command's own wording of some); returns the group, for a command's own run options."""
    from nqm.engine import RunConfig

    defaults, texts = RunConfig(), {name: text for name, (_, text) in _RUN.items()} | (help or {})
    group = parser.add_argument_group("run")
    for name in names:
        kind, default = _RUN[name][0], getattr(defaults, name)
        flag = "--" + name.replace("_", "-")
        if name == "progress":
            group.add_argument("--no-progress", dest=name, action="store_false", default=default, help=texts[name])
        elif kind is bool:
            group.add_argument(flag, action="store_true", default=default, help=texts[name])
        elif name == "memory_budget":
            group.add_argument(flag, type=float, default=None if default is None else default / GIB, metavar="GIB",
                               help=texts[name])
        else:
            group.add_argument(flag, type=kind, default=default, help=texts[name])
    return group


def settings(args) -> dict:
    """The run settings of ``args`` as :class:`nqm.engine.RunConfig` fields (memory in bytes)."""
    from nqm.engine import RunConfig

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig) if hasattr(args, f.name)}
    if given.get("memory_budget") is not None:
        given["memory_budget"] = positive(given["memory_budget"], "--memory-budget") * GIB
    return given


def outputs(parser, out: str, *, required: bool = True, plot: str | None = None, threshold: str | None = None):
    """``--out`` (what it holds), and if described ``--plot FIGURE`` and ``--threshold``."""
    parser.add_argument("--out", type=ResultFile, required=required, default=None, help=out + " (netCDF, .nc)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing --out file other than by a re-run of the same computation (a result "
                             "of other settings or of another kind, or a file nqm did not write)"
                             + (", and a --plot figure nqm did not draw" if plot else "") + "; never done without it")
    if plot:
        parser.add_argument("--plot", type=OutputFile, default=None, metavar="FIGURE", help=plot)
    if threshold:
        threshold_option(parser, threshold)


THRESHOLD_HELP = ("overlay the stability threshold on the heatmaps: without TABLE, derived from the method's own "
                  "update (linear methods only); or the table of `nqm threshold ... --out TABLE` (e.g. --simulate)")


def threshold_option(parser, help: str = THRESHOLD_HELP) -> None:
    """``--threshold [TABLE]``: the derived threshold of the result's own method, or a table's."""
    parser.add_argument("--threshold", nargs="?", const=True, default=None, type=InputFile, metavar="TABLE",
                        help=help)
