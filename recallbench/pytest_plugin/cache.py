"""Recall measurements kept on disk, across pytest runs and between pytest-xdist workers.

    key, material = share_key(cfg, factory)      # None, None: cannot be shared
    record, source, error, unavailable = RunCache(folder, session_id).fetch(key, material, train)

A measurement is stored as ``<key>.json`` (schema ``recallbench.pytest-cache/1``: the key's
material, the session that trained it, the record).  The key is the sha256 of everything
that decides the record:

* the resolved config's hash (execution-only keys left out) and the device kind it runs on;
* the adapter's provenance (:func:`recallbench.api.provenance.provenance`: the
  distribution that registered it, its version, the declared library and its version, the
  sha256 of the adapter module's source), and the task module's source hash;
* the versions of Python, recallbench, torch, Lightning;
* for ``factory=`` runs: the factory's label and line and the source hashes of its module
  and of the modules of the classes and functions its code names.  A ``functools.partial``
  or a closure holds values no source shows: it is never shared.

So an edited layer, task or library is a new key and trains again.  One file lock per key
makes the first process to ask train while the others wait and read its result, so
concurrent workers train a config once; files are written to a temporary name and moved
into place (``os.replace``), so a crash never leaves a torn entry.  :func:`clear` removes
only the files this module writes.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import re
from pathlib import Path
from typing import Callable

CACHE_SCHEMA = "recallbench.pytest-cache/1"
_OWN_FILE = re.compile(r"^[0-9a-f]{64}\.json(\.lock|\.\d+\.tmp)?$")

# where a measurement came from: trained here, measured earlier in this session (this or
# another worker), or read from the cache of an earlier run
TRAINED, SESSION, CACHE = "trained", "session", "cache"


def _factory_identity(factory: Callable) -> dict | None:
    """What decides the modules a factory builds; None if something outside any source does."""
    from recallbench.api.provenance import source_sha256

    if isinstance(factory, functools.partial) or getattr(factory, "__closure__", None):
        return None
    code = getattr(factory, "__code__", None)
    named = []
    if code is not None:
        scope = getattr(factory, "__globals__", {})
        named = [scope[n] for n in code.co_names
                 if n in scope and (inspect.isclass(scope[n]) or inspect.isfunction(scope[n]))]
    sources = {}
    for obj in (factory, *named):
        digest = source_sha256(obj)
        if digest is None:
            return None
        sources[obj.__module__] = digest
    qual = getattr(factory, "__qualname__", None) or type(factory).__qualname__
    return {"label": f"{factory.__module__}:{qual}",
            "line": code.co_firstlineno if code is not None else None, "sources": sources}


def share_key(cfg, factory: Callable | None) -> tuple[str | None, dict | None]:
    """(sha256 key, its material) of a resolved config's measurement; (None, None) if it
    cannot be shared between processes."""
    from recallbench.api.canonical import sha256_of
    from recallbench.api.provenance import provenance, source_sha256
    from recallbench.api.record import versions
    from recallbench.api.registry import TASKS
    from recallbench.harness.prepare import pick_device

    adapter = provenance(cfg.model.adapter)
    material = {"config_hash": cfg.hash(), "device": pick_device(cfg.train.device).type,
                "adapter": adapter, "task_source_sha256": source_sha256(TASKS.get(cfg.task.name)),
                "versions": versions(adapter["library"])}
    if factory is not None:
        material["factory"] = _factory_identity(factory)
        if material["factory"] is None:
            return None, None
    return sha256_of(material), material


class RunCache:
    """A folder of measurements, shared by concurrent processes."""

    def __init__(self, root: Path, session_id: str):
        self.root = root
        self.session_id = session_id

    def fetch(self, key: str, material: dict, train: Callable[[], tuple]) -> tuple:
        """(record, source, config error, unavailable reason): the stored measurement of
        ``key``, else ``train()``'s (stored when it gives a record)."""
        from filelock import FileLock

        path = self.root / f"{key}.json"
        with FileLock(str(path) + ".lock"):
            stored = _read(path, key)
            if stored is not None:
                source = SESSION if stored.get("session") == self.session_id else CACHE
                return stored["record"], source, None, None
            record, error, unavailable = train()
            if record is not None:
                _write(path, {"schema": CACHE_SCHEMA, "key": key, "material": material,
                              "session": self.session_id, "record": record})
            return record, TRAINED, error, unavailable


def _read(path: Path, key: str) -> dict | None:
    """A stored entry, or None if there is none or it is not one (then it is retrained)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and data.get("schema") == CACHE_SCHEMA \
        and data.get("key") == key and isinstance(data.get("record"), dict)
    return data if ok else None


def _write(path: Path, data: dict) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True) + "\n")
    os.replace(tmp, path)


def prepare(root: Path, what: str) -> None:
    """Create the cache folder; one-line ValueError naming ``what`` if it cannot be one."""
    if root.exists() and not root.is_dir():
        raise ValueError(f"{what} {root}: not a folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe.{os.getpid()}.tmp"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"{what} {root}: cannot write there ({exc.strerror or exc})") from None


def clear(root: Path) -> int:
    """Remove the entries (and their locks and temporary files) of a cache folder; the
    number of files removed.  Other files in the folder are left alone."""
    removed = 0
    for path in root.iterdir() if root.is_dir() else ():
        if _OWN_FILE.match(path.name):
            path.unlink(missing_ok=True)
            removed += 1
    return removed
