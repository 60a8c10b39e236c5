"""Every public function and class of the public API has a docstring, and
every public function with parameters has an ``Args:`` section naming each
of them (issue 27, point 4)."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

MODULES = [
    "nqm", "nqm.engine", "nqm.optimizers", "nqm.optimizers.base", "nqm.optimizers.optax_bridge",
    "nqm.expected", "nqm.search", "nqm.search.answers",
    "nqm.thresholds.polynomials", "nqm.thresholds.derived",
    "nqm.search.simulated", "nqm.thresholds.agreement", "nqm.delays", "nqm.pmfs",
    "nqm.diagnostics", "nqm.sweeps", "nqm.jobs", "nqm.io", "nqm.results",
    "nqm.status", "nqm.summary", "nqm.settling", "nqm.plots.heatmap",
    "nqm.plots.trace", "nqm.plots.stability", "nqm.problem", "nqm.config",
    "nqm.conventions", "nqm.devices", "nqm.machine", "nqm.validate",
]

# Modules under their own ``xfail(strict=True)`` until their docstrings are
# written; empty when the whole API is documented.
UNFINISHED: dict[str, str] = {}


def public_objects(module_name):
    """The public functions and classes of a module, by name.

    Args:
        module_name: the dotted name of the module.

    Returns:
        ``(name, object)`` pairs: the module's ``__all__`` when it has one,
        otherwise the functions and classes defined in it whose names do not
        start with an underscore. Constants are left out.
    """
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name, obj in vars(module).items()
                 if not name.startswith("_")
                 and (inspect.isfunction(obj) or inspect.isclass(obj))
                 and obj.__module__ == module_name]
    out = []
    for name in names:
        obj = getattr(module, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            out.append((name, obj))
    return out


def args_section(doc):
    """The text of a docstring's ``Args:`` section, or ``None``.

    Args:
        doc: the cleaned docstring (``inspect.getdoc``).

    Returns:
        The lines after ``Args:`` up to the next section heading at the same
        indentation (or the end), joined by newlines.
    """
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Args:":
            indent = len(line) - len(line.lstrip())
            body = []
            for later in lines[i + 1:]:
                stripped = later.strip()
                if (stripped and len(later) - len(later.lstrip()) <= indent):
                    break
                body.append(later)
            return "\n".join(body)
    return None


def documented_names(section):
    """The parameter names an ``Args:`` section describes.

    Args:
        section: the text of the section, from :func:`args_section`.

    Returns:
        The set of names given before a colon at the start of an entry;
        ``a, b: ...`` names both, ``**options:`` names ``options``.
    """
    names = set()
    for match in re.finditer(r"^\s*([*\w][*\w ,]*?)\s*(?:\([^)]*\))?:",
                             section, re.MULTILINE):
        for part in match.group(1).split(","):
            names.add(part.strip().lstrip("*"))
    return names


def parameters(func):
    """The parameter names of a function a docstring must describe.

    Args:
        func: the function.

    Returns:
        Its parameter names, without ``self``/``cls`` or stars.
    """
    return [name for name in inspect.signature(func).parameters
            if name not in ("self", "cls")]


def written_docstring(cls):
    """Whether a class has a docstring of its own.

    Args:
        cls: the class.

    Returns:
        ``False`` when it has none, inherits one, or has only the ``Name(field, …)`` line that
        ``NamedTuple`` and ``dataclass`` generate.
    """
    doc = vars(cls).get("__doc__")
    return bool(doc) and not doc.startswith(f"{cls.__name__}(")


def problems(module_name):
    """What a module's public API lacks.

    Args:
        module_name: the dotted name of the module.

    Returns:
        One line per missing docstring, missing ``Args:`` section or
        undocumented parameter.
    """
    out = []
    for name, obj in public_objects(module_name):
        doc = inspect.getdoc(obj) if obj.__doc__ else None
        if inspect.isclass(obj):
            if not written_docstring(obj):
                out.append(f"{name}: no docstring")
            continue
        if not doc:
            out.append(f"{name}: no docstring")
            continue
        wanted = parameters(obj)
        if not wanted:
            continue
        section = args_section(doc)
        if section is None:
            out.append(f"{name}: no Args: section ({', '.join(wanted)})")
            continue
        missing = [p for p in wanted if p not in documented_names(section)]
        if missing:
            out.append(f"{name}: Args: misses {', '.join(missing)}")
    return out


@pytest.mark.parametrize("module_name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True,
                                               reason=UNFINISHED[name]))
    if name in UNFINISHED else name
    for name in MODULES])
def test_public_api_documented(module_name):
    """Every public function/class of the module has a docstring, and every
    public function with parameters an ``Args:`` section naming them all."""
    found = problems(module_name)
    assert not found, (f"{module_name}: {len(found)} public definitions "
                       "undocumented:\n  " + "\n  ".join(found))


def test_modules_have_public_objects():
    """The enumeration finds something to check in every listed module."""
    empty = [name for name in MODULES if not public_objects(name)]
    assert not empty, f"no public functions or classes found in {empty}"
