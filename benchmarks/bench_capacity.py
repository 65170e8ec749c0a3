"""CPU time of one capacity card (method 2), the protocol as it is beside the halving one.

    python benchmarks/bench_capacity.py                          # linear-mamba at D32-N8
    python benchmarks/bench_capacity.py --d-state 4 --seeds 0,1
    python benchmarks/bench_capacity.py --only new               # one protocol

Runs ``recallbench capacity``'s card search (``recallbench.runs.card_search.run``, as the
CLI's default method 2 calls it) once per protocol, each in its own temporary store:
``old``, the card protocol (``recallbench.runs.capacity.TRAIN``: every lr candidate trains
``max_steps``), and ``new``, the same with ``train.lr_rung`` (successive halving of the
candidates, extension judged before the anneal: ``recallbench.harness.lr_halving``).
Printed per protocol: the runs' CPU minutes (every thread of each run's process), the
training work, the runs, N50 with its 95% interval and the card's status, and the driver's
wall time; then the ratio of CPU minutes new/old, the goal (:data:`GOAL_MIN` CPU minutes for
linear-mamba at D32-N8), and, for the cells both cards trained (same N_f and seed), the lr
each chose and its test accuracy.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

GOAL_MIN = 6.0
RUNG = 0.25


def card_of(args, extra: list[str], store: Path) -> tuple[dict, float, float]:
    """The card of one protocol, the driver's CPU seconds and its wall seconds."""
    from recallbench.cli import capacity as cli
    from recallbench.runs import card_search

    ns = argparse.Namespace(adapter=args.adapter, factory=None, state_size=None,
                            d_model=args.d_model, d_state=args.d_state, n_layers=1,
                            vocab_size=512, set=args.set + extra, method=2,
                            work_budget=args.work_budget, time_budget=None, cpu_budget=None,
                            max_cells=None, workers=args.workers, max_step=args.max_step)
    seeds = cli._seeds(args.seeds)
    base = cli.base_config(ns)
    cpu0, t0 = time.process_time(), time.perf_counter()
    res = card_search.run(base, seeds=seeds, store=store, workers=cli._workers(ns, seeds),
                          work_budget=ns.work_budget, max_batches=ns.max_cells,
                          max_step=args.max_step or None, say=lambda s: None)
    return res.card, time.process_time() - cpu0, time.perf_counter() - t0


def n50_text(card: dict) -> str:
    n50 = card.get("n50") or {}
    lo, hi = n50.get("ci") or (None, None)
    if n50.get("value") is None:
        return f"{n50.get('bound') or '-'} [{lo}, {hi}]"
    return (f"{n50['value']:.3g} [{'-' if lo is None else f'{lo:.3g}'}, "
            f"{'inf' if hi is None else f'{hi:.3g}'}]")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapter", default="linear-mamba")
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--d-state", type=int, default=8)
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--work-budget", type=float, default=300.0, help="Mtok per card")
    p.add_argument("--max-step", type=float, default=0.0)
    p.add_argument("--rung", type=float, default=RUNG, help="train.lr_rung of the new protocol")
    p.add_argument("--only", choices=("old", "new"), default=None)
    p.add_argument("--set", action="append", default=[])
    args = p.parse_args(argv)

    protocols = {"old": [], "new": [f"train.lr_rung={args.rung}"]}
    cards = {}
    print(f"capacity card (method 2): {args.adapter} D={args.d_model} N={args.d_state}, "
          f"seeds {args.seeds}, work budget {args.work_budget:g} Mtok")
    print(f"{'protocol':<9} {'CPU min':>8} {'Mtok':>6} {'runs':>5} {'wall min':>9}  "
          f"{'status':<9} N50 [95%]")
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in protocols.items():
            if args.only and name != args.only:
                continue
            card, _, wall = card_of(args, extra, Path(tmp) / name)
            cards[name] = card
            runs = card.get("runs") or []
            cpu = sum(r.get("cpu_s") or 0.0 for r in runs) / 60
            print(f"{name:<9} {cpu:>8.2f} {card.get('work_mtok', 0):>6.0f} {len(runs):>5} "
                  f"{wall / 60:>9.2f}  {card['status']:<9} {n50_text(card)}", flush=True)
            cards[name]["_cpu_min"] = cpu
    if len(cards) == 2:
        old, new = cards["old"]["_cpu_min"], cards["new"]["_cpu_min"]
        print(f"CPU minutes new/old: {new / old:.3f} (saving {100 * (1 - new / old):.0f}%)")
        _shared(cards)
    for name, card in cards.items():
        if args.adapter == "linear-mamba" and (args.d_model, args.d_state) == (32, 8):
            print(f"goal {GOAL_MIN:g} CPU-min (linear-mamba D32-N8), {name}: "
                  f"{'met' if card['_cpu_min'] <= GOAL_MIN else 'NOT met'}")
    return 0


def _shared(cards: dict) -> None:
    """The cells both cards trained: the lr each chose and its test accuracy."""
    key = lambda r: (r["num_facts"], r["seed"])  # noqa: E731
    old = {key(r): r for r in cards["old"].get("runs") or []}
    both = [(old[key(r)], r) for r in cards["new"].get("runs") or [] if key(r) in old]
    if not both:
        return
    same = sum(a.get("lr") == b.get("lr") for a, b in both)
    print(f"cells in both cards: {len(both)}, the same lr chosen in {same}")
    print(f"{'N_f':>5} {'seed':>5} {'lr old':>7} {'lr new':>7} {'acc old':>8} {'acc new':>8} "
          f"{'steps old':>9} {'steps new':>9}")
    for a, b in sorted(both, key=lambda ab: key(ab[0])):
        acc = lambda r: "failed" if r.get("accuracy") is None else f"{r['accuracy']:.4f}"  # noqa: E731
        print(f"{a['num_facts']:>5} {a['seed']:>5} {a.get('lr') or 0:>7g} {b.get('lr') or 0:>7g} "
              f"{acc(a):>8} {acc(b):>8} {a.get('steps') or 0:>9} {b.get('steps') or 0:>9}")


if __name__ == "__main__":
    sys.exit(main())
