"""Build a dataclass from a user's mapping, with one-line errors.

Every config section (``task``, ``model``, ``train``) and every task's parameters
go through :func:`from_mapping`, so an unknown key, a wrong type or an
out-of-range value is always reported the same way: the dotted field name, the
value given (cut to :data:`ECHO_CHARS` characters by :func:`short`), and what is
allowed.  Every number must be finite: NaN and ±inf are refused in every field
(:func:`from_mapping` for typed fields, :func:`check_finite` for a whole raw config).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import reprlib
import types
import typing
from typing import Any, Mapping

from recallbench.api.errors import ConfigError


ECHO_CHARS = 80  # a value echoed in a message is cut to this many characters
MAX_INT = 2**63 - 1  # the largest integer any field takes (torch's int64)


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = ECHO_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 8
_REPR.maxlevel = 3


def short(value: Any, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters (a long string, a big or deep structure,
    a huge integer): how every message echoes a user's value."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**40:
        return f"<an integer of about {round(value.bit_length() * math.log10(2))} digits>"
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def fail(field: str, value: Any, allowed: str) -> typing.NoReturn:
    raise ConfigError(f"{field} = {short(value)} is not allowed: {allowed}")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_finite(raw: Any, where: str) -> None:
    """ConfigError naming the first NaN or ±inf anywhere in ``raw`` (mappings, lists)."""
    stack = [(where, raw)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            fail(name, value, "must be a finite number")
        if isinstance(value, Mapping):
            stack.extend((f"{name}.{k if isinstance(k, str) else short(k)}"[:2 * ECHO_CHARS], v)
                         for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{name}[{i}]", v) for i, v in enumerate(value))


def _coerce(field: str, value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        for a in inner:
            try:
                return _coerce(field, value, a)
            except ConfigError:
                pass
        names = " or ".join(getattr(a, "__name__", str(a)) for a in inner)
        fail(field, value, f"expected {names}" + (" or null" if type(None) in args else ""))
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        fail(field, value, "expected true or false")
    if hint is int:
        if not is_number(value) or (isinstance(value, float)
                                    and not (math.isfinite(value) and value.is_integer())):
            fail(field, value, "expected an integer")
        if abs(value) > MAX_INT:
            fail(field, value, "expected an integer of at most 2**63 - 1")
        return int(value)
    if hint is float:
        if not is_number(value):
            fail(field, value, "expected a number")
        if isinstance(value, int) and abs(value) > 1e300 or not math.isfinite(value):
            fail(field, value, "expected a finite number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            fail(field, value, "expected a string")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            fail(field, value, "expected a list")
        item = args[0] if args else Any
        return origin(_coerce(f"{field}[{i}]", v, item) for i, v in enumerate(value))
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            fail(field, value, "expected a mapping")
        return dict(value)
    return value


def from_mapping(cls: type, mapping: Mapping[str, Any] | None, section: str, **extra: Any):
    """``cls(**mapping)`` with unknown keys and wrong types reported by name."""
    if mapping is not None and not isinstance(mapping, Mapping):
        raise ConfigError(f"{section} must be a mapping of keys to values, not {short(mapping)}")
    mapping = dict(mapping or {})
    mapping.update(extra)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in mapping.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            name = key if isinstance(key, str) and len(key) <= ECHO_CHARS else short(key)
            raise ConfigError(f"unknown key {section}.{name}{hint}; "
                              f"allowed: {', '.join(sorted(fields))}")
        kwargs[key] = _coerce(f"{section}.{key}", value, hints[key])
    return cls(**kwargs)


def check_range(field: str, value: float, lo: float | None = None, hi: float | None = None,
                why: str = "") -> None:
    """Raise ``ConfigError`` unless ``lo <= value <= hi`` (either bound optional); NaN and
    ±inf are never in range."""
    finite = not isinstance(value, float) or math.isfinite(value)
    if not finite or (lo is not None and value < lo) or (hi is not None and value > hi):
        if lo is not None and hi is not None:
            allowed = f"must be in [{lo}, {hi}]"
        elif lo is not None:
            allowed = f"must be >= {lo}"
        else:
            allowed = f"must be <= {hi}"
        fail(field, value, allowed + (f" {why}" if why else ""))
