"""Wall time and peak memory of ``recallbench score`` and ``sweep --dry-run`` on large stores.

    python benchmarks/bench_score_scale.py [--sizes 100000 1000000] [--dry-run-size 100000]

Writes a store of N synthetic minimal ok records (``designed`` points: a grid of D, N and
N_f cells with many seeds each, every record filed under its config's hash) into a
temporary folder, then runs ``recallbench score STORE --no-figures`` in a child process
and prints its wall time and peak resident memory (``resource.getrusage`` of the
children, so each measurement runs in a fresh helper).  ``--dry-run-size``: also a
``sweep --dry-run`` of a grid of that many seeds against a store of as many records.
Numbers are of the machine it runs on; the goal is 1e6 records in under 2 min and 2 GB.
"""
from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TASK = {"name": "mqar", "vocab_size": 64, "seq_len": 64}
MEASURE = ("import resource, subprocess, sys, time\n"
           "t = time.perf_counter()\n"
           "rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
           "print(rc, time.perf_counter() - t, "
           "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")


def _bases():
    from recallbench.api.config import resolve

    out = []
    for d in (8, 16, 32):
        for n in (2, 4, 8):
            for facts in (2, 4, 8, 16):
                out.append(resolve({"task": {**TASK, "num_facts": facts},
                                    "model": {"adapter": "designed", "d_model": d, "d_state": n},
                                    "train": {"max_steps": 0, "seed": 0}}).to_dict())
    return out


def write_store(folder: Path, n: int, seeds_of_one_cell: bool = False) -> Path:
    """``n`` minimal ok records; ``seeds_of_one_cell``: all of the first base config."""
    from recallbench.api.canonical import config_hash

    bases = _bases()
    folder.mkdir(parents=True)
    with open(folder / "results.jsonl", "w") as fh:
        for i in range(n):
            base = bases[0] if seeds_of_one_cell else bases[i % len(bases)]
            cfg = copy.deepcopy(base)
            cfg["train"]["seed"] = i if seeds_of_one_cell else i // len(bases)
            total = 256
            correct = (i * 7919) % (total + 1)
            fh.write(json.dumps({"schema": "recallbench.result/1", "status": "ok",
                                 "config_hash": config_hash(cfg), "correct": correct,
                                 "total": total, "accuracy": correct / total,
                                 "state_size": 2 * cfg["model"]["d_model"]
                                 * cfg["model"]["d_state"], "seed": cfg["train"]["seed"],
                                 "config": cfg}) + "\n")
    return folder


def measure(argv: list[str]) -> tuple[int, float, float]:
    """(exit status, seconds, peak RSS in MB) of ``argv`` run in a fresh child."""
    out = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    ap.add_argument("--dry-run-size", type=int, default=100_000)
    args = ap.parse_args()
    cli = [sys.executable, "-m", "recallbench.cli.main"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n in args.sizes:
            store = write_store(tmp / f"store_{n}", n)
            rc, s, mb = measure(cli + ["score", str(store), "--out", str(tmp / f"out_{n}"),
                                       "--no-figures"])
            print(f"score {n:>9,} minimal records: {s:7.1f} s, peak RSS {mb:7.0f} MB "
                  f"(exit {rc})", flush=True)
        if args.dry_run_size:
            n = args.dry_run_size
            store = write_store(tmp / "sweep_store", n, seeds_of_one_cell=True)
            base = _bases()[0]
            (tmp / "sweep.yaml").write_text(json.dumps({
                "base": base, "axes": {"train.seed": list(range((n + 1) // 2)),
                                       "train.lr": [0.001, 0.002]}}))
            rc, s, mb = measure(cli + ["sweep", str(tmp / "sweep.yaml"), "--store", str(store),
                                       "--dry-run", "--max-points", str(max(n, 10))])
            print(f"sweep --dry-run, {n:,} points, a store of {n:,} records: {s:7.1f} s, "
                  f"peak RSS {mb:7.0f} MB (exit {rc})", flush=True)


if __name__ == "__main__":
    main()
