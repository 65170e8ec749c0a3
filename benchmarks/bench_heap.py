"""Training steps with and without the heap settings of ``recallbench.harness.heap``.

    python benchmarks/bench_heap.py                    # linear-mamba D32-N8, N_f 9 15 26 38
    python benchmarks/bench_heap.py --facts 38 --reps 5 --steps 60

For each N_f (MQAR, L = 4·N_f, V = 512, B = 32: the capacity card's cells), fresh worker
processes train ``--steps`` steps after a warm-up (the harness's step: the read-out at the
asked positions, label smoothing 0.1, AdamW, gradient clipping; one thread), alternately
with malloc's defaults (``RECALLBENCH_KEEP_HEAP=0``) and with the settings, ``--reps``
times each.  Printed per N_f: the median CPU ms and minor page faults per step of each, and
the ratio of the medians (defaults / settings), all from this one invocation.  The settings
change no number a step computes; the last column checks it: the loss after the last step
of both, which must be equal.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys


def worker(args) -> None:
    import resource
    import time

    import torch

    from recallbench.harness.heap import keep_freed_memory

    applied = keep_freed_memory()
    torch.set_num_threads(1)
    from recallbench.api.config import resolve
    from recallbench.harness.loop import labelled_loss
    from recallbench.harness.prepare import build_model
    from recallbench.runs.capacity import TRAIN, cell_config

    base = {"task": {"name": "mqar", "vocab_size": 512},
            "model": {"adapter": args.adapter, "d_model": args.d_model,
                      "d_state": args.d_state, "n_layers": 1},
            "train": {**TRAIN, "lr": 0.01}}
    cfg = resolve(cell_config(base, args.worker, 0))
    _, model = build_model(cfg, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=0.01, betas=(0.9, 0.95))
    batches = [cfg.task.sample(32, gen) for _ in range(args.steps)]

    def step(batch) -> float:
        loss = labelled_loss(model, *batch, 0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.item()

    for b in batches[:5]:
        step(b)
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cpu0 = time.process_time()
    loss = [step(b) for b in batches][-1]
    cpu = time.process_time() - cpu0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    print(json.dumps({"applied": applied, "cpu_ms": 1e3 * cpu / args.steps,
                      "faults": faults / args.steps, "loss": loss}))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapter", default="linear-mamba")
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--d-state", type=int, default=8)
    p.add_argument("--facts", type=int, nargs="+", default=[9, 15, 26, 38])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        worker(args)
        return 0

    def one(nf: int, keep: bool) -> dict:
        env = {**os.environ, "RECALLBENCH_KEEP_HEAP": "1" if keep else "0"}
        cmd = [sys.executable, __file__, "--worker", str(nf), "--steps", str(args.steps),
               "--adapter", args.adapter, "--d-model", str(args.d_model),
               "--d-state", str(args.d_state)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    print(f"{args.adapter} D={args.d_model} N={args.d_state}, B = 32, L = 4·N_f, V = 512; "
          f"{args.steps} steps per worker, {args.reps} workers per setting, alternating")
    print(f"{'N_f':>4} {'default ms':>10} {'faults':>7} {'kept ms':>8} {'faults':>7} "
          f"{'ratio':>6}  same loss")
    for nf in args.facts:
        rows = {True: [], False: []}
        for r in range(args.reps):
            for keep in ((False, True) if r % 2 == 0 else (True, False)):
                rows[keep].append(one(nf, keep))
        if not all(row["applied"] for row in rows[True]):
            print(f"{nf:>4}: the settings are not available here (not glibc): nothing to compare")
            continue
        med = {k: (statistics.median(x["cpu_ms"] for x in v),
                   statistics.median(x["faults"] for x in v)) for k, v in rows.items()}
        same = len({x["loss"] for x in rows[True] + rows[False]}) == 1
        print(f"{nf:>4} {med[False][0]:>10.2f} {med[False][1]:>7.0f} {med[True][0]:>8.2f} "
              f"{med[True][1]:>7.0f} {med[False][0] / med[True][0]:>6.2f}  {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
