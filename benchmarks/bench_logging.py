"""CPU time a harness step spends on values nobody reads: Lightning's per-step logging and
batch transfer, against the module's own choice to skip both on a CPU run without a progress
bar (``recallbench.harness.module.RecallModule``).

    python benchmarks/bench_logging.py [--facts 9 26] [--steps 300] [--reps 3]

A capacity card's runs train with no progress bar and on the CPU: the logged loss and
validation accuracy feed only the bar, and the batch is where it is trained.  Each setting
runs in fresh worker processes, taking turns (``--reps`` per setting): one ``run()`` of
linear-mamba at D32-N8 on a cpu-v3 cell (B = 32, L = 4·N_f, V = 512, validating every 50
steps, one thread), ``--steps`` steps after an untimed run of 20.  ``lightning`` restores
Lightning's defaults (log the loss every step, move the batch through
``transfer_batch_to_device``); ``skipped`` is the module as it is.  Printed per N_f: the
median CPU ms a step of each (the whole run: steps, validations, test), their ratio, and
whether the records agree (accuracy, validation accuracy, best step).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def worker(nf: int, steps: int, lightning: bool) -> None:
    import time

    import torch

    torch.set_num_threads(1)
    from lightning import LightningModule

    from recallbench.harness import module
    from recallbench.harness.train import run
    from recallbench.runs.capacity import TRAIN, cell_config

    if lightning:  # Lightning's defaults: log whatever a progress bar would show; move the batch
        module.RecallModule.on_fit_start = lambda self: None
        module.RecallModule.transfer_batch_to_device = LightningModule.transfer_batch_to_device
    base = {"task": {"name": "mqar", "vocab_size": 512},
            "model": {"adapter": "linear-mamba", "d_model": 32, "d_state": 8, "n_layers": 1},
            "train": {**TRAIN, "lr": 0.01, "max_steps_limit": None, "patience": None,
                      "early_stop": None, "progress": False, "threads": 1}}
    run(cell_config({**base, "train": {**base["train"], "max_steps": 20}}, nf, 0))
    cfg = cell_config({**base, "train": {**base["train"], "max_steps": steps}}, nf, 0)
    cpu0 = time.process_time()
    rec = run(cfg)
    cpu = time.process_time() - cpu0
    print(json.dumps({"cpu_ms": 1e3 * cpu / rec["steps"], "record": [
        rec["accuracy"], rec["val_accuracy"], rec["best_step"], rec["steps"]]}))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--facts", type=int, nargs="+", default=[9, 26])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--lightning", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps < 1 or args.reps < 1 or min(args.facts) < 1:
        p.error("--steps, --reps and --facts must be >= 1")
    if args.worker is not None:
        worker(args.worker, args.steps, args.lightning)
        return 0

    def one(nf: int, lightning: bool) -> dict:
        cmd = [sys.executable, __file__, "--worker", str(nf), "--steps", str(args.steps),
               *(["--lightning"] if lightning else [])]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    print(f"linear-mamba D=32 N=8, B = 32, L = 4·N_f, V = 512; {args.steps} steps per worker, "
          f"{args.reps} workers per setting, alternating")
    print(f"{'N_f':>4} {'lightning ms':>12} {'skipped ms':>10} {'ratio':>6}  same record")
    for nf in args.facts:
        rows = {True: [], False: []}
        for r in range(args.reps):
            for lightning in ((True, False) if r % 2 == 0 else (False, True)):
                rows[lightning].append(one(nf, lightning))
        med = {k: statistics.median(x["cpu_ms"] for x in v) for k, v in rows.items()}
        same = len({json.dumps(x["record"]) for x in rows[True] + rows[False]}) == 1
        print(f"{nf:>4} {med[True]:>12.2f} {med[False]:>10.2f} {med[True] / med[False]:>6.2f}  "
              f"{same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
