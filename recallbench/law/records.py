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
from typing import Any, Iterable

from recallbench.api.errors import ConfigError
from recallbench.api.fields import is_number, short

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


def _read_jsonl(path: Path, whole: bool = True) -> list[tuple[str, Any]]:
    """(place, value) of each JSON line; torn lines skipped with a warning, as a store's.
    A ``whole`` input file none of whose lines is JSON is not a JSON-lines file at all."""
    from recallbench.runs.store import scan_lines

    items, torn = scan_lines(path, _warn)
    if whole and torn and not items:
        raise ConfigError(f"input {path}: not a JSON-lines file (no line of it is JSON; "
                          f"line {torn[0]} is not UTF-8 or not JSON)")
    return [(f"{path}:{n}", item) for n, item in items]


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


def _read_store(path: Path) -> list[tuple[str, Any]]:
    """A store directory: every file's records checked where they are, then merged to one
    per config hash as the store itself merges them (an ok record over failed ones)."""
    from recallbench.runs import store as result_store

    places: dict[int, str] = {}
    records = []
    for f in result_store.store_files(path):
        for place, rec in _read_jsonl(f, whole=False):
            if isinstance(rec, dict) and isinstance(rec.get("config_hash"), str):
                places[id(rec)] = place
                records.append(rec)
            else:
                _warn(f"{place}: ignoring an entry that is not a result record")
    merged, duplicates = result_store.merge_records(records)
    if duplicates:
        _warn(f"{path}: {duplicates} duplicate records of the same config_hash merged (an ok "
              "record kept over failed ones)")
    return [(places[id(rec)], rec) for rec in merged]


def _inputs(paths: Iterable[str | Path]) -> list[tuple[str, Path]]:
    """(kind, path) of every input: a store directory, or a .jsonl / .json file."""
    from recallbench.runs import store as result_store

    out = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir() and result_store.is_store(path):
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
    warning (:func:`recallbench.runs.verify.record_problem`).
    """
    from recallbench.runs.verify import record_problem

    if isinstance(paths, (str, Path)):
        paths = [paths]
    records: list[dict] = []
    for kind, path in _inputs(paths):
        items = (_read_store(path) if kind == "store"
                 else _read_jsonl(path) if path.suffix == ".jsonl" else _read_json(path))
        for place, rec in items:
            if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
                got = rec.get("schema") if isinstance(rec, dict) else type(rec).__name__
                _warn(f"{place}: skipping an entry that is not a {SCHEMA} record "
                      f"(schema {short(got, 40)})")
                continue
            check_record(rec, place)
            problem = record_problem(rec)  # filed under another config's hash, impossible counts
            if problem is not None:
                _warn(f"{place}: {problem}")
                continue
            records.append(rec)
    return records
