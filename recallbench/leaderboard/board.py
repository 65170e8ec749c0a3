"""A suite's board as a whole: every submission validated, and duplicates refused.

:func:`check_board` validates each file of ``<suite>/submissions/`` and then compares the
valid ones: two files are duplicates, and both are refused, when they share

* a model name (case-insensitively): one row per model;
* the same model config (the same set of point config hashes): a second copy of a
  submission, or the same runs under another name;
* the same counts at every point, unless every point is perfect (correct = total): copied
  results under another config cannot be told from a re-run, and no two real models
  match at every point by chance.

``validate`` and ``render`` both read the board through it, so what one refuses the other
does not show.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, NamedTuple

from recallbench.api.errors import ConfigError
from recallbench.leaderboard.suite import SUBMISSIONS_DIR, submission_files
from recallbench.leaderboard.validate import find_suite_for, validate_file


class Entry(NamedTuple):
    """One submission file: its data and notes when valid, else the one-line reason."""

    path: Path
    sub: dict | None
    notes: list[str]
    error: str | None


def _identities(sub: Mapping) -> dict[str, object]:
    """What must be unique on a board, per kind of duplicate."""
    pts = [(b["name"], p) for b in sub["budgets"] for p in b["points"]]
    out: dict[str, object] = {
        "model name": sub["model"]["name"].casefold(),
        "model config (point config hashes)": frozenset(p["config_hash"] for _, p in pts)}
    if any(p["correct"] < p["total"] for _, p in pts):
        out["counts at every point"] = tuple(sorted(
            (name, p["num_facts"], float(p["lr"]), p["seed"], p["correct"], p["correct_topk"],
             p["total"]) for name, p in pts))
    return out


def duplicates(subs: list[tuple[Path, Mapping]]) -> dict[Path, tuple[Path, str]]:
    """{file: (the file it duplicates, what they share)} for every file sharing an identity."""
    seen: dict[tuple[str, object], Path] = {}
    out: dict[Path, tuple[Path, str]] = {}
    for path, sub in subs:
        for kind, ident in _identities(sub).items():
            other = seen.setdefault((kind, ident), path)
            if other != path:
                out.setdefault(path, (other, kind))
                out.setdefault(other, (path, kind))
    return out


def _dup_error(path: Path, other: Path, kind: str) -> str:
    return f"{path}: duplicate of {other.name} (same {kind}); one submission per model"


def _each_valid(suite_dir: str | Path, check_scores: bool) -> list[Entry]:
    """Every submission of the suite, validated on its own."""
    entries = []
    for f in submission_files(suite_dir):
        try:
            sub, _, notes = validate_file(f, suite_dir, check_scores=check_scores)
            entries.append(Entry(f, sub, notes, None))
        except ConfigError as exc:
            entries.append(Entry(f, None, [], str(exc)))
    return entries


def check_board(suite_dir: str | Path, *, check_scores: bool = True) -> list[Entry]:
    """Every submission of the suite, validated, with duplicates refused."""
    entries = _each_valid(suite_dir, check_scores)
    dup = duplicates([(e.path, e.sub) for e in entries if e.sub is not None])
    return [Entry(e.path, None, [], _dup_error(e.path, *dup[e.path])) if e.path in dup else e
            for e in entries]


def check_files(paths: list[str | Path], *, check_scores: bool = True) -> list[Entry]:
    """Submission files (or suite folders: all their submissions), each validated and
    compared with the other submissions of its suite."""
    out: list[Entry] = []
    siblings: dict[Path, dict[Path, tuple[Path, str]]] = {}
    for raw in paths:
        p = Path(raw)
        if p.is_dir() and p.suffix not in (".yaml", ".yml"):
            found = check_board(p, check_scores=check_scores)
            if not found:
                raise ConfigError(f"{p}: no submissions in {p / SUBMISSIONS_DIR}")
            out += found
            continue
        try:
            sub, _, notes = validate_file(p, check_scores=check_scores)
        except ConfigError as exc:
            out.append(Entry(p, None, [], str(exc)))
            continue
        suite_dir = find_suite_for(p)
        if suite_dir not in siblings:  # the board without scores: enough to compare
            board = _each_valid(suite_dir, check_scores=False)
            siblings[suite_dir] = duplicates([(Path(os.path.abspath(e.path)), e.sub)
                                              for e in board if e.sub is not None])
        dup = siblings[suite_dir].get(Path(os.path.abspath(p)))
        out.append(Entry(p, None, [], _dup_error(p, *dup)) if dup else Entry(p, sub, notes, None))
    return out


def valid_board(suite_dir: str | Path, *, check_scores: bool = True) -> list[tuple[Path, dict]]:
    """The board's (file, submission) pairs; ConfigError naming the first refused file."""
    entries = check_board(suite_dir, check_scores=check_scores)
    bad = [e for e in entries if e.error]
    if bad:
        more = f" (and {len(bad) - 1} more refused)" if len(bad) > 1 else ""
        raise ConfigError(f"{bad[0].error}{more}; nothing rendered")
    return [(e.path, e.sub) for e in entries]
