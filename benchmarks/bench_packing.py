"""Runs per hour of one card cell's runs: packed (``recallbench.runs.packing``) against one run
at a time and against today's card executor, side by side in one invocation.

    python benchmarks/bench_packing.py                        # CPU: a tiny cell, 4 runs
    python benchmarks/bench_packing.py --device cuda --d-model 32 --d-state 8 --vocab 512 \\
        --facts 9 --steps 200 --limit 400 --runs 32 --batch 32 --batch-size 32   # a GPU

The runs are a capacity card's (``runs.capacity.cell_config``: MQAR at N_f, L = 4·N_f,
the card protocol's learning-rate list and its ``max_steps_limit``), seeds 0..R-1, trained
in batches of ``--batch`` seeds as a card trains them, each mode into its own store:

* ``one``: ``capacity.trained(store, 1)``: every run in this process, one after another
  (``--one-runs K``: the first K only, to bound its time);
* ``today``: ``capacity.trained(store, W)``, W = the batch's seeds, at most the CPUs (on a
  GPU at most the sweep's worker bound): the card's default, one process per run;
* ``packed``: ``packing.packed(store)``: the tasks at once, as many as :func:`packing.plan`
  allows (its line is printed).

Each mode's clock runs from its context's start (its workers' start, as a card pays it once;
``one`` first trains one untimed step, so that this process's imports and CUDA's start are
not counted) to its last record; a row gives runs, seconds, runs per hour and the ratios to ``one`` and
``today``.  ``--out`` appends one JSON line per row.  ``--modes`` picks the modes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

MODES = ("one", "today", "packed")


class Parser(argparse.ArgumentParser):
    """argparse, with a bad flag told in one line (no usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message}\n")


def cell_configs(args) -> list[dict]:
    from recallbench.runs.capacity import TRAIN, cell_config

    train = {**TRAIN, "max_steps": args.steps, "max_steps_limit": args.limit,
             "val_every": args.val_every, "val_size": args.eval_size,
             "test_size": args.eval_size, "batch_size": args.batch_size,
             "device": args.device, "progress": False}
    base = {"task": {"name": "mqar", "vocab_size": args.vocab, "num_facts": 2, "seq_len": 8},
            "model": {"adapter": args.adapter, "d_model": args.d_model,
                      "d_state": args.d_state},
            "train": train}
    return [cell_config(base, args.facts, s) for s in range(args.runs)]


def trained_by(mode: str, store: Path, args, say):
    """The ``(done, run_cell)`` context of ``mode``."""
    if mode == "packed":
        from recallbench.runs.packing import packed

        return packed(store, args.workers, say=say)
    from recallbench.runs.capacity import trained

    if mode == "one":
        return trained(store, 1)
    cpus = os.cpu_count() or 1
    return trained(store, max(1, min(args.batch, cpus)))


def measure(mode: str, cfgs: list[dict], args, tmp: Path, say) -> dict:
    """One mode over every batch: its runs, seconds, failures."""
    if mode == "one":  # this process's first-use costs (imports, CUDA's start) untimed
        from recallbench.harness.train import run

        first = cfgs[0]
        run({**first, "train": {**first["train"], "max_steps": 1, "max_steps_limit": None,
                                "lr": first["train"]["lr"][0]}}, progress=False)
    t0 = time.perf_counter()
    records = []
    marks = []
    if mode == "one" and args.one_runs:  # its rate is per run: fewer runs bound its time
        cfgs = cfgs[:args.one_runs]
    with trained_by(mode, tmp / mode, args, say) as (_, run_cell):
        for i in range(0, len(cfgs), args.batch):
            records += run_cell(cfgs[i:i + args.batch])
            marks.append(time.perf_counter())
    wall = marks[-1] - t0
    batches = [round(b - a, 2) for a, b in zip([t0] + marks, marks)]
    return {"mode": mode, "runs": len(records), "wall_s": round(wall, 3),
            "failed": sum(r.get("status") != "ok" for r in records),
            "runs_per_hour": round(3600.0 * len(records) / wall, 1), "batches_s": batches,
            "accuracy": {r["seed"]: r.get("accuracy") for r in records}}


def parse(argv=None):
    p = Parser(prog=os.path.basename(__file__), description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--adapter", default="linear-mamba")
    p.add_argument("--d-model", type=int, default=8)
    p.add_argument("--d-state", type=int, default=4)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--facts", type=int, default=4, help="N_f of the cell (L = 4 N_f)")
    p.add_argument("--steps", type=int, default=40, help="train.max_steps")
    p.add_argument("--limit", type=int, default=80, help="train.max_steps_limit")
    p.add_argument("--val-every", type=int, default=10)
    p.add_argument("--eval-size", type=int, default=64, help="validation and test sequences")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--runs", type=int, default=4, help="seeds of the cell")
    p.add_argument("--batch", type=int, default=2, help="seeds per card batch")
    p.add_argument("--workers", type=int, default=None, help="packed: fixed worker count")
    p.add_argument("--one-runs", type=int, default=None,
                   help="'one' trains only the first this many runs (default all)")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--out", help="append one JSON line per row")
    args = p.parse_args(argv)
    for flag, v in (("--runs", args.runs), ("--batch", args.batch), ("--steps", args.steps)):
        if v < 1:
            p.error(f"{flag} {v} is not allowed: must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device here: run with --device cpu")
            return 2
    cfgs = cell_configs(args)
    say = lambda line: print(line, flush=True)  # noqa: E731
    print(f"{args.adapter} D={args.d_model} N={args.d_state} V={args.vocab} N_f={args.facts}: "
          f"{args.runs} runs in batches of {args.batch}, lr {cfgs[0]['train']['lr']}, "
          f"{args.steps} steps (limit {args.limit}), on {args.device} ({os.cpu_count()} CPUs); "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            row = measure(mode, cfgs, args, Path(tmp), say)
            rows.append(row)
            base = {r["mode"]: r["runs_per_hour"] for r in rows}
            for ref in ("one", "today"):
                if ref in base and ref != mode:
                    row[f"ratio_to_{ref}"] = round(row["runs_per_hour"] / base[ref], 2)
            ratios = "  ".join(f"{row[k]:.2f}x {k[9:]}" for k in row if k.startswith("ratio"))
            print(f"{mode:<7} {row['runs']:>3} runs  {row['wall_s']:8.2f} s  "
                  f"{row['runs_per_hour']:9.0f} runs/h  {ratios}  (batches: "
                  f"{', '.join(f'{b:.1f}' for b in row['batches_s'])} s)"
                  + (f"  ({row['failed']} failed)" if row["failed"] else ""), flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(json.dumps({**row, "device": args.device, "steps": args.steps,
                                         "d_model": args.d_model, "d_state": args.d_state,
                                         "facts": args.facts, "cpus": os.cpu_count()}) + "\n")
    # the modes trained the same runs: their accuracies agree seed by seed (the packed split
    # search makes the one-process search's record)
    common = set.intersection(*(set(r["accuracy"]) for r in rows))
    accs = {r["mode"]: [r["accuracy"][s] for s in sorted(common)] for r in rows}
    same = len({tuple(v) for v in accs.values()}) == 1
    print(f"same accuracies in every mode (seeds {sorted(common)}): "
          f"{'yes' if same else 'NO: ' + str(accs)}")
    return 0 if same and not any(r["failed"] for r in rows) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
