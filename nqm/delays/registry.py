"""The registry of delay families and the interface of a process (:mod:`nqm.delays`)."""

from __future__ import annotations

from typing import Callable, NamedTuple, Protocol

import numpy as np

from nqm.errors import NqmError

STREAM = 0x64656C61  # separates the delay stream from anything else drawn from the same seed


class History(NamedTuple):
    """What the engine keeps per cell to serve a schedule's delays.

    ``by_worker=False``: a ring of the last ``slots`` weights (``w_s`` in slot ``s mod slots``; every
    delay must be below ``slots``). ``by_worker=True``: one snapshot per worker (slot ``k`` holds what
    worker ``k`` fetched last; the current weights are kept apart)."""

    slots: int
    by_worker: bool = False


class Process(Protocol):
    """The interface of a delay process (see the module docstring): ``label``, ``mean``, ``workers``,
    ``pmf()``, ``schedule(seed, steps)`` and ``history(delays)``."""
    label: str
    mean: float
    workers: int

    def pmf(self) -> np.ndarray | None: ...

    def schedule(self, seed: int, steps: int) -> tuple[np.ndarray, np.ndarray]: ...

    def history(self, delays: np.ndarray) -> History: ...


class Family(NamedTuple):
    """A registered family: its name, syntax, one-line help, an example spec (the contract tests run
    it) and ``parse(rest) -> Process`` for the text after ``NAME:``."""

    name: str
    syntax: str
    help: str
    example: str
    parse: Callable[[str], Process]


_FAMILIES: dict[str, Family] = {}


def register(name: str, *, syntax: str, help: str, example: str):
    """Decorator: make ``parse(rest) -> Process`` the parser of specs ``NAME:rest``.

    Args:
      name: the family's name, the ``NAME`` of specs ``NAME:rest``.
      syntax: the spec syntax shown in help and errors (e.g. ``uniform:A:B``).
      help: a one-line description.
      example: a valid spec, run by the contract tests.

    Returns:
      The decorator; it returns the parser unchanged.
    """

    def deco(parse):
        _FAMILIES[name] = Family(name, syntax, help, example, parse)
        return parse

    return deco


def families() -> tuple[Family, ...]:
    """Every registered delay family, in registration order."""
    return tuple(_FAMILIES.values())


def syntax() -> str:
    """The spec syntax of every registered family, for help texts and error messages."""
    return "D, " + ", ".join(f.syntax for f in _FAMILIES.values())


def bad(family: str, rest: str):
    return NqmError(f"delay process {family}:{rest} is not of the form {_FAMILIES[family].syntax}")
