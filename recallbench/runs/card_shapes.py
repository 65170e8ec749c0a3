"""One layer at several shapes of the same state S: a method-2 card per shape and which shape
recalls most per state.

    shapes = plan(base, "key", [4, 8, 16, 32])      # ConfigError names the values allowed
    done = measure(shapes, lambda s: card_search.measure(s.base, run_cell=...))
    summary(done)["best"]["n50_per_kbit"]            # {"verdict": "highest", "shape": "key-32"}

A shape sets one term of the adapter's ``state_shape()`` (``key``, ``heads``, or the layer's
own) through its ``shape_overrides`` at the base config's S; :func:`recallbench.api.adapter
.realisable` keeps the values whose built adapter has that S and that term, and any other
value is refused in one line.  Each shape is searched on its own
(:func:`recallbench.runs.card_search.measure`, the same seeds and budget), so its card is a
normal method-2 card.  The summary ranks the measured cards by N50 per kbit and by S_eff/S:
a shape is named the highest only when its 95% interval lies above every other shape's
(a bound's open side counts as reaching 0 or ∞); when intervals overlap it says "not
separable" and names the shapes whose interval meets the highest one's.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

from recallbench.api.adapter import realisable
from recallbench.api.config import resolve
from recallbench.api.errors import ConfigError
from recallbench.api.registry import ADAPTERS

SCHEMA = "recallbench.shapes/1"
#: what the summary ranks: card field -> its name in the summary
METRICS = {"n50_per_kbit": "N50 per kbit", "ratio": "S_eff/S"}


@dataclasses.dataclass
class Shape:
    name: str  # e.g. "key-4": the card's subdirectory
    term: str
    value: int
    shape: dict  # the adapter's state_shape() at this config
    base: dict  # the card's base config (canonical)


def _adapter(base: Mapping[str, Any]):
    cfg = resolve(copy.deepcopy(dict(base)))
    return ADAPTERS.require(cfg.model.adapter)(cfg.model)


def plan(base: Mapping[str, Any], term: str, values: Sequence[int]) -> list[Shape]:
    """The configs that realise ``term`` = each of ``values`` at ``base``'s S; ConfigError
    (one line naming ``--shapes``, the term and the values allowed) for any other."""
    adapter = _adapter(base)
    state, shape = adapter.state_size(), adapter.state_shape()
    name = adapter.name
    if not shape:
        raise ConfigError(f"--shapes is not allowed for adapter {name}: its state has no "
                          "shape (it grows with L, or the adapter does not report one)")
    if term not in shape:
        raise ConfigError(f"--shapes {term[:40]} is not allowed: adapter {name}'s state shape "
                          f"has the terms {', '.join(shape)}")
    got = realisable(adapter, term)
    allowed = ", ".join(map(str, sorted(got))) or f"none but {shape[term]}"
    for v in values:
        if v not in got:
            raise ConfigError(f"--shapes {term}={v} is not allowed: adapter {name} at "
                              f"S = {state} realises {term} in {{{allowed}}}")
    out = []
    for v in values:
        cfg = copy.deepcopy(dict(base))
        cfg["model"] = dataclasses.asdict(got[v])
        cfg = resolve(cfg).to_dict()
        out.append(Shape(f"{term}-{v}", term, int(v), _adapter(cfg).state_shape(), cfg))
    return out


def parse(text: str) -> tuple[str, list[int]]:
    """``--shapes TERM=V1,V2,...``: (term, distinct values >= 1, in the order given)."""
    term, sep, rest = str(text).partition("=")
    try:
        values = [int(v) for v in rest.split(",") if v.strip()]
    except ValueError:
        values = []
    if (not sep or not term.strip().isidentifier() or len(values) < 2
            or len(set(values)) != len(values) or min(values) < 1):
        raise ConfigError(f"--shapes {str(text)[:40]!r} is not allowed: TERM=V1,V2,... with a "
                          "term of the state's shape and at least two distinct integers >= 1 "
                          "(for example key=4,8,16,32)")
    return term.strip(), values


def measure(shapes: Sequence[Shape], search: Callable[[Shape], Any],
            say: Callable[[str], None] = print) -> list[tuple[Shape, Any]]:
    """``search(shape)`` (a :class:`recallbench.runs.card_search.Result`) for each shape in
    turn; stops after the first one that did not finish (its card is then unfinished)."""
    out = []
    for i, s in enumerate(shapes):
        say(f"capacity: shape {i + 1} of {len(shapes)}: {s.name} ({describe(s.shape)})")
        res = search(s)
        out.append((s, res))
        if not getattr(res, "finished", True) or getattr(res, "failed", False):
            break
    return out


def describe(shape: Mapping[str, int]) -> str:
    return " × ".join(f"{k} {v}" for k, v in shape.items())


def _interval(card: Mapping, key: str) -> tuple[float, float] | None:
    """A card's interval of ``key``; a bound's open side reaches 0 or ∞; None without one."""
    entry = card.get(key)
    if not isinstance(entry, Mapping):
        return None
    lo, hi = (entry.get("ci") or [None, None])[:2]
    bound = (card.get("n50") or {}).get("bound")
    lo = 0.0 if lo is None or bound == "upper" else float(lo)
    hi = math.inf if hi is None or bound == "lower" else float(hi)
    return lo, hi


def rank(cards: Mapping[str, Mapping], key: str) -> dict:
    """Which card has the highest ``key`` (a measured card's value), and whether its interval
    lies above every other card's: "highest", "not separable" (with the shapes whose
    interval meets it), or "no measured card"."""
    measured = {n: c for n, c in cards.items()
                if c.get("status") == "measured" and (c.get(key) or {}).get("value") is not None}
    if not measured:
        return {"verdict": "no measured card", "shape": None, "overlaps": []}
    best = max(measured, key=lambda n: measured[n][key]["value"])
    lo = _interval(measured[best], key)[0]
    overlaps = []
    for n, c in cards.items():
        iv = _interval(c, key) or (0.0, math.inf)  # no interval: it could be anywhere
        if n != best and iv[1] >= lo:
            overlaps.append(n)
    return {"verdict": "not separable" if overlaps else "highest", "shape": best,
            "value": measured[best][key]["value"], "ci": list(_interval(measured[best], key)),
            "overlaps": overlaps}


def summary(done: Sequence[tuple[Shape, Any]]) -> dict:
    """The multi-shape result: each shape's card headline numbers and the ranking."""
    cards = {s.name: r.card for s, r in done}
    rows = [{"name": s.name, "term": s.term, "value": s.value, "shape": s.shape,
             "status": r.card.get("status"), "stopped": r.stopped,
             **{k: r.card.get(k) for k in ("state_size", "n50", *METRICS)}} for s, r in done]
    return {"schema": SCHEMA, "term": done[0][0].term if done else None,
            "state_size": rows[0]["state_size"] if rows else None, "shapes": rows,
            "best": {k: rank(cards, k) for k in METRICS}}


def verdict_line(best: Mapping, metric: str) -> str:
    """One line of the ranking, never naming a shape as higher when the intervals overlap."""
    name = METRICS[metric]
    if best["verdict"] == "no measured card":
        return f"{name}: no shape has a measured card, so none is ranked"
    if best["verdict"] == "not separable":
        return (f"{name}: not separable: {best['shape']} has the highest value "
                f"({best['value']:.3g}) but its interval meets {', '.join(best['overlaps'])}'s")
    lo, hi = best["ci"]
    return (f"{name}: {best['shape']} recalls most per state ({best['value']:.3g} "
            f"[{lo:.3g}, {hi:.3g}], above every other shape's interval)")


def render_markdown(summ: Mapping) -> str:
    """shapes.md: a row per shape (its card in its own directory) and the ranking."""
    from recallbench.law.card_render import interval, num

    lines = [f"# Capacity by state shape: {summ['term']} at S = {summ['state_size']}", "",
             "| shape | state | status | N50 | N50 per kbit | S_eff/S | card |",
             "|---|---|---|---|---|---|---|"]
    for r in summ["shapes"]:
        cells = [f"{num((r.get(k) or {}).get('value'))} {interval((r.get(k) or {}).get('ci'))}"
                 if r.get(k) else "–" for k in ("n50", "n50_per_kbit", "ratio")]
        lines.append(f"| {r['name']} | {describe(r['shape'])} | {r['status']} | "
                     + " | ".join(cells) + f" | [{r['name']}/card.md]({r['name']}/card.md) |")
    lines += ["", *(f"- {verdict_line(summ['best'][k], k)}" for k in METRICS), "",
              "A shape is named only when its 95% interval lies above every other shape's; a "
              "bound's open side reaches 0 or ∞.", ""]
    return "\n".join(lines)
