"""Do two method-2 cards of one layer agree?  The test of a card by re-seeding.

Two cards of the same layer, budget and protocol, trained from disjoint seeds, estimate the
same N50.  Each card gives a range for it: a measured card its 95% interval; a bound its
interval when the cells bracket N50 but the interval is too wide (``bound: "interval"``),
[lo, ∞) when every cell's median run recalls at least half (``"lower"``), (0, hi] when none
does (``"upper"``); a card with no N50 (every run failed) gives none.

    a = agreement(card_seeds_01, card_seeds_23)
    a["agree"]     # True when the two ranges overlap (None: a card has no range)
    a["inside"]    # [a's point in b's range, b's point in a's range] (None without points)
    a["ratio"]     # b's N50 / a's N50

Overlap is the weakest agreement two honest intervals owe each other: two independent 95%
intervals of equal width around one quantity overlap with probability 99.4%.  A point inside
the other's interval is stronger: 83% for equal widths (the capture percentage of Cumming &
Maillardet, 2006, "Confidence intervals and replication"); both are reported.
"""
from __future__ import annotations

import math
from typing import Any, Mapping


def n50_range(card: Mapping[str, Any]) -> tuple[float, float] | None:
    """The range a card gives for N50 (see the module's text); None without one."""
    n50 = card.get("n50")
    if not isinstance(n50, Mapping) or not isinstance(n50.get("ci"), (list, tuple)):
        return None
    lo, hi = n50["ci"]
    lo = float(lo) if lo is not None else 0.0
    hi = float(hi) if hi is not None else math.inf
    side = n50.get("bound")
    if side == "lower":
        return lo, math.inf
    if side == "upper":
        return 0.0, hi
    return lo, hi


def _inside(x: float | None, r: tuple[float, float]) -> bool | None:
    return None if x is None else r[0] <= x <= r[1]


def agreement(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Whether cards ``a`` and ``b`` agree on N50: their ranges, overlap and points."""
    ra, rb = n50_range(a), n50_range(b)
    pa = (a.get("n50") or {}).get("value")
    pb = (b.get("n50") or {}).get("value")
    out: dict[str, Any] = {"status": [a.get("status"), b.get("status")],
                           "range": [ra, rb], "n50": [pa, pb], "agree": None,
                           "inside": [None, None], "ratio": None}
    if ra is None or rb is None:
        return out
    out["agree"] = max(ra[0], rb[0]) <= min(ra[1], rb[1])
    out["inside"] = [_inside(pa, rb), _inside(pb, ra)]
    if pa and pb:
        out["ratio"] = float(pb) / float(pa)
    return out


def describe(a: Mapping[str, Any]) -> str:
    """``agreement``'s result in one line."""
    def rng(r):
        if r is None:
            return "no N50"
        lo, hi = r
        if math.isinf(hi):
            return f"≥ {lo:.3g}"
        return f"≤ {hi:.3g}" if lo == 0 else f"[{lo:.3g}, {hi:.3g}]"

    def pt(p):
        return "—" if p is None else f"{p:.3g}"

    (sa, sb), (ra, rb), (pa, pb) = a["status"], a["range"], a["n50"]
    if a["agree"] is None:
        verdict = "cannot be compared (a card has no N50)"
    else:
        verdict = "agree (the ranges overlap)" if a["agree"] else "DISAGREE (disjoint ranges)"
    text = (f"N50 {pt(pa)} {rng(ra)} ({sa}) against {pt(pb)} {rng(rb)} ({sb}): {verdict}")
    if a["inside"][0] is not None and a["inside"][1] is not None:
        n = sum(bool(x) for x in a["inside"])
        text += f"; {n} of 2 points inside the other's range"
    return text
