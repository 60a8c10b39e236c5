"""A study's own methods and delay processes on the command line: ``nqm COMMAND --import MODULE``
(repeatable) imports MODULE before the command builds its options and runs, and every command loads
the ``nqm.plugins`` entry points of installed packages (:mod:`importlib.metadata`) first.

Both must come before the parser: its ``--method`` choices and each method's hyperparameter flags
are read off the registry (:func:`nqm.optimizers.base.register`, :func:`nqm.delays.registry.register`),
so ``--import`` is read off ``argv`` by hand, before argparse sees it. A MODULE is a module name
importable from the working directory (which is put first on ``sys.path``, as a script's directory
is) or a path to a ``.py`` file (its directory put first, likewise). A module that cannot be found or
that raises ends the command with one line naming the module and the error (exit status 2).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback

from nqm.errors import NqmError

GROUP = "nqm.plugins"  # the entry point group an installed package registers its methods under
FLAG = "--import"
SHORTEST = "--im"  # argparse takes any unambiguous prefix of an option; no other option starts so
HELP = ("import MODULE before the command runs, e.g. a study's script that registers its own methods or delay "
        "processes: a module importable from the working directory, or a path to a .py file; repeatable "
        f"(installed packages' {GROUP} entry points are loaded by every command)")


def requested(argv: list[str]) -> tuple[list[str], list[str]]:
    """The modules ``argv`` asks to import (``--import M``, ``--import=M``, or a prefix of
    ``--import`` as argparse reads it), and ``argv`` without them (where the command is the first
    word that is not an option).

    Args:
      argv: the command line's words, after ``nqm``.

    Returns:
      ``(modules, rest)``.

    Raises:
      NqmError: ``--import`` without a module.
    """
    modules, rest, words = [], [], iter(argv)
    for word in words:
        if word == "--":  # what follows is no option
            rest += [word, *words]
            break
        name, equals, value = word.partition("=")
        if not (name.startswith(SHORTEST) and FLAG.startswith(name)):
            rest.append(word)
            continue
        if not equals:
            value = next(words, None)
        if not value or value.startswith("-"):
            raise NqmError(f"{FLAG} needs a module: {FLAG} MODULE (a module name or a path to a .py file)")
        modules.append(value)
    return modules, rest


def load(modules: list[str], *, plugins: bool) -> None:
    """Import the installed packages' plugins (with ``plugins``), then each of ``modules`` in order.

    Args:
      modules: the ``--import`` values.
      plugins: whether to load the :data:`GROUP` entry points (a command runs, or shows its help).

    Raises:
      NqmError: a module or plugin that cannot be found or that raises, in one line.
    """
    if plugins:
        for entry in _entry_points():
            package = f"package {entry.dist.name}, " if getattr(entry, "dist", None) is not None else ""
            where = f"the {GROUP} entry point {entry.name!r} ({package}{entry.value})"
            _guarded(entry.load, where, f"fix or uninstall {entry.dist.name if package else 'it'}")
    for module in modules:
        _guarded(lambda: _import(module), f"{FLAG} {module}", f"fix it or leave {FLAG} {module} out")


def check(parsed: list[str], loaded: list[str]) -> None:
    """Refuse a module the parser read that was not imported before it (an abbreviation of
    ``--import`` shorter than :data:`SHORTEST`, which argparse accepts where it is unambiguous)."""
    late = [m for m in parsed if m not in loaded]
    if late:
        raise NqmError(f"write {FLAG} {late[0]} in full: an abbreviation shorter than {SHORTEST} is read too late to "
                       "import the module before the command's options are built")


def _entry_points():
    from importlib.metadata import entry_points  # ~20 ms to scan the installed packages: only when a command runs

    return entry_points(group=GROUP)


def _import(module: str):
    """Import ``module``: a path to a ``.py`` file, or a name importable from the working directory."""
    if module.endswith(".py") or os.sep in module or "/" in module:
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise _NotFound(f"{FLAG} {module}: no such file; give a path to a .py file or a module name")
        name = os.path.splitext(os.path.basename(path))[0]
        if not name.isidentifier():
            raise _NotFound(f"{FLAG} {module}: {name!r} is not a module name; rename the file (letters, digits, _)")
        loaded = sys.modules.get(name)
        if loaded is not None:
            if os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
                return loaded  # given twice
            raise _NotFound(f"{FLAG} {module}: a module named {name!r} is already imported from elsewhere; rename "
                            "the file")
        _first_on_path(os.path.dirname(path))  # it imports its neighbours as a script would
        spec = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules[name]
            raise
        return loaded
    _first_on_path(os.getcwd())
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module != exc.name and not module.startswith(exc.name + "."):
            raise  # the module was found: something it imports was not
        raise _NotFound(f"{FLAG} {module}: no module named {module!r} in the working directory ({os.getcwd()}) or "
                        "the installed packages; run nqm where the module is, or give a path to its .py file") from None


def _first_on_path(directory: str) -> None:
    if directory not in sys.path:
        sys.path.insert(0, directory)
    importlib.invalidate_caches()  # a module written since the interpreter started is found


class _NotFound(Exception):
    """A module that is not there, with the line that says so."""


def _guarded(load, where: str, fix: str) -> None:
    """Run ``load``; anything it raises (but an interrupt) becomes one line naming ``where``, the
    error and the line of the module that raised it."""
    try:
        load()
    except _NotFound as exc:
        raise NqmError(str(exc)) from None
    except (KeyboardInterrupt, GeneratorExit):
        raise
    except BaseException as exc:  # SystemExit too: a module that calls sys.exit() ends no command silently
        frame = _culprit(traceback.extract_tb(exc.__traceback__))
        at = f" at {os.path.basename(frame.filename)}:{frame.lineno}" if frame else ""
        text = " ".join(str(exc).split()) or "(no message)"
        raise NqmError(f"{where} raised {type(exc).__name__}{at}: {text}; {fix}") from None


def _culprit(frames):
    """The innermost frame of the user's own code (not nqm's, the import machinery's, the standard
    library's or an installed package's), else the innermost outside the import machinery."""
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the nqm package
    installed = tuple(os.path.abspath(p) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    outside = [f for f in frames if "importlib" not in f.filename and f.filename != __file__]
    theirs = [f for f in outside if not os.path.abspath(f.filename).startswith((ours + os.sep, *installed))]
    return (theirs or outside or [None])[-1]
