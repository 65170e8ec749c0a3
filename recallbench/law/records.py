"""Read result records (``recallbench.result/1``) from stores, ``.jsonl`` and ``.json`` files.

    records = load_records(["runs/store", "extra.jsonl"])   # a list of record dicts

What the scorer reads; records are returned in reading order, without de-duplication
across inputs (the scorer counts each config hash once).  Every value the scorer computes
with is checked first (:func:`check_record`): a bad one is a :class:`ConfigError` naming the
file, the line (or entry) and the field, never a traceback or a nonsense report.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from recallbench.api.errors import ConfigError
from recallbench.api.fields import is_number, short
from recallbench.api.store_layout import is_store, iter_lines, store_files
from recallbench.api.verify import record_problem

SCHEMA = "recallbench.result/1"
COUNTS = ("correct", "total", "correct_topk")  # integers >= 0, the first and last <= total
RATES = ("accuracy", "accuracy_topk")  # in [0, 1]
SIZES = {"task": ("vocab_size", "seq_len", "num_facts"),
         "model": ("d_model", "d_state", "n_layers")}  # config keys: integers >= 1


class ScoreWarning(UserWarning):
    """Something in the input the scorer skipped or doubts (torn line, duplicate run, ...)."""


def _warn(message: str) -> None:
    warnings.warn(message, ScoreWarning, stacklevel=4)


def _bad(where: str, field: str, value: Any, allowed: str):
    raise ConfigError(f"input {where}: {field} = {short(value)} is not allowed: {allowed}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_record(rec: dict, where: str) -> None:
    """ConfigError naming ``where`` (file and line) and the field, for a record whose
    counts, rates, sizes or config the scorer could not use."""
    for key in ("status", "config_hash"):
        if rec.get(key) is not None and not isinstance(rec[key], str):
            _bad(where, key, rec[key], "a string")
    for key in COUNTS:
        if rec.get(key) is not None and not (_is_int(rec[key]) and rec[key] >= 0):
            _bad(where, key, rec[key], "an integer >= 0 (or null)")
    total = rec.get("total")
    for key in ("correct", "correct_topk"):
        if rec.get(key) is not None and total is not None and rec[key] > total:
            _bad(where, key, rec[key], f"at most total = {total}")
    for key in RATES:
        if rec.get(key) is not None and not (is_number(rec[key]) and 0 <= rec[key] <= 1):
            _bad(where, key, rec[key], "a number in [0, 1] (or null)")
    for key, low in (("state_size", 0), ("state_bits", 0), ("info_bits", -1)):
        v = rec.get(key)
        if v is not None and not (is_number(v) and math.isfinite(v) and v > low):
            _bad(where, key, v, f"a finite number {'> 0' if low == 0 else '>= 0'} (or null)")
    if rec.get("seed") is not None and not _is_int(rec["seed"]):
        _bad(where, "seed", rec["seed"], "an integer (or null)")
    if "config" in rec:
        _check_config(rec["config"], where)


def _check_config(cfg: Any, where: str) -> None:
    if not isinstance(cfg, dict):
        _bad(where, "config", cfg, "a mapping with sections task, model, train")
    for section, keys in SIZES.items():
        values = cfg.get(section)
        if not isinstance(values, dict):
            _bad(where, f"config.{section}", values, "a mapping")
        for key in keys:
            v = values.get(key)
            if v is not None and not (_is_int(v) and v >= 1):
                _bad(where, f"config.{section}.{key}", v, "an integer >= 1")


def _outcome(rec: Any, place: str):
    """None for a record the scorer uses; else ``("warn", message)`` for one it skips, or
    ``("error", ConfigError)`` for one whose values it cannot use (raised if it is kept)."""
    if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
        got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
        return ("warn", f"{place}: skipping an entry that is not a {SCHEMA} record "
                        f"(schema {short(got, 40)})")
    try:
        check_record(rec, place)
    except ConfigError as exc:
        return ("error", exc)
    problem = record_problem(rec)  # filed under another config's hash, impossible counts
    return None if problem is None else ("warn", f"{place}: {problem}")


def _settle(entries: Iterable[tuple[Any, Any]]) -> Iterator[Any]:
    """The kept records of (kept, outcome) pairs, in order; the others warned or raised."""
    for kept, outcome in entries:
        if outcome is None:
            yield kept
        elif outcome[0] == "warn":
            _warn(outcome[1])
        else:
            raise outcome[1]


def _read_jsonl(path: Path, keep: Callable[[dict], Any]) -> Iterator[Any]:
    """The records of a ``.jsonl`` file, read line by line; torn lines skipped with a
    warning, as a store's.  A file none of whose lines is JSON is not a JSON-lines file.
    Only what ``keep`` makes of each record is held until the file is read."""
    torn: list[int] = []
    entries, parsed = [], 0
    for number, item in iter_lines(path, _warn, torn):
        parsed += 1
        outcome = _outcome(item, f"{path}:{number}")
        entries.append((keep(item) if outcome is None else None, outcome))
    if torn and not parsed:
        raise ConfigError(f"input {path}: not a JSON-lines file (no line of it is JSON; "
                          f"line {torn[0]} is not UTF-8 or not JSON)")
    return _settle(entries)


def _read_json(path: Path) -> list[tuple[str, Any]]:
    try:
        text = path.read_bytes().decode("utf-8")
        data = json.loads(text)
    except OSError as exc:
        raise ConfigError(f"cannot read input {path} ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"input {path}: not UTF-8 text (byte {exc.start}): expected a "
                          "JSON record or a list of records") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"input {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ConfigError(f"input {path}: JSON nested too deeply") from None
    if isinstance(data, dict):
        return [(str(path), data)]
    if isinstance(data, list):
        return [(f"{path} entry {j + 1}", item) for j, item in enumerate(data)]
    raise ConfigError(f"input {path} holds a {type(data).__name__}: expected a record or a list of records")


def _read_store(path: Path, keep: Callable[[dict], Any]) -> Iterator[Any]:
    """A store directory, read line by line: every file's records merged to one per config
    hash as the store itself merges them (an ok record kept over failed ones), then each
    kept one checked where it was read.  Only what ``keep`` makes of a record is held."""
    kept: dict[str, tuple[Any, Any, Any]] = {}  # config hash -> (status, kept, outcome)
    duplicates = 0
    for f in store_files(path):
        strays = []
        for number, rec in iter_lines(f, _warn):
            if not (isinstance(rec, dict) and isinstance(rec.get("config_hash"), str)):
                strays.append(number)
                continue
            h = rec["config_hash"]
            old = kept.get(h)
            if old is not None:
                duplicates += 1
                if old[0] == "ok":
                    continue  # ok beats failed; a later failure replaces an earlier one
            outcome = _outcome(rec, f"{f}:{number}")
            kept[h] = (rec.get("status"), keep(rec) if outcome is None else None, outcome)
        for number in strays:
            _warn(f"{f}:{number}: ignoring an entry that is not a result record")
    if duplicates:
        _warn(f"{path}: {duplicates} duplicate records of the same config_hash merged (an ok "
              "record kept over failed ones)")
    return _settle((k, outcome) for _, k, outcome in kept.values())


def _inputs(paths: Iterable[str | Path]) -> list[tuple[str, Path]]:
    """(kind, path) of every input: a store directory, or a .jsonl / .json file."""
    out = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and is_store(path):
            out.append(("store", path))
        elif path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json"))
            if not found:
                raise ConfigError(f"input {path} is a directory without results.jsonl "
                                  "or any .jsonl/.json file")
            out += [("file", p) for p in found]
        elif path.is_file():
            out.append(("file", path))
        else:
            what = "is not a regular file" if path.exists() else "does not exist"
            raise ConfigError(f"input {path} {what}: expected a result store "
                              "directory, a .jsonl or a .json file")
    return out


def iter_records(paths: Iterable[str | Path] | str | Path,
                 keep: Callable[[dict], Any] | None = None) -> Iterator[Any]:
    """The records :func:`load_records` returns, in its order, one input at a time, each
    made into ``keep(record)`` as it is read (the scorer keeps only the fields it uses),
    so no input's raw records are held whole.  Warnings and errors as load_records'."""
    keep = keep or (lambda rec: rec)
    if isinstance(paths, (str, Path)):
        paths = [paths]
    for kind, path in _inputs(paths):
        if kind == "store":
            yield from _read_store(path, keep)
        elif path.suffix == ".jsonl":
            yield from _read_jsonl(path, keep)
        else:
            yield from _settle((keep(rec) if (o := _outcome(rec, place)) is None else None, o)
                               for place, rec in _read_json(path))


def load_records(paths: Iterable[str | Path] | str | Path) -> list[dict]:
    """Read result records from stores, ``.jsonl`` and ``.json`` files.

    A directory is a result store, read as :mod:`recallbench.runs.store` reads it: all its
    files (``results.jsonl``, ``results.shard-I-of-N.jsonl``) merged to one record per
    config hash, an ok record preferred over failed ones (or, without any such file, every
    ``*.jsonl`` and ``*.json`` directly inside it, in name order).  In a ``.jsonl`` file,
    as in a store, a torn line (a crash mid-write, anywhere in the file) is skipped with a
    :class:`ScoreWarning`.  A ``.json`` file holds a record or a list of records.  Entries
    that are not ``recallbench.result/1`` records are skipped with a warning; a record with
    a value the scorer cannot use is a :class:`ConfigError` (:func:`check_record`); one
    filed under another config's hash, or with impossible counts, is skipped with a
    warning (:func:`recallbench.api.verify.record_problem`).
    """
    return list(iter_records(paths))
