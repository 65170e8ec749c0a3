"""A card's runs trained again with the learning-rate halving decided at an earlier rung:
what the earlier decision changes (the lr chosen, each run's test accuracy, the card) and
what it saves (training work).

    python benchmarks/rung_twins.py --suite leaderboards/cpu-v4 --budget D32-N4 \
        --adapter retnet --store STORE --rung 0.125 --out twins.jsonl [--limit N]

The card's runs are the store's ok runs of the budget's config (as ``seed_effects.py``
reads them).  Each is trained twice here from its own config (its N_f, seed, data stream
and initial weights): at the suite's rung (``train.lr_rung``, 0.25 on cpu-v4: every lr
candidate trained a quarter of the way under the full run's schedule, the best by
validation going on), the control, and at ``--rung``.  The control is needed: a stored run
retrained on another machine or library version need not choose the same lr or reach the
same accuracy (float rounding is chaotic over 2,000 steps).  Where the two rungs choose the
same lr the twin is the control's run (the chosen candidate goes on from its in-memory
state: the run of its lr alone); where they differ it is the run at the other lr.
``--out`` keeps one JSON line per trained run; a rerun resumes.

Printed: how often the choice agrees (stored vs control, control vs ``--rung``), the paired
test-accuracy differences, the lr chosen, work (Mtok, every candidate counted) and the
runs' CPU time, and, once every run is trained, the three cards on the same cells
(``law.run_card.build_run_card``): N50 [95%], slope, run SD.
"""
from __future__ import annotations

import argparse
import collections
import copy
import json
import statistics
import time
from pathlib import Path

from recallbench.harness.train import run
from recallbench.law import run_card
from recallbench.leaderboard import load_suite
from recallbench.leaderboard.capacity.suite import budget_base
from recallbench.runs.store import Store
from seed_effects import card_runs  # benchmarks/seed_effects.py


def twin_config(record: dict, rung: float) -> dict:
    cfg = copy.deepcopy(record["config"])
    cfg["train"]["lr_rung"] = rung
    cfg["train"]["progress"] = False
    return cfg


def key(record: dict) -> tuple[int, int]:
    return int(record["config"]["task"]["num_facts"]), int(record["config"]["train"]["seed"])


def card_line(name: str, card: dict) -> str:
    n50, fit = card["n50"], card.get("fit") or {}
    ci = [f"{x:.3g}" if x is not None else "open" for x in (n50.get("ci") or (None, None))]
    return (f"{name}: {card['status']}, N50 {n50['value']:.3g} [{ci[0]}, {ci[1]}], "
            f"slope {fit.get('slope', float('nan')):.2f}, run SD {fit.get('tau', float('nan')):.2f}"
            f", {len(card['runs'])} runs")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True)
    p.add_argument("--budget", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--rung", type=float, default=0.125)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--limit", type=int, default=None, help="twin only the first N runs")
    args = p.parse_args()
    suite = load_suite(args.suite)
    b = next(x for x in suite.budgets if x["name"] == args.budget)
    base = budget_base(suite, args.adapter, b)
    records = Store(args.store).read(warn=lambda _: None).records
    originals = {key(r): r for r in card_runs(base, records)}
    order = sorted(originals)[: args.limit]
    control = float(base["train"].get("lr_rung"))
    rungs = (control, args.rung)
    done: dict[tuple, dict] = {}
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done[(*key(r), r["config"]["train"]["lr_rung"])] = r
    start = time.perf_counter()
    for i, k in enumerate(order):
        for rung in rungs:
            if (*k, rung) in done:
                continue
            twin = run(twin_config(originals[k], rung))
            with args.out.open("a") as f:
                f.write(json.dumps(twin) + "\n")
            done[(*k, rung)] = twin
        c, t = done[(*k, control)], done[(*k, args.rung)]
        print(f"run {i + 1} of {len(order)}: N_f {k[0]}, seed {k[1]}: lr (stored, rung {control}, "
              f"rung {args.rung}) {originals[k].get('lr')}, {c.get('lr')}, {t.get('lr')}; accuracy "
              f"{originals[k]['accuracy']:.3f}, {c['accuracy']:.3f}, {t['accuracy']:.3f} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    report(args, [(originals[k], done[(*k, control)], done[(*k, args.rung)])
                  for k in order if (*k, control) in done and (*k, args.rung) in done],
           control, len(originals))


def report(args, triples: list[tuple[dict, dict, dict]], control: float, n_card: int) -> None:
    print(f"\n{args.adapter} {args.budget}: {len(triples)} runs, each trained here at rung "
          f"{control} (the control) and at rung {args.rung}")
    pairs = {"stored vs control (the same protocol, retrained)": [(o, c) for o, c, _ in triples],
             f"control vs rung {args.rung}": [(c, t) for _, c, t in triples]}
    for name, pp in pairs.items():
        same = [(a, b) for a, b in pp if a.get("lr") == b.get("lr")]
        d_same = [abs(b["accuracy"] - a["accuracy"]) for a, b in same]
        d_all = [b["accuracy"] - a["accuracy"] for a, b in pp]
        print(f"  {name}: the same lr in {len(same)} of {len(pp)}"
              + (f" (largest |Δ accuracy| there {max(d_same):.4f})" if d_same else "")
              + f"; Δ accuracy mean {statistics.mean(d_all):+.4f}, SD "
              f"{statistics.pstdev(d_all):.4f}")
    for name, i in (("stored", 0), (f"rung {control}", 1), (f"rung {args.rung}", 2)):
        rs = [tr[i] for tr in triples]
        lrs = dict(sorted(collections.Counter(r.get("lr") for r in rs).items()))
        work = sum(run_card.work_tokens(r) for r in rs) / 1e6
        cpu = sum(float(r.get("cpu_s") or r.get("train_s") or 0) for r in rs) / 60
        print(f"  {name}: lr chosen {lrs}; work {work:.1f} Mtok; runs' CPU {cpu:.1f} min")
        if len(triples) == n_card:
            print("    " + card_line("card", run_card.build_run_card(rs)))


if __name__ == "__main__":
    main()
