"""The board's state shapes: each adapter's default shape beside the best of the shapes
submitted for it at the same state S (``recallbench.runs.card_shapes.rank``).

A shape is one more submission of the adapter at settings that change the state's shape
and not its size (``leaderboard run --shape heads=4``, then ``submit --shape heads=4
--model-name rwkv6-heads-4``; ``shape_entry``), or with ``--set`` of a setting the suite
leaves open.  Per budget, the cards of one adapter at one fixed S with at
least two shapes form a group:

    groups(suite, rows)   # [{"budget", "adapter", "state_size", "default", "rows", "best"}]

``default`` is the row whose model config is the suite's own for the adapter (None when that
card is not submitted); ``best`` is ``card_shapes.rank`` by N50 per kbit over the group: a
shape is named "highest" only when its 95% interval lies above every other shape's (a
bound's open side reaches 0 or ∞), else "not separable", naming the shapes its interval
meets; a group without a measured card names none.
"""
from __future__ import annotations

from typing import Mapping

from recallbench.law.card_render import estimate
from recallbench.law.run_card_render import shape_text
from recallbench.leaderboard.capacity.board import MEASURED, NO_RECALL, bounded

KEY = "n50_per_kbit"
HEAD = ("budget", "adapter", "S", "default shape", "N50 per kbit [95%]", "highest shape",
        "N50 per kbit [95%]", "verdict")
NOTE = (
    "Each adapter at its default state shape and at the shape with the highest N50 per kbit "
    "among those submitted at the same S (their cards are ranked above as any other). A "
    "shape is named highest only when its 95% interval lies above every other shape's; when "
    "intervals overlap the verdict is \"not separable\" and names the shapes that overlap. "
    "A shape is measured as the adapter at other settings that keep each budget's S: "
    "`recallbench leaderboard run ... --shape TERM=V`, then `recallbench submit ... "
    "--shape TERM=V --model-name NAME-TERM-V` (`recallbench capacity --adapter NAME "
    "--shapes TERM=V1,V2 --dry-run` lists the shapes an adapter realises).")


def groups(suite, rows: list[dict]) -> list[dict]:
    """Per budget (the suite's order), each adapter's cards at one fixed S with at least two
    shapes: the default row, every row, and the ranking (``card_shapes.rank``)."""
    from recallbench.leaderboard.capacity.suite import budget_base
    from recallbench.runs.card_shapes import rank

    out = []
    for b in suite.budgets:
        by: dict[tuple, list[dict]] = {}
        for r in rows:
            if r["budget"] == b["name"] and r["state_size"]:
                by.setdefault((r["adapter"], r["state_size"]), []).append(r)
        for (adapter, state), mine in sorted(by.items()):
            shapes = {shape_text(r["card"].get("state_shape")) for r in mine}
            if len(mine) < 2 or len(shapes) < 2:
                continue
            own = budget_base(suite, adapter, b)["model"]
            default = next((r for r in mine if r["card"].get("model") == own), None)
            out.append({"budget": b["name"], "adapter": adapter, "state_size": state,
                        "default": default, "rows": mine,
                        "best": rank({r["model"]: r["card"] for r in mine}, KEY)})
    return out


def _named(r: Mapping | None) -> str:
    if r is None:
        return "not submitted"
    return f"{r['model']} ({shape_text(r['card'].get('state_shape')) or 'no shape'})"


def _value(r: Mapping | None) -> str:
    if r is None:
        return "–"
    c = r["card"]
    if c.get("status") == MEASURED:
        return estimate(c.get(KEY))
    side = "upper" if c.get("status") == NO_RECALL else (c.get("n50") or {}).get("bound")
    return f"{c.get('status')}: {bounded(c.get(KEY), side)}"


def verdict(best: Mapping) -> str:
    if best["verdict"] == "no measured card":
        return "no shape measured: none named"
    if best["verdict"] == "not separable":
        return f"not separable: overlaps {', '.join(best['overlaps'])}"
    return "highest: above every other shape's interval"


def table(found: list[dict]) -> list[list[str]]:
    """One row per group, in the order of :data:`HEAD`."""
    out = []
    for g in found:
        best = next((r for r in g["rows"] if r["model"] == g["best"]["shape"]), None)
        out.append([g["budget"], g["adapter"], str(int(g["state_size"])), _named(g["default"]),
                    _value(g["default"]), _named(best) if best else "none", _value(best),
                    verdict(g["best"])])
    return out
