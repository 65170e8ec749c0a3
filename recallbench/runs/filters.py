"""A sweep's ``where`` filters: ``KEY OP KEY|LITERAL`` comparisons on a config, and
``{any: [...]}`` groups of them.

Parsed by a tiny parser (a dotted config key, a comparison operator, a key or a literal:
a number, true/false/null, a quoted string or a bare word); nothing is evaluated as code::

    Condition.parse("model.d_state <= model.d_model").holds(config)   # config: sections of keys
"""
from __future__ import annotations

import dataclasses
import operator
import re
from typing import Any, Callable, Mapping

from recallbench.api.config import SECTIONS
from recallbench.api.errors import ConfigError
from recallbench.api.fields import short

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "<": operator.lt, ">": operator.gt,
}
#: a dotted config key such as model.d_model
KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+"
_COND = re.compile(r"^\s*(\S+?)\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


@dataclasses.dataclass(frozen=True)
class Operand:
    key: str | None = None  # a dotted config key, or
    value: Any = None  # a literal (number, string, true/false/null)

    def get(self, view: Mapping[str, Any]) -> Any:
        return lookup(view, self.key) if self.key is not None else self.value

    def __str__(self) -> str:
        return self.key if self.key is not None else repr(self.value)


@dataclasses.dataclass(frozen=True)
class Condition:
    """``left OP right``: parsed from text, evaluated on a config mapping."""

    text: str
    left: Operand
    op: str
    right: Operand

    @classmethod
    def parse(cls, text: Any, where: str = "where") -> "Condition":
        if not isinstance(text, str):
            raise ConfigError(f"{where}: {short(text)} is not allowed: expected a string "
                              "'KEY OP KEY|NUMBER', e.g. 'model.d_state <= model.d_model'")
        m = _COND.match(text)
        if not m:
            raise ConfigError(f"{where}: {short(text)} is not a comparison: expected 'KEY OP KEY|NUMBER' "
                              f"with OP one of {' '.join(OPS)}, e.g. 'model.d_state <= model.d_model'")
        left, op, right = _operand(m.group(1), text, where), m.group(2), _operand(m.group(3), text, where)
        if left.key is None and right.key is None:
            raise ConfigError(f"{where}: {short(text)} compares two literals; one side must be a "
                              "config key such as model.d_model")
        return cls(text.strip(), left, op, right)

    def holds(self, view: Mapping[str, Any]) -> bool:
        a, b = self.left.get(view), self.right.get(view)
        if self.op in ("==", "!="):
            return OPS[self.op](a, b)
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
        if not (numeric or (isinstance(a, str) and isinstance(b, str))):
            raise ConfigError(f"where {short(self.text)}: cannot order {short(a)} and {short(b)} "
                              f"({self.left} vs {self.right})")
        return OPS[self.op](a, b)


@dataclasses.dataclass(frozen=True)
class AnyOf:
    """``{any: [cond, ...]}`` in ``where``: holds when at least one of its conditions does."""

    conditions: tuple[Condition, ...]

    @property
    def text(self) -> str:
        return "any(" + "; ".join(c.text for c in self.conditions) + ")"

    def holds(self, view: Mapping[str, Any]) -> bool:
        return any(c.holds(view) for c in self.conditions)


def parse_filter(item: Any, where: str) -> Condition | AnyOf:
    """A ``where`` entry: a comparison string, or ``{any: [comparison, ...]}``."""
    if isinstance(item, Mapping):
        if set(item) != {"any"} or not isinstance(item["any"], list) or not item["any"]:
            raise ConfigError(f"{where}: {short(item)} is not allowed: a comparison string or "
                              "{any: [comparison, ...]}")
        return AnyOf(tuple(Condition.parse(t, f"{where}.any[{i}]") for i, t in enumerate(item["any"])))
    return Condition.parse(item, where)


def _operand(token: str, text: str, where: str) -> Operand:
    if re.fullmatch(KEY, token):
        section = token.split(".", 1)[0]
        if section not in SECTIONS:
            raise ConfigError(f"{where}: {short(text)}: {short(token)} is not a config key "
                              f"(sections: {', '.join(SECTIONS)})")
        return Operand(key=token)
    if _NUMBER.match(token):
        num = float(token)
        return Operand(value=int(num) if num.is_integer() and re.fullmatch(r"[+-]?\d+", token) else num)
    low = token.lower()
    if low in ("true", "false"):
        return Operand(value=low == "true")
    if low in ("null", "none"):
        return Operand(value=None)
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return Operand(value=token[1:-1])
    if re.fullmatch(r"[A-Za-z0-9_\-]+", token):
        return Operand(value=token)  # a bare word, e.g. an adapter name
    raise ConfigError(f"{where}: {short(text)}: cannot read {short(token)} (a config key, a number, "
                      "true/false/null or a word)")


_MISSING = object()


def lookup(view: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key of a nested mapping; ConfigError if there is no such key."""
    node: Any = view
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not isinstance(node, Mapping):
            raise ConfigError(f"{key[:80]} is not a config key ({'.'.join(parts[:i])[:80]} is not a mapping)")
        nxt = node.get(part, _MISSING)
        if nxt is _MISSING:
            if i >= 2:  # inside a free-form mapping such as model.options: absent = unset
                return None
            raise ConfigError(f"{key[:80]} is not a config key")
        node = nxt
    return node
