"""Reading and writing leaderboard YAML as plain data, safely.

Files are read with a size limit checked before parsing, with PyYAML's safe loader (no
Python tags), refusing aliases (no billion-laughs expansion), duplicate keys and nesting
deeper than :data:`MAX_DEPTH`; every problem is one line naming the file.  Writing never emits aliases, so what we write the
reader accepts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from recallbench.api.errors import ConfigError

MAX_BYTES = 1 << 20  # 1 MiB: larger files are refused before parsing
MAX_DEPTH = 32  # a submission nests 6 levels; deeper is refused while parsing


class _SafeNoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors/aliases (no billion-laughs expansion) and
    nesting deeper than MAX_DEPTH (no RecursionError from the recursive composer)."""

    _depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise ConfigError(f"YAML aliases are not allowed in leaderboard files "
                              f"(line {event.start_mark.line + 1})")
        if self._depth >= MAX_DEPTH:
            raise ConfigError(f"nested deeper than {MAX_DEPTH} levels (line {event.start_mark.line + 1})")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _duplicate_check(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dup = sorted({str(k) for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(f"duplicate key {dup[0]!r} (line {node.start_mark.line + 1})")
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_SafeNoAliasLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _duplicate_check)


def _read_text(path: Path, what: str, limit: int) -> str:
    """The file's text, after checking it is a regular file within ``limit`` bytes."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read ({exc.strerror})") from None
    if not path.is_file():
        raise ConfigError(f"{what} {path}: not a regular file")
    if size > limit:
        raise ConfigError(f"{what} {path}: {size} bytes, larger than the {limit}-byte limit")
    with open(path, "rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise ConfigError(f"{what} {path}: larger than the {limit}-byte limit")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not UTF-8 text") from None


def read_yaml_data(path: str | Path, what: str = "submission", limit: int = MAX_BYTES) -> Any:
    """Parse a YAML data file safely: size checked first, safe loader, one-line errors."""
    path = Path(path)
    text = _read_text(path, what, limit)
    try:
        return yaml.load(text, Loader=_SafeNoAliasLoader)  # noqa: S506 (a SafeLoader subclass)
    except ConfigError as exc:
        raise ConfigError(f"{what} {path}: {exc}") from None
    except yaml.constructor.ConstructorError as exc:
        tag = getattr(exc, "problem", "") or "unsupported tag"
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        raise ConfigError(f"{what} {path}: rejected at line {line}: {tag.strip()} "
                          "(only plain YAML data is allowed; no Python tags)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{what} {path}: not valid YAML{where}") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"{what} {path}: unreadable value ({str(exc).split(':')[0][:80]})") from None


class _NoAliasDumper(yaml.SafeDumper):
    """Safe dumper that writes shared objects out in full (the reader refuses aliases)."""

    def ignore_aliases(self, data):
        return True


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, default_flow_style=None,
                     width=100, allow_unicode=False)
