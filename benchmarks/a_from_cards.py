"""The full-Mamba coefficient a (the paper's heuristic: 5/8 on MQAR) re-read from
method-2 capacity cards of one suite and budget, beside the linear reference's card.

    python benchmarks/a_from_cards.py --suite leaderboards/cpu-v4 --budget D32-N4 \
        --store linear-mamba=STORE1 --store mamba2=STORE2 [--store mamba=STORE3]

Each card is replayed from its store (nothing trains; an unfinished search is said so) and
its S_eff/S read as a (``law.coefficients.a_implied``): against the law's reference
(a_linear / r) and against this protocol's linear-mamba card (a_linear · r_ref / r).
"""
from __future__ import annotations

import argparse

from recallbench.law.coefficients import A_TABLE, a_implied
from recallbench.leaderboard import load_suite
from recallbench.leaderboard.capacity import method2
from recallbench.leaderboard.capacity.suite import budget_base
from recallbench.runs.store import Store


def card(suite, budget, adapter, store):
    b = next(x for x in suite.budgets if x["name"] == budget)
    return method2.replay(suite, budget_base(suite, adapter, b), Store(store).read().records)


def triple(entry):
    return entry["value"], entry["ci"][0], entry["ci"][1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True)
    p.add_argument("--budget", required=True)
    p.add_argument("--store", action="append", required=True, metavar="ADAPTER=DIR")
    p.add_argument("--reference", default="linear-mamba")
    args = p.parse_args()
    suite = load_suite(args.suite)
    stores = dict(s.split("=", 1) for s in args.store)
    cards = {a: card(suite, args.budget, a, d) for a, d in stores.items()}
    ref = cards.get(args.reference)
    ref_ok = ref is not None and ref.card["status"] == "measured"
    a_full = A_TABLE[("full", "mqar")]
    print(f"{suite.name} {args.budget}: the paper's a_full = {a_full:g} (a_linear = "
          f"{A_TABLE[('linear', 'mqar')]:g})")
    print("| card | status | runs | N50 [95%] | S_eff/S [95%] | a vs the law's reference | "
          f"a vs this protocol's {args.reference} |")
    print("|---|---|---|---|---|---|---|")
    for a, res in cards.items():
        c = res.card
        n50, r = c.get("n50") or {}, c.get("ratio") or {}
        cells = [a, c["status"] + ("" if res.finished else " (search unfinished)"),
                 str(len(c.get("runs") or [])),
                 f"{n50.get('value', 0):.3g} [{n50['ci'][0]:.3g}, {n50['ci'][1]:.3g}]"
                 if n50.get("ci") and None not in n50["ci"] else "–"]
        if c["status"] == "measured" and r.get("ci"):
            v, lo, hi = a_implied(triple(r))
            cells += [f"{r['value']:.3g} [{r['ci'][0]:.3g}, {r['ci'][1]:.3g}]",
                      f"{v:.3g} [{lo:.3g}, {hi:.3g}]"]
            if ref_ok and a != args.reference:
                v, lo, hi = a_implied(triple(r), reference=triple(ref.card["ratio"]))
                cells.append(f"{v:.3g} [{lo:.3g}, {hi:.3g}]"
                             + (" holds 5/8" if lo <= a_full <= hi else " excludes 5/8"))
            else:
                cells.append("–")
        else:
            cells += ["not measured: no a is read from a bound", "–", "–"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
