"""Where a new method-2 card would stand among a board's cards at the same budget.

A card says how much its layer recalls; a reader also asks "against what?".  The boards
under ``leaderboards/`` whose suites are card method 2, at the card's V, with a budget of
the card's sizes (d_model, d_state, n_layers) and the card's training protocol, hold the
cards it compares with.  Its place follows the board's ranking rule (``board2.ranked``):
1 + the number of the budget's measured cards whose N50-per-kbit interval lies entirely
above its own; a bound is not ranked.  The board's cards are read as committed (the board
validates them when it is rendered).

    lines = placement(card, base_train, root)   # one line per matching board, or why none
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from recallbench.api.canonical import EXECUTION_KEYS
from recallbench.leaderboard.capacity.board2 import MEASURED, _ci, card_rows
from recallbench.leaderboard.capacity.method2 import is_v2
from recallbench.leaderboard.suite import load_suite, submission_files, suite_dirs
from recallbench.leaderboard.yaml_io import read_yaml_data

SIZES = ("d_model", "d_state", "n_layers")


def _same_protocol(suite, train: Mapping) -> bool:
    """The suite's train section, resolved with every default, is ``train`` (seed and
    execution keys aside; the learning rate too for a layer that trains nothing, which a
    suite runs at one rate, ``runs.capacity.protocol_lr``)."""
    from recallbench.api.config import resolve

    ours = resolve({"task": {"name": "mqar", "vocab_size": 64, "num_facts": 2, "seq_len": 8},
                    "model": {"d_model": 8, "d_state": 4},  # the config's default layer
                    "train": dict(suite.data.get("train") or {})}).to_dict()["train"]
    ignore = set(EXECUTION_KEYS.get("train", ())) | {"seed"}
    if not isinstance(train.get("lr"), list):  # a layer that trains nothing: one lr (0.01)
        ignore.add("lr")
    keys = (set(ours) | set(train)) - ignore
    return all(ours.get(k) == train.get(k) for k in keys)


def _boards(card: Mapping, train: Mapping, root: Path):
    for d in suite_dirs(root):
        try:
            suite = load_suite(d)
        except Exception:  # a broken suite is not this card's to report  # noqa: BLE001
            continue
        if not is_v2(suite) or suite.data["task"].get("vocab_size") != card["task"].get(
                "vocab_size") or not _same_protocol(suite, train):
            continue
        for b in suite.budgets:
            if all(b["model"].get(k) == card["model"].get(k) for k in SIZES):
                yield suite, b["name"]


def placement(card: Mapping[str, Any], train: Mapping[str, Any], root: str | Path) -> list[str]:
    """One line per method-2 board at the card's budget and protocol: its place there."""
    root = Path(root)
    if not root.is_dir():
        return []
    lines = []
    for suite, budget in _boards(card, train, root):
        subs = [(p, read_yaml_data(p)) for p in submission_files(suite.dir)]
        rows = [r for r in card_rows(suite, subs)
                if r["budget"] == budget and r["kind"] == MEASURED]
        where = f"on {suite.name} at {budget} ({len(rows)} measured card(s), same protocol)"
        per = card.get("n50_per_kbit")
        if card.get("status") != MEASURED or not per:
            lines.append(f"{where}: not ranked, the card is {card.get('status')}")
            continue
        lo, hi = _ci(per)
        above = sorted(r["model"] for r in rows if _ci(r["card"]["n50_per_kbit"])[0] > hi)
        below = sum(_ci(r["card"]["n50_per_kbit"])[1] < lo for r in rows)
        lines.append(f"{where}: N50 per kbit {per['value']:.3g} [{lo:.3g}, {hi:.3g}] would "
                     f"rank {1 + len(above)}" + (f" (above it: {', '.join(above)})" if above
                                                  else "")
                     + f"; {below} card(s) lie entirely below it, "
                     f"{len(rows) - len(above) - below} overlap it")
    return lines or [f"no method-2 board in {root.name}/ has a budget of this card's sizes "
                     "with its V and protocol"]
