"""``recallbench sweep --merge SRC... --store DST``: copy into DST the records its sources add.

A record is added when DST has no record of its config hash, or only a failed one and the
source's is ok (the store's own rule: an ok record beats failed ones).  Two ok records of
the same config hash that disagree (different ``correct``, ``total`` or ``accuracy``: a
nondeterministic rerun, or stores of different code) are a *conflict*: by default the
merge refuses, names each conflict (file and line of both records) and writes nothing;
``on_conflict="first"`` keeps the record met first (DST's own, then the sources in the
order given) and leaves the others out.  Records equal in their results are duplicates,
merged silently.

Everything is read and checked before DST is opened, so a merge that fails leaves DST as
it was (a DST that did not exist is not created).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterable

from recallbench.api.errors import ConfigError
from recallbench.api.fields import short
from recallbench.runs.store import Store, _default_warn, _store_lines

ON_CONFLICT = ("refuse", "first")
#: conflicts listed one per line; the rest are counted
MAX_LISTED = 10


@dataclasses.dataclass
class Conflict:
    """Two ok records of one config hash with different results: where each one is."""

    config_hash: str
    kept: tuple[str, dict]  # "file:line" and the record met first
    other: tuple[str, dict]

    def line(self) -> str:
        (wa, a), (wb, b) = self.kept, self.other
        return (f"conflict: config {self.config_hash[:12]}: {wa} has {_result(a)}, "
                f"{wb} has {_result(b)}")


class MergeConflicts(ConfigError):
    """The merge found conflicts and was told to refuse them: nothing was written."""

    def __init__(self, conflicts: list[Conflict]):
        self.conflicts = conflicts
        super().__init__(f"--merge: {len(conflicts)} config hash(es) have ok records with "
                         f"different results (listed above); nothing was merged: pass "
                         f"--on-conflict first to keep the record listed first (DST, then "
                         f"the sources in order)")

    def lines(self) -> list[str]:
        shown = [c.line() for c in self.conflicts[:MAX_LISTED]]
        if len(self.conflicts) > MAX_LISTED:
            shown.append(f"... and {len(self.conflicts) - MAX_LISTED} more conflicts")
        return shown


def _result(rec: dict) -> str:
    acc = rec.get("accuracy")
    text = f"accuracy {acc:.4f}" if isinstance(acc, float) else f"accuracy {short(acc, 20)}"
    return f"{text} ({short(rec.get('correct'), 20)}/{short(rec.get('total'), 20)})"


def _same_result(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in ("correct", "total", "accuracy"))


def _sources(sources: Iterable[str | Path], dest: Path, warn) -> list[tuple[Path, list]]:
    """Each source's records with their places; ConfigError for a source that is not one."""
    out = []
    for src in map(Path, sources):
        if not src.exists():
            raise ConfigError(f"--merge {src} does not exist: expected a store directory "
                              "or a .jsonl file")
        if dest.exists() and src.resolve() == dest.resolve():
            continue
        files, entries, _ = _store_lines(src, warn)
        if src.is_dir() and not files:
            raise ConfigError(f"--merge {src} is a directory without results*.jsonl files")
        out.append((src, entries))
    return out


def plan_merge(sources: Iterable[str | Path], dest: str | Path, on_conflict: str = "refuse",
               warn: Callable[[str], None] = _default_warn) -> dict[str, Any]:
    """What a merge would add, and the conflicts; reads only.  MergeConflicts when there
    are conflicts and ``on_conflict`` is ``"refuse"``."""
    if on_conflict not in ON_CONFLICT:
        raise ConfigError(f"--on-conflict {short(on_conflict)} is not allowed: one of "
                          f"{', '.join(ON_CONFLICT)}")
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"--store {dest} exists and is not a directory")
    held: dict[str, tuple[str, dict]] = {}  # config hash → (place, record) kept so far
    for f, n, rec in _store_lines(dest, warn)[1] if dest.exists() else []:
        held.setdefault(rec["config_hash"], (f"{f}:{n}", rec))
        if rec.get("status") == "ok" and held[rec["config_hash"]][1].get("status") != "ok":
            held[rec["config_hash"]] = (f"{f}:{n}", rec)
    counts = {"sources": 0, "read": 0, "added": 0, "already": 0, "duplicates": 0}
    add: list[dict] = []
    conflicts: dict[str, Conflict] = {}
    for src, entries in _sources(sources, dest, warn):
        counts["sources"] += 1
        counts["read"] += len(entries)
        here: set[str] = set()
        for f, n, rec in entries:
            h, place = rec["config_hash"], f"{f}:{n}"
            have, repeat = held.get(h), h in here
            here.add(h)
            if have is None or (have[1].get("status") != "ok" and rec.get("status") == "ok"):
                held[h] = (place, rec)
                add.append(rec)
                continue
            counts["duplicates" if repeat else "already"] += 1
            if (have[1].get("status") == "ok" and rec.get("status") == "ok"
                    and not _same_result(have[1], rec) and h not in conflicts):
                conflicts[h] = Conflict(h, have, (place, rec))
    if conflicts and on_conflict == "refuse":
        raise MergeConflicts(list(conflicts.values()))
    counts.update(added=len(add), conflicts=list(conflicts.values()))
    return {"records": add, "counts": counts}


def merge_stores(sources: Iterable[str | Path], dest: str | Path, on_conflict: str = "refuse",
                 warn: Callable[[str], None] = _default_warn) -> dict[str, Any]:
    """Append to ``dest``'s results.jsonl every record its sources add; returns counts
    (``conflicts``: the :class:`Conflict` list, resolved by ``on_conflict="first"``)."""
    plan = plan_merge(sources, dest, on_conflict, warn)
    if plan["records"]:
        with Store(dest, warn=warn) as out:
            for rec in plan["records"]:
                out.append(rec)
    return plan["counts"]
