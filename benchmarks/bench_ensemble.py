"""Throughput of a batched ensemble against the same runs one after another.

    python benchmarks/bench_ensemble.py [--members 8] [--steps 100] [--shapes 8x4 16x8 32x16 64x16]

Each shape DxN is a cell of the D-N study (``sweeps/cpu/dn_mqar.yaml``: MQAR V=512, L=64,
N_f=16, linear-mamba d_model=D, d_state=N, batch 64, validation 256 sequences every 50
steps, test 1024), trained for a fixed number of steps with early stop off, K members
with seeds 0..K-1.  ``--table8`` adds the Table-8 setting (V=128, D=64, N=16).
Measured in this run, on this machine, for each shape:

1. K sequential single runs (``recallbench.harness.train.run``, its own thread choice: 1 for
   these sizes);
2. the same K configs as one batched ensemble (``recallbench.harness.ensemble.run_ensemble``)
   with 1 thread, and with all cores (``--threads``);
   and one member alone as a 1-member ensemble on 1 thread, times K: the ensemble's code
   without the batching, so ``1-member x K / batched 1t`` is what batching itself gains;
3. with more than one core, the K single runs spread over one worker process per core
   (the sweep's ``--executor processes``; the pool is started and warmed before timing),
   the alternative that also uses every core.

Printed: wall times, the ratio sequential/batched for each thread count, the ratio
processes/batched on all cores, batching alone (1-member x K / batched on 1 thread), and
the largest difference between a member's test
accuracy and its single run's (members draw the single runs' data and initial weights,
so they agree up to float rounding).  Timings on a
machine shared with other jobs are noisy: ``--repeat`` alternates the measurements and
reports medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import yaml

from recallbench.harness.ensemble import run_ensemble
from recallbench.runs.executors import Processes
from recallbench.harness.train import run

STUDY = Path(__file__).resolve().parent.parent / "sweeps" / "cpu" / "dn_mqar.yaml"


def configs(members: int, steps: int, d_model: int, d_state: int, vocab: int | None) -> list[dict]:
    base = yaml.safe_load(STUDY.read_text())["base"]
    task = {**base["task"], **({"vocab_size": vocab} if vocab else {})}
    return [{"task": task,
             "model": {**base["model"], "d_model": d_model, "d_state": d_state},
             "train": {**base["train"], "max_steps": steps, "seed": k, "early_stop": None,
                       "progress": False}}
            for k in range(members)]


def with_train(cfgs: list[dict], **train) -> list[dict]:
    return [{**c, "train": {**c["train"], **train}} for c in cfgs]


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def sequential(cfgs):
    return [run(c) for c in cfgs]


def spread(pool, cfgs):
    return [res[0] for _, res in sorted(pool.run([[c] for c in cfgs]), key=lambda t: t[0])]


def measure(cfgs: list[dict], threads: list[int], repeat: int, pool):
    seq_t, one_t, bat_t, par_t = [], [], {t: [] for t in threads}, []
    seq_recs = bat_recs = None
    for _ in range(repeat):
        t, seq_recs = timed(sequential, cfgs)
        seq_t.append(t)
        one_t.append(len(cfgs) * timed(run_ensemble, with_train(cfgs[:1], threads=1))[0])
        for th in threads:
            t, bat_recs = timed(run_ensemble, with_train(cfgs, threads=th))
            bat_t[th].append(t)
        if pool is not None:
            par_t.append(timed(spread, pool, cfgs)[0])
    diff = max(abs(a["accuracy"] - b["accuracy"]) for a, b in zip(seq_recs, bat_recs))
    return (statistics.median(seq_t), statistics.median(one_t),
            {t: statistics.median(v) for t, v in bat_t.items()},
            statistics.median(par_t) if par_t else None, diff)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=8)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--shapes", nargs="+", default=["8x4", "16x8", "32x16"],
                    help="cells DxN of the D-N study")
    ap.add_argument("--table8", action="store_true", help="also the Table-8 setting (V=128, 64x16)")
    ap.add_argument("--threads", type=int, nargs="+", default=None,
                    help="ensemble thread counts (default: 1 and all cores)")
    ap.add_argument("--repeat", type=int, default=1, help="alternate the measurements n times")
    args = ap.parse_args()
    K, S = args.members, args.steps
    threads = args.threads or sorted({1, os.cpu_count() or 1})
    shapes = [(tuple(map(int, s.lower().split("x"))), None) for s in args.shapes]
    if args.table8:
        shapes.append(((64, 16), 128))
    print(f"{K} members, {S} steps each, early stop off; CPU ({os.cpu_count()} cores), "
          f"torch {torch.__version__}; sequential = {K} x recallbench.harness.train.run")
    warm = configs(2, 2, 8, 4, None)
    run(warm[0])
    run_ensemble(warm)
    cores = os.cpu_count() or 1
    pool = Processes(workers=cores, threads=1) if cores > 1 else None
    if pool is not None:
        spread(pool, warm * cores)  # start and warm the workers
    top = max(threads)
    head = f"{'task, shape':<24}{'sequential':>12}{f'1-member x{K}':>14}" + "".join(
        f"{f'batched {t}t':>14}{'ratio':>8}" for t in threads) + (
        f"{f'processes x{cores}':>16}{f'batched {top}t / it':>18}" if pool else "") + \
        f"{'batching alone':>16}{'max |Δacc|':>12}"
    print(head)
    try:
        for (d, n), vocab in shapes:
            cfgs = configs(K, S, d, n, vocab)
            seq, one, bat, par, diff = measure(cfgs, threads, args.repeat, pool)
            v = cfgs[0]["task"]["vocab_size"]
            row = f"{f'V={v} D={d} N={n}':<24}{seq:>11.1f}s{one:>13.1f}s" + "".join(
                f"{bat[t]:>13.1f}s{seq / bat[t]:>7.2f}x" for t in threads) + (
                f"{par:>15.1f}s{par / bat[top]:>17.2f}x" if pool else "") + \
                f"{one / bat[1] if 1 in bat else float('nan'):>15.2f}x{diff:>12.4f}"
            print(row, flush=True)
    finally:
        if pool is not None:
            pool.close()


if __name__ == "__main__":
    main()
