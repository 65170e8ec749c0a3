"""Build a dataclass from a user's mapping, with one-line errors.

Every config section (``task``, ``model``, ``train``) and every task's parameters
go through :func:`from_mapping`, so an unknown key, a wrong type or an
out-of-range value is always reported the same way: the dotted field name, the
value given, and what is allowed.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Mapping

from recallbench.api.errors import ConfigError


def fail(field: str, value: Any, allowed: str) -> typing.NoReturn:
    raise ConfigError(f"{field} = {value!r} is not allowed: {allowed}")


def _coerce(field: str, value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        errors = []
        for a in inner:
            try:
                return _coerce(field, value, a)
            except ConfigError as exc:
                errors.append(exc)
        names = " or ".join(getattr(a, "__name__", str(a)) for a in inner)
        fail(field, value, f"expected {names}" + (" or null" if type(None) in args else ""))
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        fail(field, value, "expected true or false")
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            fail(field, value, "expected an integer")
        return int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail(field, value, "expected a number")
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
    mapping = dict(mapping or {})
    mapping.update(extra)
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{section} must be a mapping of keys to values")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in mapping.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(
                f"unknown key {section}.{key}{hint}; allowed: {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(f"{section}.{key}", value, hints[key])
    return cls(**kwargs)


def check_range(field: str, value: float, lo: float | None = None, hi: float | None = None,
                why: str = "") -> None:
    """Raise ``ConfigError`` unless ``lo <= value <= hi`` (either bound optional)."""
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        if lo is not None and hi is not None:
            allowed = f"must be in [{lo}, {hi}]"
        elif lo is not None:
            allowed = f"must be >= {lo}"
        else:
            allowed = f"must be <= {hi}"
        fail(field, value, allowed + (f" {why}" if why else ""))
