"""Read result records (``recallbench.result/1``) from stores, ``.jsonl`` and ``.json`` files.

    records = load_records(["runs/store", "extra.jsonl"])   # a list of record dicts

What the scorer reads; records are returned in reading order, without de-duplication
across inputs (the scorer counts each config hash once).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Iterable

from recallbench.api.errors import ConfigError

SCHEMA = "recallbench.result/1"


class ScoreWarning(UserWarning):
    """Something in the input the scorer skipped or doubts (torn line, duplicate run, ...)."""


def _read_jsonl(path: Path) -> list[dict]:
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:
                warnings.warn(f"{path}:{i + 1}: skipping a torn last line ({exc.msg})",
                              ScoreWarning, stacklevel=3)
                continue
            raise ConfigError(f"input {path}:{i + 1} is not valid JSON ({exc.msg}); "
                              "only the last line of a store may be torn") from None
    return out


def _read_json(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"input {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list):
        return data
    raise ConfigError(f"input {path} holds a {type(data).__name__}: expected a record or a list of records")


def load_records(paths: Iterable[str | Path] | str | Path) -> list[dict]:
    """Read result records from stores, ``.jsonl`` and ``.json`` files.

    A directory is a result store, read through :mod:`recallbench.runs.store`: all its files
    (``results.jsonl``, ``results.shard-I-of-N.jsonl``) merged to one record per config
    hash, an ok record preferred over failed ones, torn lines skipped with a warning (or,
    without any such file, every ``*.jsonl`` and ``*.json`` directly inside it, in name
    order).  In a ``.jsonl`` file a
    torn last line (a crash mid-write) is skipped with a :class:`ScoreWarning`; a bad line
    elsewhere is a :class:`ConfigError`.  A ``.json`` file holds a record or a list of
    records.  Entries that are not ``recallbench.result/1`` records are skipped with a
    warning.  Records are returned in reading order.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    from recallbench.runs import store as result_store

    files: list[Path | tuple[Path, list[dict]]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            if result_store.is_store(path):  # results.jsonl and/or results.shard-I-of-N.jsonl
                contents = result_store.read_store(
                    path, warn=lambda m: warnings.warn(m, ScoreWarning, stacklevel=4))
                if contents.duplicates:
                    warnings.warn(f"{path}: {contents.duplicates} duplicate records of the same "
                                  "config_hash merged (an ok record kept over failed ones)",
                                  ScoreWarning, stacklevel=2)
                files.append((path, contents.records))
            else:
                found = sorted(p for p in path.iterdir()
                               if p.is_file() and p.suffix in (".jsonl", ".json"))
                if not found:
                    raise ConfigError(f"input {path} is a directory without results.jsonl "
                                      "or any .jsonl/.json file")
                files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"input {path} does not exist: expected a result store "
                              "directory, a .jsonl or a .json file")
    records: list[dict] = []
    for f in files:
        if isinstance(f, tuple):
            f, items = f
        else:
            items = _read_jsonl(f) if f.suffix == ".jsonl" else _read_json(f)
        for j, rec in enumerate(items):
            if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
                got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
                warnings.warn(f"{f}: skipping entry {j + 1}, not a {SCHEMA} record (schema {got!r})",
                              ScoreWarning, stacklevel=2)
                continue
            records.append(rec)
    return records
