"""A state shape as a board entry: an adapter measured at another shape of each budget's
state S (``leaderboard run --shape TERM=V``, ``submit --shape TERM=V``).

A budget fixes S, not how the adapter spends it.  ``shape = {"term": "key", "value": 8}``
sets one term of the adapter's ``state_shape()`` at every budget, with the model settings
:func:`recallbench.runs.card_shapes.plan` finds for that budget's S (at D32-N4 a key of 8
takes d_state 8 and expand 1; at D32-N8 it is the default).  The submission names its
shape (``model.shape``) and each budget's config is the planned one, which ``validate``
recomputes; a term or value a budget's S does not realise is refused in one line.

    shape = parse("key=8")                          # {"term": "key", "value": 8}
    model = budget_model(suite, "deltanet", suite.budgets[0], shape)
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from recallbench.api.errors import ConfigError
from recallbench.leaderboard.checks import need, short

FLAG = "--shape"


def parse(text: str) -> dict:
    """``TERM=V``: the term (an identifier) and one integer value >= 1."""
    term, sep, value = str(text).partition("=")
    try:
        v = int(value)
    except ValueError:
        v = 0
    if not sep or not term.strip().isidentifier() or v < 1:
        raise ConfigError(f"{FLAG} {short(text, 40)} is not allowed: TERM=V with a term of the "
                          "state's shape and one integer >= 1 (for example key=8)")
    return {"term": term.strip(), "value": v}


def flag(shape: Mapping | None) -> str:
    """`` --shape TERM=V`` for a command that remakes ``shape``'s runs ("" for None)."""
    return f" {FLAG} {shape['term']}={shape['value']}" if shape else ""


def check_suite(suite, what: str) -> None:
    """A shape needs a capacity suite of card method 2: else one line, ``what`` leading it."""
    from recallbench.leaderboard.capacity.method2 import is_v2

    if not is_v2(suite):
        raise ConfigError(f"{what} is for a capacity suite of card method 2; {suite.name} is "
                          "not one")


def check(shape: Any, where: str) -> None:
    """A submission's ``model.shape``: {term: an identifier, value: an integer >= 1}."""
    need(isinstance(shape, dict) and set(shape) == {"term", "value"}
         and isinstance(shape["term"], str) and shape["term"].isidentifier()
         and type(shape["value"]) is int and shape["value"] >= 1, where,
         "model.shape must be {term: a term of the state's shape, value: an integer >= 1}")


def _plan(suite, budget: Mapping, shape: Mapping, base: Mapping):
    """``card_shapes.plan``'s one shape at ``base``; one line naming the budget if refused."""
    from recallbench.runs import card_shapes

    try:
        (planned,) = card_shapes.plan(base, shape["term"], [shape["value"]])
    except ConfigError as exc:
        why = re.split(r" is not allowed(?::| for) ", str(exc), maxsplit=1)[-1]
        raise ConfigError(f"{FLAG} {shape['term']}={shape['value']} is not allowed at budget "
                          f"{budget['name']} of suite {suite.name}: {why}") from None
    return planned


def budget_config(suite, budget: Mapping, shape: Mapping | None, base: Mapping) -> dict:
    """``base`` (the budget's resolved config) at ``shape``; ``base`` itself for None."""
    return _plan(suite, budget, shape, base).base if shape else dict(base)


def budget_model(suite, adapter: str, budget: Mapping, shape: Mapping | None) -> dict:
    """The model config of ``adapter`` at ``budget`` and ``shape`` (the suite's own for None)."""
    from recallbench.leaderboard.capacity.suite import budget_base

    return budget_base(suite, adapter, budget, shape=shape)["model"]


def describe(suite, adapter: str, budget: Mapping, shape: Mapping) -> str:
    """One line: the shape's terms at ``budget`` and the settings that differ from the
    suite's own (``"the suite's settings"`` when none do)."""
    from recallbench.leaderboard.capacity.suite import budget_base
    from recallbench.runs.card_shapes import describe as terms

    own = budget_base(suite, adapter, budget)
    planned = _plan(suite, budget, shape, own)
    model, own = planned.base["model"], own["model"]
    diff = {k: v for k, v in model.items() if k != "options" and own.get(k) != v}
    diff.update({k: v for k, v in (model.get("options") or {}).items()
                 if (own.get("options") or {}).get(k) != v})
    said = ", ".join(f"{k} {v}" for k, v in diff.items()) or "the suite's settings"
    return (f"{adapter} at {budget['name']}, shape {shape['term']}={shape['value']}: "
            f"{terms(planned.shape)} ({said})")
