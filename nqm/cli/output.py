"""What commands write: distinct files, figures checked before any work, the sweep's closing line."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings

import numpy as np

from nqm.cli.parser import InputFile, OutputFile, ResultFile
from nqm.errors import NqmError, NqmWarning


def distinct_files(args: argparse.Namespace) -> None:
    """Refuse, before any work, two outputs that are one file, or an output that is an input.

    The files are the options typed :class:`~nqm.cli.parser.OutputFile` and
    :class:`~nqm.cli.parser.InputFile`; paths are compared resolved (``./x`` and ``x``, a symlink
    and its target, two hard links are one file).
    """
    named = []  # (label, path, is_output)
    for dest, value in vars(args).items():
        if isinstance(value, (InputFile, OutputFile)):
            output = isinstance(value, OutputFile)
            named.append(("--" + dest.replace("_", "-") if output else dest, os.fspath(value), output))
    for i, (label, path, output) in enumerate(named):
        for other, other_path, other_output in named[:i]:
            if (output or other_output) and _same_file(path, other_path):
                if output and other_output:
                    raise NqmError(f"{other} and {label} name the same file ({path}); give each output its own file")
                written, read = (label, other) if output else (other, label)
                raise NqmError(f"{written} would overwrite the input {read} ({path}); write to another file")


RESULT_SUFFIXES = (".nc", ".nc4")  # netCDF: what nqm writes, and reads back with nqm.load


def check_results(args: argparse.Namespace) -> None:
    """Refuse, before any work, a blank file name, a result output (:class:`~nqm.cli.parser.ResultFile`)
    that is not a netCDF file name, or that exists and is not a result of nqm (unless ``--force``): a command
    never writes a result over a figure, a table or anyone's notes."""
    for dest, value in vars(args).items():
        if isinstance(value, (InputFile, OutputFile)) and not os.fspath(value).strip():
            label = "--" + dest.replace("_", "-") if isinstance(value, OutputFile) else f"the {dest} file"
            raise NqmError(f"{label} is empty: give a file name")
        if not isinstance(value, ResultFile):
            continue
        label, path = "--" + dest.replace("_", "-"), os.fspath(value)
        if os.path.isdir(path):
            raise NqmError(f"cannot write {label} {path}: it is a directory; give a file name such as results.nc")
        suffix = os.path.splitext(os.path.realpath(path) if os.path.islink(path) else path)[1].lower()  # a link: its file
        if os.path.basename(path) in ("", ".", ".."):
            raise NqmError(f"{label} {path} names a folder: give a file name such as results.nc")
        if suffix not in RESULT_SUFFIXES:
            hint = (f"; to draw a figure, give --plot {path}" if suffix in (".png", ".pdf", ".svg", ".jpg", ".jpeg")
                    else "")
            raise NqmError(f"{label} {path}: a result is a netCDF file, name it *.nc{hint}")
        if os.path.isfile(path) and not getattr(args, "force", False) and not _is_result(path):
            raise NqmError(f"{label} {path} exists and is not a result of nqm: choose another name, or give --force "
                           "to overwrite it")


def _is_result(path: str) -> bool:
    """Whether ``path`` holds a result nqm wrote (its checksum attribute), read without loading it."""
    import h5py

    from nqm.io import CHECKSUM

    try:
        with h5py.File(path, "r") as f:
            return CHECKSUM in f.attrs
    except (OSError, ValueError):
        return False


def _same_file(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist yet
        return False


def check_figure(path: str | None, threshold: bool = False, force: bool = False, label: str = "--plot") -> None:
    """A figure's path and format, checked before any work (``threshold``: an overlay is asked for):
    an existing file there is replaced only if nqm drew it (:func:`nqm.io.drawn_by_nqm`), or with
    ``force``."""
    if path is None:
        if threshold:
            raise NqmError("--threshold draws on the figure: give --plot FIGURE too")
        return
    threshold_overlay(threshold)  # a table is read and checked now, before any work
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backend_bases import FigureCanvasBase

    from nqm.io import check_writable, drawn_by_nqm

    check_writable(path)
    kind = os.path.splitext(path)[1].lstrip(".").lower()
    formats = FigureCanvasBase.get_supported_filetypes()
    if kind not in formats:
        raise NqmError(f"cannot write figure {path}: unknown format {kind!r}; use one of {', '.join(sorted(formats))}")
    if not force and os.path.isfile(path) and not drawn_by_nqm(path):
        raise NqmError(f"{label} {path} exists and is not a figure nqm drew: choose another name, or give --force "
                       "to overwrite it")


def threshold_overlay(threshold):
    """What ``--threshold`` asks to draw, the one reading of its value: ``False`` (not given),
    ``True`` (given alone: derived from the result's method), or the table ``TABLE`` names (read and
    checked: a Dataset, drawn and labelled as it is)."""
    if threshold is None or threshold is False:
        return False
    if threshold is True:
        return True
    from nqm.io import load_dataset

    if not os.path.lexists(threshold):
        raise NqmError(f"cannot read threshold table {threshold}: no such file (write one with nqm threshold --out)")
    table = load_dataset(threshold)  # what is there and no file is named by what it is
    if "threshold" not in table or "momentum" not in table.dims:
        raise NqmError("--threshold TABLE takes a table written by nqm threshold --out (a threshold over momentum)")
    return table


def sweep_of(path: str):
    """The sweep result in ``path``, what ``nqm summary`` and ``nqm plot`` read; a result of another
    kind is one line naming it."""
    from nqm.io import load
    from nqm.results import KINDS, kind

    ds = load(path)
    which = kind(ds)
    if which != "sweep":
        raise NqmError(f"{path} is {KINDS[which]}, not a sweep: nqm summary and nqm plot read the results of nqm sweep "
                       "and nqm expected")
    return ds


class Refused(Exception):
    """A result output that may not be replaced, found as the result is about to be written: one
    line and exit status 2 like an :class:`NqmError`, but not one, so that a command does not
    rescue its result elsewhere (nothing is written)."""


def replacing(path: str, new, *, what: str | None = None, force: bool = False) -> None:
    """Refuse, unless ``force``, to replace the result at ``path`` with ``new`` other than by a re-run
    of the same computation: a result of another kind (:func:`nqm.results.kind`) is never replaced,
    one of the same kind only if its grid and settings are the same (:func:`nqm.results.difference`).

    Args:
      path: the output.
      new: the result about to be written, or the empty one a computation fills (its identity).
      what: the kind of ``new`` where it holds the settings alone (a search's, as attributes).
      force: replace whatever is there.

    Raises:
      NqmError: ``path`` holds another computation's result, or one that cannot be read.
    """
    if force or not os.path.isfile(path):
        return
    import xarray as xr

    from nqm.io import load_dataset
    from nqm.results import KINDS, difference, kind

    again = "choose another name, or give --force to replace it"
    try:
        old = load_dataset(path)
    except NqmError as exc:
        raise NqmError(f"--out {path} cannot be read back ({str(exc).replace(f'{path} ', '')}): {again}") from None
    mine, held = what or kind(new), kind(old)
    if held != mine:
        raise NqmError(f"--out {path} holds {KINDS[held] if held else 'no result of nqm'}, not {KINDS[mine]}: {again}")
    if what is not None:  # a computation known by its settings alone: its grid is what it will find
        old = xr.Dataset(attrs={name: old.attrs.get(name) for name in new.attrs})
    why = difference(old, new, where="file")
    if why:
        raise NqmError(f"--out {path} holds another {KINDS[mine].split(' (')[0][2:]}: {why}; {again}")


@contextlib.contextmanager
def guarded(args: argparse.Namespace):
    """While a command runs, its result outputs (:class:`~nqm.cli.parser.ResultFile`) are replaced
    only as :func:`replacing` allows, checked as each is written (a sweep and a search check it
    before any work too); a refusal there is :class:`Refused`."""
    from nqm.io import before_save

    outputs = {os.path.realpath(value) for value in vars(args).values() if isinstance(value, ResultFile)}

    def check(path, ds):
        if os.path.realpath(os.fspath(path)) in outputs:
            try:
                replacing(os.fspath(path), ds, force=getattr(args, "force", False))
            except NqmError as exc:
                raise Refused(str(exc)) from None

    with before_save(check):
        yield


def locked(args: argparse.Namespace) -> contextlib.ExitStack:
    """Locks on every output of the command (:func:`nqm.io.lock`: by the file a path resolves to,
    so a second run through a symlink is refused too), each checked writable first."""
    from nqm.io import lock

    stack = contextlib.ExitStack()
    with stack:
        for value in vars(args).values():
            if isinstance(value, OutputFile):
                stack.enter_context(lock(value))
        return stack.pop_all()


def save_figure(fig, path: str) -> None:
    """Write a figure (150 dpi) atomically (:func:`nqm.io.save_figure`); a failed write is one
    line and leaves the previous figure as it was."""
    from nqm.io import save_figure

    save_figure(fig, path, dpi=150)
    print(f"wrote {path}")


def rescue(ds, out: str, checkpoint: str | None = None, what: str = "every computed cell") -> str:
    """Keep ``ds`` once ``out`` could not be written, trying in this order: a file beside ``out``,
    the ``checkpoint`` (which a second run of the same command resumes from), the temporary
    directory; returns one line saying where, or plainly that nothing could be saved. A rescued
    file is compressed when that makes it smaller (a file-size limit may still let it through)."""
    import tempfile

    from nqm import io

    data = min(io.to_bytes(ds), io.to_bytes(ds, compress=True), key=len)
    stem, ext = os.path.splitext(out)
    beside = f"{stem}.rescued{ext or '.nc'}"
    if os.path.lexists(beside):  # an earlier rescue is not overwritten
        beside = f"{stem}.rescued-{os.getpid()}{ext or '.nc'}"
    try:
        io.write_bytes(beside, data)
        return f"{what} is saved in {beside}: move it to {out} once that can be written"
    except NqmError:
        pass
    if checkpoint is not None:
        again = f"run the same command again once {out} can be written: it writes them without computing anything"
        if _holds(checkpoint, ds):
            return f"{what} is kept in the checkpoint {checkpoint}: {again}"
        try:
            io.write_bytes(checkpoint, data)
            return f"{what} is saved in the checkpoint {checkpoint}: {again}"
        except NqmError:
            pass
    elsewhere = os.path.join(tempfile.gettempdir(), f"nqm-rescued-{os.getpid()}-{os.path.basename(out)}")
    try:
        io.write_bytes(elsewhere, data)
        return f"{what} is saved in {elsewhere}: move it to {out} once that can be written"
    except NqmError:
        pass
    places = ", ".join(filter(None, (beside, checkpoint and f"the checkpoint {checkpoint}", elsewhere)))
    return f"nothing could be saved ({places} could not be written either): the computed results are lost"


def _holds(checkpoint: str, ds) -> bool:
    """Whether the checkpoint already holds every value of ``ds``."""
    from nqm.io import load

    try:
        saved = load(checkpoint).transpose(*ds.steps.dims)
        return all(np.array_equal(saved[v].values, ds[v].values, equal_nan=v == "loss") for v in ("steps", "status", "loss"))
    except (NqmError, KeyError, ValueError):
        return False


def plot_result(ds, path: str, threshold) -> None:
    """The heatmaps of a sweep (or expected) result, with the stability threshold if asked
    (``True``: derived for the result's method; a path: that threshold table's)."""
    import matplotlib

    matplotlib.use("Agg")
    from nqm.io import check_writable
    from nqm.plots.heatmap import plot_heatmaps

    check_writable(path)
    overlay = threshold_overlay(threshold)
    missing = [k for k in ("lam_max", "method") if overlay is not False and k not in ds.attrs]
    if missing:
        raise NqmError(f"--threshold needs the result's attribute(s) {', '.join(missing)} (the problem's largest "
                       "eigenvalue and the method), which nqm sweep writes; this file lacks them")
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always", NqmWarning)
        figure = plot_heatmaps(ds, threshold=overlay)
    for note in notes:
        if issubclass(note.category, NqmWarning):
            print(f"nqm: note: {note.message}", file=sys.stderr)
    save_figure(figure, path)


def report(ds, panels: int = 24) -> None:
    """The closing lines of a sweep: how many cells reached, diverged or ran out, then per panel its
    T* and fastest cell — the numbers its figure's titles give (the summary table, up to ``panels``
    rows; ``nqm summary`` prints any size)."""
    import numpy as np

    from nqm import summary
    from nqm.status import BUDGET, DIVERGED, REACHED, SKIPPED, TRANSIENT, UNDECIDED, plural

    status = ds.status.values
    converged = "reached the target" if ds.attrs.get("first_passage") else "settled below the target"
    transient = f"{int((status == TRANSIENT).sum()):,} transient (reached it, did not stay), " \
        if not ds.attrs.get("first_passage") else ""
    if (status == UNDECIDED).any():
        transient += (f"{int((status == UNDECIDED).sum()):,} undecided (reached it, no verdict within "
                      f"{ds.attrs.get('work_limit', '?'):g} × the budget: raise --work-limit), ")
    print(f"{plural(status.size, 'cell')}: {int((status == REACHED).sum()):,} {converged}, {transient}"
          f"{int((status == DIVERGED).sum()):,} diverged, {int((status == BUDGET).sum()):,} ran out of budget"
          + (f", {int((status == SKIPPED).sum()):,} not run (cannot settle)" if ds.attrs.get("skip_decided") else ""))
    table = summary.summarize(ds)
    rows = int(np.prod([table.sizes[d] for d in table.t_star.dims]))
    print(summary.format_table(table) if rows <= panels else
          f"{rows} panels: `nqm summary` prints each one's T* (1st percentile of T over its converged cells)")
