"""CPU time of one capacity card: ``recallbench capacity`` on one model at one budget.

    python benchmarks/bench_capacity.py                       # linear-mamba at D32-N8
    python benchmarks/bench_capacity.py --adapter designed    # fixed weights: seconds
    python benchmarks/bench_capacity.py --store DIR           # keep (and resume) its runs

Runs the card's search (``recallbench.runs.capacity.run``) with the default protocol
(``recallbench.runs.capacity.TRAIN``) in a temporary store, unless ``--store`` names one
(then cells already there are reused, and their CPU time is the time they took when
trained).  Printed: each cell's N_f, accuracy, steps of the best seed (and how often its
cap was doubled) and its CPU time, then the card's status, S_eff/S and the total CPU
minutes of the runs (every thread of each run's process) against the goal of 10 CPU
minutes for linear-mamba at D32-N8, and the driver's own CPU time (fits and placement).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

GOAL_MIN = 10.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapter", default="linear-mamba")
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--d-state", type=int, default=8)
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--time-budget", type=float, default=60.0, help="minutes")
    p.add_argument("--max-cells", type=int, default=12)
    p.add_argument("--max-step", type=float, default=0.0,
                   help="as capacity --max-step (default 0: none, as cpu-v3 searched)")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--store", default=None)
    args = p.parse_args(argv)

    from recallbench.cli import capacity as cli
    from recallbench.runs import capacity

    ns = argparse.Namespace(adapter=args.adapter, factory=None, state_size=None,
                            d_model=args.d_model, d_state=args.d_state, n_layers=1,
                            vocab_size=512, set=args.set, time_budget=args.time_budget,
                            cpu_budget=None,
                            max_cells=args.max_cells, workers=args.workers,
                            max_step=args.max_step)
    seeds = cli._seeds(args.seeds)
    base = cli.base_config(ns)
    workers = cli._workers(ns, seeds)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(args.store) if args.store else Path(tmp) / "store"
        cpu0, t0 = time.process_time(), time.perf_counter()
        res = capacity.run(base, seeds=seeds, store=store, budget_s=args.time_budget * 60,
                           max_cells=args.max_cells, workers=workers, say=lambda s: None,
                           max_step=args.max_step or None)
        driver_cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    card = res.card
    print(f"capacity card: {args.adapter} D={args.d_model} N={args.d_state}, seeds {seeds}, "
          f"{workers} worker(s)")
    print(f"{'N_f':>5} {'L':>5} {'accuracy':>9} {'steps':>6} {'ext':>4} {'CPU s':>8}")
    for c in card["cells"]:
        acc = "failed" if c.get("accuracy") is None else f"{c['accuracy']:.4f}"
        print(f"{c['num_facts']:>5} {c['seq_len']:>5} {acc:>9} {c.get('steps') or 0:>6} "
              f"{c.get('extended') or 0:>4} {c.get('cpu_s', 0):>8.1f}")
    ratio = card.get("ratio") or {}
    ci = ratio.get("ci") or [None, None]
    print(f"status: {card['status']} ({card.get('stopped')}); S_eff/S "
          f"{ratio.get('value')} [{ci[0]}, {ci[1]}]")
    cpu_min = card["cpu_s"] / 60
    print(f"CPU time of the runs: {cpu_min:.2f} min (goal {GOAL_MIN:g} min for linear-mamba "
          f"at D32-N8: {'met' if cpu_min <= GOAL_MIN else 'NOT met'}); driver "
          f"{driver_cpu / 60:.2f} CPU-min; wall {wall / 60:.2f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
