"""Reading and writing files: every file nqm writes (results, checkpoints, figures, tables) goes
through one atomic writer, one writer at a time per file, and every saved array is checksummed
(no JAX needed to read)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import stat
import sys
import tempfile
import warnings

import numpy as np
import xarray as xr

from nqm.errors import NqmError
from nqm.results import index_delays

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
      NqmError: ``ds`` is not a dataset, or the file cannot be written.

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
    jax = sys.modules.get("jax")  # a run across processes has loaded JAX; without it this is process 0
    if jax is not None and jax.process_index() != 0:
        return
    write_bytes(path, to_bytes(ds))


SEAL = b"\nnqm-sha256:"  # what save appends: the SHA-256 of every byte before it, checked before parsing
_SEAL_SIZE = len(SEAL) + 64 + 1  # the marker, 64 hex digits, a newline


def _sealed(data: bytes) -> bytes:
    """``data`` and its seal: netCDF readers ignore bytes past the file's end, :func:`load_dataset`
    checks them before any parser sees the file (a damaged header cannot steer the parser then)."""
    return data + SEAL + hashlib.sha256(data).hexdigest().encode() + b"\n"


def _unsealed(raw: bytes, path) -> bytes | None:
    """The bytes before a file's seal, verified; ``None`` for a file without one (written before
    seals were, or by another program)."""
    if len(raw) < _SEAL_SIZE or raw[-_SEAL_SIZE:-65] != SEAL:
        return None
    body, digest = raw[:-_SEAL_SIZE], raw[-65:-1]
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise NqmError(f"{path} is damaged: its bytes do not match the checksum saved with them; write it again, "
                       "or restore a copy")
    return body


def to_bytes(ds: xr.Dataset, compress: bool = False) -> bytes:
    """``ds`` as the bytes of a netCDF file carrying its :data:`CHECKSUM`, sealed (:data:`SEAL`)
    (``compress``: gzip its variables, as a rescued result is).

    Args:
      ds: the dataset to serialise.
      compress: gzip the variables that have dimensions.

    Returns:
      The netCDF file's bytes (h5netcdf engine).
    """
    sealed = ds.copy(deep=False)
    sealed.attrs = {**ds.attrs, CHECKSUM: checksum(ds)}
    encoding = {name: {"zlib": True} for name, var in ds.data_vars.items() if var.ndim} if compress else None
    buffer = io.BytesIO()
    sealed.to_netcdf(buffer, engine="h5netcdf", encoding=encoding)
    return _sealed(buffer.getvalue())


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
    figure byte-identical and says so in one line.

    Args:
      fig: the matplotlib figure.
      path: the destination; its extension picks the format.
      dpi: the resolution, dots per inch.
      savefig_kwargs: further arguments of ``Figure.savefig``.

    Raises:
      NqmError: the figure cannot be rendered or written.
    """
    path = os.fspath(path)
    kind = os.path.splitext(path)[1].lstrip(".").lower() or None
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=kind, dpi=dpi, **savefig_kwargs)
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


def discard(path: str | os.PathLike) -> bool:
    """Remove ``path`` if it is there; ``False`` (never an exception) if it cannot be removed.

    Args:
      path: the file to remove.

    Returns:
      ``True`` if it is gone (or was never there), ``False`` if removing failed.
    """
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def lock_path(path: str | os.PathLike) -> str:
    """The lock file of ``path``: beside the file it resolves to, so that every name of one file (a
    symlink, ``./x``, a symlinked directory) takes the same lock.

    Args:
      path: the file to lock (any name of it).

    Returns:
      The lock file's path, ``realpath(path) + ".lock"``.
    """
    return os.path.realpath(os.fspath(path)) + ".lock"


@contextlib.contextmanager
def lock(path: str | os.PathLike):
    """Hold an advisory lock on ``path`` (a ``.lock`` file beside the file it resolves to): one
    writer at a time, however the file is named.

    Args:
      path: the file about to be written.

    Returns:
      A context manager holding the lock while inside.

    Raises:
      NqmError: another process holds the lock, or the lock file cannot be written.
    """
    path = os.fspath(path)
    check_writable(path)
    target = lock_path(path)
    try:
        handle = open(target, "a+")
    except OSError as exc:
        raise NqmError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise NqmError(f"another nqm run is writing {path} (it holds {target}); "
                       "wait for it to finish or choose another output") from None
    try:
        yield
    finally:
        discard(target)  # while still holding it: a later run creates and locks a new file
        handle.close()


def load(path: str | os.PathLike) -> xr.Dataset:
    """Read a result written by :func:`save` (fully into memory; the file is closed), its
    checksum verified: a damaged file is one error line, never wrong numbers.

    Args:
      path: the result file (netCDF).

    Returns:
      The result, its delays indexed (:func:`nqm.results.index_delays`).

    Raises:
      NqmError: the file is missing, unreadable, damaged or not a sweep result.

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
    if "steps" not in ds or "status" not in ds:
        raise NqmError(f"{path} is not an nqm sweep result (no steps/status variables)")
    return index_delays(ds)


def load_dataset(path: str | os.PathLike) -> xr.Dataset:
    """Read any netCDF file written by :func:`save` (a result, a figure's data, a threshold table)
    fully into memory, its checksum verified.

    Args:
      path: the netCDF file.

    Returns:
      The dataset, without its checksum attribute.

    Raises:
      NqmError: the path is a directory or missing, the file unreadable or damaged.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise NqmError(f"cannot read {path}: it is a directory; give a result file (netCDF)")
    if not os.path.isfile(path):
        raise NqmError(f"cannot read {path}: no such file")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise NqmError(f"cannot read {path}: {exc.strerror or exc}") from None
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
      NqmError: the bytes are damaged or no netCDF file.
    """
    body = _unsealed(raw, name)  # damaged sealed bytes stop here, before any parser
    try:
        with warnings.catch_warnings():  # e.g. xarray's on a plain HDF5 file: the error line says it all
            warnings.simplefilter("ignore")
            with xr.open_dataset(io.BytesIO(raw if body is None else body), engine="h5netcdf") as ds:
                ds = ds.load()
    except Exception as exc:  # h5py/xarray raise many types for a broken file
        raise NqmError(f"cannot read {name}: not an nqm netCDF file ({type(exc).__name__})") from None
    verify(ds, name)
    ds.attrs.pop(CHECKSUM, None)  # a property of the file, not of the result: save writes a fresh one
    return ds


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


def check_writable(path: str | os.PathLike) -> None:
    """Fail early, before any simulation, if ``path`` cannot be written: it must be a new path or a
    regular file (every writer and every command's outputs are checked here).

    Args:
      path: the output file.

    Raises:
      NqmError: it is a directory or a special file, its directory is missing, or permission is denied.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise NqmError(f"cannot write {path}: it is a directory; give a file name such as results.nc")
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        # A device or a FIFO would be replaced by a regular file (the write is a rename): refuse it.
        raise NqmError(f"cannot write {path}: it is not a regular file (a device, a FIFO or a socket); "
                       "give the name of a new or regular file such as results.nc")
    if not os.path.isdir(directory):
        raise NqmError(f"cannot write {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise NqmError(f"cannot write {path}: permission denied")


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
