"""CPU time of one learning-rate search with a step limit: the chosen candidate continued
from its checkpoint at the cap, against training it again from the start with the limit.

    python benchmarks/bench_extension.py                    # a capacity cell: N_f = 9, D32-N8
    python benchmarks/bench_extension.py --num-facts 15 --reps 2

The cell is one run of linear-mamba's capacity card at D = 32, N = 8 (the protocol
``recallbench.runs.capacity.TRAIN``: lr 0.003, 0.01 and 0.03 compared at 2,000 steps, the
chosen one extended up to 8,000 while it improves), seed 0.  Both ways are timed in this
process after an untimed warm-up, each ``--reps`` times, alternating which goes first (CPU
time of the process, one thread):

* ``continued``: ``recallbench.harness.lr_search.run_search``, the search as it is (what
  ``recallbench.harness.train.run`` calls, without its provenance and timing around it);
* ``again``: the same candidates (``train_one``), then the chosen one's lr trained from the
  start with the limit, what the search did before it kept checkpoints.

Printed: steps trained and CPU seconds of each, the ratio, and whether both give the same
record (accuracy, steps, best step): they must, as the continued run is the run with the
limit step for step.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-facts", type=int, default=9)
    p.add_argument("--adapter", default="linear-mamba")
    p.add_argument("--d-state", type=int, default=8)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--set", action="append", default=[], help="train.KEY=VALUE")
    args = p.parse_args(argv)

    import torch

    from recallbench.api.config import apply_overrides, resolve
    from recallbench.harness.lr_candidates import candidates, choose, entry
    from recallbench.harness.single import train_one
    from recallbench.harness.lr_search import run_search
    from recallbench.runs.capacity import TRAIN, cell_config

    torch.set_num_threads(1)
    raw = {"task": {"name": "mqar", "vocab_size": 512, "num_facts": 2, "seq_len": 8},
           "model": {"adapter": args.adapter, "d_model": 32, "d_state": args.d_state,
                     "n_layers": 1},
           "train": {**TRAIN, "progress": False, "threads": 1}}
    raw = apply_overrides(raw, args.set)
    cfg = resolve(cell_config(resolve(raw).to_dict(), args.num_facts, 0))
    limit, cpu = cfg.train.max_steps_limit, torch.device("cpu")

    def continued():
        rec = run_search(cfg, cpu, False, batched=False)
        steps = sum(e["steps"] for e in rec["lr_search"])
        return rec, steps

    def again():
        plain = [dataclasses.replace(c, train=dataclasses.replace(c.train, max_steps_limit=None))
                 for c in candidates(cfg)]
        runs = [train_one(c, cpu, False) for c in plain]
        entries = [entry(c.train.lr, t.val_accuracy, t.steps, t.convergence()["converged"])
                   for c, t in zip(plain, runs)]
        best = runs[choose(entries)]
        steps = sum(t.steps for t in runs)
        if limit and not best.convergence()["converged"]:
            best = train_one(dataclasses.replace(best.cfg, train=dataclasses.replace(
                best.cfg.train, max_steps_limit=limit)), cpu, False)
            steps += best.steps
        return best.record(cpu), steps

    # untimed: the first run of a process pays one-off costs (Lightning's first Trainer,
    # the first forward), which would count against whichever way ran first
    train_one(dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, lr=0.01, max_steps=20, max_steps_limit=None)), cpu, False)
    times: dict[str, list[float]] = {"continued": [], "again": []}
    out = {}
    ways = [("continued", continued), ("again", again)]
    for rep in range(args.reps):
        for name, fn in ways[::1 if rep % 2 == 0 else -1]:  # alternating which goes first
            t0 = time.process_time()
            out[name] = fn()
            times[name].append(time.process_time() - t0)
    print(f"lr search of {args.adapter} D32-N{args.d_state}, N_f = {args.num_facts}, "
          f"L = {4 * args.num_facts}, seed 0, limit {limit}; CPU s (median of {args.reps})")
    for name in times:
        rec, steps = out[name]
        print(f"{name:>10}: {steps:>6} steps trained, {statistics.median(times[name]):7.1f} "
              f"CPU s; accuracy {rec['accuracy']:.6f}, {rec['steps']} steps, best step "
              f"{rec['best_step']}")
    ratio = statistics.median(times["again"]) / statistics.median(times["continued"])
    same = all(out["continued"][0][k] == out["again"][0][k]
               for k in ("correct", "total", "steps", "best_step"))
    print(f"again / continued: {ratio:.2f}x the CPU time; the same record: "
          f"{'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
