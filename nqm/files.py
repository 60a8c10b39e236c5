"""Files as files, before any format is parsed: what a path is (a regular file, or something named
for what it is, never opened so that it blocks), one writer at a time (locks), whether a file is
whole (its HDF5 header's length and the seal nqm appends) and whether a figure is one nqm drew. No
JAX and no xarray: :mod:`nqm.io` reads and writes the formats."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gzip
import hashlib
import io
import os
import stat

from nqm.errors import NqmError


SEAL = b"\nnqm-sha256:"  # what save appends: the SHA-256 of every byte before it, checked before parsing
SEAL_SIZE = len(SEAL) + 64 + 1  # the marker, 64 hex digits, a newline
# The attribute of a sealed file: its seal cut off entirely, it is damaged, not a file written before seals.
SEALED = "nqm_sealed"
HDF5 = b"\x89HDF\r\n\x1a\n"  # how a netCDF-4 file (HDF5, no user block) begins


def sealed(data: bytes) -> bytes:
    """``data`` and its seal: netCDF readers ignore bytes past the file's end, :func:`nqm.io.load_dataset`
    checks them before any parser sees the file (a damaged header cannot steer the parser then)."""
    return data + SEAL + hashlib.sha256(data).hexdigest().encode() + b"\n"


def unsealed(raw: bytes, path) -> bytes | None:
    """The bytes before a file's seal, verified; ``None`` for a file without one (written before
    seals were, or by another program)."""
    if len(raw) < SEAL_SIZE or raw[-SEAL_SIZE:-65] != SEAL:
        return None
    body, digest = raw[:-SEAL_SIZE], raw[-65:-1]
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise NqmError(f"{path} is damaged: its bytes do not match the checksum saved with them; write it again, "
                       "or restore a copy")
    return body


# What every figure nqm draws carries in its metadata, so that a file there is replaced without
# --force only if nqm drew it (drawn_by_nqm). In a format with no place for it (webp, raw, …) no file
# is known as nqm's. No parentheses: a PDF escapes them.
FIGURE_MARK = "nqm: Noisy Quadratic Model under gradient delay"
_MARKS = {**dict.fromkeys(("png", "pdf", "ps", "eps", "svg", "svgz"), lambda m: {"metadata": {"Creator": m}}),
          **dict.fromkeys(("jpg", "jpeg", "gif"), lambda m: {"pil_kwargs": {"comment": m.encode()}}),
          **dict.fromkeys(("tif", "tiff"), lambda m: {"pil_kwargs": {"description": m}})}


def figure_mark(form: str | None) -> dict:
    """The arguments of ``Figure.savefig`` that put :data:`FIGURE_MARK` in a figure of format
    ``form`` (``"png"``, …; none for a format without metadata)."""
    return _MARKS[form](FIGURE_MARK) if form in _MARKS else {}


def drawn_by_nqm(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` is a figure nqm drew (it carries :data:`FIGURE_MARK`).

    Args:
      path: the file.

    Returns:
      ``False`` also for a file that cannot be read, is not a regular file, or whose mark is not
      within its first 256 MiB.
    """
    try:
        with os.fdopen(opened(os.fspath(path)), "rb") as f:
            data = f.read(2**28)
        if data[:2] == b"\x1f\x8b":  # gzip: an svgz
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
                data = unzipped.read(2**28)
    except (NqmError, OSError, EOFError):
        return False
    return FIGURE_MARK.encode() in data


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


_SPECIAL = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (a named pipe), not a file"),
            (stat.S_ISCHR, "a character device (such as /dev/null), not a file"),
            (stat.S_ISBLK, "a block device, not a file"), (stat.S_ISSOCK, "a socket, not a file"))


def opened(path: str) -> int:
    """A read-only descriptor of the regular file ``path``; anything else is one line naming what it
    is. Nothing but a regular file is opened, and that without blocking (a FIFO put there after the
    check cannot hang the reader)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISREG(mode):
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode):
                return fd
            os.close(fd)
    except OSError as exc:
        raise NqmError(f"cannot read {path}: {_missing(path, exc)}") from None
    what = next((text for test, text in _SPECIAL if test(mode)), "not a file")
    raise NqmError(f"cannot read {path}: it is {what}; give a result file (netCDF)")


def _missing(path: str, exc: OSError) -> str:
    """Why ``path`` cannot be opened, in words."""
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link loop (its links lead back to themselves); give a result file (netCDF)"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        return f"it is a broken symbolic link (to {os.readlink(path)}, which does not exist)"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return "no such file"
    return exc.strerror or str(exc)


def whole(read_at, size: int, name) -> None:
    """Refuse, from a few bytes at either end, what cannot be a whole netCDF file nqm wrote: one
    that does not begin as one, or one cut short — shorter than its HDF5 header says, or ending in
    part of a seal (:data:`SEAL`) — before the rest is read. A sealed file passes: its checksum decides."""
    if size >= SEAL_SIZE and read_at(size - SEAL_SIZE, len(SEAL)) == SEAL:
        return
    head = read_at(0, 64)
    if not size or not HDF5.startswith(head[:len(HDF5)]):
        why = "it is empty" if not size else "it does not begin as one"
        raise NqmError(f"cannot read {name}: not an nqm netCDF file ({why})")
    end = _hdf5_end(head) if size >= 64 else size + 1  # every HDF5 file is longer: a shorter one was cut
    if end is None:
        return
    if size < end:
        given = f" of the {end:,} its header gives" if size >= 64 else ""
        raise NqmError(f"{name} is damaged: it is cut short ({size:,} bytes{given}: truncated, as by a full disk or an "
                       "interrupted copy); write it again, or restore a copy")
    tail = read_at(end, min(size - end, len(SEAL)))
    if tail and SEAL.startswith(tail):
        raise NqmError(f"{name} is damaged: it is cut short (the seal saved at its end, its checksum, is incomplete); "
                       "write it again, or restore a copy")


def _hdf5_end(head: bytes) -> int | None:
    """The end-of-file address in the HDF5 superblock at the start of ``head`` (where the file's
    bytes must reach), or ``None`` where it cannot be read."""
    version = head[8] if len(head) > 8 else None
    if version in (0, 1):
        size, at = head[13], 24 + 4 * version  # version 1 has 4 more bytes before the addresses
    elif version in (2, 3):
        size, at = head[9], 12
    else:
        return None
    if size not in (2, 4, 8) or len(head) < at + 3 * size:
        return None
    base, end = (int.from_bytes(head[at + i * size:at + (i + 1) * size], "little") for i in (0, 2))
    return None if end == 2 ** (8 * size) - 1 else base + end  # all ones: undefined


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
