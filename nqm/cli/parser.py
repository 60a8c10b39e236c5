"""The parser every command shares: one-line errors, each option at most once, each default shown
once, and value lists (numbers, ``geom:START:STOP:NUM``, ``lin:START:STOP:NUM``)."""

from __future__ import annotations

import argparse
import re

import numpy as np

from nqm.errors import NqmError
from nqm.validate import MAX_VALUES, did_you_mean, exact

RANGES = "numbers, geom:START:STOP:NUM or lin:START:STOP:NUM"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one :class:`NqmError` line, whose options may be given
    once only, and whose help shows each default once (:class:`HelpFormatter`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        # Every option of this parser and of its groups goes through these (the groups share the registry).
        for name, action in ((None, _StoreOnce), ("store", _StoreOnce), ("store_true", _StoreTrueOnce),
                             ("store_false", _StoreFalseOnce)):
            self.register("action", name, action)

    def error(self, message):  # one line instead of usage + message
        raise NqmError(f"{message}{self._suggestion(message)} (see '{self.prog} --help')")

    def _suggestion(self, message: str) -> str:
        """What a mistyped choice or option was probably meant to be (``"; did you mean …?"``)."""
        if match := re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message):
            return did_you_mean(match.group(1), re.findall(r"'([^']*)'", match.group(2)))
        if match := re.match(r"unrecognized arguments: (.*)", message):
            # The command's parser is a subparser here: its options are what was meant.
            parsers = [self] + [p for a in self._actions if isinstance(a, argparse._SubParsersAction)
                                for p in a.choices.values()]
            options = [s for p in parsers for s in p._option_string_actions]
            return "".join(did_you_mean(t.split("=")[0], options) for t in match.group(1).split() if t.startswith("--"))
        return ""


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` from the option's default, the one place a default is written. A
    ``None`` default (not given: the command decides, and the help says how) and a flag's ``False``
    or ``True`` are not shown."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if action.option_strings and default is not None and not isinstance(default, bool) \
                and default is not argparse.SUPPRESS:
            shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
            text += f" (default: {shown.replace('%', '%%')})"
        return text


class _Once:
    """Refuses an option given a second time (argparse would silently keep the last)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_options", set())
        if self.dest in given:
            also = " with all its values" if self.nargs in ("+", "*") else ""
            raise argparse.ArgumentError(self, f"given more than once; give it once{also}")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class _StoreOnce(_Once, argparse._StoreAction):
    pass


class _StoreTrueOnce(_Once, argparse._StoreTrueAction):
    pass


class _StoreFalseOnce(_Once, argparse._StoreFalseAction):
    pass


class OutputFile(str):
    """A path a command writes; :func:`nqm.cli.output.distinct_files` checks it names no other file
    of the command (use as an option's ``type``)."""


class ResultFile(OutputFile):
    """A netCDF result a command writes (``--out``): :func:`nqm.cli.output.check_results` refuses
    another kind of file, and an existing file that is not a result of nqm unless ``--force``."""


class InputFile(str):
    """A path a command reads (use as an option's ``type``)."""


def values(text: str) -> list[float]:
    """One CLI value: a number, ``geom:START:STOP:NUM`` or ``lin:START:STOP:NUM``."""
    kind, _, rest = text.partition(":")
    if not rest:
        if re.fullmatch(r"[+-]?\d+", text.strip()):  # an integer the float may not hold exactly
            exact(int(text), "value")
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


def joined(items: list[str] | None) -> list[float] | None:
    """The values of an option's items (``None``: the option was not given)."""
    return None if items is None else [x for item in items for x in values(item)]


def positive(value: float, name: str) -> float:
    """A number > 0 (finite), or one error line."""
    if not (np.isfinite(value) and value > 0):
        raise NqmError(f"{name} must be a number > 0, got {value}")
    return value

