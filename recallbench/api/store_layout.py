"""A result store as its readers see it: which files hold its records, and how their JSON
lines are read.

Layout of a store directory::

    results.jsonl                     written by an unsharded sweep (and by ``--merge``)
    results.shard-I-of-N.jsonl        written by shard I of N (``--shard I/N``)

Both the store's writer (:mod:`recallbench.runs.store`) and the scorer's reader
(:mod:`recallbench.law.records`) read records through :func:`store_files` and
:func:`iter_lines`, so the two agree on what a store holds: a torn line (an unfinished
write) is skipped with a warning naming the file and line, and a record file that is a
FIFO, a socket or a device is refused before it is opened.
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

from recallbench.api.errors import ConfigError
from recallbench.api.safe_files import special_kind

RESULTS = "results.jsonl"
SHARD_RE = re.compile(r"^results\.shard-(\d+)-of-(\d+)\.jsonl$")
#: warnings about one file's skipped lines; the rest are counted in one more line
MAX_NOTES = 5


class StoreWarning(UserWarning):
    """Something in a store that was skipped: a torn line, an entry that is not a record."""


def _default_warn(message: str) -> None:
    warnings.warn(message, StoreWarning, stacklevel=3)


def shard_file(shard: tuple[int, int] | None) -> str:
    return RESULTS if shard is None else f"results.shard-{shard[0]}-of-{shard[1]}.jsonl"


def store_files(path: str | Path) -> list[Path]:
    """The record files of a store directory: results.jsonl first, then shards in order."""
    path = Path(path)
    files = []
    if (path / RESULTS).is_file():
        files.append(path / RESULTS)
    _check_regular(path / RESULTS)
    shards = []
    for p in path.iterdir() if path.is_dir() else ():
        m = SHARD_RE.match(p.name)
        if m and p.is_file():
            shards.append(((int(m.group(2)), int(m.group(1))), p))
        elif m:
            _check_regular(p)
    files += [p for _, p in sorted(shards)]
    return files


def _check_regular(path: Path) -> None:
    """ConfigError when a store's record file exists but is a FIFO, a socket or a device
    (reading or appending would block or lose what is written); a folder is one too."""
    kind = special_kind(path) or ("a folder" if path.is_dir() else None)
    if kind is not None:
        raise ConfigError(f"--store {path.parent}: {path.name} is {kind}, not a regular "
                          "file: move it away (a store's results*.jsonl are plain files)")


def is_store(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and bool(store_files(path))


class _Notes:
    """The warnings about one file's skipped lines: the first :data:`MAX_NOTES`, then a count."""

    def __init__(self, path: Path, warn: Callable[[str], None]):
        self.path, self.warn, self.count = path, warn, 0

    def add(self, number: int, what: str) -> None:
        self.count += 1
        if self.count <= MAX_NOTES:
            self.warn(f"{self.path}:{number}: {what}")

    def close(self) -> None:
        if self.count > MAX_NOTES:
            self.warn(f"{self.path}: {self.count - MAX_NOTES} more lines ignored")


def iter_lines(path: Path, warn: Callable[[str], None] = _default_warn,
               torn: list[int] | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of every line of a JSON-lines file that parses, read one line at
    a time (a large file is never held whole); a torn line (not UTF-8, or not JSON) is
    skipped, its number added to ``torn`` and reported through ``warn`` (at most
    :data:`MAX_NOTES` of them, then a count, once the file is read)."""
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise ConfigError(f"cannot read {path} ({exc.strerror})") from None
    notes = _Notes(path, warn)
    with fh:
        number = 0
        try:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    if torn is not None:
                        torn.append(number)
                    notes.add(number, "ignoring a torn line (an unfinished record from an "
                                      "interrupted write)")
                    continue
                yield number, value
        except OSError as exc:
            raise ConfigError(f"cannot read {path} ({exc.strerror})") from None
    notes.close()


def scan_lines(path: Path, warn: Callable[[str], None] = _default_warn
               ) -> tuple[list[tuple[int, Any]], list[int]]:
    """(line number, value) of every line of a JSON-lines file that parses, and the numbers
    of the torn lines (not UTF-8, or not JSON) it skipped, each reported through ``warn``
    (at most :data:`MAX_NOTES` of them, then a count): :func:`iter_lines` as lists."""
    torn: list[int] = []
    items = list(iter_lines(path, warn, torn))
    return items, torn
