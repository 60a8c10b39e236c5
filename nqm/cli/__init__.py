"""The ``nqm`` command (also ``python -m nqm``): ``nqm sweep | best | scaling | trace | expected | plot |
summary | threshold | bench | transfer``.

One module per command, each with ``NAME``, ``HELP``, ``add_parser(subparsers)`` (its options,
mostly the shared groups of :mod:`nqm.cli.groups`) and ``run(args) -> int | None``; a new command
is one module and one line in :data:`COMMANDS`. Only the command being run builds its options
(some read their defaults off modules that import JAX), so that ``nqm threshold``, ``nqm summary``,
``nqm plot`` and ``nqm --help`` start without JAX.

Rules every command follows: bad input ends with one line ``nqm: error: …`` on stderr and exit
status 2, never a traceback and before any work; an option given twice is refused; no two of a
command's files (outputs, or an output and an input) are the same file; every output is locked
(by the file it resolves to) while the command runs, and written atomically (:mod:`nqm.io`).
A module may define ``interrupted(args) -> str | None``: what an interrupted run leaves behind.
Every command takes ``--import MODULE`` and loads the ``nqm.plugins`` entry points before its
parser is built (:mod:`nqm.cli.plugins`), so a study's own methods are among its choices.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import sys
import threading
import warnings

from nqm.cli import bench, best, expected, output, plot, plugins, scaling, summary, sweep, threshold, trace, transfer
from nqm.cli.parser import Parser, values
from nqm.devices import use_every_core
from nqm.errors import NqmError

COMMANDS = (sweep, best, scaling, trace, expected, plot, summary, threshold, bench, transfer)

__all__ = ["COMMANDS", "build_parser", "command", "full_parser", "main", "values"]

CACHE = "NQM_COMPILATION_CACHE"  # where the command keeps JAX's compiled programs, or "off"


def build_parser(command: str | None = None) -> Parser:
    """The ``nqm`` parser, with the options of ``command`` (the others are listed by name only).

    Args:
        command: the command whose options to build (``None``: none of them, ``"*"``: all).

    Returns:
        The parser.
    """
    from nqm import __version__

    parser = Parser(prog="nqm", description="Noisy Quadratic Model under gradient delay: sweeps, traces, "
                    "summaries and stability thresholds. Value lists take numbers, geom:START:STOP:NUM or "
                    "lin:START:STOP:NUM.")
    parser.add_argument("--version", action="version", version=f"nqm {__version__}")
    # Read off argv before the parser is built (nqm.cli.plugins); here for the help and the namespace.
    parser.add_argument(plugins.FLAG, dest="imports", action="append", default=argparse.SUPPRESS, metavar="MODULE",
                        help=plugins.HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for module in COMMANDS:
        if module.NAME == command or command == "*":
            module.add_parser(subparsers)
            subparsers.choices[module.NAME].add_argument(plugins.FLAG, dest="imports", action="append",
                                                         default=argparse.SUPPRESS, metavar="MODULE", help=plugins.HELP)
        else:
            subparsers.add_parser(module.NAME, help=module.HELP)
    return parser


def full_parser() -> Parser:
    """The ``nqm`` parser with every command's options: the command-line reference of the
    documentation (``docs/cli.md``) is generated from it. The command itself builds only the options
    of the command being run (:func:`build_parser`).

    Returns:
        The parser.
    """
    return build_parser("*")


def command() -> int:
    """The ``nqm`` program (``nqm …``, ``python -m nqm …``): :func:`main` in a process that keeps
    its compiled programs in JAX's persistent compilation cache (:func:`use_compilation_cache`),
    and then exits with its status; a failure :func:`main` does not catch ends as usual."""
    use_compilation_cache()
    use_every_core()  # sweeps shard their cells over one device per core
    code = main()
    # Leave without the interpreter's teardown: once JAX is loaded it takes ~0.3 s (a tenth of a
    # short command) and does nothing for us. Every file is written and closed by now; what is
    # registered to run at exit still runs, and the output is flushed.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # the reader left, or the stream is closed
            pass
    os._exit(code)


def use_compilation_cache(environ=os.environ) -> str | None:
    """Turn JAX's persistent compilation cache on for this process and those it starts, before JAX
    is imported: a command run again loads what it compiled before instead of compiling it again
    (seconds, most of a short ``nqm expected``); results are the same bits. The directory:
    ``$NQM_COMPILATION_CACHE``, else ``$XDG_CACHE_HOME/nqm/jax`` (``~/.cache/nqm/jax``); ``off``
    turns it off, a ``JAX_COMPILATION_CACHE_DIR`` of the user's own wins, and a directory that
    cannot be written is left alone (the command compiles, as without). Returns the directory used."""
    if "JAX_COMPILATION_CACHE_DIR" in environ:
        return environ["JAX_COMPILATION_CACHE_DIR"]
    where = environ.get(CACHE)
    if where is not None and where.strip().lower() in ("off", "0", "no", "false", ""):
        return None
    try:
        where = where or os.path.join(environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nqm", "jax")
        os.makedirs(where, exist_ok=True)
    except OSError:
        return None
    if not os.access(where, os.W_OK | os.X_OK):
        return None
    environ["JAX_COMPILATION_CACHE_DIR"] = where
    environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.1")  # not every small kernel
    # An entry cut short (a file-size limit, a full disk) cannot be read back: JAX then compiles, as
    # without the cache, and warns; the cache is ours, not the user's, so its warnings are not shown.
    warnings.filterwarnings("ignore", message="Error (reading|writing) persistent compilation cache entry")
    return where


def main(argv=None) -> int:
    """Run ``nqm`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status. SIGTERM ends a
    command as Ctrl-C does: its locks removed, one line saying what it keeps."""
    with _terminate_as_interrupt():
        return _main(argv)


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM raises KeyboardInterrupt while a command runs (a sweep's checkpoint takes both signals
    over while it computes); the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv) -> int:
    module = args = None
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        modules, rest = plugins.requested(argv)
        command = next((a for a in rest if not a.startswith("-")), None)
        # Before the parser: a study's methods are among its --method choices and flags.
        plugins.load(modules, plugins=command is not None)
        args = build_parser(command).parse_args(argv)
        plugins.check(getattr(args, "imports", []), modules)
        module = next(m for m in COMMANDS if m.NAME == args.command)
        output.distinct_files(args)
        output.check_results(args)
        with output.locked(args), output.guarded(args):  # every file it writes, by the file it resolves to
            return module.run(args) or 0
    except (NqmError, output.Refused) as exc:
        print(f"nqm: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `nqm threshold ... | head`: the reader left, nothing is wrong
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        # A command that keeps something says what (the sweep and the search: their checkpoints).
        after = module.interrupted(args) if hasattr(module, "interrupted") and args is not None else None
        print("nqm: interrupted" + (f"; {after}" if after else ""), file=sys.stderr)
        return 130
