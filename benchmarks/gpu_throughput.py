"""Runs per hour of the D–N study's cells on one device: one run after another, worker
processes sharing the device, and batched ensembles, each as a ratio to the sequential
runs measured in the same invocation.

    python benchmarks/gpu_throughput.py [--out rows.jsonl]              # on a CUDA machine
    python benchmarks/gpu_throughput.py --device cpu --quick            # dry run, < 2 min

The runs are cells of ``sweeps/dn_mqar_linear.yaml`` (MQAR V=512, L=64, N_f=16, linear
Mamba, batch 64, its validation and test sets), each trained for ``--steps`` steps with
early stop off, so every mode does the same work per run.  For each cell DxN
(``--cells``, default 8x4, 32x16 and 64x32: a small, a middle and the largest cell):

* ``sequential``: ``--sequential`` runs one after another in this process, as
  ``recallbench sweep`` does by default (after one untimed run and ensemble of 2, so that
  imports and CUDA's start are not counted);
* ``workers W`` (``--workers``, default 1 4 16): 2·W runs over W worker processes of
  ``--executor processes`` (on a GPU all on the one device, with its worker bound and
  memory check); the pool is started and warmed with W runs before timing;
* ``ensemble K`` (``--ensembles``, default 8 32 64): K seeds as one batched ensemble
  (``--compile MODE`` adds the compiled ensemble of the largest K).

Each row gives runs, wall seconds, runs per hour and ``ratio`` = runs per hour / the
sequential runs per hour of the same cell; ``--out`` gets one JSON line per row as it
finishes.  ``--quick`` shrinks everything for a dry run (one cell 4x2, 2 steps, batch 8,
16 validation and test sequences, workers 1 and 2, the same ensemble sizes).

The goal on one H200 is at least 20x the sequential runs per hour; it has not been
measured yet.  On one H200 (docs/results/gpu/) the 32x16 cell ran 8.5-9.2 ms a step one
run after another and 3.31x the sequential runs per hour with 4 workers; 16 workers and
the ensembles were not reached (earlier H200 numbers: a mamba2 step 61 ms, an ensemble of
8 D=32 cells 3.27x the sequential runs).  On a CPU the ratios say
nothing about a GPU: the dry run checks that every mode runs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from recallbench.harness.ensemble import run_ensemble
from recallbench.runs.executors import InProcess, Processes, make_executor
from recallbench.runs.gpu_share import GpuRuns, check_per_gpu
from recallbench.runs.sweep import load_sweep

STUDY = Path(__file__).resolve().parent.parent / "sweeps" / "dn_mqar_linear.yaml"
QUICK = {"batch_size": 8, "val_size": 16, "test_size": 16}


def configs(cell: str, seeds: range, steps: int, device: str, quick: bool) -> list[dict]:
    """The cell's configs, one per seed, as the study's base with fixed steps."""
    d_model, d_state = (int(v) for v in cell.lower().split("x"))
    base = load_sweep(STUDY).base
    train = {**base["train"], "max_steps": steps, "early_stop": None, "val_every": steps,
             "device": device, "progress": False, **(QUICK if quick else {})}
    return [{"task": dict(base["task"]),
             "model": {**base["model"], "d_model": d_model, "d_state": d_state},
             "train": {**train, "seed": s}} for s in seeds]


def timed(fn) -> tuple[list[dict], float]:
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    records = fn()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return records, time.perf_counter() - t0


def through(executor, cfgs: list[dict]) -> list[dict]:
    """Every config as one work item through ``executor``; the records in any order."""
    out = []
    for _, result in executor.run([[c] for c in cfgs]):
        out += result if isinstance(result, list) else [{"status": "failed", "error": str(result)}]
    return out


def pool(workers: int, device: str, cfgs: list[dict]):
    """W worker processes: on a GPU through the sweep's executor (its bound and memory
    check); on a CPU (a dry run) directly, whatever the CPU count."""
    if device == "cpu":
        return Processes(workers, 1)
    from recallbench.api.config import resolve
    from recallbench.harness.ensemble.memory import ensemble_bytes

    need = ensemble_bytes(resolve(cfgs[0]), 1, on_device=True)
    gpu = GpuRuns(device, need, check_per_gpu(max(workers, 16)))
    return make_executor("processes", workers=workers, threads=1, gpu=gpu)


def measure(args, cell: str, emit) -> None:
    """Every mode on one cell; one row each."""
    seq_cfgs = configs(cell, range(args.sequential), args.steps, args.device, args.quick)
    warm = configs(cell, range(2000, 2002), args.steps, args.device, args.quick)
    through(InProcess(threads=1), warm[:1])  # first-use costs (imports, CUDA) untimed
    run_ensemble(warm)
    records, wall = timed(lambda: through(InProcess(threads=1), seq_cfgs))
    base_rate = emit(cell, "sequential", 1, records, wall, None)
    for w in args.workers:
        ex = pool(w, args.device, seq_cfgs)
        try:
            through(ex, configs(cell, range(1000, 1000 + w), args.steps, args.device, args.quick))
            cfgs = configs(cell, range(2 * w), args.steps, args.device, args.quick)
            records, wall = timed(lambda: through(ex, cfgs))
        finally:
            ex.close()
        emit(cell, "workers", w, records, wall, base_rate)
    for k in args.ensembles:
        cfgs = configs(cell, range(k), args.steps, args.device, args.quick)
        records, wall = timed(lambda: run_ensemble(cfgs))
        emit(cell, "ensemble", k, records, wall, base_rate)
    if args.compile and args.ensembles:
        k = max(args.ensembles)
        cfgs = configs(cell, range(k), args.steps, args.device, args.quick)
        run_ensemble(cfgs, compile=args.compile)  # compiles, untimed (a fresh ensemble
        # may still recompile: then the timed row includes it)
        records, wall = timed(lambda: run_ensemble(cfgs, compile=args.compile))
        emit(cell, f"ensemble+compile:{args.compile}", k, records, wall, base_rate)


def emitter(args, out):
    """A function that prints and writes one row, and returns its runs per hour."""
    meta = {"device": args.device, "device_name": device_name(args.device),
            "steps": args.steps, "quick": args.quick, "torch": torch.__version__}

    def emit(cell, mode, n, records, wall, base_rate):
        rate = 3600.0 * len(records) / wall
        row = {"cell": cell, "mode": mode, "n": n, "runs": len(records),
               "failed": sum(r.get("status") != "ok" for r in records), "wall_s": round(wall, 3),
               "runs_per_hour": round(rate, 1),
               "ratio": round(rate / base_rate, 2) if base_rate else 1.0, **meta}
        print(f"{cell:>6}  {mode:<12} {n:>3}  {row['runs']:>3} runs  {wall:8.2f} s  "
              f"{rate:10.0f} runs/h  {row['ratio']:6.2f}x sequential"
              + (f"  ({row['failed']} failed)" if row["failed"] else ""), flush=True)
        if out is not None:
            out.write(json.dumps(row) + "\n")
            out.flush()
        return rate

    return emit


def device_name(device: str) -> str:
    if device == "cpu":
        return f"cpu ({os.cpu_count()} cores)"
    return torch.cuda.get_device_name(torch.device(device))


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    p.add_argument("--quick", action="store_true", help="tiny dry run (see above)")
    p.add_argument("--cells", nargs="+", default=None, metavar="DxN")
    p.add_argument("--steps", type=int, default=None, help="steps per run (default 200)")
    p.add_argument("--sequential", type=int, default=None, help="sequential runs (default 8)")
    p.add_argument("--workers", type=int, nargs="*", default=None, metavar="W")
    p.add_argument("--ensembles", type=int, nargs="*", default=[8, 32, 64], metavar="K")
    p.add_argument("--compile", default=None, metavar="MODE",
                   help="also time the largest ensemble compiled (e.g. reduce-overhead)")
    p.add_argument("--out", help="append one JSON line per row to this file")
    args = p.parse_args(argv)
    q = args.quick
    args.cells = args.cells or (["4x2"] if q else ["8x4", "32x16", "64x32"])
    args.steps = args.steps or (2 if q else 200)
    args.sequential = args.sequential or (2 if q else 8)
    args.workers = args.workers if args.workers is not None else ([1, 2] if q else [1, 4, 16])
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu --quick for a dry run")
        return 2
    out = open(args.out, "a") if args.out else None
    try:
        emit = emitter(args, out)
        print(f"{device_name(args.device)}, {args.steps} steps a run, torch {torch.__version__}")
        for cell in args.cells:
            measure(args, cell, emit)
    finally:
        if out is not None:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
