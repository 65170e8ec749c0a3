"""Where a user waits: start-up, the cost around the training steps, and the process around
``train_s``, for ``recallbench run``.

    python benchmarks/bench_overhead.py [--reps 3]

Prints, measured in this run on this machine (medians of ``--reps`` interleaved
repetitions, each a fresh process where a process is what is timed):

1. start-up: a 1-step ``recallbench run`` (val 64, test 128), whole process, against
   ``python -c "import torch"``; beside it ``import lightning`` alone, the part of the
   start-up that Lightning's own imports fix (they bring torch._dynamo and torchmetrics,
   whatever the harness imports from them), and ``import torch, torch._dynamo,
   torchmetrics``, the floor those two imports set (``lightning.fabric.wrappers`` imports
   torch._dynamo, ``lightning.fabric.utilities.imports`` imports torchmetrics, whose
   ``functional`` package imports scipy.signal and, where it is installed, transformers);
2. around the steps: the default run's ``train_s`` against the time of its steps, both
   from the same in-process run: the time from one training batch's start to the next,
   less the validations in between (so a step is everything Lightning does per step: its
   batch, forward, backward, optimizer, hooks); also, as ``bench_train.py`` measures it,
   the per-step time from two runs of different lengths validated once each (their
   difference is the steps alone), which a loaded machine makes noisier;
3. the default run's whole process against its ``train_s``.

``--run-set KEY=VALUE`` (repeatable) changes the "default" run, ``--steps SHORT LONG`` the
per-step runs; both only to keep a smoke test short.  ``--shares-only [--device cuda]``
prints instead where a tiny model's step goes (``benchmarks/step_shares.py``: Lightning
against a plain loop, the phases, operator calls and launches, the validations' share).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str]) -> float:
    """Seconds of wall time of a fresh process (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def cli_run(sets: list[str], out: Path) -> tuple[float, dict]:
    """(process seconds, record) of ``recallbench run --quiet`` with ``--set`` overrides."""
    argv = [sys.executable, "-m", "recallbench.cli.main", "run", "--quiet", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    seconds = timed(argv)
    return seconds, json.loads(out.read_text())


def timed_steps(sets: list[str]) -> tuple[dict, float, float]:
    """(record, seconds of its steps, seconds of its validations) of an in-process run."""
    from recallbench.api.canonical import set_dotted
    from recallbench.harness.module import RecallModule
    from recallbench.harness.train import run

    raw: dict = {}
    for s in sets:
        key, value = s.split("=", 1)
        set_dotted(raw, key, yaml_value(value))
    stamps: list[float] = []
    validations: list[tuple[float, float]] = []
    validate = RecallModule.validate

    def on_train_batch_start(self, batch, batch_idx):
        stamps.append(time.perf_counter())

    def timed_validate(self, step):
        start = time.perf_counter()
        try:
            return validate(self, step)
        finally:
            validations.append((start, time.perf_counter()))

    RecallModule.on_train_batch_start = on_train_batch_start
    RecallModule.validate = timed_validate
    try:
        record = run(raw, progress=False)
    finally:
        del RecallModule.on_train_batch_start
        RecallModule.validate = validate
    between = sum(e - s for s, e in validations if s < stamps[-1])
    val_s = sum(e - s for s, e in validations)
    # the last step: its own time is the median step's (its end is not stamped)
    last = statistics.median(b - a for a, b in zip(stamps, stamps[1:])) if len(stamps) > 1 else 0
    return record, stamps[-1] - stamps[0] - between + last, val_s


def yaml_value(text: str):
    import yaml

    return yaml.safe_load(text)


def harness_seconds(steps: int) -> float:
    """``train_s`` of an in-process run of ``steps`` steps validated once (at the end)."""
    from recallbench.harness.train import run

    return run({"train": {"max_steps": steps, "val_every": steps, "val_size": 64,
                          "test_size": 64, "early_stop": None}}, progress=False)["train_s"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--run-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--steps", type=int, nargs=2, default=(50, 250), metavar=("SHORT", "LONG"))
    ap.add_argument("--shares-only", action="store_true",
                    help="only where a tiny model's step goes (step_shares.py)")
    ap.add_argument("--device", default="cpu", help="--shares-only: cpu or cuda")
    args = ap.parse_args(argv)
    if args.shares_only:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import step_shares

        return step_shares.main(["--device", args.device, "--reps", str(args.reps)]
                                + [a for s in args.run_set for a in ("--set", s)])
    short, long = args.steps
    py = sys.executable
    one_step = ["train.max_steps=1", "train.val_size=64", "train.test_size=128"]
    load = os.getloadavg()[0]
    harness_seconds(short)  # warm up: imports, first Trainer
    rows: dict[str, list[float]] = {k: [] for k in (
        "torch", "lightning", "floor", "start", "process", "train", "in_train", "in_steps", "steps_s",
        "val_s", "per_step")}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        for _ in range(args.reps):
            rows["torch"].append(timed([py, "-c", "import torch"]))
            rows["start"].append(cli_run(one_step, out)[0])
            rows["lightning"].append(timed([py, "-c", "import lightning"]))
            rows["floor"].append(timed([py, "-c", "import torch, torch._dynamo, torchmetrics"]))
            seconds, record = cli_run(args.run_set, out)
            rows["process"].append(seconds)
            rows["train"].append(record["train_s"])
            inner, steps_s, val_s = timed_steps(args.run_set)
            rows["in_train"].append(inner["train_s"])
            rows["in_steps"].append(inner["steps"])
            rows["steps_s"].append(steps_s)
            rows["val_s"].append(val_s)
            t_short, t_long = harness_seconds(short), harness_seconds(long)
            rows["per_step"].append((t_long - t_short) / (long - short))
    med = {k: statistics.median(v) for k, v in rows.items()}
    around = [t / s for t, s in zip(rows["in_train"], rows["steps_s"])]
    differential = [t / (n * p) for t, n, p in zip(rows["in_train"], rows["in_steps"],
                                                    rows["per_step"])]
    outside = [p / t for p, t in zip(rows["process"], rows["train"])]
    print(f"medians of {args.reps} interleaved repetitions; load average {load:.1f} at the "
          f"start, {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} CPUs")
    print(f"1. start-up: 1-step run {med['start']:.2f} s, import torch {med['torch']:.2f} s, "
          f"ratio {med['start'] / med['torch']:.2f}x "
          f"(import lightning alone {med['lightning']:.2f} s, "
          f"{med['lightning'] / med['torch']:.2f}x; import torch, torch._dynamo, torchmetrics "
          f"{med['floor']:.2f} s, {med['floor'] / med['torch']:.2f}x)")
    print(f"2. around the steps: default run {med['in_steps']:.0f} steps, train_s "
          f"{med['in_train']:.2f} s, its steps {med['steps_s']:.2f} s "
          f"({med['steps_s'] / med['in_steps'] * 1e3:.1f} ms each), its validations "
          f"{med['val_s']:.2f} s; train_s / steps {statistics.median(around):.2f}x "
          f"(per step {med['per_step'] * 1e3:.1f} ms from {short}- and {long}-step runs: "
          f"{statistics.median(differential):.2f}x)")
    print(f"3. process around train_s: default run process {med['process']:.2f} s, train_s "
          f"{med['train']:.2f} s, ratio {statistics.median(outside):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
