"""Reading and writing files: every file nqm writes (results, checkpoints, figures, tables) goes
through one atomic writer, one writer at a time per file, and every saved array is checksummed
(no JAX needed to read)."""

from __future__ import annotations

import contextlib
import contextvars
import gc
import hashlib
import io
import os
import sys
import tempfile
import warnings

import numpy as np
import xarray as xr

from nqm.errors import NqmError
# What a file is, locks and seals live in nqm.files; their names are nqm.io's too.
from nqm.files import (FIGURE_MARK, SEAL, SEAL_SIZE, SEALED, check_writable, discard, drawn_by_nqm, figure_mark,
                       lock, lock_path, opened, sealed, unsealed, whole)
from nqm.results import check as check_result, index_delays, kind
from nqm.validate import BOUNDS, format_bytes

CHECKSUM = "nqm_checksum"  # the attribute holding the checksum of a saved result's arrays


def save(ds: xr.Dataset, path: str | os.PathLike) -> None:
    """Write a result atomically: a complete file appears at ``path`` or nothing changes.

    The file is serialised in memory first, so a full disk or a size limit surfaces as a one-line
    :class:`NqmError` from a plain write (never inside the HDF5 library), and the previous file is
    left byte-identical. It carries the checksum of its arrays (:func:`checksum`), which
    :func:`load` verifies. An overwritten file keeps its mode. Across several processes
    (``jax.distributed``) only process 0 writes.

    Args:
      ds: the result (an ``xarray.Dataset``) to write.
      path: the destination netCDF file.

    Returns:
      Nothing; the file holds ``ds`` (:func:`load` reads it back).

    Raises:
      NqmError: ``ds`` is not a dataset, is a result nqm's readers could not read (:func:`nqm.results.check`),
        or the file cannot be written.

    Examples:
      >>> import os, tempfile
      >>> import nqm
      >>> ds = nqm.sweep("sgdm", lr=[0.1, 0.5], momentum=0.5, problem=nqm.zhang(10), max_steps=500,
      ...                progress=False)
      >>> path = os.path.join(tempfile.mkdtemp(), "sweep.nc")
      >>> nqm.save(ds, path)
      >>> nqm.load(path).identical(ds)
      True
    """
    if not isinstance(ds, xr.Dataset):
        raise NqmError(f"save writes an xarray.Dataset (a result of nqm), got {type(ds).__name__}")
    try:
        check_result(ds)  # what nqm's readers cannot read is refused here, not by them later
    except NqmError as exc:
        raise NqmError(f"cannot save {os.fspath(path)}: {exc}") from None
    jax = sys.modules.get("jax")  # a run across processes has loaded JAX; without it this is process 0
    if jax is not None and jax.process_index() != 0:
        return
    check = _BEFORE_SAVE.get()
    if check is not None:
        check(path, ds)
    data = to_bytes(ds)
    if len(data) > BOUNDS["file_bytes"]:
        raise NqmError(f"cannot write {os.fspath(path)}: {format_bytes(len(data))} is more than the "
                       f"{format_bytes(BOUNDS['file_bytes'])} a result may have (nqm.load refuses larger files); "
                       "split the result")
    write_bytes(path, data)


_BEFORE_SAVE = contextvars.ContextVar("nqm_before_save", default=None)


@contextlib.contextmanager
def before_save(check):
    """While inside, :func:`save` calls ``check(path, ds)`` before it writes: where the command
    line applies its rule for replacing a result (what ``check`` raises is raised by ``save``).

    Args:
      check: a function of the path and the dataset.

    Returns:
      A context manager.
    """
    token = _BEFORE_SAVE.set(check)
    try:
        yield
    finally:
        _BEFORE_SAVE.reset(token)


def to_bytes(ds: xr.Dataset, compress: bool = False) -> bytes:
    """``ds`` as the bytes of a netCDF file carrying its :data:`CHECKSUM`, sealed (:data:`SEAL`)
    (``compress``: gzip its variables, as a rescued result is).

    Args:
      ds: the dataset to serialise.
      compress: gzip the variables that have dimensions.

    Returns:
      The netCDF file's bytes (h5netcdf engine).
    """
    marked = ds.copy(deep=False)
    marked.attrs = {**ds.attrs, CHECKSUM: checksum(ds), SEALED: "the SHA-256 of this file's bytes follows them"}
    encoding = {name: {"zlib": True} for name, var in ds.data_vars.items() if var.ndim} if compress else None
    buffer = io.BytesIO()
    marked.to_netcdf(buffer, engine="h5netcdf", encoding=encoding)
    return sealed(buffer.getvalue())


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`).

    Args:
      path: the destination file.
      data: the complete content.
    """
    with atomic_write(path, "wb") as f:
        f.write(data)


def save_figure(fig, path: str | os.PathLike, *, dpi: float = 150, **savefig_kwargs) -> None:
    """Write a matplotlib figure atomically: it is rendered in memory (format from the file's
    extension), then written as one file, so a full disk or a size limit leaves the previous
    figure byte-identical and says so in one line. The file carries :data:`FIGURE_MARK` where its
    format has metadata (PNG, PDF, SVG, PS/EPS, JPEG, GIF, TIFF).

    Args:
      fig: the matplotlib figure.
      path: the destination; its extension picks the format.
      dpi: the resolution, dots per inch.
      savefig_kwargs: further arguments of ``Figure.savefig``.

    Raises:
      NqmError: the figure cannot be rendered or written.
    """
    path = os.fspath(path)
    form = os.path.splitext(path)[1].lstrip(".").lower() or None
    marked = {**figure_mark(form), **savefig_kwargs}
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=form, dpi=dpi, **marked)
    except (OSError, ValueError) as exc:
        raise NqmError(f"cannot write figure {path}: {exc}") from None
    write_bytes(path, buffer.getvalue())


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb"):
    """A file object whose content replaces ``path`` only once it is complete and on disk (keeping
    the mode of the file it replaces); a failed write is a one-line :class:`NqmError` and changes
    nothing. Every file nqm writes goes through here.

    Args:
      path: the file to replace (or create).
      mode: the mode of the temporary file, ``"wb"`` or ``"w"``.

    Returns:
      A context manager yielding the open temporary file.

    Raises:
      NqmError: the file cannot be written.
    """
    path = os.fspath(path)
    check_writable(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".nqm-")
    except OSError as exc:
        raise NqmError(f"cannot write {path}: {exc.strerror or exc}; the previous file, if any, is unchanged") from None
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # on disk before it replaces anything
        if os.path.exists(path):
            mode_bits = os.stat(path).st_mode & 0o7777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode_bits = 0o666 & ~umask  # mkstemp makes private files; a result is an ordinary one
        os.chmod(tmp, mode_bits)
        os.replace(tmp, path)
    except OSError as exc:
        raise NqmError(f"cannot write {path}: {exc.strerror or exc}; the previous file, if any, is unchanged") from None
    finally:
        discard(tmp)


def load(path: str | os.PathLike) -> xr.Dataset:
    """Read a result written by :func:`save` (fully into memory; the file is closed), its
    checksum verified: a damaged file is one error line, never wrong numbers. Every kind of result
    nqm writes is read (:data:`nqm.results.KINDS`: a sweep, a search's points, a scaling, a trace,
    a threshold table, a transfer comparison; :func:`nqm.results.kind` tells which).

    Args:
      path: the result file (netCDF).

    Returns:
      The result, its delays indexed (:func:`nqm.results.index_delays`).

    Raises:
      NqmError: the file is missing, unreadable, damaged or no result of nqm.

    Examples:
      A damaged file is an error, never wrong numbers:

      >>> import os, tempfile
      >>> import nqm
      >>> path = os.path.join(tempfile.mkdtemp(), "sweep.nc")
      >>> nqm.save(nqm.sweep("sgdm", lr=0.5, momentum=0.5, problem=nqm.zhang(10), max_steps=500,
      ...                    progress=False), path)
      >>> int(nqm.load(path).steps.squeeze())
      13
      >>> with open(path, "r+b") as f:
      ...     _ = f.seek(os.path.getsize(path) // 2)
      ...     _ = f.write(b"damage")
      >>> nqm.load(path)
      Traceback (most recent call last):
          ...
      nqm.errors.NqmError: ...
    """
    ds = load_dataset(path)
    if kind(ds) is None:
        held = ", ".join(map(str, ds.data_vars)) or "no variables"
        raise NqmError(f"{os.fspath(path)} is not an nqm result (it holds {held[:80]}); nqm.io.load_dataset reads any "
                       "netCDF file nqm wrote, a figure's data included")
    return index_delays(ds)


def load_dataset(path: str | os.PathLike) -> xr.Dataset:
    """Read any netCDF file written by :func:`save` (a result, a figure's data, a threshold table)
    fully into memory, its checksum verified.

    What is not a regular file (a directory, a FIFO, a device, a symbolic link loop) is refused by
    what it is, without reading from it; a file larger than ``BOUNDS["file_bytes"]``, or one whose
    first and last bytes show it cut short or not a netCDF file, is refused before the rest is read.

    Args:
      path: the netCDF file.

    Returns:
      The dataset, without its checksum attribute.

    Raises:
      NqmError: the path is missing or not a regular file, the file too large, unreadable or damaged.
    """
    path = os.fspath(path)
    fd = opened(path)
    try:
        size = os.fstat(fd).st_size
        if size > BOUNDS["file_bytes"]:
            largest = format_bytes(BOUNDS["file_bytes"])
            raise NqmError(f"cannot read {path}: {format_bytes(size)} is more than the {largest} of the largest result "
                           "nqm writes; it is none of nqm's")
        whole(lambda offset, n: os.pread(fd, n, offset), size, path)
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise NqmError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return load_bytes(raw, path)


def load_bytes(raw: bytes, name="the data") -> xr.Dataset:
    """A dataset from the bytes :func:`to_bytes` made (or a netCDF file's), its seal and checksum
    verified before and after parsing.

    Args:
      raw: the bytes.
      name: what they came from, for the error line.

    Returns:
      The dataset, in memory, without its checksum attribute.

    Raises:
      NqmError: the bytes are damaged (cut short, their seal cut off) or no netCDF file.
    """
    whole(lambda offset, n: raw[offset:offset + n], len(raw), name)
    body = unsealed(raw, name)  # damaged sealed bytes stop here, before any parser
    ds = _parsed(raw if body is None else body, name)
    if body is None and SEALED in ds.attrs:  # written with a seal that is gone: not a file from before seals
        raise NqmError(f"{name} is damaged: the seal saved at its end (its checksum) is missing or broken, as when "
                       "a file is cut short; write it again, or restore a copy")
    verify(ds, name)
    for attribute in (CHECKSUM, SEALED):  # properties of the file, not of the result: save writes fresh ones
        ds.attrs.pop(attribute, None)
    return ds


def _parsed(data: bytes, name) -> xr.Dataset:
    """The dataset in ``data``, or one error line. A file the HDF5 layer could not open leaves a
    half-made h5netcdf object whose finaliser fails ("Exception ignored in … File.close"): it is
    finalised here, its error silenced, and nothing else's."""
    hook = sys.unraisablehook

    def quiet(unraisable):
        if not getattr(unraisable.object, "__module__", "").startswith(("h5netcdf", "h5py")):
            hook(unraisable)

    failure = None
    sys.unraisablehook = quiet
    try:
        try:
            with warnings.catch_warnings():  # e.g. xarray's on a plain HDF5 file: the error line says it all
                warnings.simplefilter("ignore")
                with xr.open_dataset(io.BytesIO(data), engine="h5netcdf") as ds:
                    return ds.load()
        except Exception as exc:  # h5py/xarray raise many types for a broken file
            failure = type(exc).__name__
        gc.collect()  # the failed open's objects, unreachable now that the exception is gone
    finally:
        sys.unraisablehook = hook
    raise NqmError(f"cannot read {name}: not an nqm netCDF file ({failure})")


def verify(ds: xr.Dataset, path) -> None:
    """Refuse a result whose arrays do not match the checksum saved with them (a file written
    before checksums were, without the attribute, is read as it is).

    Args:
      ds: the dataset as read, with its :data:`CHECKSUM` attribute if any.
      path: the file it came from (for the message).

    Raises:
      NqmError: the arrays do not match the saved checksum.
    """
    saved = ds.attrs.get(CHECKSUM)
    if saved is not None and str(saved) != checksum(ds):
        raise NqmError(f"{path} is damaged: its arrays do not match the checksum saved with them; "
                       "write it again, or restore a copy")


def checksum(data: xr.Dataset | dict) -> str:
    """``sha256:…`` of every array of ``data``: a dataset's variables and coordinates (names,
    dimensions and values, in a form that survives a netCDF round trip: integers as int64, floats
    as float64, text as UTF-8), or a dict of arrays as they are (dtype and bytes, as ``.npz``
    keeps them).

    Args:
      data: a dataset, or a dict of name to array.

    Returns:
      ``"sha256:"`` followed by the hex digest.
    """
    digest = hashlib.sha256()
    if isinstance(data, xr.Dataset):
        arrays = {name: (var.dims, _portable(np.asarray(var.values))) for name, var in data.variables.items()}
    else:
        arrays = {name: (np.asarray(x).dtype.str, np.ascontiguousarray(x)) for name, x in data.items()}
    for name in sorted(arrays):
        label, values = arrays[name]
        raw = values.tobytes() if values.dtype.kind in "biufc" else "\x1f".join(map(str, values.ravel())).encode()
        digest.update(f"{name}\x1e{label}\x1e{values.shape}\x1e".encode() + raw + b"\x1d")
    return "sha256:" + digest.hexdigest()


def _portable(values: np.ndarray) -> np.ndarray:
    kind = values.dtype.kind
    portable = {"b": "<i8", "i": "<i8", "u": "<u8", "f": "<f8", "c": "<c16"}.get(kind)
    return np.ascontiguousarray(values.astype(portable, copy=False)) if portable else values


def json_plain(value):
    """numpy scalars and arrays as Python numbers and lists, NaN and ±inf as None (for JSON).

    Args:
      value: a value, possibly nested in dicts, lists, tuples or arrays.

    Returns:
      The same structure in plain Python types (dict keys as strings).
    """
    if isinstance(value, dict):
        return {str(k): json_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_plain(v) for v in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None  # JSON has no NaN: "no value"
    return value
