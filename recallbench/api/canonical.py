"""One canonical form for everything recallbench hashes or writes as JSON.

* :data:`EXECUTION_KEYS`: the config keys that change how a run executes but not what it
  measures (threads, progress bar, device).  They are left out of every hash, so the same
  experiment run on another machine is the same point.
* :func:`canonical_json`: sorted keys, no spaces, ASCII, no NaN; what every hash is taken of.
* :func:`config_hash`: sha256 of a resolved config less its execution keys.
* :func:`plain`: a copy that :func:`json.dumps` writes as standard JSON: numpy scalars to
  Python, tuples to lists, non-finite floats to ``null`` (read: unbounded or undefined).
* :func:`set_dotted`: ``section.key[.sub]=value`` into a raw config mapping.

Example::

    >>> cfg = {"task": {"name": "mqar"}, "model": {}, "train": {"seed": 0, "threads": 2}}
    >>> config_hash(cfg) == config_hash({**cfg, "train": {"seed": 0, "threads": 1}})
    True
    >>> plain({"a": float("inf"), "b": (1, 2)})
    {'a': None, 'b': [1, 2]}
"""
from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Mapping

from recallbench.api.errors import ConfigError

SECTIONS = ("task", "model", "train")

#: keys that do not change what is measured, per section
EXECUTION_KEYS: dict[str, tuple[str, ...]] = {"train": ("threads", "progress", "device")}


def strip_execution(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a config (sections of keys) without its execution-only keys."""
    return {section: {k: v for k, v in dict(values or {}).items()
                      if k not in EXECUTION_KEYS.get(section, ())}
            if isinstance(values, Mapping) else values
            for section, values in config.items()}


def canonical_json(obj: Any) -> str:
    """The one text every hash is taken of; ValueError on NaN/inf, TypeError on non-data."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def sha256_of(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a resolved config, execution-only keys dropped."""
    try:
        return sha256_of(strip_execution(config))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config holds a value that cannot be hashed ({exc})") from None


def plain(obj: Any) -> Any:
    """JSON-ready copy: numpy scalars to Python, tuples to lists, NaN and ±inf to None."""
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, bool) or getattr(getattr(obj, "dtype", None), "kind", "") == "b":
        return bool(obj)
    kind = getattr(getattr(obj, "dtype", None), "kind", None)  # numpy scalars
    if isinstance(obj, int) or kind in ("i", "u"):
        return int(obj)
    if isinstance(obj, float) or kind == "f":
        x = float(obj)
        return x if math.isfinite(x) else None
    return obj


def set_dotted(raw: dict, dotted: str, value: Any, *, what: str = "key") -> None:
    """Set ``section.key[.sub...]`` in a raw config; ConfigError naming ``what`` if malformed.

    Intermediate mappings are created; a non-mapping in the way is an error.
    """
    parts = dotted.split(".")
    if len(parts) < 2 or not all(parts) or parts[0] not in SECTIONS:
        raise ConfigError(f"{what} {dotted!r}: expected section.key with a section among "
                          f"{', '.join(SECTIONS)}, e.g. model.d_state")
    node = raw
    for p in parts[:-1]:
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{what} {dotted!r}: {p} is not a mapping")
        node = child
    node[parts[-1]] = value
