"""The edge of a card's learning-rate grid: when most runs choose its end, one more rate.

    edge = lr_edge(card["runs"], [0.003, 0.01, 0.03])   # (0.03, 5, 8): 5 of 8 chose 0.03
    wider_grid([0.003, 0.01, 0.03], 0.03, first)         # [0.003, 0.01, 0.03, 0.09]

A card's runs each choose their rate on validation (``harness.lr_halving``); a grid whose
largest (or smallest) rate wins most runs may be cutting off better rates, so the card
search (``runs.card_search``) says so and, asked to, searches one rate beyond, once per side.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from recallbench.law import run_card

#: the share of the runs that learned which must choose one end of the grid to call it the
#: edge (:func:`lr_edge`), and the fewest such runs
EDGE_SHARE, EDGE_RUNS = 0.5, 4
#: how far beyond its edge a grid is widened: one more rate, this factor out
GRID_STEP = 3.0


def lr_edge(runs: Sequence[Mapping], lrs) -> tuple[float, int, int] | None:
    """(the end of the grid ``lrs``, runs that chose it, runs that learned) when more than
    :data:`EDGE_SHARE` of a card's runs (``card["runs"]``) that left the guess level (at
    least :data:`EDGE_RUNS`) chose its largest or its smallest rate; else None."""
    if not isinstance(lrs, list) or len(lrs) < 2:
        return None
    learned = [r for r in runs if r.get("lr") is not None and r.get("accuracy") is not None
               and r.get("kind") != run_card.KINDS[1]]
    for end in (max(lrs), min(lrs)):
        n = sum(math.isclose(float(r["lr"]), end, rel_tol=1e-9) for r in learned)
        if len(learned) >= EDGE_RUNS and n > EDGE_SHARE * len(learned):
            return end, n, len(learned)
    return None


def wider_grid(lrs: Sequence[float], edge: float, first: Sequence[float]) -> list[float] | None:
    """``lrs`` with one more rate :data:`GRID_STEP` times beyond ``edge``, its end; None when
    that rate would lie more than one step beyond ``first``, the grid the search started
    with (each side is widened once)."""
    new = float(f"{edge * GRID_STEP:.3g}") if edge == max(lrs) else float(f"{edge / GRID_STEP:.3g}")
    if not min(first) / GRID_STEP / 1.01 <= new <= max(first) * GRID_STEP * 1.01:
        return None
    return sorted({*map(float, lrs), new})
