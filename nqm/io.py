"""Reading and writing results: atomic, crash-safe, one writer at a time (no JAX needed to read)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import tempfile

import xarray as xr

from nqm.errors import NqmError


def save(ds: xr.Dataset, path: str | os.PathLike) -> None:
    """Write a result atomically: a complete file appears at ``path`` or nothing changes.

    The file is serialised in memory first, so a full disk or a size limit surfaces as a one-line
    :class:`NqmError` from a plain write (never inside the HDF5 library), and the previous file is
    left byte-identical. An overwritten file keeps its mode. Across several processes
    (``jax.distributed``) only process 0 writes.
    """
    import jax

    if jax.process_index() != 0:
        return
    buffer = io.BytesIO()
    ds.to_netcdf(buffer, engine="h5netcdf")
    write_bytes(path, buffer.getbuffer())


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` (serialised beforehand: a PNG, a JSON text) atomically to ``path``."""
    with atomic_write(path, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb"):
    """A file object whose content replaces ``path`` only once it is complete (keeping the mode of
    the file it replaces); a failed write is a one-line :class:`NqmError` and changes nothing."""
    path = os.fspath(path)
    check_writable(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".nqm-")
    except OSError as exc:
        raise NqmError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, mode) as f:
            yield f
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
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def lock(path: str | os.PathLike):
    """Hold an advisory lock on ``path`` (a ``.lock`` file beside it): one writer at a time."""
    target = os.fspath(path) + ".lock"
    check_writable(target)
    try:
        handle = open(target, "a+")
    except OSError as exc:
        raise NqmError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise NqmError(f"another nqm run is writing {os.fspath(path)} (it holds {target}); "
                       "wait for it to finish or choose another output") from None
    try:
        yield
    finally:
        os.remove(target)  # while still holding it: a later run creates and locks a new file
        handle.close()


def load(path: str | os.PathLike) -> xr.Dataset:
    """Read a result written by :func:`save` (fully into memory; the file is closed)."""
    from nqm.results import index_delays

    ds = load_dataset(path)
    if "steps" not in ds or "status" not in ds:
        raise NqmError(f"{path} is not an nqm sweep result (no steps/status variables)")
    return index_delays(ds)


def load_dataset(path: str | os.PathLike) -> xr.Dataset:
    """Read any netCDF file written by :func:`save` (a result, a figure's data) fully into memory."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise NqmError(f"cannot read {path}: no such file")
    try:
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            return ds.load()
    except Exception as exc:  # h5py/xarray raise many types for a broken file
        raise NqmError(f"cannot read {path}: not an nqm netCDF result ({type(exc).__name__})") from None


def check_writable(path: str | os.PathLike) -> None:
    """Fail early, before any simulation, if ``path`` cannot be written."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise NqmError(f"cannot write {path}: it is a directory; give a file name such as results.nc")
    if not os.path.isdir(directory):
        raise NqmError(f"cannot write {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise NqmError(f"cannot write {path}: permission denied")
