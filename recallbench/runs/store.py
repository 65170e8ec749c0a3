"""The result store: a directory of append-only JSON-lines files, one record per line.

Layout of a store directory (:mod:`recallbench.api.store_layout`, where its files are
found and their lines read)::

    results.jsonl                     written by an unsharded sweep (and by ``--merge``)
    results.shard-I-of-N.jsonl        written by shard I of N (``--shard I/N``)

Every file has exactly one writer at a time (an advisory ``flock`` on the file; a second
writer gets a one-line error), so independent shard workers may share a store directory,
also on a shared filesystem.  A record is appended as one line and flushed to disk
(``os.fsync``) as soon as its point finishes, so a crash loses at most the point that was
running.  A crash in the middle of a write leaves a *torn* line: readers report it (a
warning naming the file and line) and ignore it, and the next writer starts on a fresh
line, so no finished record is lost.

Reading a store merges all its files: one record per ``config_hash``, an ``ok`` record
preferred over ``failed`` ones (the first ok record is kept; among failed ones the
latest, whose reason is the most recent), and the number of duplicates is reported.
Records are plain JSON (``recallbench.result/1``, see :mod:`recallbench.api.record`); nothing
read from a store is executed.  A record whose ``config_hash`` is not its config's, or whose
counts are impossible, is reported (file:line) and not used (:mod:`recallbench.api.verify`),
and so is one whose ``total`` is not its config's test sequences × queries per sequence, or
whose times are negative or not finite (:func:`recallbench.api.record.run_problem`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable, Iterable

from recallbench.api.errors import ConfigError
from recallbench.api.safe_files import special_kind, write_aside, write_all
from recallbench.api.store_layout import (MAX_NOTES, RESULTS, SHARD_RE, StoreWarning,  # noqa: F401
                                          _check_regular, _default_warn, _Notes, is_store,
                                          iter_lines, scan_lines, shard_file, store_files)
from recallbench.api.verify import record_problem


class StoreWriteError(ConfigError):
    """Records that could not be appended to a store (a full disk, an I/O error), and the
    file they were saved to instead: beside the store's files, else in the temp folder,
    else printed on standard output.  Nothing trained is lost."""

    def __init__(self, store: "Store", why: str, records: list[dict]):
        self.store, self.why, self.records = store, why, []
        self.saved_to: Path | None = None
        self.set_aside(records)
        super().__init__(str(self))

    def set_aside(self, more: list[dict]) -> None:
        """Save ``more`` records with those already set aside, in one new file."""
        if not more:
            return
        self.records += list(more)
        text = "".join(_line(r) for r in self.records)
        old = self.saved_to
        self.saved_to = write_aside(text, f"{self.store.file.stem}.unmerged-", ".jsonl",
                                    [self.store.path, None])
        if self.saved_to is None:
            print(text, end="", flush=True)
        if old is not None and old != self.saved_to:
            try:
                old.unlink()
            except OSError:
                pass
        self.args = (str(self),)

    def __str__(self) -> str:
        n = len(self.records)
        what = f"{n} finished record{'s' if n > 1 else ''}"
        if self.saved_to is None:
            return (f"cannot append to store file {self.store.file} ({self.why}); stopped: the "
                    f"{what} could be saved nowhere else and {'were' if n > 1 else 'was'} "
                    f"printed on standard output as JSON lines")
        return (f"cannot append to store file {self.store.file} ({self.why}); stopped: the "
                f"{what} saved to {self.saved_to}; once the store can be written, merge "
                f"{'them' if n > 1 else 'it'} back with: recallbench sweep --merge "
                f"{self.saved_to} --store {self.store.path}")


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=False, separators=(",", ":"), default=str) + "\n"


def _record_lines(path: Path, warn: Callable[[str], None]
                  ) -> tuple[list[tuple[int, dict]], list[int]]:
    """:func:`scan_lines` less the entries that are not result records, and the records
    that fail :func:`recallbench.api.verify.record_problem` (numbers no run of their config
    makes among them: a ``total`` other than test sequences × queries per sequence,
    negative or non-finite times; reported too)."""
    items, torn = scan_lines(path, warn)
    records = []
    notes = _Notes(path, warn)
    for number, item in items:
        if not (isinstance(item, dict) and isinstance(item.get("config_hash"), str)):
            notes.add(number, "ignoring an entry that is not a result record")
        elif (problem := record_problem(item)) is not None:
            notes.add(number, problem)
        else:
            records.append((number, item))
    notes.close()
    return records, torn


def read_lines(path: Path, warn: Callable[[str], None] = _default_warn) -> tuple[list[dict], list[int]]:
    """The records of one JSON-lines file, and the numbers of the torn lines it skipped."""
    records, torn = _record_lines(path, warn)
    return [rec for _, rec in records], torn


def merge_records(records: Iterable[dict]) -> tuple[list[dict], int]:
    """One record per config_hash (first ok, else the latest failed), and the duplicates."""
    kept: dict[str, dict] = {}
    duplicates = 0
    for rec in records:
        h = rec["config_hash"]
        old = kept.get(h)
        if old is None:
            kept[h] = rec
            continue
        duplicates += 1
        if old.get("status") != "ok":
            kept[h] = rec  # ok beats failed; a later failure replaces an earlier one
    return list(kept.values()), duplicates


@dataclasses.dataclass
class StoreContents:
    records: list[dict]  # one per config_hash, in first-seen order
    files: list[Path]
    read: int  # records read from all files, duplicates included
    duplicates: int
    torn: list[tuple[Path, int]]

    @property
    def by_hash(self) -> dict[str, dict]:
        return {r["config_hash"]: r for r in self.records}

    def hashes(self, status: str) -> set[str]:
        return {r["config_hash"] for r in self.records if r.get("status") == status}


def _store_lines(path: Path, warn: Callable[[str], None]
                 ) -> tuple[list[Path], list[tuple[Path, int, dict]], list[tuple[Path, int]]]:
    """The files of a store directory (or a single .jsonl file), every record in them with
    its file and line, and the torn lines."""
    if path.is_dir():
        files = store_files(path)
    elif path.is_file():
        files = [path]
    elif path.exists():
        raise ConfigError(f"--store {path} is {special_kind(path) or 'not a regular file'}: "
                          "expected a store directory (or a .jsonl file)")
    else:
        files = []
    entries, torn = [], []
    for f in files:
        recs, bad = _record_lines(f, warn)
        entries += [(f, n, rec) for n, rec in recs]
        torn += [(f, n) for n in bad]
    return files, entries, torn


def read_store(path: str | Path, warn: Callable[[str], None] = _default_warn) -> StoreContents:
    """Read a store directory (all its files) or a single .jsonl file, merged."""
    files, entries, torn = _store_lines(Path(path), warn)
    merged, duplicates = merge_records(rec for _, _, rec in entries)
    return StoreContents(merged, files, len(entries), duplicates, torn)


def stale_points(points: Iterable, contents: StoreContents) -> list[tuple[Any, dict]]:
    """(point, stored record) of the points the store holds as ok but whose record was made
    by other adapter source than the one installed now (``provenance.source_sha256``
    differs; a record without provenance, from before records had it, is not judged)."""
    from recallbench.api.record import adapter_provenance

    now: dict[str, str | None] = {}
    ok = contents.by_hash
    out = []
    for p in points:
        rec = ok.get(p.hash)
        then = (rec or {}).get("provenance") or {}
        if rec is None or rec.get("status") != "ok" or not then.get("source_sha256"):
            continue
        if p.adapter not in now:
            now[p.adapter] = (adapter_provenance(p.adapter) or {}).get("source_sha256")
        if now[p.adapter] and now[p.adapter] != then["source_sha256"]:
            out.append((p, rec))
    return out


class Store:
    """A store directory and this process's file in it (one writer per file).

    ``with Store(dir, shard) as store: store.append(record)``.
    """

    def __init__(self, path: str | Path, shard: tuple[int, int] | None = None,
                 warn: Callable[[str], None] = _default_warn):
        self.path = Path(path)
        self.shard = shard
        self.warn = warn  # where reading reports a skipped line
        self.file = self.path / shard_file(shard)
        self._fd: int | None = None
        self._fresh_line_checked = False

    # -- reading ------------------------------------------------------------------
    def read(self, warn: Callable[[str], None] | None = None) -> StoreContents:
        return read_store(self.path, warn or self.warn)

    # -- writing ------------------------------------------------------------------
    def open(self) -> "Store":
        if self._fd is not None:
            return self
        if self.path.exists() and not self.path.is_dir():
            kind = special_kind(self.path)
            raise ConfigError(f"--store {self.path} exists and is not a directory"
                              + (f" (it is {kind})" if kind else ""))
        _check_regular(self.file)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            new = not self.file.exists()
            fd = os.open(self.file, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot write store {self.file}: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO since the check
            os.close(fd)
            _check_regular(self.file)
            raise ConfigError(f"--store {self.path}: {self.file.name} is not a regular file")
        os.set_blocking(fd, True)
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: no lock, one writer per file is the user's to keep
            pass
        except OSError:
            os.close(fd)
            raise ConfigError(f"store file {self.file} is being written by another sweep or "
                              "capacity search (one writer per file): wait for it to finish or "
                              "use another --store (a sweep's parallel workers: --shard I/N)"
                              ) from None
        self._fd = fd
        if new:
            _fsync_dir(self.path)
        return self

    def _ensure_fresh_line(self) -> None:
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            write_all(self._fd, b"\n")  # a torn tail stays on its own line, reported on read

    def append(self, record: dict[str, Any]) -> None:
        """Append one record as a line, and make it durable before returning.

        :class:`StoreWriteError` (the record saved aside, see there) when it cannot be."""
        if self._fd is None:
            self.open()
        try:
            if not self._fresh_line_checked:
                self._ensure_fresh_line()
                self._fresh_line_checked = True
            write_all(self._fd, _line(record).encode("utf-8"))
            os.fsync(self._fd)
        except OSError as exc:
            raise StoreWriteError(self, exc.strerror or type(exc).__name__, [record]) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None
            self._fresh_line_checked = False

    def __enter__(self) -> "Store":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
