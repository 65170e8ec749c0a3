"""Files that must never block, never be lost and never be written through a planted link.

* :func:`special_kind`: what an existing path is when it is neither a regular file nor a
  folder (a FIFO, a socket, a device).  Opening a FIFO for writing blocks until someone
  reads it, and a device swallows what is written: such a path is refused before any work.
* :func:`write_regular`: write a file that must be a regular one, never blocking on a FIFO.
* :func:`write_aside`: a record that cannot go where it was meant to is written to a new
  file under a name nobody can guess (:func:`tempfile.mkstemp`: ``O_CREAT | O_EXCL``, so
  a symlink or any other file planted in the folder is never opened, let alone followed),
  in the first of the given folders where that works.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def special_kind(path: str | Path) -> str | None:
    """``"a FIFO (named pipe)"``, ``"a socket"``, ... when ``path`` exists (links followed)
    and is neither a regular file nor a folder; None otherwise (also when it is missing)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    for test, name in _KINDS:
        if test(mode):
            return name
    return None


def write_regular(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` (created or truncated), which must be a regular file: a
    FIFO or a device is refused without blocking (``O_NONBLOCK``).  OSError on failure."""
    import errno

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"it is {special_kind(path) or 'not a regular file'}")
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        write_all(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_aside(text: str, prefix: str, suffix: str,
                folders: Iterable[str | Path | None]) -> Path | None:
    """Write ``text`` to a new file ``<prefix><random><suffix>`` in the first folder of
    ``folders`` where that works (None: the temp folder), flushed to disk; its path, or
    None when it could be written nowhere.  The file is created exclusively (mode 0600):
    never an existing file, never through a symlink."""
    for folder in folders:
        try:
            fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix,
                                        dir=None if folder is None else str(folder))
        except OSError:
            continue
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            return Path(name)
        except OSError:
            try:
                os.unlink(name)
            except OSError:
                pass
    return None
