"""What a board's cards would have cost under a looser interval target, replayed from their runs.

    python benchmarks/precision_cost.py --suite leaderboards/cpu-v4 \\
        leaderboards/cpu-v4/submissions/*.yaml [--spreads 1.4,1.5,1.75,2]

The card search (``runs.card_search``) stops at the first batch after which its card is
measured, and a card is measured only when its N50 interval spans at most its target
(``law.run_card.MAX_SPREAD``, 1.3, unless the suite sets ``capacity.max_spread``).  The
search is a function of its records, and a run of a seed is the same run whenever the
search asks for it, so a search stopping at a looser target F visits exactly a prefix of
the batches the stored card visited: its first batch whose card is measured at F.  This
script replays each submitted card (its points rebuilt as records, as ``leaderboard
validate`` does) at each F, nothing trained, and prints per card the runs, work (Mtok) and
the runs' CPU minutes up to that stop, with the card's N50 and interval there; then per F
the board's total, its median card, and how many cards are measured.  Shape entries
(``model.shape``) and states that grow with L are left out (the set the board's cost line
compares).  A target looser than the stored one can be read this way; a tighter one cannot
(the runs past the stored stop were never trained), nor does the replay say whether an
interval that stops at F still covers: ``card_looks.py`` simulates that.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import yaml

from recallbench.law import run_card
from recallbench.leaderboard import load_suite
from recallbench.leaderboard.capacity import method2
from recallbench.leaderboard.points import point_records
from recallbench.runs import card_search


def budget_records(sub: dict, budget: dict) -> list[dict]:
    """The budget's points as result records, each with its learning-rate search."""
    recs = point_records({**sub, "budgets": [budget]})
    return method2.with_protocol(recs, budget["points"])


def at_spread(suite, budget: dict, records: list[dict], spread: float) -> dict:
    """The replayed search's stop at the N50 interval target ``spread``."""
    res = card_search.replay(budget["config"], records, seeds=suite.seeds,
                             **{**method2.settings(suite), "max_spread": spread})
    card, runs = res.card, res.records
    n50 = card.get("n50") or {}
    ci = n50.get("ci") or [None, None]
    return {"status": card.get("status"), "stopped": res.stopped, "runs": len(runs),
            "mtok": sum(run_card.work_tokens(r) for r in runs) / 1e6,
            "cpu_min": sum(float(r.get("cpu_s") or 0.0) for r in runs) / 60,
            "n50": n50.get("value"), "lo": ci[0], "hi": ci[1],
            "cells": sorted((r["config"]["task"]["num_facts"], r["config"]["train"]["seed"])
                            for r in runs)}


def _num(x) -> str:
    return "open" if x is None else f"{x:.3g}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True, help="the board's folder (its suite.yaml)")
    p.add_argument("--spreads", default="1.4,1.5,1.75,2",
                   help="comma-separated N50 interval targets (upper / lower), at least the "
                        "board's own")
    p.add_argument("submissions", nargs="+")
    args = p.parse_args(argv)
    try:
        spreads = [float(s) for s in args.spreads.split(",")]
    except ValueError:
        p.error(f"--spreads: {args.spreads!r} is not a comma-separated list of numbers")
    suite = load_suite(args.suite)
    lo, hi = method2.target(suite), run_card.SPREAD_RANGE[1]
    if any(not lo <= s <= hi for s in spreads):
        p.error(f"--spreads: each target must be in [{lo:g}, {hi:g}]: at least the board's own "
                "(runs past its cards' stops were never trained)")
    rows = []
    for path in args.submissions:
        sub = yaml.safe_load(Path(path).read_text())
        if sub["model"].get("shape"):
            continue
        for b in sub["budgets"]:
            if not b.get("state_size"):
                continue
            recs = budget_records(sub, b)
            rows.append((f"{sub['model']['name']} {b['name']}",
                         [at_spread(suite, b, recs, s) for s in spreads]))
            print(f"{rows[-1][0]:<32}" + "".join(
                f"  F={s:g}: {'m' if r['status'] == 'measured' else 'b'} {r['runs']:>3} runs "
                f"{r['cpu_min']:>6.1f} min {_num(r['n50'])} [{_num(r['lo'])}, {_num(r['hi'])}]"
                for s, r in zip(spreads, rows[-1][1])), flush=True)
    print(f"\n{len(rows)} cards (no shape entries, no states that grow with L)")
    print(f"{'target F':>9}{'measured':>10}{'runs':>7}{'Mtok':>9}{'CPU h':>8}{'median min':>12}")
    for i, s in enumerate(spreads):
        at = [r[i] for _, r in rows]
        print(f"{s:>9g}{sum(a['status'] == 'measured' for a in at):>10}"
              f"{sum(a['runs'] for a in at):>7}{sum(a['mtok'] for a in at):>9.0f}"
              f"{sum(a['cpu_min'] for a in at) / 60:>8.1f}"
              f"{statistics.median(a['cpu_min'] for a in at):>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
