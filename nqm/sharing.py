"""Work shared by several processes on one host: the same figure script started once per core.

Each piece of work has a key; a process claims a key before doing its piece (``PATH.claims``, a
JSON ``{key: pid}`` kept under ``PATH``'s lock), leaves the keys other live processes hold to them,
takes over a key whose process died, and comes back to the keys others held once they let them go
(by then their work is in ``PATH``, or in the files their pieces keep, and reading it is quick).
Who does a piece never changes what it gives. The last process to leave (:func:`member`) clears
what they shared, so that none removes files another is still reading.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from typing import Callable, Hashable, Iterable, Iterator

import numpy as np

from nqm.errors import NqmError
from nqm.io import load_bytes, lock, to_bytes, write_bytes

__all__ = ["each", "keep", "kept", "locked", "member"]


def each(keys: Iterable[Hashable], path: str | None, wait: float = 30.0, log: Callable = print) -> Iterator:
    """Yield every key of ``keys`` once, each while this process holds its claim: first the keys no
    other live process holds, in order, then the rest as their holders let them go.

    Args:
      keys: the pieces of work (keys as JSON writes them: strings).
      path: the shared file the claims sit beside (``path + ".claims"``); ``None``: no sharing,
        every key in order.
      wait: seconds between looks at keys other processes hold.
      log: called with one line when this process starts waiting for others.

    Returns:
      An iterator of the keys; a key's claim is let go when the loop moves past it (or leaves).
    """
    pending, waiting = list(keys), None
    while pending:
        held = _held_elsewhere(path)
        free = [key for key in pending if key not in held]
        if not free:
            if waiting != len(pending):
                waiting = len(pending)
                log(f"waiting for {waiting} piece(s) of work that another process does")
            time.sleep(wait)
            continue
        key = free[0]
        if not _claim(path, key):
            continue  # another process took it meanwhile
        try:
            yield key
        finally:
            _claim(path, key, release=True)
        pending.remove(key)


def kept(path: str | None, key: str):
    """The result kept under ``key`` in ``path`` (:func:`keep`), or ``None``."""
    if not path or not os.path.exists(path):
        return None
    with locked(path):
        data = _pieces(path).get(key)
    return None if data is None else load_bytes(data, f"{key} in {path}")


def keep(path: str | None, key: str, result):
    """Add ``result`` (an xarray Dataset) to ``path`` under ``key`` (an npz of netCDF bytes, one per
    finished piece; several processes may add theirs) and return it."""
    if path:
        with locked(path):
            pieces = {**_pieces(path), key: to_bytes(result)}
            buffer = io.BytesIO()
            np.savez(buffer, **{k: np.frombuffer(v, np.uint8) for k, v in pieces.items()})
            write_bytes(path, buffer.getvalue())
    return result


def _pieces(path: str) -> dict:
    """``{key: bytes}`` of the pieces in ``path`` (read under its lock)."""
    if not os.path.exists(path):
        return {}
    try:
        with np.load(path) as saved:
            return {k: saved[k].tobytes() for k in saved.files}
    except (OSError, ValueError) as exc:
        raise NqmError(f"cannot read {path} ({exc}); delete it to start over") from None


@contextlib.contextmanager
def member(path: str, clear: Callable[[], None]):
    """Count this process among those sharing ``path`` while inside; on a normal exit, the last
    live one to leave calls ``clear()`` (under ``path``'s lock). An exception leaves everything
    as it is, for a rerun to resume from.

    Args:
      path: the shared file.
      clear: removes what the processes shared once none needs it.
    """
    with locked(path):
        _write_members(path, _members(path) | {os.getpid()})
    finished = False
    try:
        yield
        finished = True
    finally:
        with locked(path):
            others = {pid for pid in _members(path) if pid != os.getpid() and _alive(pid)}
            _write_members(path, others)
            if finished and not others:
                clear()


def _members(path: str) -> set:
    return set(_load(path + ".members", []))


def _write_members(path: str, pids: set) -> None:
    _store(path + ".members", sorted(pids))


@contextlib.contextmanager
def locked(path: str, patience: float = 60.0):
    """:func:`nqm.io.lock` on ``path``, waiting up to ``patience`` seconds for another process's
    turn (each holds it for one read or write of the shared file)."""
    deadline = time.monotonic() + patience
    with contextlib.ExitStack() as stack:
        while True:
            try:
                stack.enter_context(lock(path))
                break
            except NqmError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield


def _held_elsewhere(path) -> set:
    """The keys that other live processes hold (none without a shared file)."""
    if not path:
        return set()
    with locked(path):
        return {key for key, pid in _claims(path).items() if pid != os.getpid() and _alive(pid)}


def _claim(path, key, release: bool = False) -> bool:
    """Claim ``key`` for this process (False: a live process holds it), or let it go."""
    if not path:
        return True
    with locked(path):
        claims = _claims(path)
        if release:
            claims.pop(key, None)
        elif key in claims and claims[key] != os.getpid() and _alive(claims[key]):
            return False
        else:
            claims[key] = os.getpid()
        _store(path + ".claims", claims)
    return True


def _claims(path: str) -> dict:
    """``{key: pid}`` of the keys claimed (read under ``path``'s lock)."""
    return _load(path + ".claims", {})


def _load(file: str, empty):
    """The JSON value in ``file`` (``empty`` where there is none)."""
    return json.loads(open(file).read()) if os.path.exists(file) else empty


def _store(file: str, value) -> None:
    """Write ``value`` to ``file`` as JSON, or remove the file when ``value`` is empty."""
    if value:
        write_bytes(file, (json.dumps(value) + "\n").encode())
    elif os.path.exists(file):
        os.remove(file)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` (on this host) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        pass
    return True
