"""Small checks shared by suites and submissions: one-line errors, numbers, names, paths.

Every failed check raises :class:`ConfigError` as ``"<where>: <message>"``.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from recallbench.api.errors import ConfigError
from recallbench.api.fields import short  # noqa: F401 (the one way messages echo a value)

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")


def need(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{where}: {msg}")


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_num(x) -> bool:
    """A finite int or float (bools excluded) that converts to a float (10**400 does not)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


#: the largest count (queries, steps) a file may claim: far above any real run, and small
#: enough that every ratio of counts is an ordinary float
MAX_COUNT = 10 ** 12


def agrees(a: Any, c: Any) -> bool:
    """A stored value and its recomputation agree: both null, the same text or flag,
    mappings with the same keys and lists of the same length whose entries agree, the same
    infinity (an interval a card's cells do not close), or finite numbers within 2% (what
    validation allows for a refitted score or card)."""
    if isinstance(a, (str, bool)) or isinstance(c, (str, bool)):
        return a == c
    if isinstance(a, dict) or isinstance(c, dict):
        return (isinstance(a, dict) and isinstance(c, dict) and set(a) == set(c)
                and all(agrees(a[k], c[k]) for k in a))
    if isinstance(a, list) or isinstance(c, list):
        return (isinstance(a, list) and isinstance(c, list) and len(a) == len(c)
                and all(agrees(x, y) for x, y in zip(a, c)))
    if a is None or c is None:
        return a is None and c is None
    if isinstance(a, float) and isinstance(c, float) and (math.isinf(a) or math.isinf(c)):
        return a == c
    return is_num(a) and is_num(c) and math.isclose(a, c, rel_tol=0.02, abs_tol=1e-6)


def _kind(x: Any) -> str:
    """What a recomputed value is, in words (what its stored value must be)."""
    if isinstance(x, dict):
        return "a mapping"
    if isinstance(x, list):
        return f"a list of {len(x)} entries"
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true or false"
    if isinstance(x, str):
        return "text"
    return "an integer" if isinstance(x, int) else "a number"


def difference(a: Any, c: Any, path: str) -> str | None:
    """Where a stored value ``a`` is not its recomputation ``c`` (named from ``path``), in
    words, or None.  Recursively: the same keys (none unknown, none missing), the same kind
    of value (a mapping, a list of as many entries, text, a flag, null, an integer, a
    number), texts, flags and integers equal, numbers as :func:`agrees` has them (2%, the
    same infinity).  Nothing here knows what the value holds: a whole stored result (a
    capacity card, of any schema) is checked against the one its data make."""
    if type(a) is not type(c):
        return f"{path} = {short(a)} must be {_kind(c)}, as recomputed ({short(c)})"
    if isinstance(c, dict):
        for k in a:
            if k not in c:
                return f"{path} holds the unknown field {short(k)} (the recomputed {path} has not)"
        for k in c:
            if k not in a:
                return f"{path} lacks the field {short(k)} (the recomputed {path} has it)"
            found = difference(a[k], c[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(c, list):
        if len(a) != len(c):
            return f"{path} holds {len(a)} entries, the recomputed {len(c)}"
        return next((d for i, (x, y) in enumerate(zip(a, c))
                     if (d := difference(x, y, f"{path}[{i}]"))), None)
    same = agrees(a, c) if isinstance(c, float) else a == c
    return None if same else f"{path} = {short(a)} is not the recomputed {short(c)}"


def is_count(x, low: int = 0) -> bool:
    """An int in [low, MAX_COUNT] (bools excluded)."""
    return is_int(x) and low <= x <= MAX_COUNT


def check_name(value: Any, where: str) -> str:
    need(isinstance(value, str) and bool(NAME_RE.match(value)) and ".." not in value,
         where, f"{short(value)} is not a plain name (letters, digits, . _ + -; no '/', no '..')")
    return value


def check_file_name(path: Path) -> Path:
    """A submission file's name: a plain name (as :func:`check_name`) then ``.yaml`` or
    ``.yml``, so that it can be shown anywhere (README.md, the page) as it is."""
    stem, suffix = (path.name[:-len(path.suffix)], path.suffix) if path.suffix else (path.name, "")
    need(suffix in (".yaml", ".yml") and bool(NAME_RE.match(stem)) and ".." not in stem,
         f"{path.parent}{os.sep}{short(path.name)}",
         "a submission file name is a plain name (letters, digits, . _ + -; 1 to 64 "
         "characters, starting with a letter or digit) then .yaml")
    return path


def check_relative_path(value: Any, where: str) -> str:
    """A path-like field: relative, inside the leaderboard folder, no '..', no drive."""
    need(isinstance(value, str) and value != "", where, "a relative path is required")
    p = value.replace("\\", "/")
    need(not p.startswith("/") and not re.match(r"^[A-Za-z]:", p) and "\x00" not in p,
         where, f"{short(value)} is an absolute path; only paths inside the leaderboard folder")
    need(".." not in p.split("/"), where, f"{short(value)} escapes the leaderboard folder ('..')")
    return value


def check_keys(obj: Any, allowed: set, required: set, where: str) -> None:
    """``obj`` is a mapping with only ``allowed`` keys and all ``required`` ones."""
    need(isinstance(obj, dict), where, "must be a mapping")
    unknown = sorted(short(k) for k in set(obj) - allowed)
    need(not unknown, where, f"unknown field {unknown[0] if unknown else ''}")
    missing = sorted(required - set(obj))
    need(not missing, where, f"missing field {missing[0] if missing else ''!r}")


def slug(text: str) -> str:
    """A plain file name made from free text (at most 64 characters)."""
    s = re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-.")[:64]
    return s or "model"
