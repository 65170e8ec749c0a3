"""Read a user's YAML file as plain data, within bounds, with one-line errors.

Every YAML file recallbench reads (run configs, sweep files, leaderboard files) goes
through :func:`read_yaml`, so each is refused the same way, in one line naming the
file and what it is, before it can cost much:

* larger than ``limit`` bytes (1 MiB by default), checked before parsing;
* not a regular file, or not UTF-8 text;
* not YAML, Python tags (PyYAML's safe loader), duplicate keys;
* nested deeper than :data:`MAX_DEPTH` (checked while composing, so no RecursionError);
  with libyaml, PyYAML's C parser composes the nodes (some 20 times faster) and caps the
  nesting at 1,000 itself, and the cap of 50 is checked on the composed nodes;
* more than :data:`MAX_NODES` nodes once aliases are expanded (a "billion laughs" file
  is a few hundred bytes that expand to 10⁹ nodes); ``aliases=False`` refuses aliases
  outright.

Example::

    >>> data = read_mapping("my.yaml", "config")      # a dict, or ConfigError
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from recallbench.api.errors import ConfigError
from recallbench.api.fields import short

MAX_BYTES = 1 << 20  # 1 MiB
MAX_DEPTH = 50  # nested mappings/sequences
MAX_NODES = 100_000  # nodes after alias expansion


class NotYAML(ConfigError):
    """The text does not parse as YAML (a subclass, for callers that fall back to text)."""


class _NoDuplicateKeys:
    """A safe constructor's mapping, refusing a key given twice."""

    def construct_mapping(self, node, deep=False):
        """A mapping, refusing a key given twice (before merge keys ``<<`` are applied)."""
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, (str, int, float)) and key in seen:
                    raise ConfigError(f"duplicate key {short(key)} "
                                      f"(line {key_node.start_mark.line + 1})")
                if isinstance(key, (str, int, float)):
                    seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _BoundedLoader(_NoDuplicateKeys, yaml.SafeLoader):
    """PyYAML's safe loader with a depth cap while composing and optional alias refusal."""

    allow_aliases = True

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent) and not self.allow_aliases:
            line = self.peek_event().start_mark.line + 1
            raise ConfigError(f"YAML aliases are not allowed here (line {line})")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(f"nested deeper than {MAX_DEPTH} levels (line {line})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _NoAliasLoader(_BoundedLoader):
    allow_aliases = False


# libyaml's parser (where PyYAML was built with it), with the same constructor
_CLoader = type("_CLoader", (_NoDuplicateKeys, yaml.CSafeLoader), {}) \
    if getattr(yaml, "__with_libyaml__", False) else None


def _expanded_size(root: yaml.Node) -> tuple[int, int, int | None]:
    """(nodes, depth, the line of the first node an alias reuses or None) of the document
    with every alias expanded, in time linear in the composed graph (aliases share nodes,
    so each node is measured once); ConfigError if an alias refers to a node that
    contains it."""
    sizes: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    reused = None
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = ([n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if done:
            parts = [sizes[id(c)] for c in children]
            nodes = min(1 + sum(p[0] for p in parts), MAX_NODES + 1)
            sizes[id(node)] = (nodes, 1 + max((p[1] for p in parts), default=0))
            on_path.discard(id(node))
            continue
        if id(node) in sizes:
            reused = node.start_mark.line + 1 if reused is None else reused
            continue
        if id(node) in on_path:
            raise ConfigError(f"a recursive alias (line {node.start_mark.line + 1})")
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children)
    return (*sizes[id(root)], reused)


def _read_text(path: Path, what: str, limit: int) -> str:
    """The file's text, after checking it is a regular file within ``limit`` bytes."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ConfigError(f"{what} {path}: not a regular file")
        if size > limit:
            raise ConfigError(f"{what} {path}: {size} bytes, larger than the "
                              f"{limit}-byte limit")
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path} ({exc.strerror})") from None
    if len(raw) > limit:
        raise ConfigError(f"{what} {path}: larger than the {limit}-byte limit")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def _parse(text: str, aliases: bool) -> Any:
    """Compose, measure, then construct: nothing is built from an oversized document."""
    load = (_CLoader or (_BoundedLoader if aliases else _NoAliasLoader))(text)
    try:
        try:
            node = load.get_single_node()
        except yaml.scanner.ScannerError as exc:  # libyaml's own cap on nesting
            if "maximum nesting depth" not in str(exc.problem) or exc.problem_mark is None:
                raise
            raise ConfigError(f"nested deeper than {MAX_DEPTH} levels "
                              f"(line {exc.problem_mark.line + 1})") from None
        if node is None:
            return None
        nodes, depth, reused = _expanded_size(node)
        if reused is not None and not aliases:
            raise ConfigError(f"YAML aliases are not allowed here (the value at line {reused} "
                              "is used again)")
        expanded = " once aliases are expanded" if reused is not None else ""
        if nodes > MAX_NODES:
            raise ConfigError(f"more than {MAX_NODES} values{expanded}")
        if depth > MAX_DEPTH:
            raise ConfigError(f"nested deeper than {MAX_DEPTH} levels{expanded}")
        return load.construct_document(node)
    finally:
        load.dispose()


def read_yaml(path: str | Path, what: str, *, limit: int = MAX_BYTES,
              aliases: bool = True) -> Any:
    """The data of a YAML file; ConfigError (one line: ``what``, the path, the problem)."""
    path = Path(path)
    return parse_yaml(_read_text(path, what, limit), f"{what} {path}", aliases=aliases)


def parse_yaml(text: str, what: str, *, aliases: bool = True) -> Any:
    """The data of YAML ``text`` (bounded as a file is); ConfigError starting with ``what``."""
    try:
        return _parse(text, aliases)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    except yaml.constructor.ConstructorError as exc:
        problem = (getattr(exc, "problem", "") or "unsupported tag").strip()
        mark = exc.problem_mark
        raise ConfigError(f"{what}: rejected at line {mark.line + 1 if mark else '?'}: "
                          f"{short(problem)[1:-1]} (only plain YAML data is allowed)") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ConfigError(f"{what}: unreadable value ({short(str(exc).split(':')[0])[1:-1]})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise NotYAML(f"{what}: not valid YAML{where}") from None


def read_mapping(path: str | Path, what: str, *, must: str = "a mapping of keys to values",
                 limit: int = MAX_BYTES, aliases: bool = True) -> dict:
    """:func:`read_yaml` for a file that must hold a mapping (an empty file is ``{}``);
    ``must`` says what the mapping holds, for the message."""
    data = read_yaml(path, what, limit=limit, aliases=aliases)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path}: must be {must}, not a {type(data).__name__}")
    return data
