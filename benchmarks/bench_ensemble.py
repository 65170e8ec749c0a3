"""Throughput of a batched ensemble against the same runs one after another.

    python benchmarks/bench_ensemble.py [--members 8] [--steps 100] [--threads 1 2]

The Table-8 setting (MQAR V=128, L=64, N_f=16; linear-mamba D=64, N=16; batch 64),
K members with seeds 0..K-1, a fixed number of steps, early stop off, the default
validation (512 sequences every 25 steps) and test (2048 sequences).  Measured in this
run, on this machine:

1. K sequential single runs (``recallbench.train.run``, its default thread choice: 1);
2. the same K configs as one batched ensemble (``recallbench.ensemble.run_ensemble``)
   with 1 thread and with 2 threads;

and prints wall times, member-steps per second, the ratio batched/sequential, and how
closely the members' test accuracies agree with the single runs'.  On a machine shared
with other jobs the timings are noisy: ``--repeat`` alternates the measurements and
reports medians.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from recallbench.ensemble import run_ensemble
from recallbench.train import run


def configs(members: int, steps: int, lrs: list[float] | None) -> list[dict]:
    out = []
    for k in range(members):
        lr = lrs[k % len(lrs)] if lrs else 1e-2
        out.append({"task": {"name": "mqar", "vocab_size": 128, "seq_len": 64, "num_facts": 16},
                    "model": {"adapter": "linear-mamba", "d_model": 64, "d_state": 16},
                    "train": {"max_steps": steps, "batch_size": 64, "seed": k, "lr": lr,
                              "early_stop": None, "progress": False}})
    return out


def sequential(cfgs: list[dict]) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    recs = [run(c) for c in cfgs]
    return time.perf_counter() - start, recs


def batched(cfgs: list[dict], threads: int) -> tuple[float, list[dict]]:
    cfgs = [{**c, "train": {**c["train"], "threads": threads}} for c in cfgs]
    start = time.perf_counter()
    recs = run_ensemble(cfgs)
    return time.perf_counter() - start, recs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=1, help="alternate the measurements n times")
    ap.add_argument("--lrs", type=float, nargs="*", default=None,
                    help="members' learning rates (cycled); default 1e-2 for all")
    args = ap.parse_args()
    cfgs = configs(args.members, args.steps, args.lrs)
    K, S = args.members, args.steps
    print(f"Table-8 setting, linear-mamba D=64 N=16, batch 64, {K} members, {S} steps each, "
          f"early stop off; CPU, torch {torch.__version__}, {torch.get_num_threads()} threads "
          f"available")
    run(cfgs[0] | {"train": {**cfgs[0]["train"], "max_steps": 2}})  # warm up imports
    run_ensemble([c | {"train": {**c["train"], "max_steps": 2}} for c in cfgs[:2]])
    seq_t, bat_t = [], {t: [] for t in args.threads}
    seq_recs = bat_recs = None
    for _ in range(args.repeat):
        t, seq_recs = sequential(cfgs)
        seq_t.append(t)
        for th in args.threads:
            t, bat_recs = batched(cfgs, th)
            bat_t[th].append(t)
    seq = statistics.median(seq_t)
    print(f"sequential train.run x{K}: {seq:.1f} s  ({K * S / seq:.1f} member-steps/s)")
    for th, ts in bat_t.items():
        b = statistics.median(ts)
        print(f"batched ensemble, {th} thread{'s' if th > 1 else ''}: {b:.1f} s  "
              f"({K * S / b:.1f} member-steps/s)  ratio {seq / b:.2f}x")
    diffs = [abs(a["accuracy"] - b["accuracy"]) for a, b in zip(seq_recs, bat_recs)]
    print(f"members vs single runs: test accuracy max |diff| {max(diffs):.4f} "
          f"(single {[round(r['accuracy'], 3) for r in seq_recs]})")


if __name__ == "__main__":
    main()
